"""CPU lowering, pooling: avg_pool2d, _adaptive_avg_pool2d and mean -> quantized_avg_pool2d;
max_pool2d(_with_indices) -> quantized_max_pool2d. Input and output share qparams."""

from __future__ import annotations

import math
import operator

import torch
from torch.fx import Node

from imxrt.cpu import scratch
from imxrt.cpu.lowering_rules.common import NotLowered, Rewrite, cortex_m, edge, nhwc, node_arg, pair, shape_of
from imxrt.kernels.pooling import pool_output_size
from imxrt.kernels.requantize import INT8_MAX, INT8_MIN, quantize_multiplier_scalar


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
    kernel = pair(node.args[1], (1, 1))
    stride = pair(node_arg(node, 2, "stride"), tuple(kernel))
    if node_arg(node, 6, "divisor_override") is not None:
        raise NotLowered("divisor_override")
    return _avg_pool(rw, node.args[0], kernel, stride, pair(node_arg(node, 3, "padding"), (0, 0)),
                     bool(node_arg(node, 5, "count_include_pad", True)),
                     ceil_mode=bool(node_arg(node, 4, "ceil_mode", False)))


def lower_adaptive_avg_pool(rw: Rewrite) -> Node:
    """_adaptive_avg_pool2d with an output size that divides the input -> quantized_avg_pool2d."""
    x_dq = rw.anchor.args[0]
    _, _, height, width = shape_of(x_dq)
    out_h, out_w = pair(rw.anchor.args[1], (1, 1))
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
    dims = node_arg(rw.anchor, 1, "dim") or list(range(len(shape)))  # None or []: every dimension
    if node_arg(rw.anchor, 3, "dtype") is not None:
        raise NotLowered("mean with a dtype")
    if len(shape) in (2, 3) and len(dims) == 1:
        return _single_dim_mean(rw, x_dq, shape, int(dims[0]) % len(shape))
    spatial = sorted(int(d) % 4 for d in dims) if len(shape) == 4 else None
    if spatial not in ([2, 3], [2], [3]):
        raise NotLowered(f"mean over dims {list(dims)} of a rank-{len(shape)} tensor (only H and / or W of a "
                         "rank-4 tensor, or one dim of a rank-2 or rank-3 one, is an average pool)")
    kernel = [shape[2] if 2 in spatial else 1, shape[3] if 3 in spatial else 1]
    if node_arg(rw.anchor, 2, "keepdim", False):
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
    kernel = pair(node.args[1], (1, 1))
    stride = pair(node_arg(node, 2, "stride"), tuple(kernel))
    padding = pair(node_arg(node, 3, "padding"), (0, 0))
    dilation = pair(node_arg(node, 4, "dilation"), (1, 1))
    x = rw.int8(x_dq)
    if dilation != [1, 1]:
        # CMSIS-NN pools have no dilation: ExecuTorch's portable kernel picks the int8 values
        ceil_mode = bool(node_arg(node, 5, "ceil_mode", False))
        values = rw.like(shape_of(rw.cluster.quantizes[0]))
        pooled = rw.emit(edge.max_pool2d_with_indices.default, (x, kernel, stride, padding, dilation, ceil_mode),
                         val=(values, values.new_empty(values.shape, dtype=torch.long)))
        return rw.emit(operator.getitem, (pooled, 0))
    if node_arg(node, 5, "ceil_mode", False):
        in_shape, out_shape = shape_of(x_dq), shape_of(rw.cluster.quantizes[0])
        after = [max(padding[i], (out_shape[axis] - 1) * stride[i] + kernel[i] - in_shape[axis] - padding[i])
                 for i, axis in enumerate((2, 3))]
        padded = (*in_shape[:2], in_shape[2] + padding[0] + after[0], in_shape[3] + padding[1] + after[1])
        x = rw.emit(cortex_m("pad"), (x, [0, 0, *padding], [0, 0, *after], INT8_MIN), val=rw.like(padded))
        padding = [0, 0]
    args = (x, kernel, stride, padding, dilation, False, q.zero_point, q.zero_point, INT8_MIN, INT8_MAX)
    return rw.emit(cortex_m("quantized_max_pool2d"), args)
