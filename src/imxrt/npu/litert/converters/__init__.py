"""The converter table: edge op -> the function that lowers one node of it to LiteRT operators.

One explicit, ordered list; each converter takes ``(LoweringContext, node)``, reads its operands with
``ctx.tensor`` / ``ctx.weight``, writes its result through ``ctx.output`` and emits through ``ctx.emit``.
A duplicate op raises at import.
"""

from __future__ import annotations

from collections.abc import Callable

from executorch.exir.dialects._ops import ops as exir_ops
from torch.fx import Node

from imxrt.npu.litert.context import LoweringContext
from imxrt.npu.litert.converters import conv, elementwise, linear, pad, pool, reduce, resize, shape
from imxrt.op_tables import one_row_per_op

aten = exir_ops.edge.aten
Converter = Callable[[LoweringContext, Node], None]

_TABLE: list[tuple[object, Converter]] = [
    # weighted
    (aten.convolution.default, conv.convert_convolution),
    (aten.linear.default, linear.convert_linear),
    (aten.addmm.default, linear.convert_addmm),
    (aten.mm.default, linear.convert_mm),
    (aten.bmm.default, linear.convert_bmm),
    # binary elementwise
    (aten.add.Tensor, elementwise.ADD),
    (aten.sub.Tensor, elementwise.SUB),
    (aten.mul.Tensor, elementwise.MUL),
    (aten.maximum.default, elementwise.MAXIMUM),
    (aten.minimum.default, elementwise.MINIMUM),
    # activations and unary math
    (aten.relu.default, elementwise.convert_clamp),
    (aten.hardtanh.default, elementwise.convert_clamp),
    (aten.clamp.default, elementwise.convert_clamp),
    (aten.sigmoid.default, elementwise.Unary("LOGISTIC")),
    (aten.tanh.default, elementwise.Unary("TANH")),
    (aten.exp.default, elementwise.Unary("EXP")),
    (aten.log.default, elementwise.Unary("LOG")),
    (aten.rsqrt.default, elementwise.Unary("RSQRT")),
    (aten.hardswish.default, elementwise.Unary("HARD_SWISH")),
    (aten.abs.default, elementwise.Unary("ABS")),
    (aten.neg.default, elementwise.convert_neg),
    (aten.leaky_relu.default, elementwise.convert_leaky_relu),
    (aten.prelu.default, elementwise.convert_prelu),
    # pooling and reductions
    (aten.avg_pool2d.default, pool.convert_avg_pool),
    (aten._adaptive_avg_pool2d.default, pool.convert_adaptive_avg_pool),
    (aten.max_pool2d_with_indices.default, pool.convert_max_pool),
    (aten.max_pool2d.default, pool.convert_max_pool),
    (aten.mean.dim, pool.convert_mean),
    (aten.sum.dim_IntList, reduce.SUM),
    (aten.amax.default, reduce.REDUCE_MAX),
    (aten.amin.default, reduce.REDUCE_MIN),
    (aten._softmax.default, reduce.convert_softmax),
    # padding
    (aten.constant_pad_nd.default, pad.convert_constant_pad),
    (aten.pad.default, pad.convert_pad),
    (aten.reflection_pad2d.default, pad.convert_reflection_pad),
    # data movement
    (aten.view_copy.default, shape.convert_view),
    (aten.squeeze_copy.dim, shape.convert_view),
    (aten.squeeze_copy.dims, shape.convert_view),
    (aten.squeeze_copy.default, shape.convert_view),
    (aten.unsqueeze_copy.default, shape.convert_view),
    (aten.clone.default, shape.convert_view),
    (aten.alias_copy.default, shape.convert_view),
    (aten._to_copy.default, shape.convert_view),
    (exir_ops.edge.dim_order_ops._clone_dim_order.default, shape.convert_view),
    (exir_ops.edge.dim_order_ops._to_dim_order_copy.default, shape.convert_view),
    (aten.permute_copy.default, shape.convert_permute),
    (aten.slice_copy.Tensor, shape.convert_slice),
    (aten.select_copy.int, shape.convert_select),
    (aten.cat.default, shape.convert_cat),
    (aten.upsample_nearest2d.vec, resize.convert_upsample_nearest),
    (aten.upsample_bilinear2d.vec, resize.convert_upsample_bilinear),
]


CONVERTERS: dict[object, Converter] = one_row_per_op(_TABLE, "LiteRT converters")
