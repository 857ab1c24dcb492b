"""Cortex-M programs: imxrt beside ExecuTorch's upstream Cortex-M backend, same run, same models and samples.

Both pipelines compile each MLPerf Tiny example for each CPU-only target and the two `.pte` files are read
by the same code (`_program_stats`). One row per model x target x side:
- arena: planned activation memory (`non_const_buffer_sizes`, memory ids >= 1, summed);
- scratch: the CMSIS-NN buffers, i.e. the tensors passed as `scratch` / `output_scratch` to `cortex_m::*`
  kernels (bytes, and how many allocations);
- .pte: file size in bytes;
- calls: kernel calls in the chain, of which `cortex_m::*` and of which float `aten::*` compute;
- consts: constant tensors serialized, and how many of them no instruction reads (dead);
then one line per model with the ours / upstream ratios on each target.

Both sides get the model and every sample in channels_last (the same values), as upstream's AOT compiler
prepares them. Upstream runs the way its AOT compiler's Cortex-M path does (`backends/arm/scripts/aot_arm_compiler.py`,
`_to_edge_cortex_m`, default dim-order layout): model and inputs to channels_last, strict export,
`CortexMQuantizer` (prepare_pt2e, calibrate, convert_pt2e), export again, `to_edge_transform_and_lower`
with `cortex_m_edge_compile_config()`, `CortexMPassManager(target_config=CortexMTargetConfig(cpu=...))`,
`to_executorch(extract_delegate_segments=False)`. The target's core and CMSIS-NN path (ISA) are passed
to it as they are to ours.

    python benchmarks/cpu.py [--models ds_cnn resnet8 ...] [--targets imxrt700-cpu cortex-m55]
                             [--calibration-samples 8] [--ops]

Upstream anchor (reference/anchors.md), ResNet-8 on the M33: arena 49,728 B, scratch 6,704 B in 10
allocations, 16 calls all cortex_m, 41 of 77 constant tensors dead, `.pte` 97,816 B. This benchmark
reproduces every figure but the file size, which comes out 98,648 B: ExecuTorch serializes identical
constant buffers once, and its untrained ResNet8 (BatchNorm at mean 0, variance 1) has zero biases that
coincide with the zero-point tensors; the examples' seeded weights and BatchNorm statistics give fewer
identical buffers. Untrained weights give 97,816 B (the anchor) or 97,688 B here, depending on the seed of
the weights and the calibration input: a few small per-channel tensors (shifts) may coincide too.
Quantizing a model that is not channels_last (as upstream's own test harness does) stores every conv
weight twice, OIHW (dead) and OHWI (read by the kernel), as different bytes: about 172 KB.
"""

from __future__ import annotations

import argparse
import copy
import logging
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
sys.path.insert(0, str(HERE))

for _name in ("torchao", "torch.utils._pytree", "executorch"):
    logging.getLogger(_name).setLevel(logging.ERROR)
warnings.filterwarnings("ignore")

import torch  # noqa: E402
from _program_stats import ProgramStats, program_stats  # noqa: E402
from executorch.backends.cortex_m.edge_compile_config import cortex_m_edge_compile_config  # noqa: E402
from executorch.backends.cortex_m.library import cmsis_nn  # noqa: E402
from executorch.backends.cortex_m.passes.cortex_m_pass_manager import CortexMPassManager  # noqa: E402
from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer  # noqa: E402
from executorch.backends.cortex_m.target_config import CortexMTargetConfig  # noqa: E402
from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower  # noqa: E402
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e  # noqa: E402

from imxrt.errors import ImxrtError  # noqa: E402
from imxrt.pipeline import CompileOptions, compile  # noqa: E402
from imxrt.source import load_source  # noqa: E402
from imxrt.targets import Target, get_target  # noqa: E402

logging.getLogger("executorch.exir.pass_manager").setLevel(logging.ERROR)  # it sets its own level at import

MODELS = ("ds_cnn", "mobilenet_v1", "resnet8", "autoencoder")
TARGETS = ("imxrt700-cpu", "cortex-m55")
SIDES = ("ours", "upstream")


def run_ours(model, inputs, calibration, target: Target) -> bytes:
    # The same channels_last model and samples upstream gets: a channels_last input stays channels_last, so
    # neither program converts the image's layout (an NCHW input costs ours one copy into the first conv).
    model = model.to(memory_format=torch.channels_last)
    calibration = [_channels_last(sample) for sample in calibration]
    return compile(model, _channels_last(inputs), target, calibration, CompileOptions(show_progress=False)).pte


def upstream_target(target: Target) -> CortexMTargetConfig:
    """Upstream's config for the target's core, on the CMSIS-NN path our program is built for."""
    config = CortexMTargetConfig.from_target_string(target.cpu.core.name)
    return CortexMTargetConfig(cpu=config.cpu, isa=getattr(cmsis_nn.Backend, target.cpu.isa.name))


def _channels_last(sample: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return tuple(x.to(memory_format=torch.channels_last) if x.dim() == 4 else x for x in sample)


def run_upstream(model, inputs, calibration, target: Target) -> bytes:
    config = upstream_target(target)
    # Upstream's dim-order lowering reads channels_last tensors: its AOT compiler converts the model and every
    # sample (the same values, another memory format) before exporting.
    model = model.to(memory_format=torch.channels_last)
    inputs = _channels_last(inputs)
    captured = torch.export.export(model, inputs, strict=True).module(check_guards=False)
    prepared = prepare_pt2e(captured, CortexMQuantizer())
    for sample in calibration:
        prepared(*_channels_last(sample))
    quantized = torch.export.export(convert_pt2e(prepared), inputs, strict=True)
    edge = to_edge_transform_and_lower(quantized, compile_config=cortex_m_edge_compile_config())
    # The pass manager rewrites the edge program outside the manager, as upstream's AOT compiler does.
    edge._edge_programs["forward"] = CortexMPassManager(edge.exported_program(), target_config=config).transform()
    return edge.to_executorch(ExecutorchBackendConfig(extract_delegate_segments=False)).buffer


RUNNERS = {"ours": run_ours, "upstream": run_upstream}

COLUMNS = (("arena B", 9), ("scratch B", 9), ("allocs", 6), (".pte B", 9), ("calls", 5), ("cortex_m", 8),
           ("aten fp", 7), ("consts", 6), ("dead", 4), ("s", 5))


def _cells(stats: ProgramStats, seconds: float) -> list[str]:
    return [f"{stats.arena_bytes:,}", f"{stats.scratch_bytes:,}", f"{stats.scratch_allocs}",
            f"{stats.pte_bytes:,}", f"{stats.calls}", f"{stats.cortex_m_calls}", f"{stats.float_aten_calls}",
            f"{stats.constants}", f"{stats.dead_constants}", f"{seconds:.1f}"]


def _ratio(ours: int, upstream: int) -> str:
    return f"{ours / upstream:.2f}" if upstream else "-"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--targets", nargs="+", default=list(TARGETS),
                        help="imxrt CPU-only targets (see `imxrt targets`)")
    parser.add_argument("--calibration-samples", type=int, default=8)
    parser.add_argument("--ops", action="store_true", help="print each program's kernel calls by operator")
    args = parser.parse_args(argv)
    try:
        targets = [get_target(name) for name in args.targets]
    except ImxrtError as e:
        parser.error(str(e))
    for target in targets:
        if target.npu is not None:
            parser.error(f"{target.name} has an NPU; give CPU-only targets (imxrt700-cpu, cortex-m0 ... cortex-m85)")

    header = f"{'model':13s} {'target':13s} {'side':8s} " + " ".join(f"{name:>{width}s}" for name, width in COLUMNS)
    print(header)
    print("-" * len(header))
    for name in args.models:
        source = load_source(str(EXAMPLES / f"{name}.py"))
        calibration = list(source.calibration or [source.example_inputs])[:args.calibration_samples]
        ratios = []
        for target in targets:
            stats = {}
            for side in SIDES:
                start = time.perf_counter()
                try:
                    pte = RUNNERS[side](copy.deepcopy(source.model), source.example_inputs, calibration, target)
                except Exception as e:  # a failing side is a result to print, not a reason to stop the table
                    detail = str(e).strip().splitlines()[0] if str(e).strip() else ""
                    print(f"{name:13s} {target.name:13s} {side:8s} failed: {type(e).__name__}: {detail[:120]}")
                    continue
                stats[side] = program_stats(pte)
                cells = _cells(stats[side], time.perf_counter() - start)
                row = " ".join(f"{cell:>{width}s}" for cell, (_, width) in zip(cells, COLUMNS, strict=True))
                print(f"{name:13s} {target.name:13s} {side:8s} {row}", flush=True)
                if args.ops:
                    print(" " * 36 + ", ".join(f"{op} {count}" for op, count in sorted(stats[side].operators.items())))
            if len(stats) == len(SIDES):
                ours, upstream = stats["ours"], stats["upstream"]
                ratios.append(f"{target.name}: arena {_ratio(ours.arena_bytes, upstream.arena_bytes)}, "
                              f"scratch {_ratio(ours.scratch_bytes, upstream.scratch_bytes)}, "
                              f".pte {_ratio(ours.pte_bytes, upstream.pte_bytes)}, "
                              f"calls {_ratio(ours.calls, upstream.calls)}")
        if ratios:
            print(f"{name:13s} ours/upstream  " + "; ".join(ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
