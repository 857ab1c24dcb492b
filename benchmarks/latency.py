"""The cost model's estimates next to every published latency (the table in docs/cost_model.md).

Each anchor of `imxrt.perf.published_latencies` is compiled for its target with the clock set to the measurement's,
and its estimated latency printed beside the published figure, with the error against the published range
and whether the anchor calibrated constants or only checks them. Then the bundled models no RT700 NPU
figure exists for: their NPU estimate on imxrt700, the effective MACs per cycle that implies (the published
RT700 models run at 14-37 of 64), and the same model's CPU-only estimate on imxrt700-cpu.

    python benchmarks/latency.py [--models ds_cnn cifarnet ...]
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"

for _name in ("torchao", "torch.utils._pytree", "executorch"):
    logging.getLogger(_name).setLevel(logging.ERROR)
warnings.filterwarnings("ignore")

from imxrt.perf.published_latencies import ANCHORS  # noqa: E402
from imxrt.pipeline import CompileOptions, compile  # noqa: E402
from imxrt.source import load_source  # noqa: E402
from imxrt.targets import get_target  # noqa: E402

UNPUBLISHED_ON_NPU = ("resnet8", "mobilenet_v1", "autoencoder", "mobilenet_v2")


def estimate(model: str, target) -> dict:
    source = load_source(str(EXAMPLES / f"{model}.py"))
    calibration = list(source.calibration) if source.calibration is not None else None
    result = compile(source.model, source.example_inputs, target, calibration, CompileOptions(show_progress=False))
    return result.report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", help="only these examples")
    args = parser.parse_args(argv)
    keep = (lambda name: name in args.models) if args.models else (lambda name: True)

    print(f"{'model':14} {'target':12} {'MHz':>5} {'published us':>15} {'estimate us':>12} {'error':>7}  role")
    for anchor in ANCHORS:
        if not keep(anchor.model):
            continue
        report = estimate(anchor.model, anchor.target_at_clock())
        us = report["latency"]["total"]["us"]
        low, high = anchor.published_us
        published = f"{low:,.0f}" if low == high else f"{low:,.0f}-{high:,.0f}"
        role = f"calibrates: {anchor.calibrates}" if anchor.calibrates else "check"
        print(f"{anchor.model:14} {anchor.target:12} {anchor.clock_hz / 1e6:5.0f} {published:>15} {us:12,.1f} "
              f"{100 * anchor.error(us):+6.1f}%  {role}", flush=True)

    print("\nno published RT700 NPU figure: estimate at 325 MHz")
    print(f"{'model':14} {'MACs':>12} {'NPU us':>9} {'MAC/cycle':>9} {'CPU-only us':>12} {'speed-up':>8}")
    for model in UNPUBLISHED_ON_NPU:
        if not keep(model):
            continue
        report = estimate(model, get_target("imxrt700"))
        cpu_only = estimate(model, get_target("imxrt700-cpu"))["latency"]["total"]["us"]
        latency = report["latency"]
        macs = report["summary"]["macs_total"]
        us = latency["total"]["us"]
        per_cycle = macs / latency["total"]["cycles"]
        print(f"{model:14} {macs:12,} {us:9,.1f} {per_cycle:9.1f} {cpu_only:12,.1f} {cpu_only / us:7.1f}x",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
