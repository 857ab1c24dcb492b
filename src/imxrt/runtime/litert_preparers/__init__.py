"""The host runtime's operator table: every LiteRT op the lowering can emit, with the function that prepares it.

A preparer takes an ``OperatorView`` (its operands checked against TFLM's rules already), computes what the
kernel needs once (multipliers, shifts, lookup tables, windows, constant weights in matmul layout) and returns
the ``Evaluate`` that only runs it (``BlasFree`` for one that calls no BLAS). The preparers live in one module
per op family, the families of the NPU's converters (``npu/litert/converters``): conv, linear, elementwise,
pool, reduce, pad, resize, shape. One explicit list keyed by ``BuiltinOperator``; a duplicate raises at import.
"""

from __future__ import annotations

from collections.abc import Callable

from imxrt.kernels import elementwise as elementwise_kernels
from imxrt.kernels import pooling
from imxrt.kernels import reduce as reduce_kernels
from imxrt.op_tables import one_row_per_op
from imxrt.runtime.litert_model import BUILTIN_NAMES, Op, OperatorView
from imxrt.runtime.litert_preparers import conv, elementwise, linear, pad, pool, reduce, resize, shape
from imxrt.runtime.litert_preparers.common import BlasFree, Evaluate

Preparer = Callable[[OperatorView], Evaluate | BlasFree]

_TABLE: list[tuple[int, Preparer]] = [
    # weighted
    (Op.CONV_2D, conv.prepare_conv2d),
    (Op.DEPTHWISE_CONV_2D, conv.prepare_depthwise_conv2d),
    (Op.TRANSPOSE_CONV, conv.prepare_transpose_conv),
    (Op.FULLY_CONNECTED, linear.prepare_fully_connected),
    (Op.BATCH_MATMUL, linear.prepare_batch_matmul),
    # binary elementwise
    (Op.ADD, lambda op: elementwise.prepare_add_or_sub(op, subtract=False)),
    (Op.SUB, lambda op: elementwise.prepare_add_or_sub(op, subtract=True)),
    (Op.MUL, elementwise.prepare_mul),
    (Op.MAXIMUM, elementwise.prepare_raw_binary(elementwise_kernels.maximum)),
    (Op.MINIMUM, elementwise.prepare_raw_binary(elementwise_kernels.minimum)),
    (Op.PRELU, elementwise.prepare_prelu),
    # activations and unary math: lookup tables; and requantization
    *((builtin, elementwise.prepare_lut(build)) for builtin, build in elementwise.LUTS.items()),
    (Op.QUANTIZE, elementwise.prepare_quantize),
    # pooling and reductions
    (Op.AVERAGE_POOL_2D, pool.prepare_pool(pooling.average_pool)),
    (Op.MAX_POOL_2D, pool.prepare_pool(pooling.max_pool)),
    (Op.MEAN, reduce.prepare_reduce(reduce_kernels.mean_or_sum, mean=True)),
    (Op.SUM, reduce.prepare_reduce(reduce_kernels.mean_or_sum)),
    (Op.REDUCE_MAX, reduce.prepare_reduce(reduce_kernels.reduce_max)),
    (Op.REDUCE_MIN, reduce.prepare_reduce(reduce_kernels.reduce_min)),
    (Op.SOFTMAX, reduce.prepare_softmax),
    # padding
    (Op.PAD, pad.prepare_pad),
    (Op.PADV2, pad.prepare_pad),
    (Op.MIRROR_PAD, pad.prepare_mirror_pad),
    # data movement
    (Op.TRANSPOSE, shape.prepare_transpose),
    (Op.RESHAPE, shape.prepare_reshape),
    (Op.SLICE, shape.prepare_slice),
    (Op.STRIDED_SLICE, shape.prepare_strided_slice),
    (Op.CONCATENATION, shape.prepare_concatenation),
    (Op.SPLIT, shape.prepare_split),
    (Op.SPLIT_V, shape.prepare_split_v),
    (Op.RESIZE_NEAREST_NEIGHBOR, resize.prepare_resize_nearest),
    (Op.RESIZE_BILINEAR, resize.prepare_resize_bilinear),
]


PREPARERS: dict[int, Preparer] = one_row_per_op(_TABLE, "preparers", BUILTIN_NAMES.__getitem__)
