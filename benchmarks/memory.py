"""Planned SRAM: imxrt beside ExecuTorch's default plan, the lower bound and TFLM, same run, same models.

Per model, on imxrt700-cpu (every op a cortex_m kernel on the Cortex-M33):
- ours: the planned arena (activations, the program's float input/output, CMSIS-NN scratch);
- ET default: ExecuTorch's greedy plan for the same tensors and lifetimes (computed in the same planning
  call, and equal to what `to_executorch` writes with its default pass);
- bound: the most bytes live at one step for this operator order (no whole-tensor plan is smaller);
- io int8: the planned arena of the same model compiled with `--io int8` (the program takes and returns
  its int8 tensors: no float tensor is planned), beside ours (float I/O);
- int8 only: our planner on the same program without its float input and output tensors (TFLM's int8
  model has neither: it takes and returns int8), and that program's bound;
- TFLM: `print_allocations()` of TFLM's interpreter on the same int8 graph (the NPU compile's partition
  `.tflite`: the whole model, int8 in and out). "head" is its planned tensor memory (what ours plans),
  "total" adds its persistent data (tensor structs, node structs, per-channel quantization data: objects
  ExecuTorch keeps in flash or in the method allocator instead). TFLM's structs are measured on this
  64-bit host, larger than on a Cortex-M.

    python benchmarks/memory.py [--models ds_cnn resnet8 ...] [--calibration-samples 4]
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"

for _name in ("torchao", "torch.utils._pytree", "executorch"):
    logging.getLogger(_name).setLevel(logging.ERROR)
warnings.filterwarnings("ignore")

from tflite_micro import runtime as tflm  # noqa: E402

from imxrt.memory.lifetimes import peak  # noqa: E402
from imxrt.memory.packing import plan  # noqa: E402
from imxrt.memory.planning_pass import ImxrtMemoryPlanner  # noqa: E402
from imxrt.pipeline import CompileOptions, check_inputs, compile, export, lower, quantize, serialize  # noqa: E402
from imxrt.placement import PlacementLog  # noqa: E402
from imxrt.source import load_source  # noqa: E402
from imxrt.targets import get_target  # noqa: E402

MODELS = ("ds_cnn", "mobilenet_v1", "resnet8", "autoencoder", "mobilenet_v2")
TARGET = "imxrt700-cpu"


def tflm_arena(tflite: bytes) -> dict[str, int]:
    """TFLM's arena for an int8 model: total, head (planned tensors), tail (persistent), from
    ``print_allocations()``, which writes to the C-level stderr."""
    interpreter = tflm.Interpreter.from_bytes(tflite, arena_size=8 << 20)
    with tempfile.TemporaryFile() as captured:
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            interpreter.print_allocations()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        text = captured.read().decode()
    return {part: int(re.search(rf"Arena allocation {part} (\d+) bytes", text).group(1))
            for part in ("total", "head", "tail")}


def ours(name: str, samples: int) -> dict:
    source = load_source(str(EXAMPLES / f"{name}.py"))
    calibration = list(source.calibration)[:samples] if source.calibration is not None else None
    target, options = get_target(TARGET), CompileOptions(show_progress=False)
    inputs = check_inputs(source.model, source.example_inputs)
    quantized = quantize(export(source.model, inputs), inputs, calibration, options, target)
    edge = lower(quantized, target, options, PlacementLog())
    planner = ImxrtMemoryPlanner()
    serialize(edge, planner)
    (memory,) = planner.plans
    int8_io = ImxrtMemoryPlanner()
    serialize(lower(quantized, target, dataclasses.replace(options, io="int8"), PlacementLog()), int8_io)
    assert not [b for plan in int8_io.plans for b in plan.buffers if b.dtype.startswith("float")]
    int8 = [b for b in memory.buffers if not (b.role in ("input", "output") and b.dtype.startswith("float"))]
    int8_plan, _ = plan(int8)
    npu = compile(source.model, source.example_inputs, "imxrt700", calibration, options)
    return {
        "ours": memory.arena_bytes, "io_int8": sum(plan.arena_bytes for plan in int8_io.plans),
        "default": memory.executorch_bytes, "bound": memory.bound.nbytes,
        "algorithm": memory.chosen.label, "int8": int8_plan.size, "int8_bound": peak(int8).nbytes,
        "partitions": len(npu.partitions), "tflm": tflm_arena(npu.partitions[0]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--calibration-samples", type=int, default=4)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(EXAMPLES))
    header = (f"{'model':13s} {'ours':>8s} {'io int8':>8s} {'ET dflt':>8s} {'bound':>8s} {'ours/bd':>7s} "
              f"{'ET/ours':>7s} | "
              f"{'int8':>8s} {'int8 bd':>8s} {'TFLM hd':>8s} {'TFLM tot':>8s} {'int8/hd':>7s} {'ours/tot':>8s}  "
              "algorithm")
    print(f"planned SRAM in bytes, {TARGET} (Cortex-M33, CMSIS-NN DSP); TFLM on the same int8 graph")
    print(header)
    print("-" * len(header))
    for name in args.models:
        row = ours(name, args.calibration_samples)
        tflm_ = row["tflm"]
        note = "" if row["partitions"] == 1 else f"  (TFLM: partition 0 of {row['partitions']})"
        print(f"{name:13s} {row['ours']:8,d} {row['io_int8']:8,d} {row['default']:8,d} {row['bound']:8,d} "
              f"{row['ours'] / row['bound']:7.3f} {row['default'] / row['ours']:7.3f} | "
              f"{row['int8']:8,d} {row['int8_bound']:8,d} {tflm_['head']:8,d} {tflm_['total']:8,d} "
              f"{row['int8'] / tflm_['head']:7.3f} {row['ours'] / tflm_['total']:8.3f}  {row['algorithm']}{note}",
              flush=True)
    print("ours and ET dflt include the program's float input and output (TFLM's int8 model has neither); "
          "int8 = ours without them, the figure comparable with TFLM's head (its planned tensors); "
          "io int8 = the arena of the --io int8 program.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
