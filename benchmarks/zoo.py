"""The CNN families people deploy, compiled by imxrt and by ExecuTorch's upstream NXP pipeline, side by side.

For each model of `_zoo_models.FAMILIES` (torchvision and timm architectures with random weights and
refreshed batch-norm statistics, and 1-D audio nets, a UNet and an FPN head written there), both pipelines
get the same module and calibration samples. Printed per model and pipeline: NPU MAC fraction, NeutronBackend
partitions, TRANSPOSEs in the partitions' LiteRT graphs, compute ops left on the CPU in float, compile
seconds; for imxrt also the estimated latency, the SRAM total, how many random inputs every partition
matched TFLM on bit for bit, and the largest .pte-vs-quantized-program difference in output LSBs.
Upstream needs NXP's SDK to import: `upstream_nxp` installs a stand-in for its target query, and stops
after its edge -> TFLite conversion (the converter itself is unavailable).

    pip install -e ".[test,zoo]"
    python benchmarks/zoo.py [--models mobilenet_v3_small ...] [--inputs 20] [--side both|ours|upstream] [--repeat N]
"""

from __future__ import annotations

import argparse
import copy
import logging
import math
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))  # the checks the test suite makes (program_checks)

for _name in ("torchao", "torch.utils._pytree", "executorch"):
    logging.getLogger(_name).setLevel(logging.ERROR)
warnings.filterwarnings("ignore")

import torch  # noqa: E402
import upstream_nxp  # noqa: E402
from _zoo_models import FAMILIES, build  # noqa: E402

from imxrt.npu.compilers.reference import litert_ops  # noqa: E402
from imxrt.pipeline import CompileOptions, compile  # noqa: E402

CALIBRATION_SAMPLES = 8


def _samples(shape: tuple[int, ...], count: int, seed: int) -> list[tuple[torch.Tensor, ...]]:
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(shape, generator=generator),) for _ in range(count)]


def run_ours(model, calibration, checks: list, repeat: int = 1) -> dict:
    """imxrt's row (the fastest of ``repeat`` compiles); a compile the compiler refuses (or a check that
    raises) is a row with the error."""
    import program_checks

    start = time.perf_counter()
    stage = "compile"
    try:
        options = CompileOptions(neutron_compiler="reference", show_progress=False)  # the stand-in may be imported
        seconds = math.inf
        for _ in range(repeat):
            fresh = copy.deepcopy(model)
            start = time.perf_counter()
            result = compile(fresh, calibration[0], "imxrt700", calibration, options)
            seconds = min(seconds, time.perf_counter() - start)
        stage = "check"
        exact = sum(not program_checks.partition_mismatches(result, inputs) for inputs in checks)
        lsb = max((max(program_checks.output_differences_lsb(result, inputs, model)) for inputs in checks[:3]),
                  default=float("nan"))
    except Exception as exc:  # one model's failure is that model's row, not the end of the benchmark
        return {"error": upstream_nxp.error_line(stage, exc), "seconds": time.perf_counter() - start}
    summary = result.report["summary"]
    return {
        "mac": summary["npu_mac_fraction"], "partitions": summary["partitions"],
        "transposes": Counter(op for t in result.partitions for op in litert_ops(t))["TRANSPOSE"],
        "float": summary["ops_cpu_float"], "seconds": seconds,
        "latency_us": result.report["latency"]["total"]["us"],
        "sram_kib": result.report["memory"]["sram"]["total_bytes"] / 1024,
        "tflm": f"{exact}/{len(checks)}", "lsb": lsb,
    }


def run_upstream(model, calibration, repeat: int = 1) -> dict:
    seconds = math.inf
    for _ in range(repeat):
        fresh = copy.deepcopy(model)
        start = time.perf_counter()
        result = upstream_nxp.run_upstream(fresh, calibration[0], calibration)
        seconds = min(seconds, time.perf_counter() - start)
    if result.error:
        return {"error": result.error, "seconds": seconds}
    delegated, cpu = result.delegated_nodes, len(result.cpu_nodes)
    return {
        # upstream records no MACs: the fraction of compute ops delegated stands in for it
        "mac": delegated / (delegated + cpu) if delegated + cpu else 0.0, "partitions": result.partitions,
        "transposes": result.tflite_ops.get("TRANSPOSE", 0), "float": cpu, "seconds": seconds,
    }


def compare(model, shape: tuple[int, ...], side: str, inputs: int, repeat: int = 1) -> dict[str, dict]:
    """Both pipelines' rows for one model (``side``: both, ours or upstream), on the same calibration
    samples; ours checked against TFLM on ``inputs`` random inputs. ``repeat`` > 1: each pipeline's fastest of
    that many compiles, so neither pays the first trace of an op kind that only this model has (the first
    compile of a model warms those for whichever pipeline runs second)."""
    calibration = _samples(shape, CALIBRATION_SAMPLES, seed=1)
    rows = {}
    if side != "upstream":
        rows["imxrt"] = run_ours(model, calibration, _samples(shape, inputs, seed=2), repeat)
    if side != "ours":
        rows["upstream"] = run_upstream(model, calibration, repeat)
    return rows


def warm_up(side: str) -> None:
    """One untimed compile of a small conv net by each pipeline measured: the first compile in a process also
    pays one-time costs (lazy imports, operator registration, first traces of each op kind), which would land
    on whichever pipeline and model came first."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                torch.nn.Flatten(), torch.nn.Linear(8, 4)).eval()
    calibration = _samples((1, 3, 16, 16), 2, seed=0)
    if side != "upstream":
        compile(model, calibration[0], "imxrt700", calibration,
                CompileOptions(neutron_compiler="reference", show_progress=False))
    if side != "ours":
        upstream_nxp.run_upstream(model, calibration[0], calibration)


HEADER = (f"{'model':20s} {'who':9s} {'NPU MACs':>8s} {'parts':>5s} {'TRANSPOSE':>9s} {'float CPU':>9s} "
          f"{'compile s':>9s} {'est. us':>8s} {'SRAM KiB':>8s} {'TFLM':>6s} {'pte LSB':>7s}")
FOOTNOTE = ("* upstream: delegated compute ops / all compute ops (it records no MAC counts); its float CPU ops "
            "count every compute op left outside a partition. TFLM: random inputs on which every partition gave "
            "TFLM's bytes. pte LSB: largest .pte vs quantized-program difference in output scale units (grows "
            "with depth: each op may round one LSB differently).")


def print_rows(name: str, rows: dict[str, dict]) -> None:
    for who, row in rows.items():
        if "error" in row:
            print(f"{name:20s} {who:9s} failed after {row['seconds']:.1f} s: {row['error']}")
            continue
        mac = f"{100 * row['mac']:7.1f}%" + ("*" if who == "upstream" else " ")
        ours = (f" {row['latency_us']:8.0f} {row['sram_kib']:8.0f} {row['tflm']:>6s} {row['lsb']:7.2f}"
                if who == "imxrt" else "")
        print(f"{name:20s} {who:9s} {mac:>8s}{row['partitions']:5d} {row['transposes']:9d} {row['float']:9d} "
              f"{row['seconds']:9.1f}{ours}")
    sys.stdout.flush()


def benchmark(description: str, names: list[str], build_model, argv=None) -> int:
    """The command line both model benchmarks share: ``build_model(name)`` gives ``(model, input shape)``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--models", nargs="+", default=names, choices=names)
    parser.add_argument("--inputs", type=int, default=20, help="random inputs checked against TFLM per model")
    parser.add_argument("--side", choices=("both", "ours", "upstream"), default="both")
    parser.add_argument("--repeat", type=int, default=1, help="compiles per model and pipeline; the fastest is shown")
    args = parser.parse_args(argv)
    if args.side != "ours":
        upstream_nxp.ensure_neutron_sdk()

    warm_up(args.side)
    print(HEADER)
    print("-" * len(HEADER))
    for name in args.models:
        model, shape = build_model(name)
        print_rows(name, compare(model, shape, args.side, args.inputs, args.repeat))
    print("\n" + FOOTNOTE)
    return 0


def main(argv=None) -> int:
    return benchmark(__doc__.splitlines()[0], list(FAMILIES), build, argv)


if __name__ == "__main__":
    sys.exit(main())
