"""Host execution speed: imxrt's runtime on the whole .pte beside TFLM and LiteRT on the same partition, on an
idle machine and on one with other work.

Per model, inferences per second of:
- imxrt700: `imxrt.runtime.load(pte).forward(x)`, the whole program (input quantize, the NPU partition on the
  int8 kernel library, output dequantize) in its planned arena;
- imxrt700-cpu: the same model compiled for imxrt700-cpu (every op a cortex_m kernel), run the same way;
- TFLM: tflite-micro's Python interpreter on the partition's .tflite (int8 in, int8 out);
- LiteRT BUILTIN_REF and LiteRT's default resolver (XNNPACK) on the same .tflite.
Each interpreter is built once; the figure is the median of timed batches after a warm-up. The runners'
batches are interleaved (one batch of each, five rounds), so that load from other processes on the
machine falls on all of them alike.

Two conditions, one table each: idle (no load the benchmark adds) and loaded (``--load`` processes, two by
default, spinning a core each, started before the condition's timing and killed after it, however it ends):
what a user sees on a machine that is running CI or a training run beside the evaluation. Each figure is
printed with its ratio to TFLM's on the same model and condition.

    python benchmarks/runtime.py [--models ds_cnn resnet8 ...] [--seconds 2] [--load 2] [--conditions idle loaded]
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
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


RUNNERS = ("imxrt700", "imxrt700-cpu", "TFLM", "LiteRT ref", "LiteRT XNNPACK")
CONDITIONS = ("idle", "loaded")


@contextlib.contextmanager
def background_load(processes: int) -> Iterator[None]:
    """``processes`` children spinning a core each for the duration; killed on the way out, however it ends."""
    children = []
    try:
        for _ in range(processes):
            children.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        if children:
            time.sleep(0.5)  # let them reach their loop
        yield
    finally:
        for child in children:
            child.kill()
        for child in children:
            child.wait()


def runners(name: str) -> dict:
    """Each runner's step (one inference) on the model ``examples/<name>.py``, compiled for both targets."""
    source = load_source(str(EXAMPLES / f"{name}.py"))
    calibration = list(source.calibration)[:8]
    result = compile(source.model, source.example_inputs, "imxrt700", calibration, CompileOptions(show_progress=False))
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
    return {
        "imxrt700": lambda: program.forward(x),
        "imxrt700-cpu": lambda: cpu_program.forward(x),
        "TFLM": _tflm(tflite, feed),
        "LiteRT ref": _litert(tflite, feed, OpResolverType.BUILTIN_REF),
        "LiteRT XNNPACK": _litert(tflite, feed, OpResolverType.AUTO),
    }


def table(condition: str, rates: dict[str, dict[str, float]]) -> str:
    """One condition's figures: inferences/s per model and runner, each with its ratio to TFLM's."""
    width = 19
    lines = [f"{condition}: inferences/s (x TFLM's on the same model)",
             f"{'model':14s}" + "".join(f"{runner:>{width}s}" for runner in RUNNERS)]
    for model, figures in rates.items():
        cells = [f"{figures[runner]:.1f} ({figures[runner] / figures['TFLM']:.2f}x)" for runner in RUNNERS]
        lines.append(f"{model:14s}" + "".join(f"{cell:>{width}s}" for cell in cells))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--seconds", type=float, default=2.0, help="timing budget per runner, model and condition")
    parser.add_argument("--load", type=int, default=2, help="spinning processes of the loaded condition")
    parser.add_argument("--conditions", nargs="+", choices=CONDITIONS, default=list(CONDITIONS))
    args = parser.parse_args(argv)
    steps = {}
    for name in args.models:
        steps[name] = runners(name)
        print(f"compiled {name}", flush=True)
    tables = []
    for condition in args.conditions:
        with background_load(args.load if condition == "loaded" else 0):
            rates = {name: per_second(model_steps, args.seconds) for name, model_steps in steps.items()}
        tables.append(table(condition if condition == "idle" else f"loaded ({args.load} spinning processes)", rates))
        print(tables[-1], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
