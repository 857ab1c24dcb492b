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
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from executorch.exir.dialects._ops import ops as exir_ops
from torch.fx import Node

from imxrt.cpu import scratch
from imxrt.cpu.isa import Isa
from imxrt.cpu.lowering_graph import Editor
from imxrt.kernels import activations, elementwise
from imxrt.kernels.pooling import pool_output_size
from imxrt.kernels.requantize import (
    INT8_MAX,
    INT8_MIN,
    fully_connected_multiplier,
    quantize_multiplier,
    quantize_multiplier_scalar,
    quantize_value,
)
from imxrt.passes.qdq import (
    DEQUANTIZE_PER_CHANNEL,
    DEQUANTIZE_PER_TENSOR,
    Cluster,
    QParams,
    is_dequantize,
    qparams_of_quantize,
)

edge = exir_ops.edge.aten


def cortex_m(name: str):
    """The edge op ``cortex_m::<name>`` (registered by ``imxrt.cortex_m.ops``)."""
    return getattr(exir_ops.edge.cortex_m, name).default


class NotLowered(Exception):
    """The cluster's op has a kernel, but not for this instance; the message says why."""


SOFTMAX_OUTPUT = QParams(1.0 / 256.0, -128)  # arm_softmax_s8 writes this scale and zero point
_SOFTMAX_INTEGER_BITS = 5


def _f32(scale: float) -> float:
    """Scales as the device sees them: float32 values (TFLM and the .pte both store float32)."""
    return float(np.float32(scale))


def _pair(value, default: tuple[int, int]) -> list[int]:
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        return list(default)
    if isinstance(value, int):
        return [value, value]
    return [int(value[0]), int(value[-1])]


def _arg(node: Node, index: int, name: str, default=None):
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)


def shape_of(node: Node) -> tuple[int, ...]:
    value = node.meta["val"]
    value = value[0] if isinstance(value, (tuple, list)) else value
    return tuple(int(d) for d in value.shape)


def nhwc(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    n, c, h, w = shape
    return n, h, w, c


@dataclass
class Rewrite:
    """One cluster being lowered: its int8 inputs, qparams, constants and the node-creating helpers."""

    editor: Editor
    isa: Isa
    cluster: Cluster

    @property
    def anchor(self) -> Node:
        return self.cluster.anchor

    # --- reading the cluster ------------------------------------------------------------------------------

    def int8(self, arg: object) -> Node:
        """The int8 tensor behind a per-tensor dequantize argument."""
        if not (isinstance(arg, Node) and arg.target == DEQUANTIZE_PER_TENSOR):
            raise NotLowered(f"operand {getattr(arg, 'name', arg)} is not a per-tensor int8 tensor")
        if arg.args[5] != torch.int8:
            raise NotLowered(f"operand {arg.name} is {arg.args[5]}, not int8")
        return arg.args[0]

    def qparams(self, arg: Node) -> QParams:
        return QParams(_f32(arg.args[1]), int(arg.args[2]))

    def output_qparams(self) -> QParams:
        found = [qparams_of_quantize(q) for q in self.cluster.quantizes]
        if any(q.args[5] != torch.int8 for q in self.cluster.quantizes):
            raise NotLowered("the output is not quantized to int8")
        if not all(found[0].same_as(other) for other in found[1:]):
            raise NotLowered(f"the output is quantized with several qparams {found}")
        return QParams(_f32(found[0].scale), found[0].zero_point)

    def shared_qparams(self, *args: Node) -> QParams:
        """The one qparams every listed input and the output share (the kernel moves bytes unscaled)."""
        out = self.output_qparams()
        for arg in args:
            found = self.qparams(arg)
            if not out.same_as(found):
                raise NotLowered(f"input and output must share quantization parameters (found: input {found}, "
                                 f"output {out})")
        return out

    def activation_range(self, out: QParams) -> tuple[int, int]:
        """The int8 clamp of a fused relu / relu6 / hardtanh / clamp on the output scale. Quantization is
        monotonic, so clamping the int8 result at quantize(bound) is exactly the float clamp."""
        activation = self.cluster.activation
        if activation is None:
            return INT8_MIN, INT8_MAX
        low, high = (0.0, None) if activation.target == edge.relu.default else _clamp_bounds(activation)
        act_min = INT8_MIN if low is None else max(INT8_MIN, quantize_value(low, out.scale, out.zero_point))
        act_max = INT8_MAX if high is None else min(INT8_MAX, quantize_value(high, out.scale, out.zero_point))
        return act_min, act_max

    def no_fused_activation(self) -> None:
        if self.cluster.activation is not None:
            raise NotLowered(f"the kernel takes no fused {self.cluster.activation.target.__name__}")

    def weight(self, arg: object, axis: int) -> tuple[torch.Tensor, np.ndarray]:
        """(int8 weight, float64 scale per slice along ``axis``) of a constant symmetric int8 weight."""
        if not is_dequantize(arg):
            raise NotLowered("the weight is not a constant int8 tensor")
        data = self.editor.tensor(arg.args[0])
        if data is None or data.dtype != torch.int8:
            raise NotLowered(f"the weight {arg.args[0].name} is not a constant int8 tensor")
        if arg.target == DEQUANTIZE_PER_CHANNEL:
            scales, zero_points = self.editor.tensor(arg.args[1]), self.editor.tensor(arg.args[2])
            if int(arg.args[3]) % data.dim() != axis:
                raise NotLowered(f"the weight is quantized along axis {arg.args[3]}, not {axis}")
            if zero_points is not None and bool((zero_points != 0).any()):
                raise NotLowered("weight zero points must be 0 (symmetric int8 weights)")
            scales = scales.to(torch.float32).numpy().astype(np.float64)
        else:
            if int(arg.args[2]) != 0:
                raise NotLowered("the weight zero point must be 0 (symmetric int8 weights)")
            scales = np.full(data.shape[axis], _f32(arg.args[1]), np.float64)
        return data, scales

    def bias(self, arg: object) -> Node | None:
        """The int32 bias constant behind a dequantize (None without bias)."""
        if arg is None:
            return None
        if not is_dequantize(arg) or self.editor.tensor(arg.args[0]) is None or \
                self.editor.tensor(arg.args[0]).dtype != torch.int32:
            raise NotLowered("the bias is not a constant int32 tensor")
        return arg.args[0]

    # --- building --------------------------------------------------------------------------------------------

    def constant(self, suffix: str, data: torch.Tensor) -> Node:
        return self.editor.constant(f"{self.anchor.name}_{suffix}", data)

    def scratch(self, nbytes: int) -> Node:
        return self.editor.scratch(self.anchor, nbytes)

    def emit(self, op, args, val: torch.Tensor | None = None) -> Node:
        """A node standing for the cluster (or, with ``val``, an intermediate value of it)."""
        if val is None:
            val = self.cluster.quantizes[0].meta["val"]
        return self.editor.call(op, args, val, self.cluster.ops, before=self.anchor)

    def like(self, shape) -> torch.Tensor:
        return self.cluster.quantizes[0].meta["val"].new_empty(tuple(shape), dtype=torch.int8)


def _per_channel(s_in: float, weight_scales: np.ndarray, s_out: float) -> tuple[torch.Tensor, torch.Tensor]:
    """M[c] = s_in * s_w[c] / s_out in double (TFLM's PopulateConvolutionQuantizationParams) as int32 tensors."""
    multipliers, shifts = quantize_multiplier(np.float64(s_in) * weight_scales / np.float64(s_out))
    return torch.tensor(multipliers, dtype=torch.int32), torch.tensor(shifts, dtype=torch.int32)


# --- convolution ---------------------------------------------------------------------------------------------

def lower_convolution(rw: Rewrite) -> Node:
    """convolution -> quantized_conv2d (groups 1, or grouped), quantized_depthwise_conv2d (groups = C_in)
    or quantized_transpose_conv2d."""
    x_dq, w_dq, b_dq, stride, padding, dilation, transposed, output_padding, groups = rw.anchor.args[:9]
    in_shape, out_shape = shape_of(x_dq), shape_of(rw.cluster.quantizes[0])
    if len(in_shape) != 4:
        raise NotLowered(f"only 2-D convolutions have a CMSIS-NN kernel (input rank {len(in_shape)})")
    x, q_in, out = rw.int8(x_dq), rw.qparams(x_dq), rw.output_qparams()
    act_min, act_max = rw.activation_range(out)
    stride, padding, dilation = _pair(stride, (1, 1)), _pair(padding, (0, 0)), _pair(dilation, (1, 1))
    if transposed:
        return _transpose_conv(rw, x, w_dq, b_dq, in_shape, out_shape, q_in, out, (act_min, act_max), stride,
                               padding, _pair(output_padding, (0, 0)), dilation, groups)
    weight, scales = rw.weight(w_dq, axis=0)
    bias = rw.bias(b_dq)
    in_channels, out_channels = in_shape[1], weight.shape[0]
    multipliers, shifts = _per_channel(q_in.scale, scales, out.scale)
    window = (tuple(stride), tuple(padding), tuple(dilation))
    depthwise_layout = weight.permute(1, 2, 3, 0)  # [1, kh, kw, C_out]
    depthwise_bytes = scratch.depthwise_conv2d_scratch_bytes(rw.isa, nhwc(in_shape), tuple(depthwise_layout.shape),
                                                             nhwc(out_shape), *window)
    depthwise = groups == in_channels and weight.shape[1] == 1 and groups > 1
    if not depthwise:
        # OHWI; a grouped conv's I is C_in / groups, and arm_convolve_s8 runs each group on its channels
        op, layout = cortex_m("quantized_conv2d"), weight.permute(0, 2, 3, 1)
        nbytes = scratch.conv2d_scratch_bytes(rw.isa, nhwc(in_shape), tuple(layout.shape), nhwc(out_shape),
                                              *window)
        extra = ()
        # One input channel: the same sums as a depthwise conv with multiplier C_out, which may need less
        # scratch on this ISA (none on DSP, where the im2col conv needs a column buffer).
        depthwise = in_channels == 1 and depthwise_bytes < nbytes
    if depthwise:
        op, layout, nbytes = cortex_m("quantized_depthwise_conv2d"), depthwise_layout, depthwise_bytes
        extra = (out_channels // in_channels,)  # depth_multiplier
    if bias is None and (depthwise or groups > 1):  # these kernels offset the bias per group: a real one
        bias = rw.constant("bias", torch.zeros(out_channels, dtype=torch.int32))
    args = (x, rw.constant("weight", layout.contiguous()), bias, stride, padding, dilation, *extra,
            -q_in.zero_point, out.zero_point, rw.constant("multipliers", multipliers),
            rw.constant("shifts", shifts), act_min, act_max, rw.scratch(nbytes))
    return rw.emit(op, args)


def _transpose_conv(rw: Rewrite, x, w_dq, b_dq, in_shape, out_shape, q_in, out, act, stride, padding,
                    output_padding, dilation, groups) -> Node:
    if groups != 1:
        raise NotLowered(f"a grouped transposed convolution (groups={groups}) has no CMSIS-NN int8 kernel")
    if dilation != [1, 1]:
        raise NotLowered(f"a dilated transposed convolution (dilation={dilation}) has no CMSIS-NN int8 kernel")
    weight, scales = rw.weight(w_dq, axis=1)  # PyTorch [C_in, C_out, kh, kw]
    layout = weight.permute(1, 2, 3, 0).contiguous()  # [C_out, kh, kw, C_in]
    multipliers, shifts = _per_channel(q_in.scale, scales, out.scale)
    nbytes, out_nbytes = scratch.transpose_conv2d_scratch_bytes(rw.isa, nhwc(in_shape), tuple(layout.shape),
                                                                nhwc(out_shape), tuple(stride), tuple(padding))
    args = (x, rw.constant("weight", layout), rw.bias(b_dq), stride, padding, output_padding, dilation,
            -q_in.zero_point, out.zero_point, rw.constant("multipliers", multipliers),
            rw.constant("shifts", shifts), *act, rw.scratch(nbytes), rw.scratch(out_nbytes))
    return rw.emit(cortex_m("quantized_transpose_conv2d"), args)


# --- fully connected and matmul ------------------------------------------------------------------------------

def _fully_connected(rw: Rewrite, x_dq: Node, weight: torch.Tensor, weight_node: Node | None,
                     scales: np.ndarray, bias: Node | None, viewed: Node | None = None,
                     val: torch.Tensor | None = None) -> Node:
    """quantized_linear on a [out, in] int8 weight; on MVE the bias folds into a constant kernel_sum.
    ``viewed``: read this int8 node, a rearrangement of ``x_dq``'s values, instead of them."""
    x, q_in, out = viewed if viewed is not None else rw.int8(x_dq), rw.qparams(x_dq), rw.output_qparams()
    act_min, act_max = rw.activation_range(out)
    if len(set(scales.tolist())) == 1:
        # A per-tensor weight (the quantizer's linear): the stock kernel takes one multiplier, computed as
        # TFLM's FULLY_CONNECTED does.
        multipliers, shifts = quantize_multiplier(fully_connected_multiplier(q_in.scale, scales[0], out.scale))
    else:
        multipliers, shifts = quantize_multiplier(np.float64(q_in.scale) * scales / np.float64(out.scale))
    weights = weight_node if weight_node is not None else rw.constant("weight", weight.contiguous())
    kernel_sum = None
    if rw.isa is Isa.MVE:
        # kernel_sum[i] = -zp_in * sum_j w[i, j] + bias[i]: arm_fully_connected_s8's Helium path reads it
        sums = -q_in.zero_point * weight.to(torch.int64).sum(dim=1)
        if bias is not None:
            sums = sums + rw.editor.tensor(bias).to(torch.int64)
        kernel_sum, bias = rw.constant("kernel_sum", sums.to(torch.int32)), None
    args = (x, weights, bias, kernel_sum, -q_in.zero_point, 0, out.zero_point,
            [int(m) for m in multipliers], [int(s) for s in shifts], act_max, act_min)  # max before min
    return rw.emit(cortex_m("quantized_linear"), args, val=val)


def lower_linear(rw: Rewrite) -> Node:
    """linear(x, W[out, in], b) -> quantized_linear."""
    x_dq, w_dq = rw.anchor.args[:2]
    b_dq = _arg(rw.anchor, 2, "bias")
    weight, scales = rw.weight(w_dq, axis=0)
    return _fully_connected(rw, x_dq, weight, w_dq.args[0], scales, rw.bias(b_dq))


def lower_mm(rw: Rewrite) -> Node:
    """mm(x, W[in, out]) with a constant W -> quantized_linear on W transposed."""
    x_dq, w_dq = rw.anchor.args[:2]
    if not is_dequantize(w_dq) or rw.editor.tensor(w_dq.args[0]) is None:
        raise NotLowered("the right operand is not a constant weight (two activations need bmm)")
    weight, scales = rw.weight(w_dq, axis=1)
    return _fully_connected(rw, x_dq, weight.t(), None, scales, None)


def lower_sum(rw: Rewrite) -> Node:
    """sum over dims -> quantized_linear by a weight of ones [1, D] on the summed dims moved last and
    flattened ([outer, D]; a transpose first where they are not last already): the int32 accumulator holds
    the exact sum, requantized once to the output scale, as TFLM's int8 SUM does. CMSIS-NN has no
    reduction kernel, and an average pool would round the mean to an int8 step first."""
    x_dq = rw.anchor.args[0]
    shape = shape_of(x_dq)
    rank = len(shape)
    if _arg(rw.anchor, 3, "dtype") is not None:
        raise NotLowered("sum with a dtype")
    dims = sorted({int(d) % rank for d in (_arg(rw.anchor, 1, "dim") or range(rank))})
    kept = [d for d in range(rank) if d not in dims]
    outer, size = math.prod(shape[d] for d in kept), math.prod(shape[d] for d in dims)
    x = rw.int8(x_dq)
    if kept + dims != list(range(rank)):
        x = _moved(rw, x, shape, kept + dims)
    x = rw.emit(edge.view_copy.default, (x, [outer, size]), val=rw.like((outer, size)))
    ones = torch.ones(1, size, dtype=torch.int8)
    summed = _fully_connected(rw, x_dq, ones, None, np.ones(1), None, viewed=x, val=rw.like((outer, 1)))
    return rw.emit(edge.view_copy.default, (summed, list(shape_of(rw.cluster.quantizes[0]))))


def lower_bmm(rw: Rewrite) -> Node:
    """bmm(lhs [B, M, K], rhs [B, K, N]) -> quantized_batch_matmul(lhs, rhs transposed [B, N, K])."""
    rw.no_fused_activation()
    lhs_dq, rhs_dq = rw.anchor.args[:2]
    lhs, q_lhs, out = rw.int8(lhs_dq), rw.qparams(lhs_dq), rw.output_qparams()
    q_rhs = rw.qparams(rhs_dq) if rhs_dq.target == DEQUANTIZE_PER_TENSOR else None
    if q_rhs is None:
        raise NotLowered("the right operand is not a per-tensor int8 tensor")
    rhs_shape = shape_of(rhs_dq)
    transposed_shape = (rhs_shape[0], rhs_shape[2], rhs_shape[1])
    constant = rw.editor.tensor(rhs_dq.args[0])
    if constant is not None:
        rhs_t = rw.constant("rhs_transposed", constant.permute(0, 2, 1).contiguous())
    else:
        rhs_t = rw.emit(cortex_m("transpose"), (rw.int8(rhs_dq), [0, 2, 1]), val=rw.like(transposed_shape))
    real = np.float64(q_lhs.scale) * np.float64(q_rhs.scale) / np.float64(out.scale)
    multiplier, shift = quantize_multiplier_scalar(float(real))
    nbytes = scratch.batch_matmul_scratch_bytes(rw.isa, shape_of(lhs_dq), transposed_shape)
    args = (lhs, -q_lhs.zero_point, rhs_t, -q_rhs.zero_point, out.zero_point, multiplier, shift,
            rw.scratch(nbytes))
    return rw.emit(cortex_m("quantized_batch_matmul"), args)


# --- elementwise -------------------------------------------------------------------------------------------

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
    return QParams(_f32(abs(value) / INT8_MAX), 0), (INT8_MAX if value > 0 else -INT8_MAX)


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
    scale_b = _f32(q_b.scale * abs(coefficient))
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
    if _arg(rw.anchor, 2, "rounding_mode") is not None:
        raise NotLowered(f"rounding_mode={_arg(rw.anchor, 2, 'rounding_mode')!r}")
    a_dq, b_dq = rw.anchor.args[:2]
    if not (is_dequantize(a_dq) and is_dequantize(b_dq)):
        raise NotLowered("an operand is a float constant")
    a, b, q_a, q_b, out = rw.int8(a_dq), rw.int8(b_dq), rw.qparams(a_dq), rw.qparams(b_dq), rw.output_qparams()
    a, b = _broadcast(rw, a, b, a_dq, b_dq)
    effective_scale = _f32(np.float64(_f32(q_a.scale)) / (np.float64(_f32(q_b.scale)) * np.float64(_f32(out.scale))))
    args = (a, q_a.zero_point, b, q_b.zero_point, out.zero_point, effective_scale)
    return rw.emit(cortex_m("quantized_div"), args)


def _min_max(name: str) -> Callable[[Rewrite], Node]:
    def lower(rw: Rewrite) -> Node:
        rw.no_fused_activation()
        a_dq, b_dq = rw.anchor.args[:2]
        rw.shared_qparams(a_dq, b_dq)
        return rw.emit(cortex_m(name), (rw.int8(a_dq), rw.int8(b_dq)))
    lower.__doc__ = f"{name}(a, b) on int8 values that share qparams -> cortex_m {name}."
    return lower


# --- unary activations as lookup tables ----------------------------------------------------------------------

def _activation(rw: Rewrite, x_dq: Node, table: np.ndarray) -> Node:
    lut = torch.from_numpy(np.asarray(table).astype(np.int8).copy())
    return rw.emit(cortex_m("quantized_activation"), (rw.int8(x_dq), rw.constant("lut", lut)))


def _lut(build: Callable[[Rewrite, QParams, QParams], activations.Lut]) -> Callable[[Rewrite], Node]:
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


def _clamp_bounds(node: Node) -> tuple[float | None, float | None]:
    """(low, high) of a hardtanh / clamp; None where there is no bound (left out, or infinite: the int8
    range bounds it then)."""
    if node.target == edge.hardtanh.default:
        bounds = _arg(node, 1, "min_val", -1.0), _arg(node, 2, "max_val", 1.0)
    else:
        bounds = _arg(node, 1, "min"), _arg(node, 2, "max")
    return tuple(None if b is None or not math.isfinite(float(b)) else float(b) for b in bounds)


def _relu_lut(rw: Rewrite, q_in: QParams, out: QParams) -> activations.Lut:
    """relu / hardtanh / clamp: requantize by s_in / s_out, clamp at the quantized bounds (TFLM RELU)."""
    low, high = (0.0, None) if rw.anchor.target == edge.relu.default else _clamp_bounds(rw.anchor)
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


_LUTS: dict[object, Callable[[Rewrite, QParams, QParams], activations.Lut]] = {
    edge.sigmoid.default: _q4_lut(activations.logistic_lut),
    edge.tanh.default: _q4_lut(activations.tanh_lut),
    edge.hardswish.default: lambda rw, i, o: _hard_swish_lut(rw, i, o),
    edge.leaky_relu.default: lambda rw, i, o: activations.leaky_relu_lut(
        i.scale, i.zero_point, o.scale, o.zero_point, float(_arg(rw.anchor, 1, "negative_slope", 0.01))),
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


lower_pointwise = _lut(_float_lut)


# --- softmax ---------------------------------------------------------------------------------------------------

def lower_softmax(rw: Rewrite) -> Node:
    """_softmax(x, dim) -> cortex_m softmax over the last dim (TFLM's integer algorithm, beta 1); another
    dim is moved last and back with two transposes."""
    rw.no_fused_activation()
    x_dq, dim = rw.anchor.args[:2]
    if _arg(rw.anchor, 2, "half_to_float", False):
        raise NotLowered("half_to_float=True")
    q_in, out = rw.qparams(x_dq), rw.output_qparams()
    if not out.same_as(SOFTMAX_OUTPUT):
        raise NotLowered(f"the output qparams must be scale 1/256, zero point -128 (found: {out})")
    shape = shape_of(x_dq)
    rank, dim = len(shape), int(dim) % len(shape)
    if rank > 4 and dim != rank - 1:
        raise NotLowered(f"softmax over dim {dim} of a rank-{rank} tensor needs a transpose of rank > 4")
    real = min(q_in.scale * float(1 << (31 - _SOFTMAX_INTEGER_BITS)), float((1 << 31) - 1))
    multiplier, shift = quantize_multiplier_scalar(real)
    diff_min = -math.floor(((1 << _SOFTMAX_INTEGER_BITS) - 1) * (1 << (31 - _SOFTMAX_INTEGER_BITS)) / (1 << shift))
    x = rw.int8(x_dq)
    perm = list(range(rank))
    perm[dim], perm[-1] = perm[-1], perm[dim]
    if dim != rank - 1:
        x = rw.emit(cortex_m("transpose"), (x, perm), val=rw.like([shape[p] for p in perm]))
    args = (x, rank - 1, q_in.zero_point, out.zero_point, multiplier, shift, diff_min)
    if dim == rank - 1:
        return rw.emit(cortex_m("softmax"), args)
    y = rw.emit(cortex_m("softmax"), args, val=rw.like([shape[p] for p in perm]))
    return rw.emit(cortex_m("transpose"), (y, perm))


# --- pooling -----------------------------------------------------------------------------------------------------

def _avg_pool(rw: Rewrite, x_dq: Node, kernel, stride, padding, count_include_pad: bool,
              val: torch.Tensor | None = None, ceil_mode: bool = False, viewed: tuple[Node, tuple] | None = None
              ) -> Node:
    """``viewed``: pool this int8 node of that shape, a view of ``x_dq``'s values, instead of them."""
    rw.no_fused_activation()
    q = rw.shared_qparams(x_dq)
    x, in_shape = viewed or (rw.int8(x_dq), shape_of(x_dq))
    out_shape = tuple(val.shape) if val is not None else shape_of(rw.cluster.quantizes[0])
    if padding != [0, 0] and count_include_pad:
        # the average counts the padding: pad with the zero point first, then pool without padding (the
        # kernel counts only taps inside its input, so a ceil-mode overhang past the padding is not counted,
        # as in PyTorch)
        padded = (in_shape[0], in_shape[1], in_shape[2] + 2 * padding[0], in_shape[3] + 2 * padding[1])
        if ceil_mode and [pool_output_size(padded[axis], kernel[i], stride[i], 0, 1, True)
                          for i, axis in enumerate((2, 3))] != list(out_shape[2:]):
            raise NotLowered("ceil_mode=True with a last window that starts in the padding")
        x = rw.emit(cortex_m("pad"), (x, [0, 0, padding[0], padding[1]], [0, 0, padding[0], padding[1]],
                                      q.zero_point), val=rw.like(padded))
        in_shape, padding = padded, [0, 0]
    multiplier, shift = quantize_multiplier_scalar(1.0)  # input and output share qparams
    nbytes = scratch.avg_pool2d_scratch_bytes(rw.isa, nhwc(in_shape), nhwc(out_shape), tuple(kernel),
                                              tuple(stride), tuple(padding))
    args = (x, kernel, stride, padding, ceil_mode, q.zero_point, multiplier, shift, rw.scratch(nbytes))
    return rw.emit(cortex_m("quantized_avg_pool2d"), args, val=val)


def lower_avg_pool(rw: Rewrite) -> Node:
    """avg_pool2d -> quantized_avg_pool2d (padding the average counts becomes a pad with the zero point;
    ceil_mode is the kernel's own, which averages the taps inside its input)."""
    node = rw.anchor
    kernel = _pair(node.args[1], (1, 1))
    stride = _pair(_arg(node, 2, "stride"), tuple(kernel))
    if _arg(node, 6, "divisor_override") is not None:
        raise NotLowered("divisor_override")
    return _avg_pool(rw, node.args[0], kernel, stride, _pair(_arg(node, 3, "padding"), (0, 0)),
                     bool(_arg(node, 5, "count_include_pad", True)),
                     ceil_mode=bool(_arg(node, 4, "ceil_mode", False)))


def lower_adaptive_avg_pool(rw: Rewrite) -> Node:
    """_adaptive_avg_pool2d with an output size that divides the input -> quantized_avg_pool2d."""
    x_dq = rw.anchor.args[0]
    _, _, height, width = shape_of(x_dq)
    out_h, out_w = _pair(rw.anchor.args[1], (1, 1))
    if height % out_h or width % out_w:
        raise NotLowered(f"input {height}x{width} is no multiple of the output {out_h}x{out_w}")
    kernel = [height // out_h, width // out_w]
    return _avg_pool(rw, x_dq, kernel, kernel, [0, 0], False)


def lower_spatial_mean(rw: Rewrite) -> Node:
    """mean over H and W, H or W of a rank-4 tensor, or over one dim of a rank-2 or rank-3 one (a sequence's
    steps or tokens, its features) -> one quantized_avg_pool2d over the whole window (plus a view without
    keepdim). Its rounding is AVERAGE_POOL_2D's (the sum divided by the count, halves away from zero), not
    TFLM MEAN's fixed-point 1 / count: the two can differ by 1 LSB."""
    x_dq = rw.anchor.args[0]
    shape = shape_of(x_dq)
    dims = _arg(rw.anchor, 1, "dim") or list(range(len(shape)))  # None or []: every dimension
    if _arg(rw.anchor, 3, "dtype") is not None:
        raise NotLowered("mean with a dtype")
    if len(shape) in (2, 3) and len(dims) == 1:
        return _single_dim_mean(rw, x_dq, shape, int(dims[0]) % len(shape))
    spatial = sorted(int(d) % 4 for d in dims) if len(shape) == 4 else None
    if spatial not in ([2, 3], [2], [3]):
        raise NotLowered(f"mean over dims {list(dims)} of a rank-{len(shape)} tensor (only H and / or W of a "
                         "rank-4 tensor, or one dim of a rank-2 or rank-3 one, is an average pool)")
    kernel = [shape[2] if 2 in spatial else 1, shape[3] if 3 in spatial else 1]
    if _arg(rw.anchor, 2, "keepdim", False):
        return _avg_pool(rw, x_dq, kernel, kernel, [0, 0], False)
    pooled_shape = (shape[0], shape[1], shape[2] // kernel[0], shape[3] // kernel[1])
    pooled = _avg_pool(rw, x_dq, kernel, kernel, [0, 0], False, val=rw.like(pooled_shape))
    return rw.emit(edge.view_copy.default, (pooled, list(shape_of(rw.cluster.quantizes[0]))))


def _single_dim_mean(rw: Rewrite, x_dq: Node, shape: tuple, dim: int) -> Node:
    """mean over dim d of a contiguous tensor (a [B, T, F] sequence's steps or features): its bytes are the
    one-channel image [1, 1, outer * D, inner], whose NCHW and NHWC orders agree, and the mean is a D x 1
    window moved by D rows, one window per outer index: every outer index is a row of one image."""
    outer, size, inner = math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:])
    image = (1, 1, outer * size, inner)
    x = rw.emit(edge.view_copy.default, (rw.int8(x_dq), list(image)), val=rw.like(image))
    pooled = _avg_pool(rw, x_dq, [size, 1], [size, 1], [0, 0], False, val=rw.like((1, 1, outer, inner)),
                       viewed=(x, image))
    return rw.emit(edge.view_copy.default, (pooled, list(shape_of(rw.cluster.quantizes[0]))))


def lower_max_pool(rw: Rewrite) -> Node:
    """max_pool2d(_with_indices) -> quantized_max_pool2d (indices unused). The kernel takes no ceil_mode:
    a ceil-mode pool pads the input with -128 (never a window's maximum: every window holds an input tap)
    so that the floor-mode pool over it ends where PyTorch's ceil-mode pool does. A dilated pool stays on
    the portable kernel, on the int8 values."""
    rw.no_fused_activation()
    node = rw.anchor
    x_dq = node.args[0]
    q = rw.shared_qparams(x_dq)
    kernel = _pair(node.args[1], (1, 1))
    stride = _pair(_arg(node, 2, "stride"), tuple(kernel))
    padding = _pair(_arg(node, 3, "padding"), (0, 0))
    dilation = _pair(_arg(node, 4, "dilation"), (1, 1))
    x = rw.int8(x_dq)
    if dilation != [1, 1]:
        # CMSIS-NN pools have no dilation: ExecuTorch's portable kernel picks the int8 values
        ceil_mode = bool(_arg(node, 5, "ceil_mode", False))
        values = rw.like(shape_of(rw.cluster.quantizes[0]))
        pooled = rw.emit(edge.max_pool2d_with_indices.default, (x, kernel, stride, padding, dilation, ceil_mode),
                         val=(values, values.new_empty(values.shape, dtype=torch.long)))
        return rw.emit(operator.getitem, (pooled, 0))
    if _arg(node, 5, "ceil_mode", False):
        in_shape, out_shape = shape_of(x_dq), shape_of(rw.cluster.quantizes[0])
        after = [max(padding[i], (out_shape[axis] - 1) * stride[i] + kernel[i] - in_shape[axis] - padding[i])
                 for i, axis in enumerate((2, 3))]
        padded = (*in_shape[:2], in_shape[2] + padding[0] + after[0], in_shape[3] + padding[1] + after[1])
        x = rw.emit(cortex_m("pad"), (x, [0, 0, *padding], [0, 0, *after], INT8_MIN), val=rw.like(padded))
        padding = [0, 0]
    args = (x, kernel, stride, padding, dilation, False, q.zero_point, q.zero_point, INT8_MIN, INT8_MAX)
    return rw.emit(cortex_m("quantized_max_pool2d"), args)


# --- data movement -------------------------------------------------------------------------------------------

def lower_pad(rw: Rewrite) -> Node:
    """constant_pad_nd -> cortex_m pad; pads are listed per dim of the rank-4 view of the tensor, in
    logical order here (the layout stage reorders them for channels_last inputs)."""
    x_dq, pads = rw.anchor.args[:2]
    value = float(_arg(rw.anchor, 2, "value", 0.0) or 0.0)
    q = rw.shared_qparams(x_dq)
    rank = len(shape_of(x_dq))
    if rank > 4 or len(pads) > 2 * rank:
        raise NotLowered(f"pad of a rank-{rank} tensor (the kernel takes rank <= 4)")
    pre, post = [0, 0, 0, 0], [0, 0, 0, 0]
    for i in range(len(pads) // 2):
        pre[3 - i], post[3 - i] = int(pads[2 * i]), int(pads[2 * i + 1])
    if min(pre + post) < 0:
        raise NotLowered("negative padding (cropping)")
    pad_value = min(max(quantize_value(value, q.scale, q.zero_point), INT8_MIN), INT8_MAX)
    return rw.emit(cortex_m("pad"), (rw.int8(x_dq), pre, post, pad_value))


def collapsed_permutation(shape, perm) -> tuple[list[int], list[int]]:
    """The same byte movement at the lowest rank: size-1 dimensions dropped, and input dimensions that stay
    neighbours in the output merged (ShuffleNet's [1, g, c/g, H, W] by [0, 2, 1, 3, 4] is [g, c/g, H*W]
    by [1, 0, 2]). Returns (shape, perm); an identity perm moves nothing."""
    kept = [d for d in perm if shape[d] != 1]
    groups: list[list[int]] = []
    for d in kept:
        if groups and d == groups[-1][-1] + 1:
            groups[-1].append(d)
        else:
            groups.append([d])
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])
    sizes = [int(np.prod([shape[d] for d in groups[g]])) for g in order]
    return sizes, [order.index(g) for g in range(len(groups))]


def lower_permute(rw: Rewrite) -> Node:
    """permute_copy -> cortex_m transpose (rank <= 4), at the lowest rank that moves the same bytes (views
    of the int8 tensor around it), or a view alone where no bytes move."""
    x_dq, dims = rw.anchor.args[:2]
    rw.shared_qparams(x_dq)
    in_shape = shape_of(x_dq)
    perm = [int(d) % len(in_shape) for d in dims]
    if len(in_shape) <= 4:
        return rw.emit(cortex_m("transpose"), (rw.int8(x_dq), perm))
    return _moved(rw, rw.int8(x_dq), in_shape, perm, val=rw.cluster.quantizes[0].meta["val"])


def _moved(rw: Rewrite, x: Node, in_shape: tuple, perm: list[int], val: torch.Tensor | None = None) -> Node:
    """The int8 node ``x`` permuted by ``perm``: a view where no bytes move, else a transpose at the lowest
    rank that moves the same bytes (views around it)."""
    out_shape = [in_shape[p] for p in perm]
    val = val if val is not None else rw.like(out_shape)
    shape, small_perm = collapsed_permutation(in_shape, perm)
    if small_perm == sorted(small_perm):
        return rw.emit(edge.view_copy.default, (x, out_shape), val=val)
    if len(shape) > 4:
        raise NotLowered(f"transpose of a rank-{len(in_shape)} tensor that is rank {len(shape)} at its lowest "
                         "(the kernel takes rank <= 4)")
    x = rw.emit(edge.view_copy.default, (x, shape), val=rw.like(shape))
    moved = rw.emit(cortex_m("transpose"), (x, small_perm), val=rw.like([shape[p] for p in small_perm]))
    return rw.emit(edge.view_copy.default, (moved, out_shape), val=val)


def lower_portable(rw: Rewrite) -> Node:
    """A data-movement op stays on its portable kernel, now on the int8 values (no requantization: input
    and output share qparams)."""
    rw.no_fused_activation()
    inputs = [a for arg in rw.anchor.args for a in (arg if isinstance(arg, (list, tuple)) else [arg])
              if isinstance(a, Node)]
    if not all(is_dequantize(a) for a in inputs):
        raise NotLowered("an operand is a float constant")
    rw.shared_qparams(*inputs)

    def swap(arg):
        if isinstance(arg, (list, tuple)):
            return type(arg)(swap(a) for a in arg)
        return rw.int8(arg) if isinstance(arg, Node) else arg

    return rw.emit(rw.anchor.target, tuple(swap(a) for a in rw.anchor.args))


@dataclass(frozen=True)
class CpuKernel:
    """One row: the kernel the report names and how a cluster of the op becomes it."""

    kernel: str
    lower: Callable[[Rewrite], Node]


_PORTABLE = "portable (int8)"

CPU_KERNELS: dict[object, CpuKernel] = {
    edge.convolution.default: CpuKernel("cortex_m::quantized_conv2d / depthwise / transpose", lower_convolution),
    edge.linear.default: CpuKernel("cortex_m::quantized_linear", lower_linear),
    edge.mm.default: CpuKernel("cortex_m::quantized_linear", lower_mm),
    edge.bmm.default: CpuKernel("cortex_m::quantized_batch_matmul", lower_bmm),
    edge.add.Tensor: CpuKernel("cortex_m::quantized_add", lower_add),
    edge.sub.Tensor: CpuKernel("cortex_m::quantized_add (negated second multiplier)", lower_sub),
    edge.mul.Tensor: CpuKernel("cortex_m::quantized_mul", lower_mul),
    edge.div.Tensor: CpuKernel("cortex_m::quantized_div", lower_div),
    edge.maximum.default: CpuKernel("cortex_m::maximum", _min_max("maximum")),
    edge.minimum.default: CpuKernel("cortex_m::minimum", _min_max("minimum")),
    edge._softmax.default: CpuKernel("cortex_m::softmax", lower_softmax),
    edge.avg_pool2d.default: CpuKernel("cortex_m::quantized_avg_pool2d", lower_avg_pool),
    edge._adaptive_avg_pool2d.default: CpuKernel("cortex_m::quantized_avg_pool2d", lower_adaptive_avg_pool),
    edge.mean.dim: CpuKernel("cortex_m::quantized_avg_pool2d", lower_spatial_mean),
    edge.sum.dim_IntList: CpuKernel("cortex_m::quantized_linear (a weight of ones)", lower_sum),
    edge.max_pool2d.default: CpuKernel("cortex_m::quantized_max_pool2d", lower_max_pool),
    edge.max_pool2d_with_indices.default: CpuKernel("cortex_m::quantized_max_pool2d", lower_max_pool),
    edge.constant_pad_nd.default: CpuKernel("cortex_m::pad", lower_pad),
    edge.permute_copy.default: CpuKernel("cortex_m::transpose", lower_permute),
    **{op: CpuKernel("cortex_m::quantized_activation", _lut(build)) for op, build in _LUTS.items()},
    **{op: CpuKernel(_PORTABLE, lower_portable) for op in (
        edge.view_copy.default, edge.squeeze_copy.dims, edge.squeeze_copy.dim, edge.unsqueeze_copy.default,
        edge.clone.default, edge.slice_copy.Tensor, edge.cat.default, edge.upsample_nearest2d.vec,
        edge.expand_copy.default, edge.select_copy.int, edge.alias_copy.default, edge.amax.default,
        edge.amin.default, edge.reflection_pad1d.default, edge.reflection_pad2d.default,
        edge.reflection_pad3d.default, edge.replication_pad1d.default, edge.replication_pad2d.default,
        edge.replication_pad3d.default)},
}
POINTWISE = CpuKernel("cortex_m::quantized_activation", lower_pointwise)


def row_for(node: Node) -> CpuKernel | None:
    """The table row of ``node``'s op; any other single-tensor pointwise op is a lookup table."""
    row = CPU_KERNELS.get(node.target)
    if row is None and is_pointwise_unary(node):
        return POINTWISE
    return row
