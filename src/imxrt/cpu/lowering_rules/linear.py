"""CPU lowering, fully connected layers and matmuls: linear, mm -> quantized_linear; bmm ->
quantized_batch_matmul."""

from __future__ import annotations

import numpy as np
import torch
from torch.fx import Node

from imxrt.cpu import scratch
from imxrt.cpu.isa import Isa
from imxrt.cpu.lowering_rules.common import NotLowered, Rewrite, cortex_m, node_arg, shape_of
from imxrt.kernels.requantize import fully_connected_multiplier, quantize_multiplier, quantize_multiplier_scalar
from imxrt.passes.qdq import DEQUANTIZE_PER_TENSOR, is_dequantize


def fully_connected(rw: Rewrite, x_dq: Node, weight: torch.Tensor, weight_node: Node | None,
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
    b_dq = node_arg(rw.anchor, 2, "bias")
    weight, scales = rw.weight(w_dq, axis=0)
    return fully_connected(rw, x_dq, weight, w_dq.args[0], scales, rw.bias(b_dq))


def lower_mm(rw: Rewrite) -> Node:
    """mm(x, W[in, out]) with a constant W -> quantized_linear on W transposed."""
    x_dq, w_dq = rw.anchor.args[:2]
    if not is_dequantize(w_dq) or rw.editor.tensor(w_dq.args[0]) is None:
        raise NotLowered("the right operand is not a constant weight (two activations need bmm)")
    weight, scales = rw.weight(w_dq, axis=1)
    return fully_connected(rw, x_dq, weight.t(), None, scales, None)


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
