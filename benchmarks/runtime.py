"""Host execution speed: imxrt's runtime on the whole .pte beside TFLM and LiteRT on the same partition.

Per model, inferences per second of:
- imxrt: `imxrt.runtime.load(pte).forward(x)`, the whole program (input quantize, the NPU partition on the
  int8 kernel library, output dequantize) in its planned arena;
- imxrt cpu: the same model compiled for imxrt700-cpu (every op a cortex_m kernel), run the same way;
- TFLM: tflite-micro's Python interpreter on the partition's .tflite (int8 in, int8 out);
- LiteRT BUILTIN_REF and LiteRT default (XNNPACK) on the same .tflite.
Each interpreter is built once; the figure is the median of timed batches after a warm-up. The runners'
batches are interleaved (one batch of each, five rounds), so that load from other processes on the
machine falls on all of them alike.

    python benchmarks/runtime.py [--models ds_cnn resnet8 ...] [--seconds 2]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

for _name in ("torchao", "torch.utils._pytree", "executorch"):
    logging.getLogger(_name).setLevel(logging.ERROR)
warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
from ai_edge_litert.interpreter import Interpreter, OpResolverType  # noqa: E402
from tflite_micro.python.tflite_micro import runtime as tflm  # noqa: E402

import imxrt.runtime  # noqa: E402
from imxrt.pipeline import CompileOptions, compile  # noqa: E402
from imxrt.source import load_source  # noqa: E402

MODELS = ("ds_cnn", "mobilenet_v1", "resnet8", "autoencoder", "mobilenet_v2")
ROUNDS = 5


def per_second(steps: dict, seconds: float) -> dict[str, float]:
    """Median inferences per second of each step, over ``ROUNDS`` rounds of one batch per step; a batch
    lasts about ``seconds / ROUNDS``."""
    batches = {}
    for name, step in steps.items():
        step()  # warm-up
        start = time.perf_counter()
        step()
        once = max(time.perf_counter() - start, 1e-6)
        batches[name] = max(1, int(seconds / ROUNDS / once))
    rates = {name: [] for name in steps}
    for _ in range(ROUNDS):
        for name, step in steps.items():
            start = time.perf_counter()
            for _ in range(batches[name]):
                step()
            rates[name].append(batches[name] / (time.perf_counter() - start))
    return {name: statistics.median(values) for name, values in rates.items()}


def _tflm(tflite: bytes, feed: np.ndarray):
    interpreter = None
    for arena in (1 << 18, 1 << 20, 1 << 22, 1 << 24):
        try:
            interpreter = tflm.Interpreter.from_bytes(tflite, arena_size=arena)
            break
        except RuntimeError:
            continue

    def step():
        interpreter.set_input(feed, 0)
        interpreter.invoke()
        return interpreter.get_output(0)

    return step


def _litert(tflite: bytes, feed: np.ndarray, resolver):
    interpreter = Interpreter(model_content=tflite, experimental_op_resolver_type=resolver)
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()

    def step():
        interpreter.set_tensor(inp["index"], feed)
        interpreter.invoke()
        return interpreter.get_tensor(out["index"])

    return step


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--seconds", type=float, default=2.0, help="timing budget per runner and model")
    args = parser.parse_args(argv)
    names = ("imxrt", "imxrt cpu", "TFLM", "LiteRT ref", "LiteRT default")
    print(f"{'model':14s} " + " ".join(f"{n:>15s}" for n in names) + "   (inferences/s; ratios imxrt/peer)")
    for name in args.models:
        source = load_source(str(EXAMPLES / f"{name}.py"))
        calibration = list(source.calibration)[:8]
        result = compile(source.model, source.example_inputs, "imxrt700", calibration,
                         CompileOptions(show_progress=False))
        (tflite,) = result.partitions
        cpu_result = compile(source.model, source.example_inputs, "imxrt700-cpu", calibration,
                             CompileOptions(show_progress=False))
        x = source.example_inputs[0].numpy()
        program = imxrt.runtime.load(result.pte)
        cpu_program = imxrt.runtime.load(cpu_result.pte)
        interpreter = Interpreter(model_content=tflite)
        detail = interpreter.get_input_details()[0]
        scale, zero_point = detail["quantization"]
        feed = np.clip(np.round(x / scale) + zero_point, -128, 127).astype(np.int8)
        if feed.shape != tuple(detail["shape"]):  # a channels_last model's partition takes NHWC
            feed = np.ascontiguousarray(feed.transpose(0, 2, 3, 1))
        rates = per_second({
            "imxrt": lambda program=program, x=x: program.forward(x),
            "imxrt cpu": lambda program=cpu_program, x=x: program.forward(x),
            "TFLM": _tflm(tflite, feed),
            "LiteRT ref": _litert(tflite, feed, OpResolverType.BUILTIN_REF),
            "LiteRT default": _litert(tflite, feed, OpResolverType.AUTO),
        }, args.seconds)
        ratios = ", ".join(f"{peer} {rates['imxrt'] / rates[peer]:.1f}x" for peer in names[2:])
        ratios += "; cpu: " + ", ".join(f"{peer} {rates['imxrt cpu'] / rates[peer]:.1f}x" for peer in names[2:4])
        print(f"{name:14s} " + " ".join(f"{rates[n]:15.1f}" for n in names) + f"   {ratios}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
