"""LiteRT preparers, pooling: AVERAGE_POOL_2D, MAX_POOL_2D (windows checked against the input and the
declared output)."""

from __future__ import annotations

from collections.abc import Callable

from imxrt.kernels import pooling
from imxrt.runtime.litert_model import CHANNELS, HEIGHT, UNARY_INPUT, OperatorView
from imxrt.runtime.litert_preparers.common import Evaluate, check_output, checked_window


def prepare_pool(kernel) -> Callable[[OperatorView], Evaluate]:
    def prepare(op: OperatorView) -> Evaluate:
        op.require_int8(UNARY_INPUT)
        options = op.options
        input_shape = op.shape(UNARY_INPUT)
        window = checked_window(op, (options.filterHeight, options.filterWidth), (options.strideH, options.strideW),
                                (1, 1))
        check_output(op, window, input_shape[CHANNELS])
        try:
            params = pooling.prepare_pool(window, input_shape[HEIGHT:CHANNELS], *op.fused())
        except ValueError as e:
            raise op.invalid(str(e)) from None
        return lambda args: [kernel(args[UNARY_INPUT], params)]
    return prepare
