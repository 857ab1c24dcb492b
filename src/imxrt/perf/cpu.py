"""Cost model, CPU side: cycles of each kernel a Cortex-M runs (cortex_m CMSIS-NN ops, portable ops).

A kernel call costs ``Rates.kernel_overhead`` (argument checks, requantization setup, the call through the
runtime) plus its work: ``MACs / MAC rate`` of its kind (conv, depthwise, fully connected) on the program's
CMSIS-NN path, plus ``elements x cycles per element`` of its kind for everything that is not MAC work
(pools per window tap, elementwise ops, lookup tables, copies, quantize / dequantize). A program adds
``Rates.inference_overhead`` once. Memory traffic is inside these rates: a Cortex-M loads and computes in
one instruction stream.

Every constant is documented with its source in docs/cost_model.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import torch
from torch.fx import Node

from imxrt import macs
from imxrt.cpu.isa import Isa
from imxrt.passes.qdq import QDQ_OPS


def op_name_of(target: object) -> str:
    """``cortex_m.quantized_conv2d.default`` style name of an op object."""
    return getattr(target, "__name__", str(target))


class Work(Enum):
    """What a kernel's time is proportional to."""

    CONV = "conv"  # MACs at the conv rate (im2col + matrix kernel)
    DEPTHWISE = "depthwise"  # MACs at the depthwise rate
    MATMUL = "fully connected"  # MACs at the fully connected rate (one weight read per MAC)
    ELEMENTWISE = "elementwise"  # output elements, two inputs rescaled
    LOOKUP = "lookup"  # output elements through a 256-entry table
    POOL = "pool"  # output elements x window taps
    REDUCE = "reduce"  # input elements
    SOFTMAX = "softmax"  # elements, three passes with exponentials
    COPY = "copy"  # bytes moved (pad, slice, concat, upsample)
    TRANSPOSE = "transpose"  # elements gathered one by one (layout copies too)
    CONVERT = "convert"  # float <-> int8 elements (quantize / dequantize)
    FLOAT = "float"  # a float op without an int8 kernel: MACs and elements in single precision
    VIEW = "view"  # no kernel: ExecuTorch's memory planning makes a view_copy a view


@dataclass(frozen=True)
class Rates:
    """Effective speeds of one CMSIS-NN path, end to end (loads, requantization and loop overhead included)."""

    conv_macs_per_cycle: float
    depthwise_macs_per_cycle: float
    matmul_macs_per_cycle: float
    cycles_per_element: dict[Work, float]
    kernel_overhead: int  # cycles per kernel call
    inference_overhead: int  # cycles per program run (method execute, input/output copies)


def _elements(dsp_factor: float) -> dict[Work, float]:
    """Per-element costs of a path, as the DSP path's (below) times the path's SIMD width factor."""
    return {work: cycles * dsp_factor for work, cycles in _DSP_ELEMENT_CYCLES.items()}


# DSP path (Cortex-M4/M7/M33/M35P), per element, from the CMSIS-NN inner loops: add/mul rescale 4 values
# in ~10 instructions per value pair; a table lookup is a load + a store; a pool tap is a SIMD max or add
# on 4 values; a copy moves a word per cycle; a transpose loads and stores one byte; float conversion
# multiplies, rounds and saturates in the FPU. Not calibrated: no published figure isolates them.
_DSP_ELEMENT_CYCLES = {
    Work.ELEMENTWISE: 4.0,
    Work.LOOKUP: 2.0,
    Work.POOL: 0.5,
    Work.REDUCE: 0.5,
    Work.SOFTMAX: 12.0,
    Work.COPY: 0.25,
    Work.TRANSPOSE: 2.0,
    Work.CONVERT: 6.0,
    Work.FLOAT: 8.0,
    Work.VIEW: 0.0,
}

RATES: dict[Isa, Rates] = {
    # Calibrated: conv on MLPerf Tiny IC (ResNet-8) and fully connected on AD (autoencoder), Cortex-M33 at
    # 160 MHz (111.07 ms, 3.43 ms); depthwise: the middle of the published CMSIS-NN range 0.35-0.5.
    # Checked, not fitted: KWS and VWW (docs/cost_model.md).
    Isa.DSP: Rates(conv_macs_per_cycle=0.72, depthwise_macs_per_cycle=0.42, matmul_macs_per_cycle=0.50,
                   cycles_per_element=_elements(1.0), kernel_overhead=1_500, inference_overhead=5_000),
    # Calibrated the same way on the Cortex-M85 at 480 MHz (TFLM + CMSIS-NN: IC 8.48 ms, AD 0.53 ms);
    # Helium handles 16 int8 lanes where the DSP extension handles 4: element costs a quarter.
    Isa.MVE: Rates(conv_macs_per_cycle=3.2, depthwise_macs_per_cycle=1.4, matmul_macs_per_cycle=1.1,
                   cycles_per_element=_elements(0.25), kernel_overhead=1_500, inference_overhead=5_000),
    # No published CMSIS-NN figure for an M0/M3 path: one MAC per multiply-add instruction pair where the
    # DSP path does two per SMLAD, so half the DSP rates; element work without SIMD costs about twice.
    Isa.SCALAR: Rates(conv_macs_per_cycle=0.36, depthwise_macs_per_cycle=0.21, matmul_macs_per_cycle=0.25,
                      cycles_per_element=_elements(2.0), kernel_overhead=1_500, inference_overhead=5_000),
}

# Kernel op name (``aten.convolution.default`` style, as the report prints it) -> the work its time is
# proportional to. Keyed by name, not op object: the cortex_m op objects are replaced when ExecuTorch's own
# Cortex-M op module loads after ours (cortex_m/ops.py); a test checks every cortex_m op has its row. Ops not
# listed: int8 data movement copies, float ops run in float (``work_of``).
_CORTEX_M_WORK = {
    "quantized_conv2d": Work.CONV,
    "quantized_conv2d_nhwc": Work.CONV,
    "quantized_transpose_conv2d": Work.CONV,
    "quantized_transpose_conv2d_nhwc": Work.CONV,
    "quantized_depthwise_conv2d": Work.DEPTHWISE,
    "quantized_depthwise_conv2d_nhwc": Work.DEPTHWISE,
    "quantized_linear": Work.MATMUL,
    "quantized_batch_matmul": Work.MATMUL,
    "quantized_add": Work.ELEMENTWISE,
    "quantized_mul": Work.ELEMENTWISE,
    "quantized_div": Work.ELEMENTWISE,
    "maximum": Work.ELEMENTWISE,
    "minimum": Work.ELEMENTWISE,
    "quantized_activation": Work.LOOKUP,
    "softmax": Work.SOFTMAX,
    "quantized_avg_pool2d": Work.POOL,
    "quantized_avg_pool2d_nhwc": Work.POOL,
    "quantized_max_pool2d": Work.POOL,
    "quantized_max_pool2d_nhwc": Work.POOL,
    "pad": Work.COPY,
    "transpose": Work.TRANSPOSE,
    "quantize_per_tensor": Work.CONVERT,
    "dequantize_per_tensor": Work.CONVERT,
}
KERNEL_WORK: dict[str, Work] = {
    **{f"cortex_m.{name}.default": work for name, work in _CORTEX_M_WORK.items()},
    **{op_name_of(op): Work.CONVERT for op in sorted(QDQ_OPS, key=str)},
    "dim_order_ops._to_dim_order_copy.default": Work.TRANSPOSE,  # a layout copy gathers bytes
    "aten.view_copy.default": Work.VIEW,
}
_MAC_WORK = {Work.CONV, Work.DEPTHWISE, Work.MATMUL}


@dataclass(frozen=True)
class CpuCost:
    kernel: str
    work: Work
    macs: int
    elements: int  # the element count the per-element rate applies to
    overhead_cycles: int
    cycles: int


def _numel(node: object) -> int:
    value = node.meta.get("val") if isinstance(node, Node) else None
    value = value[0] if isinstance(value, (tuple, list)) and value else value
    return math.prod(value.shape) if isinstance(value, torch.Tensor) else 0


def _is_float(node: Node) -> bool:
    value = node.meta.get("val")
    value = value[0] if isinstance(value, (tuple, list)) and value else value
    return isinstance(value, torch.Tensor) and value.dtype.is_floating_point


def work_of(node: Node) -> Work:
    """What a CPU node's time is proportional to (a table row, else by its output dtype)."""
    work = KERNEL_WORK.get(op_name_of(node.target))
    if work is not None:
        return work
    return Work.FLOAT if _is_float(node) else Work.COPY


def _pool_taps(node: Node) -> int:
    kernel = node.args[1]  # quantized_*_pool2d(input, kernel_size, ...)
    return math.prod(kernel) if isinstance(kernel, (list, tuple)) else 1


def kernel_cost(node: Node, isa: Isa) -> CpuCost:
    """The estimate of one CPU node on the ``isa`` path (module docstring)."""
    rates = RATES[isa]
    work = work_of(node)
    node_macs = node.meta["edge_macs"] if "edge_macs" in node.meta else macs.of(node)
    name = op_name_of(node.target)
    if work is Work.VIEW:
        return CpuCost(name, work, 0, 0, 0, 0)
    rate = {Work.CONV: rates.conv_macs_per_cycle, Work.DEPTHWISE: rates.depthwise_macs_per_cycle,
            Work.MATMUL: rates.matmul_macs_per_cycle}.get(work)
    if rate is not None:
        elements, cycles = 0, node_macs / rate
    else:
        elements = _numel(node)
        if work is Work.POOL:
            elements *= _pool_taps(node)
        elif work is Work.COPY:
            elements = max(elements, _numel(node.args[0]) if node.args else 0)
        cycles = elements * rates.cycles_per_element[work]
        if work is Work.FLOAT and node_macs:  # a float conv / matmul: one FPU multiply-add per two cycles
            cycles += node_macs * FLOAT_CYCLES_PER_MAC
    overhead = rates.kernel_overhead
    return CpuCost(name, work, node_macs if work in _MAC_WORK or work is Work.FLOAT else 0, elements, overhead,
                   overhead + math.ceil(cycles))


def loop_step_cost(scan: Node, isa: Isa) -> CpuCost:
    """The instructions a ``scan`` adds per step, beside its body's kernels (ExecuTorch's emitter): a
    ``select_copy`` per sequence input, a ``copy_`` per carry and an ``et_copy_index`` per stacked output
    (kernel calls that copy their bytes), and four ``executorch_prim`` instructions (the step counter, its
    test, the jump)."""
    rates = RATES[isa]
    _, initial, xs, _ = scan.args
    results = scan.meta["val"]
    stacked = results[len(initial):]
    copies = len(xs) + len(initial) + len(stacked)
    elements = sum(_numel(x) // max(1, x.meta["val"].shape[0]) for x in xs) + sum(_numel(c) for c in initial) + \
        sum(math.prod(y.shape[1:]) for y in stacked)
    overhead = copies * rates.kernel_overhead + 4 * PRIM_INSTRUCTION_CYCLES
    return CpuCost("scan (per step)", Work.COPY, 0, elements, overhead,
                   overhead + math.ceil(elements * rates.cycles_per_element[Work.COPY]))


# An executorch_prim instruction (scalar add / compare, jump): interpreted by the runtime, no kernel call
# (not calibrated).
PRIM_INSTRUCTION_CYCLES = 100

# A float MAC in ExecuTorch's portable kernels: load, load, VFMA, loop bookkeeping (not calibrated).
FLOAT_CYCLES_PER_MAC = 4.0
