"""CPU lowering, reductions: sum -> quantized_linear by a weight of ones; _softmax -> cortex_m softmax.
(amax / amin stay on their portable kernels, on the int8 values: ``shape.lower_portable``.)"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch.fx import Node

from imxrt.cpu.lowering_rules.common import NotLowered, Rewrite, cortex_m, edge, node_arg, shape_of
from imxrt.cpu.lowering_rules.linear import fully_connected
from imxrt.cpu.lowering_rules.shape import moved
from imxrt.kernels.requantize import quantize_multiplier_scalar
from imxrt.passes.qdq import QParams

SOFTMAX_OUTPUT = QParams(1.0 / 256.0, -128)  # arm_softmax_s8 writes this scale and zero point
_SOFTMAX_INTEGER_BITS = 5


def lower_sum(rw: Rewrite) -> Node:
    """sum over dims -> quantized_linear by a weight of ones [1, D] on the summed dims moved last and
    flattened ([outer, D]; a transpose first where they are not last already): the int32 accumulator holds
    the exact sum, requantized once to the output scale, as TFLM's int8 SUM does. CMSIS-NN has no
    reduction kernel, and an average pool would round the mean to an int8 step first."""
    x_dq = rw.anchor.args[0]
    shape = shape_of(x_dq)
    rank = len(shape)
    if node_arg(rw.anchor, 3, "dtype") is not None:
        raise NotLowered("sum with a dtype")
    dims = sorted({int(d) % rank for d in (node_arg(rw.anchor, 1, "dim") or range(rank))})
    kept = [d for d in range(rank) if d not in dims]
    outer, size = math.prod(shape[d] for d in kept), math.prod(shape[d] for d in dims)
    x = rw.int8(x_dq)
    if kept + dims != list(range(rank)):
        x = moved(rw, x, shape, kept + dims)
    x = rw.emit(edge.view_copy.default, (x, [outer, size]), val=rw.like((outer, size)))
    ones = torch.ones(1, size, dtype=torch.int8)
    summed = fully_connected(rw, x_dq, ones, None, np.ones(1), None, viewed=x, val=rw.like((outer, 1)))
    return rw.emit(edge.view_copy.default, (summed, list(shape_of(rw.cluster.quantizes[0]))))


def lower_softmax(rw: Rewrite) -> Node:
    """_softmax(x, dim) -> cortex_m softmax over the last dim (TFLM's integer algorithm, beta 1); another
    dim is moved last and back with two transposes."""
    rw.no_fused_activation()
    x_dq, dim = rw.anchor.args[:2]
    if node_arg(rw.anchor, 2, "half_to_float", False):
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
