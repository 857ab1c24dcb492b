"""Compile time and NPU graph quality: imxrt beside ExecuTorch's upstream NXP backend, same run, same models.

For each model both pipelines get the same module and the same calibration samples. Printed per model:
the seconds of each stage (export, quantize, lower, serialize) for both, the end-to-end ratio, and the
TRANSPOSE / PAD counts and partition counts of the LiteRT subgraphs each hands to the Neutron converter.
Upstream needs NXP's proprietary SDK even to import; `upstream_nxp` installs a stand-in for its target
query, and upstream stops after its edge -> TFLite conversion (the converter itself is unavailable).
The stages are cut where upstream's are: quantize is prepare, calibrate and convert; the export of the
converted module (our ``export_quantized``) is in lower, as upstream's re-export is.

    python benchmarks/compile.py [--models ds_cnn resnet8 ...] [--calibration-samples 8]
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import logging
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(EXAMPLES))  # the example files import their shared helpers as siblings

for _name in ("torchao", "torch.utils._pytree", "executorch"):
    logging.getLogger(_name).setLevel(logging.ERROR)
warnings.filterwarnings("ignore")

import torch  # noqa: E402
import upstream_nxp  # noqa: E402

from imxrt.npu.compilers.reference import litert_ops  # noqa: E402
from imxrt.pipeline import CompileOptions, compile  # noqa: E402


def _example(name: str):
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))  # the examples import their shared seeding helpers (_seeded.py)
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # upstream's strict (dynamo) export imports the model's module by name
    spec.loader.exec_module(module)
    return module


def _mobilenet_v2_224():
    """MobileNetV2 1.0 (the paper's 17 blocks) at 224x224: the size upstream's reference timings used."""
    module = _example("mobilenet_v2")
    model = module.build_mobilenet_v2(width=1.0, input_size=224, num_classes=1000, stages=module.PAPER_STAGES)
    return model, (torch.randn(1, 3, 224, 224),)


def load(name: str, samples: int):
    if name == "mobilenet_v2_224":
        model, inputs = _mobilenet_v2_224()
        generator = torch.Generator().manual_seed(1)
        calibration = [(torch.randn(1, 3, 224, 224, generator=generator),) for _ in range(samples)]
        return model, inputs, calibration
    module = _example(name)
    calibration = list(module.calibration_inputs())[:samples] if hasattr(module, "calibration_inputs") \
        else [module.example_inputs()]
    return module.model(), module.example_inputs(), calibration


def run_ours(model, inputs, calibration) -> dict:
    start = time.perf_counter()
    # the upstream side's SDK stand-in may be imported: name the reference compiler, not auto
    options = CompileOptions(neutron_compiler="reference", show_progress=False)
    result = compile(model, inputs, "imxrt700", calibration, options)
    total = time.perf_counter() - start
    ops = Counter(op for tflite in result.partitions for op in litert_ops(tflite))
    seconds = dict(result.stage_seconds, total=total)
    seconds["lower"] += seconds.pop("export_quantized")  # upstream's lower re-exports the converted module
    return {"seconds": seconds, "ops": ops,
            "partitions": result.report["summary"]["partitions"],
            "coverage": result.report["summary"]["npu_mac_fraction"]}


def run_upstream(model, inputs, calibration) -> dict:
    start = time.perf_counter()
    result = upstream_nxp.run_upstream(model, inputs, calibration)
    total = time.perf_counter() - start
    return {"seconds": dict(result.seconds, total=total), "ops": Counter(result.tflite_ops),
            "partitions": result.partitions, "error": result.error, "cpu": result.cpu_nodes}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+",
                        default=["ds_cnn", "mobilenet_v1", "resnet8", "autoencoder", "mobilenet_v2",
                                 "mobilenet_v2_224"])
    parser.add_argument("--calibration-samples", type=int, default=8)
    parser.add_argument("--side", choices=("both", "ours", "upstream"), default="both",
                        help="run one pipeline only (to time each as a whole process)")
    args = parser.parse_args(argv)
    runners = {"ours": run_ours, "upstream": run_upstream}
    if args.side != "both":
        runners = {args.side: runners[args.side]}
    if "upstream" in runners:
        upstream_nxp.ensure_neutron_sdk()

    stages = ("export", "quantize", "lower", "serialize", "total")
    header = (f"{'model':18s} {'who':9s} " + " ".join(f"{s:>9s}" for s in stages)
              + f" {'parts':>5s} {'TRANSPOSE':>9s} {'PAD':>4s}")
    print(header)
    print("-" * len(header))
    totals = {"ours": 0.0, "upstream": 0.0}
    for name in args.models:
        model, inputs, calibration = load(name, args.calibration_samples)
        rows = {who: run(copy.deepcopy(model), inputs, calibration) for who, run in runners.items()}
        for who, row in rows.items():
            if row.get("error"):
                print(f"{name:18s} {who:9s} failed: {row['error']}")
                continue
            seconds = " ".join(f"{row['seconds'][s]:9.2f}" if s in row["seconds"] else f"{'-':>9s}"
                               for s in stages)
            pads = row["ops"].get("PAD", 0) + row["ops"].get("PADV2", 0)
            print(f"{name:18s} {who:9s} {seconds} {row['partitions']:5d} {row['ops'].get('TRANSPOSE', 0):9d} "
                  f"{pads:4d}")
        if len(rows) < 2 or rows["upstream"].get("error"):
            continue
        ours, upstream = rows["ours"]["seconds"]["total"], rows["upstream"]["seconds"]["total"]
        if upstream:
            totals["ours"] += ours
            totals["upstream"] += upstream
            print(f"{name:18s} {'ratio':9s} ours / upstream end to end = {ours / upstream:.2f} "
                  f"(upstream stops before the converter; ours includes serialization)")
    if totals["upstream"]:
        print(f"\nall models: ours {totals['ours']:.1f} s, upstream {totals['upstream']:.1f} s, "
              f"ratio {totals['ours'] / totals['upstream']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
