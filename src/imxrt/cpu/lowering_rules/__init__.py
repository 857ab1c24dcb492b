"""CPU lowering, per-op knowledge: how each int8 edge cluster becomes a cortex_m op (one ordered table).

A cluster is ``dequantize -> op [-> fused activation] -> quantize`` (``passes.qdq``). Its row in ``CPU_KERNELS``
builds the replacement from the cluster's int8 inputs, following the stock cortex_m library's conventions
(reference/cortex_m.md): CMSIS weight layouts as new constants, requantization as (multiplier, shift) pairs
computed the way TFLM computes them from float32 scales, ``input_offset = -zp_in``, fused clamps as
``activation_min/max``, scratch as memory-planned ``uint8`` allocs sized for the ISA. A row that cannot take
a particular cluster raises ``NotLowered`` with the reason, and the op stays float on the CPU.

Example: ``dq(x) -> convolution(dq(w), dq(b)) -> relu -> q`` becomes
``cortex_m.quantized_conv2d(x, w_ohwi, b, stride, padding, dilation, -zp_in, zp_out, M[c], shift[c],
act_min, act_max, alloc(uint8[N]))``.

The rows' functions live in one module per op family, the families of the NPU's converters
(``npu/litert/converters``): conv, linear, elementwise, pool, reduce, pad, shape; ``common`` holds the
cluster being rewritten (``Rewrite``). A duplicate op raises at import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from executorch.exir.dialects._ops import ops as exir_ops
from torch.fx import Node

import imxrt.passes.recurrent_loops  # noqa: F401  (defines the imxrt:: loop markers)
from imxrt.cpu.lowering_rules import conv, elementwise, linear, pad, pool, reduce, shape
from imxrt.cpu.lowering_rules.common import Rewrite, edge
from imxrt.op_tables import one_row_per_op


@dataclass(frozen=True)
class CpuKernel:
    """One row: the kernel the report names and how a cluster of the op becomes it."""

    kernel: str
    lower: Callable[[Rewrite], Node]


_LUT = "cortex_m::quantized_activation"
_PORTABLE = "portable (int8)"
_LOOP = "the loop's slicing and copies (scan)"
LOOP_MARKERS = tuple(getattr(exir_ops.edge.imxrt, name).default
                     for name in ("loop_input", "loop_carry", "loop_result", "loop_stack"))

_TABLE: list[tuple[object, CpuKernel]] = [
    # weighted
    (edge.convolution.default, CpuKernel("cortex_m::quantized_conv2d / depthwise / transpose", conv.lower_convolution)),
    (edge.linear.default, CpuKernel("cortex_m::quantized_linear", linear.lower_linear)),
    (edge.mm.default, CpuKernel("cortex_m::quantized_linear", linear.lower_mm)),
    (edge.bmm.default, CpuKernel("cortex_m::quantized_batch_matmul", linear.lower_bmm)),
    # binary elementwise
    (edge.add.Tensor, CpuKernel("cortex_m::quantized_add", elementwise.lower_add)),
    (edge.sub.Tensor, CpuKernel("cortex_m::quantized_add (negated second multiplier)", elementwise.lower_sub)),
    (edge.mul.Tensor, CpuKernel("cortex_m::quantized_mul", elementwise.lower_mul)),
    (edge.div.Tensor, CpuKernel("cortex_m::quantized_div", elementwise.lower_div)),
    (edge.maximum.default, CpuKernel("cortex_m::maximum", elementwise.lower_min_max("maximum"))),
    (edge.minimum.default, CpuKernel("cortex_m::minimum", elementwise.lower_min_max("minimum"))),
    # comparisons with a constant: the portable kernel on int8 values, an integer threshold
    *((op, CpuKernel(_PORTABLE, elementwise.lower_compare)) for op in (
        edge.gt.Scalar, edge.ge.Scalar, edge.lt.Scalar, edge.le.Scalar)),
    (edge.prelu.default, CpuKernel(f"{_LUT} (one slope); two of them, quantized_mul and quantized_add (a slope "
                                   "per channel)", elementwise.lower_prelu)),
    # activations and unary math: lookup tables
    *((op, CpuKernel(_LUT, elementwise.lower_lut(build))) for op, build in elementwise.LUTS.items()),
    # pooling and reductions
    (edge.avg_pool2d.default, CpuKernel("cortex_m::quantized_avg_pool2d", pool.lower_avg_pool)),
    (edge._adaptive_avg_pool2d.default, CpuKernel("cortex_m::quantized_avg_pool2d", pool.lower_adaptive_avg_pool)),
    (edge.max_pool2d.default, CpuKernel("cortex_m::quantized_max_pool2d", pool.lower_max_pool)),
    (edge.max_pool2d_with_indices.default, CpuKernel("cortex_m::quantized_max_pool2d", pool.lower_max_pool)),
    (edge.mean.dim, CpuKernel("cortex_m::quantized_avg_pool2d", pool.lower_spatial_mean)),
    (edge.sum.dim_IntList, CpuKernel("cortex_m::quantized_linear (a weight of ones)", reduce.lower_sum)),
    (edge.amax.default, CpuKernel(_PORTABLE, shape.lower_portable)),
    (edge.amin.default, CpuKernel(_PORTABLE, shape.lower_portable)),
    (edge._softmax.default, CpuKernel("cortex_m::softmax", reduce.lower_softmax)),
    # padding
    (edge.constant_pad_nd.default, CpuKernel("cortex_m::pad", pad.lower_pad)),
    *((op, CpuKernel(_PORTABLE, shape.lower_portable)) for op in (
        edge.reflection_pad1d.default, edge.reflection_pad2d.default, edge.reflection_pad3d.default,
        edge.replication_pad1d.default, edge.replication_pad2d.default, edge.replication_pad3d.default)),
    # data movement
    (edge.permute_copy.default, CpuKernel("cortex_m::transpose", shape.lower_permute)),
    *((op, CpuKernel(_PORTABLE, shape.lower_portable)) for op in (
        edge.view_copy.default, edge.squeeze_copy.dims, edge.squeeze_copy.dim, edge.unsqueeze_copy.default,
        edge.clone.default, edge.alias_copy.default, edge.slice_copy.Tensor, edge.select_copy.int,
        edge.cat.default, edge.expand_copy.default, edge.flip.default)),
    # lookups by an integer index or a boolean mask
    (edge.embedding.default, CpuKernel(_PORTABLE, shape.lower_lookup)),
    (edge.index_select.default, CpuKernel(_PORTABLE, shape.lower_lookup)),
    (edge.masked_fill.Scalar, CpuKernel(_PORTABLE, shape.lower_masked_fill)),
    (edge.index_put.default, CpuKernel(_PORTABLE, shape.lower_lookup)),
    # resize
    (edge.upsample_nearest2d.vec, CpuKernel(_PORTABLE, shape.lower_portable)),
    # a recurrent loop's markers, on the int8 values: rolling the loop makes them its scan's slices and copies
    *((op, CpuKernel(_LOOP, shape.lower_loop_marker)) for op in LOOP_MARKERS),
]


CPU_KERNELS: dict[object, CpuKernel] = one_row_per_op(_TABLE, "CPU lowering rows")
POINTWISE = CpuKernel(_LUT, elementwise.lower_pointwise)


def row_for(node: Node) -> CpuKernel | None:
    """The table row of ``node``'s op; any other single-tensor pointwise op is a lookup table."""
    row = CPU_KERNELS.get(node.target)
    if row is None and elementwise.is_pointwise_unary(node):
        return POINTWISE
    return row


def supported_ops_markdown() -> str:
    """The CPU's section of ``docs/supported_ops.md`` (``imxrt.supported_ops``), generated from the rows."""
    lines = [
        "## On the Cortex-M33 (CMSIS-NN)",
        "",
        "An int8 op the NPU does not take (or every op, on `imxrt700-cpu`) becomes the kernel of its row; a",
        "cluster the row cannot take runs in float between the int8 ops around it, and the report says why. Any",
        "other elementwise op of one tensor is one 256-entry table (`cortex_m::quantized_activation`).",
        "",
        "| edge op | kernel | how |",
        "|---|---|---|",
    ]
    for op, row in CPU_KERNELS.items():
        how = " ".join(line.strip() for line in (row.lower.__doc__ or "").strip().splitlines()) or "int8"
        how = how.replace("|", "\\|")  # a table cell
        lines.append(f"| `{getattr(op, '__name__', op)}` | {row.kernel} | {how} |")
    return "\n".join(lines) + "\n"
