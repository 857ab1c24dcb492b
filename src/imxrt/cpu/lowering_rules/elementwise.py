"""CPU lowering, elementwise ops: add, sub, mul, div, maximum, minimum on two int8 tensors (an operand that
broadcasts expanded first), an op with a scalar constant, every unary op (activations, unary math, any
other pointwise op of one tensor) as a 256-entry lookup table (``quantized_activation``), and comparisons
with a constant as the portable kernel on int8 values."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch.fx import Node

from imxrt.cpu.lowering_rules.common import (
    NotLowered,
    Rewrite,
    clamp_bounds,
    cortex_m,
    edge,
    f32,
    node_arg,
    shape_of,
)
from imxrt.kernels import activations, elementwise
from imxrt.kernels.requantize import INT8_MAX, INT8_MIN
from imxrt.passes.qdq import DEQUANTIZE_PER_TENSOR, QParams, is_dequantize

# --- binary ops ----------------------------------------------------------------------------------------------

def _constant_operand(rw: Rewrite) -> tuple[Node, float] | None:
    """(int8 operand's dequantize, c) when the op reads one int8 tensor and one float scalar constant."""
    a, b = rw.anchor.args[:2]
    for tensor, other in ((a, b), (b, a)):
        if is_dequantize(tensor) and isinstance(other, Node) and not is_dequantize(other):
            value = rw.editor.tensor(other)
            if value is not None and value.numel() == 1:
                return tensor, float(value.reshape(()).item())
        if is_dequantize(tensor) and is_dequantize(other) and other.target == DEQUANTIZE_PER_TENSOR:
            value = rw.editor.tensor(other.args[0])  # a scalar constant quantized as it is stored
            if value is not None and value.numel() == 1 and shape_of(other) != shape_of(tensor):
                q = rw.qparams(other)
                return tensor, float((int(value.reshape(()).item()) - q.zero_point) * q.scale)
        if is_dequantize(tensor) and isinstance(other, (int, float)):
            return tensor, float(other)
    return None


def _constant_qparams(value: float) -> tuple[QParams, int]:
    """A float scalar operand as TFLite's converter stores it: symmetric, |c| -> 127 (so c is exact)."""
    if value == 0.0:
        return QParams(1.0, 0), 0
    return QParams(f32(abs(value) / INT8_MAX), 0), (INT8_MAX if value > 0 else -INT8_MAX)


def _binary_with_constant_lut(rw: Rewrite, kernel: str) -> Node:
    """x (+|-|*) c or c - x as a 256-entry table: the TFLM ADD / SUB / MUL integer arithmetic run on every
    int8 input."""
    x_dq, value = _constant_operand(rw)
    q_in, out = rw.qparams(x_dq), rw.output_qparams()
    act = rw.activation_range(out)
    q_c, c = _constant_qparams(value)
    constant = np.full_like(activations.ALL_INT8, c)
    if kernel in ("add", "sub"):
        x_first = rw.anchor.args[0] is x_dq
        (q1, v1), (q2, v2) = ((q_in, activations.ALL_INT8), (q_c, constant))[::1 if x_first else -1]
        params = elementwise.prepare_add(q1.scale, q1.zero_point, q2.scale, q2.zero_point, out.scale,
                                         out.zero_point, *act, subtract=kernel == "sub")
        table = elementwise.add(v1, v2, params)
    else:
        params = elementwise.prepare_mul(q_in.scale, q_in.zero_point, q_c.scale, 0, out.scale, out.zero_point, *act)
        table = elementwise.mul(activations.ALL_INT8, constant, params)
    return _activation(rw, x_dq, table)


def _broadcast(rw: Rewrite, a: Node, b: Node, a_dq: Node, b_dq: Node) -> tuple[Node, Node]:
    """The int8 operands at the output's shape: one that broadcasts (the squeeze-excite [1, C, 1, 1] scale
    of a [1, C, H, W] map) is expanded by a copy first (portable expand_copy on its int8 values); the
    elementwise kernels take equal shapes."""
    out_shape = list(shape_of(rw.cluster.quantizes[0]))

    def expanded(x: Node, x_dq: Node) -> Node:
        if list(shape_of(x_dq)) == out_shape:
            return x
        return rw.emit(edge.expand_copy.default, (x, out_shape), val=rw.like(out_shape))

    return expanded(a, a_dq), expanded(b, b_dq)


def lower_add(rw: Rewrite) -> Node:
    """add(a, b) -> quantized_add (TFLite scaling: both to 2 max(s1, s2), 20 bits of headroom)."""
    return _add_or_sub(rw, subtract=False)


def lower_sub(rw: Rewrite) -> Node:
    """sub(a, b) -> quantized_add with b's multiplier negated (the stock kernel library has no SUB; the
    same result as TFLM's SUB on every int8 pair, as ExecuTorch's Cortex-M backend lowers it)."""
    return _add_or_sub(rw, subtract=True)


def _add_or_sub(rw: Rewrite, subtract: bool) -> Node:
    """a + alpha b (a - alpha b): alpha scales b's scale (and its sign b's multiplier's sign)."""
    alpha = rw.anchor.kwargs.get("alpha", 1)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha == 0 or not math.isfinite(alpha):
        raise NotLowered(f"alpha={alpha} (a finite non-zero alpha folds into the second operand's scale)")
    if _constant_operand(rw) is not None:
        if alpha != 1:
            raise NotLowered(f"alpha={alpha} with a constant operand")
        return _binary_with_constant_lut(rw, "sub" if subtract else "add")
    coefficient = -alpha if subtract else alpha
    a_dq, b_dq = rw.anchor.args[:2]
    a, b, q_a, q_b, out = rw.int8(a_dq), rw.int8(b_dq), rw.qparams(a_dq), rw.qparams(b_dq), rw.output_qparams()
    a, b = _broadcast(rw, a, b, a_dq, b_dq)
    scale_b = f32(q_b.scale * abs(coefficient))
    p = elementwise.prepare_add(q_a.scale, q_a.zero_point, scale_b, q_b.zero_point, out.scale, out.zero_point,
                                *rw.activation_range(out))
    input2_multiplier = -p.input2_multiplier if coefficient < 0 else p.input2_multiplier
    args = (a, p.input1_zero_point, p.input1_multiplier, p.input1_shift, b, p.input2_zero_point,
            input2_multiplier, p.input2_shift, p.output_zero_point, p.output_multiplier, p.output_shift,
            p.act_min, p.act_max)
    return rw.emit(cortex_m("quantized_add"), args)


def lower_mul(rw: Rewrite) -> Node:
    """mul(a, b) -> quantized_mul (M = s1 s2 / s_out)."""
    if _constant_operand(rw) is not None:
        return _binary_with_constant_lut(rw, "mul")
    rw.no_fused_activation()
    a_dq, b_dq = rw.anchor.args[:2]
    a, b, q_a, q_b, out = rw.int8(a_dq), rw.int8(b_dq), rw.qparams(a_dq), rw.qparams(b_dq), rw.output_qparams()
    a, b = _broadcast(rw, a, b, a_dq, b_dq)
    p = elementwise.prepare_mul(q_a.scale, q_a.zero_point, q_b.scale, q_b.zero_point, out.scale, out.zero_point,
                                INT8_MIN, INT8_MAX)
    args = (a, p.input1_zero_point, b, p.input2_zero_point, p.output_zero_point, p.multiplier, p.shift)
    return rw.emit(cortex_m("quantized_mul"), args)


def lower_div(rw: Rewrite) -> Node:
    """div(a, b) of two int8 tensors -> quantized_div (the stock kernel divides in float32 and scales by
    s1 / (s2 s_out); CMSIS-NN has no integer division). A division by a constant became a mul earlier."""
    rw.no_fused_activation()
    if node_arg(rw.anchor, 2, "rounding_mode") is not None:
        raise NotLowered(f"rounding_mode={node_arg(rw.anchor, 2, 'rounding_mode')!r}")
    a_dq, b_dq = rw.anchor.args[:2]
    if not (is_dequantize(a_dq) and is_dequantize(b_dq)):
        raise NotLowered("an operand is a float constant")
    a, b, q_a, q_b, out = rw.int8(a_dq), rw.int8(b_dq), rw.qparams(a_dq), rw.qparams(b_dq), rw.output_qparams()
    a, b = _broadcast(rw, a, b, a_dq, b_dq)
    effective_scale = f32(np.float64(f32(q_a.scale)) / (np.float64(f32(q_b.scale)) * np.float64(f32(out.scale))))
    args = (a, q_a.zero_point, b, q_b.zero_point, out.zero_point, effective_scale)
    return rw.emit(cortex_m("quantized_div"), args)


def lower_min_max(name: str) -> Callable[[Rewrite], Node]:
    def lower(rw: Rewrite) -> Node:
        rw.no_fused_activation()
        a_dq, b_dq = rw.anchor.args[:2]
        rw.shared_qparams(a_dq, b_dq)
        return rw.emit(cortex_m(name), (rw.int8(a_dq), rw.int8(b_dq)))
    lower.__doc__ = f"{name}(a, b) on int8 values that share qparams -> cortex_m {name}."
    return lower


# --- unary activations as lookup tables ----------------------------------------------------------------------

def _activation(rw: Rewrite, x_dq: Node, table: np.ndarray, val: torch.Tensor | None = None, name: str = "lut"
                ) -> Node:
    """``val`` and ``name``: an intermediate table of a cluster lowered to several kernels, its own constant."""
    lut = torch.from_numpy(np.asarray(table).astype(np.int8).copy())
    return rw.emit(cortex_m("quantized_activation"), (rw.int8(x_dq), rw.constant(name, lut)), val=val)


def lower_lut(build: Callable[[Rewrite, QParams, QParams], activations.Lut]) -> Callable[[Rewrite], Node]:
    """A unary int8 op as ``quantized_activation`` with the 256-entry table ``build`` makes."""
    def lower(rw: Rewrite) -> Node:
        x_dq = rw.anchor.args[0]
        q_in, out = rw.qparams(x_dq), rw.output_qparams()
        table = build(rw, q_in, out).table
        low, high = rw.activation_range(out)
        return _activation(rw, x_dq, np.clip(table, low, high))
    lower.__doc__ = build.__doc__
    return lower


def _float_lut(rw: Rewrite, q_in: QParams, out: QParams) -> activations.Lut:
    """lut[q + 128] = clamp(round_half_away(f((q - zp_in) s_in) / s_out + zp_out)), f the edge op itself."""
    op, extra = rw.anchor.target, rw.anchor.args[1:]
    if any(isinstance(a, Node) for a in extra) or any(isinstance(v, Node) for v in rw.anchor.kwargs.values()):
        raise NotLowered("the op reads more than one tensor")

    def function(values: np.ndarray) -> np.ndarray:
        return op(torch.from_numpy(values), *extra, **rw.anchor.kwargs).numpy()

    return activations.float_function_lut(function, q_in.scale, q_in.zero_point, out.scale, out.zero_point)


def _relu_lut(rw: Rewrite, q_in: QParams, out: QParams) -> activations.Lut:
    """relu / hardtanh / clamp: requantize by s_in / s_out, clamp at the quantized bounds (TFLM RELU)."""
    low, high = (0.0, None) if rw.anchor.target == edge.relu.default else clamp_bounds(rw.anchor)
    if low is None:  # no floor: the bound that quantizes to -128
        low = (INT8_MIN - out.zero_point) * out.scale
    return activations.relu_lut(q_in.scale, q_in.zero_point, out.scale, out.zero_point, low, high)


def _hard_swish_lut(rw: Rewrite, q_in: QParams, out: QParams) -> activations.Lut:
    """hardswish: TFLM's int16 fixed-point arithmetic (as on the NPU), or, for an output scale at most the
    input scale / 128, which TFLM refuses to prepare, the function itself rounded (``_float_lut``)."""
    if activations.hard_swish_output_multiplier(q_in.scale, out.scale) < 1:
        return activations.hard_swish_lut(q_in.scale, q_in.zero_point, out.scale, out.zero_point)
    return _float_lut(rw, q_in, out)


def _q4_lut(table: Callable[[float, int], activations.Lut]) -> Callable[[Rewrite, QParams, QParams], activations.Lut]:
    """sigmoid / tanh: TFLM's arithmetic (as on the NPU), or, from an input scale of 8 on, where TFLM saturates
    every value (the zero point to the low end), the function itself rounded (``_float_lut``)."""
    def lut(rw: Rewrite, q_in: QParams, out: QParams) -> activations.Lut:
        if activations.q4_input_radius(q_in.scale) > 0:
            return table(q_in.scale, q_in.zero_point)
        return _float_lut(rw, q_in, out)
    return lut


def _prelu_lut(rw: Rewrite, q_in: QParams, out: QParams) -> activations.Lut:
    """prelu with one slope (``nn.PReLU()``): TFLM's PRELU arithmetic, as on the NPU, run on every int8 input."""
    alpha_dq = rw.anchor.args[1]
    q_alpha = rw.qparams(alpha_dq)
    params = elementwise.prepare_prelu(q_in.scale, q_in.zero_point, q_alpha.scale, q_alpha.zero_point,
                                       out.scale, out.zero_point)
    values = np.arange(INT8_MIN, INT8_MAX + 1, dtype=np.int8)
    alpha = rw.editor.tensor(rw.int8(alpha_dq))
    return activations.Lut(elementwise.prelu(values, alpha.numpy().reshape(()), params))


def lower_prelu(rw: Rewrite) -> Node:
    """prelu with one slope (``nn.PReLU()``) -> one ``quantized_activation`` table of TFLM's PRELU arithmetic;
    with a slope per channel -> two tables, quantized_mul and quantized_add, whose result is TFLM's PRELU
    (``_per_channel_prelu``)."""
    x_dq, alpha_dq = rw.anchor.args[:2]
    alpha = rw.editor.tensor(rw.int8(alpha_dq))
    if alpha is None:
        raise NotLowered("the slopes are not a constant int8 tensor")
    if alpha.numel() == 1:
        return lower_lut(_prelu_lut)(rw)
    return _per_channel_prelu(rw, x_dq, alpha_dq, alpha)


def _per_channel_prelu(rw: Rewrite, x_dq: Node, alpha_dq: Node, alpha: torch.Tensor) -> Node:
    """TFLM's PRELU composed exactly from four stock kernels: with c = q - zp_in,

        n = quantized_activation(x, lut[q] = min(q, zp_in))          c⁻ = n - zp_in = min(c, 0)
        N = quantized_mul(n, zp_in, alpha, zp_alpha, zp_out, M2)     MBQM(c⁻ (a - zp_alpha), M2) + zp_out
        P = quantized_activation(x, lut[q] = MBQM(max(c, 0), M1) + zp_out)
        y = quantized_add(P, zp_out, N, zp_out -> zp_out)            (P - zp_out) + (N - zp_out) + zp_out

    (M1 = s_in / s_out, M2 = s_in s_alpha / s_out, each result clamped to int8). TFLM's PRELU gives
    MBQM(c, M1) + zp_out for c >= 0 and MBQM(c (a - zp_alpha), M2) + zp_out for c < 0, clamped. For c >= 0,
    N = zp_out (MBQM(0) = 0) and P is TFLM's value; for c < 0, P = zp_out and N is TFLM's value. The add of
    three equal scales is exact on integers (TFLite's ADD scaling: each input times 2^20 / 2, the sum times
    2 / 2^20, all powers of two), so y = P + N - zp_out, TFLM's value. The slopes are one constant of the
    output's shape: the stock elementwise kernels take operands of one shape."""
    q_in, q_alpha, out = rw.qparams(x_dq), rw.qparams(alpha_dq), rw.output_qparams()
    p = elementwise.prepare_prelu(q_in.scale, q_in.zero_point, q_alpha.scale, q_alpha.zero_point, out.scale,
                                  out.zero_point)
    values = np.arange(INT8_MIN, INT8_MAX + 1, dtype=np.int64)
    shape = shape_of(x_dq)
    per_channel = [1] * len(shape)
    per_channel[1 if len(shape) > 1 else 0] = alpha.numel()
    slopes = rw.constant("slopes", alpha.reshape(per_channel).expand(shape))  # stored in its reader's dim order
    negative_part = _activation(rw, x_dq, np.minimum(values, q_in.zero_point), rw.like(shape), "negative_lut")
    negative = rw.emit(cortex_m("quantized_mul"), (negative_part, q_in.zero_point, slopes, q_alpha.zero_point,
                                                   out.zero_point, p.alpha_multiplier, p.alpha_shift),
                       val=rw.like(shape))
    # TFLM's PRELU itself on max(q, zp_in), where c >= 0 and the slope is not read
    positive_table = elementwise.prelu(np.maximum(values, q_in.zero_point).astype(np.int8), np.zeros(1, np.int8), p)
    positive = _activation(rw, x_dq, positive_table, rw.like(shape), "positive_lut")
    a = elementwise.prepare_add(out.scale, out.zero_point, out.scale, out.zero_point, out.scale, out.zero_point,
                                *rw.activation_range(out))
    args = (positive, a.input1_zero_point, a.input1_multiplier, a.input1_shift, negative, a.input2_zero_point,
            a.input2_multiplier, a.input2_shift, a.output_zero_point, a.output_multiplier, a.output_shift,
            a.act_min, a.act_max)
    return rw.emit(cortex_m("quantized_add"), args)


LUTS: dict[object, Callable[[Rewrite, QParams, QParams], activations.Lut]] = {
    edge.sigmoid.default: _q4_lut(activations.logistic_lut),
    edge.tanh.default: _q4_lut(activations.tanh_lut),
    edge.hardswish.default: lambda rw, i, o: _hard_swish_lut(rw, i, o),
    edge.leaky_relu.default: lambda rw, i, o: activations.leaky_relu_lut(
        i.scale, i.zero_point, o.scale, o.zero_point, float(node_arg(rw.anchor, 1, "negative_slope", 0.01))),
    edge.abs.default: lambda rw, i, o: activations.abs_lut(i.scale, i.zero_point, o.scale, o.zero_point),
    edge.rsqrt.default: lambda rw, i, o: activations.rsqrt_lut(i.scale, i.zero_point, o.scale, o.zero_point),
    edge.exp.default: lambda rw, i, o: activations.exp_lut(i.scale, i.zero_point, o.scale, o.zero_point),
    edge.log.default: lambda rw, i, o: activations.log_lut(i.scale, i.zero_point, o.scale, o.zero_point),
    edge.relu.default: _relu_lut,
    edge.hardtanh.default: _relu_lut,
    edge.clamp.default: _relu_lut,
}


def is_pointwise_unary(node: Node) -> bool:
    """An elementwise op (torch's pointwise tag) reading exactly one tensor: any such int8 op is a table."""
    op = getattr(node.target, "_op", None)
    tensors = [a for a in node.args if isinstance(a, Node)]
    return op is not None and torch.Tag.pointwise in op.tags and len(tensors) == 1 and node.args[0] is tensors[0]


lower_pointwise = lower_lut(_float_lut)


# --- comparisons with a constant -----------------------------------------------------------------------------

# The comparisons whose answer rises with the input (True from some value on); lt and le fall.
_RISING = frozenset({edge.gt.Scalar, edge.ge.Scalar})


def lower_compare(rw: Rewrite) -> Node:
    """A comparison with a constant, on the int8 input: the same portable kernel with the integer threshold
    that answers as the float comparison of the dequantized value does, found over all 256 int8 values
    (dequantization is monotonic, so the answer switches once)."""
    x, constant = rw.anchor.args[:2]
    x_int8 = rw.int8(x)
    if not isinstance(constant, (int, float)) or isinstance(constant, bool):
        raise NotLowered(f"the constant {constant!r} is not a number")
    q_in = rw.qparams(x)
    every_int8 = torch.arange(INT8_MIN, INT8_MAX + 1, dtype=torch.int8)
    # the dequantize and the comparison of the int8 program, on every int8 value
    values = torch.ops.quantized_decomposed.dequantize_per_tensor(
        every_int8, float(x.args[1]), int(x.args[2]), INT8_MIN, INT8_MAX, torch.int8)
    answers = rw.anchor.target._op(values, constant)
    rising = rw.anchor.target in _RISING
    if not torch.equal(answers, torch.sort(answers.to(torch.uint8), descending=not rising).values.bool()):
        raise NotLowered(f"the comparison does not switch once over the int8 values (qparams {q_in})")
    count = int(answers.sum())
    if rising:  # False ... True: q >= the first True (none True: q > 127, never)
        op, threshold = (edge.ge.Scalar, INT8_MAX + 1 - count) if count else (edge.gt.Scalar, INT8_MAX)
    else:  # True ... False: q <= the last True (none True: q < -128, never)
        op, threshold = (edge.le.Scalar, INT8_MIN - 1 + count) if count else (edge.lt.Scalar, INT8_MIN)
    return rw.emit(op, (x_int8, threshold), val=rw.anchor.meta["val"])
