"""`python -m gateway.recall.quantise SRC DST`: an int8 copy of an ONNX encoder.

Run in a subprocess by `gateway.recall.model` (it needs the `onnx` package,
which the serving process never imports).  The graph's constants are folded
first (onnxruntime's basic optimisations turn weights that the graph
dequantises back into fp32), then `quantize_dynamic` writes int8 weights per
channel with `reduce_range` (without it, CPUs lacking VNNI saturate), except
the attention's weights in the first and last layers, which stay fp32: of
the choices measured (bench/JOURNAL.md), that one won back what quantising
activations on the fly costs in answers, for little of fp32's time and
memory.
The output is the same bytes for the same input and library versions.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

# A BERT layer multiplies by six weight matrices, in this order in the
# graph: the attention's four (query, key, value, output), then the
# feed-forward's two.
WEIGHTS_PER_LAYER, ATTENTION = 6, 4


def quantise(source: Path, target: Path) -> None:
    import onnx
    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as work:
        folded = Path(work) / "folded.onnx"
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        onnxruntime.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        graph = onnx.load(str(folded)).graph
        constants = {i.name for i in graph.initializer}
        weights = [n.name for n in graph.node if n.op_type == "MatMul" and n.input[1] in constants]
        last = len(weights) - WEIGHTS_PER_LAYER
        kept = weights[:ATTENTION] + weights[last:last + ATTENTION]
        quantize_dynamic(str(folded), str(target), per_channel=True, reduce_range=True, weight_type=QuantType.QInt8,
                         nodes_to_exclude=kept)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m gateway.recall.quantise SRC DST")
    quantise(Path(sys.argv[1]), Path(sys.argv[2]))
