"""LiteRT preparers, reductions: MEAN, SUM, REDUCE_MAX, REDUCE_MIN, SOFTMAX."""

from __future__ import annotations

from collections.abc import Callable

from imxrt.kernels import reduce, softmax
from imxrt.runtime.litert_model import OUTPUT, REDUCE_AXES, REDUCE_INPUT, UNARY_INPUT, OperatorView
from imxrt.runtime.litert_preparers.common import Evaluate


def prepare_reduce(kernel, mean: bool = False) -> Callable[[OperatorView], Evaluate]:
    def prepare(op: OperatorView) -> Evaluate:
        op.require_int8(REDUCE_INPUT)
        input_shape = op.shape(REDUCE_INPUT)
        keep_dims = bool(op.options.keepDims) if op.options is not None else False
        params = reduce.prepare_reduce(op.constant(REDUCE_AXES), len(input_shape), input_shape, keep_dims,
                                       op.scale(REDUCE_INPUT), op.zero_point(REDUCE_INPUT), op.scale(OUTPUT, True),
                                       op.zero_point(OUTPUT, True), mean)
        output_shape = op.shape(OUTPUT, True)
        return lambda args: [kernel(args[REDUCE_INPUT], params).reshape(output_shape)]
    return prepare


def prepare_softmax(op: OperatorView) -> Evaluate:
    op.require_int8(UNARY_INPUT)
    beta = op.options.beta if op.options is not None else 1.0
    params = softmax.prepare_softmax(op.scale(UNARY_INPUT), beta)
    return lambda args: [softmax.softmax(args[UNARY_INPUT], params)]
