"""`python -m gateway.recall.quantise SRC DST`: an int8 copy of an ONNX encoder.

Run in a subprocess by `gateway.recall.model` (it needs the `onnx` package,
which the serving process never imports).  The graph's constants are folded
first (onnxruntime's basic optimisations turn weights that the graph
dequantises back into fp32), then `quantize_dynamic` writes int8 weights per
channel with `reduce_range`: the defaults lose more on CPUs without VNNI.
The output is the same bytes for the same input and library versions.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path


def quantise(source: Path, target: Path) -> None:
    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as work:
        folded = Path(work) / "folded.onnx"
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        onnxruntime.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        quantize_dynamic(str(folded), str(target), per_channel=True, reduce_range=True, weight_type=QuantType.QInt8)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m gateway.recall.quantise SRC DST")
    quantise(Path(sys.argv[1]), Path(sys.argv[2]))
