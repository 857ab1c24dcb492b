"""LiteRT preparers, elementwise ops: ADD, SUB, MUL (65536-entry pair tables), MAXIMUM, MINIMUM, PRELU, and
every unary op of one int8 tensor: the activations and unary math as 256-entry tables (``LUTS``), QUANTIZE as a
requantization."""

from __future__ import annotations

from collections.abc import Callable

from imxrt.kernels import activations, elementwise
from imxrt.kernels.requantize import prepare_requantize, requantize
from imxrt.runtime.litert_model import (
    BINARY_LHS,
    BINARY_RHS,
    OUTPUT,
    PRELU_ALPHA,
    PRELU_INPUT,
    UNARY_INPUT,
    Op,
    OperatorView,
)
from imxrt.runtime.litert_preparers.common import Evaluate


def prepare_add_or_sub(op: OperatorView, subtract: bool) -> Evaluate:
    op.require_int8(BINARY_LHS, BINARY_RHS)
    params = elementwise.prepare_add(op.scale(BINARY_LHS), op.zero_point(BINARY_LHS), op.scale(BINARY_RHS),
                                     op.zero_point(BINARY_RHS), op.scale(OUTPUT, True), op.zero_point(OUTPUT, True),
                                     *op.fused(), subtract=subtract)
    table = elementwise.pair_table(elementwise.add, params)
    return lambda args: [elementwise.lookup_pair(args[BINARY_LHS], args[BINARY_RHS], table)]


def prepare_mul(op: OperatorView) -> Evaluate:
    op.require_int8(BINARY_LHS, BINARY_RHS)
    params = elementwise.prepare_mul(op.scale(BINARY_LHS), op.zero_point(BINARY_LHS), op.scale(BINARY_RHS),
                                     op.zero_point(BINARY_RHS), op.scale(OUTPUT, True), op.zero_point(OUTPUT, True),
                                     *op.fused())
    table = elementwise.pair_table(elementwise.mul, params)
    return lambda args: [elementwise.lookup_pair(args[BINARY_LHS], args[BINARY_RHS], table)]


def prepare_raw_binary(kernel) -> Callable[[OperatorView], Evaluate]:
    def prepare(op: OperatorView) -> Evaluate:
        return lambda args: [kernel(args[BINARY_LHS], args[BINARY_RHS])]
    return prepare


def prepare_prelu(op: OperatorView) -> Evaluate:
    op.require_int8(PRELU_INPUT, PRELU_ALPHA)
    params = elementwise.prepare_prelu(op.scale(PRELU_INPUT), op.zero_point(PRELU_INPUT), op.scale(PRELU_ALPHA),
                                       op.zero_point(PRELU_ALPHA), op.scale(OUTPUT, True), op.zero_point(OUTPUT, True))
    return lambda args: [elementwise.prelu(args[PRELU_INPUT], args[PRELU_ALPHA], params)]


def prepare_lut(build: Callable[[OperatorView], activations.Lut]) -> Callable[[OperatorView], Evaluate]:
    """A unary int8 op evaluated through the 256-entry table ``build`` prepares."""
    def prepare(op: OperatorView) -> Evaluate:
        op.require_int8(UNARY_INPUT)
        params = build(op)
        return lambda args: [activations.apply_lut(args[UNARY_INPUT], params)]
    return prepare


def _in_out(op: OperatorView) -> tuple[float, int, float, int]:
    return op.scale(UNARY_INPUT), op.zero_point(UNARY_INPUT), op.scale(OUTPUT, True), op.zero_point(OUTPUT, True)


def prepare_quantize(op: OperatorView) -> Evaluate:
    op.require_int8(UNARY_INPUT)
    params = prepare_requantize(*_in_out(op))
    return lambda args: [requantize(args[UNARY_INPUT], params)]


LUTS: dict[int, Callable[[OperatorView], activations.Lut]] = {
    Op.RELU: lambda op: activations.relu_lut(*_in_out(op)),
    Op.RELU6: lambda op: activations.relu6_lut(op.scale(UNARY_INPUT), op.zero_point(UNARY_INPUT)),
    Op.RELU_N1_TO_1: lambda op: activations.relu_lut(*_in_out(op), low=-1.0, high=1.0),
    Op.RELU_0_TO_1: lambda op: activations.relu_lut(*_in_out(op), low=0.0, high=1.0),
    Op.LEAKY_RELU: lambda op: activations.leaky_relu_lut(*_in_out(op), op.options.alpha),
    Op.LOGISTIC: lambda op: activations.logistic_lut(op.scale(UNARY_INPUT), op.zero_point(UNARY_INPUT)),
    Op.TANH: lambda op: activations.tanh_lut(op.scale(UNARY_INPUT), op.zero_point(UNARY_INPUT)),
    Op.HARD_SWISH: lambda op: activations.hard_swish_lut(*_in_out(op)),
    Op.ABS: lambda op: activations.abs_lut(*_in_out(op)),
    Op.RSQRT: lambda op: activations.rsqrt_lut(*_in_out(op)),
    Op.EXP: lambda op: activations.exp_lut(*_in_out(op)),
    Op.LOG: lambda op: activations.log_lut(*_in_out(op)),
}
