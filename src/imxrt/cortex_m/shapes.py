"""Fake (meta) implementations of the cortex_m ops: output shape, dtype and memory format, nothing else.

torch.export, to_edge and memory planning trace the ops with these. Layout is part of the contract: a
non-``_nhwc`` op producing a 4-D activation returns an NCHW-logical tensor in channels_last memory format
(the dim order the device kernel writes), an ``_nhwc`` op an NHWC-logical contiguous tensor. Weight layouts
(reference/cortex_m.md): conv OHWI, depthwise [1, kh, kw, C_out], transpose conv [C_out, kh, kw, C_in].
"""

from __future__ import annotations

import torch
from executorch.exir.tensor import dim_order_from_stride

from imxrt.kernels.pooling import pool_output_size

# NCHW-logical positions of the activations the non-_nhwc ops take
NCHW_HEIGHT, NCHW_WIDTH, NCHW_CHANNELS = 2, 3, 1
# OHWI weight positions (conv, transpose conv); depthwise keeps C_out in the last position
WEIGHT_OUT, WEIGHT_HEIGHT, WEIGHT_WIDTH, WEIGHT_IN = 0, 1, 2, 3
DEPTHWISE_OUT = 3


def conv_output_size(in_size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    """PyTorch's (and the device kernel's) size for symmetric padding: floor((in + 2p - d(k-1) - 1) / s) + 1."""
    return (in_size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def transpose_conv_output_size(in_size: int, kernel: int, stride: int, padding: int, output_padding: int,
                               dilation: int) -> int:
    return (in_size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


def _pair(values) -> tuple[int, int]:
    values = [int(v) for v in values]
    return (values[0], values[0]) if len(values) == 1 else (values[0], values[1])


def _nchw_int8(input: torch.Tensor, shape) -> torch.Tensor:
    """Channels_last, but contiguous for one channel: the same bytes, and the one order of the two that
    ExecuTorch reads unambiguously off the strides (channels_last ties C with W)."""
    layout = torch.contiguous_format if shape[NCHW_CHANNELS] == 1 else torch.channels_last
    return torch.empty(shape, dtype=torch.int8, device=input.device, memory_format=layout)


def _as_nchw(input: torch.Tensor) -> torch.Tensor:
    return input.permute(0, 3, 1, 2)


def _nhwc_of(fake_nchw) -> callable:
    """The ``_nhwc`` twin of an NCHW-logical fake: the input seen as NCHW, the result as contiguous NHWC."""

    def fake(input, *args):
        return fake_nchw(_as_nchw(input), *args).permute(0, 2, 3, 1).contiguous()

    return fake


def quantize_per_tensor(input, scale, zero_point, quant_min, quant_max, dtype):
    return torch.empty_like(input, dtype=dtype)


def dequantize_per_tensor(input, scale, zero_point, quant_min, quant_max, dtype):
    return torch.empty_like(input, dtype=torch.float32)


def _broadcast_binary(self: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """The larger operand's layout when the other broadcasts into it; a contiguous broadcast shape otherwise."""
    shape = torch.broadcast_shapes(self.shape, other.shape)
    for operand in (self, other):
        if operand.shape == shape:
            return torch.empty_like(operand)
    return torch.empty(shape, dtype=self.dtype, device=self.device)


def quantized_add(self, self_zero_point, self_multiplier, self_shift, other, other_zero_point, other_multiplier,
                  other_shift, output_zero_point, output_multiplier, output_shift, activation_min, activation_max):
    return _broadcast_binary(self, other)


def quantized_mul(self, self_zero_point, other, other_zero_point, output_zero_point, output_multiplier,
                  output_shift):
    return _broadcast_binary(self, other)


def quantized_div(self, self_zero_point, other, other_zero_point, output_zero_point, output_scale):
    return _broadcast_binary(self, other)


def quantized_activation(input, lut):
    return torch.empty_like(input)


def minimum(self, other):
    return _broadcast_binary(self, other)


def maximum(self, other):
    return _broadcast_binary(self, other)


def quantized_linear(input, weights, bias, kernel_sum, input_offset, filter_offset, output_offset,
                     requantize_multipliers, requantize_shifts, activation_max, activation_min):
    return torch.empty((*input.shape[:-1], weights.shape[0]), dtype=torch.int8, device=input.device)


def softmax(input, dim, input_zero_point, output_zero_point, input_multiplier, input_shift, diff_min):
    return torch.empty_like(input, dtype=torch.int8)


def transpose(input, perm):
    return torch.empty([input.shape[axis] for axis in perm], dtype=input.dtype, device=input.device)


# pad's pre_pad / post_pad have four entries in memory order, right-aligned for rank < 4: a channels_last
# NCHW-logical input pads (N, H, W, C), anything else its logical dims (op_pad.cpp).
_CHANNELS_LAST_TO_LOGICAL = (0, 3, 1, 2)


def is_channels_last(input: torch.Tensor) -> bool:
    """4-D and in the channels_last dim order [0, 2, 3, 1] as ExecuTorch reads it off the strides (and the
    board's kernel off the program): a [N, C, 1, 1] tensor with channels_last strides counts, though torch
    calls it contiguous too (a pad after a global pool was padded as NCHW, [1, 8, 1, 1] to [1, 12, 5, 1])."""
    return input.dim() == 4 and tuple(dim_order_from_stride(input.stride())) == (0, 2, 3, 1)


def logical_padding(input: torch.Tensor, pre_pad, post_pad) -> list[tuple[int, int]]:
    """(before, after) per logical dimension of ``input``."""
    rank = input.dim()
    offset = 4 - rank
    if is_channels_last(input):
        pre = [int(pre_pad[i]) for i in _CHANNELS_LAST_TO_LOGICAL]
        post = [int(post_pad[i]) for i in _CHANNELS_LAST_TO_LOGICAL]
    else:
        pre, post = [int(p) for p in pre_pad], [int(p) for p in post_pad]
    return [(pre[offset + axis], post[offset + axis]) for axis in range(rank)]


def pad(input, pre_pad, post_pad, pad_value):
    shape = [size + before + after for size, (before, after) in zip(input.shape, logical_padding(
        input, pre_pad, post_pad), strict=True)]
    if is_channels_last(input):
        return torch.empty(shape, dtype=input.dtype, device=input.device, memory_format=torch.channels_last)
    return torch.empty(shape, dtype=input.dtype, device=input.device)


def quantized_conv2d(input, weight, bias, stride, padding, dilation, input_offset, output_offset,
                     requantize_multipliers, requantize_shifts, activation_min, activation_max, scratch):
    sizes = [conv_output_size(input.shape[axis], weight.shape[kernel_axis], s, p, d) for axis, kernel_axis, s, p, d
             in zip((NCHW_HEIGHT, NCHW_WIDTH), (WEIGHT_HEIGHT, WEIGHT_WIDTH), _pair(stride), _pair(padding),
                    _pair(dilation), strict=True)]
    return _nchw_int8(input, (input.shape[0], weight.shape[WEIGHT_OUT], *sizes))


def quantized_depthwise_conv2d(input, weight, bias, stride, padding, dilation, depth_multiplier, input_offset,
                               output_offset, requantize_multipliers, requantize_shifts, activation_min,
                               activation_max, scratch):
    sizes = [conv_output_size(input.shape[axis], weight.shape[kernel_axis], s, p, d) for axis, kernel_axis, s, p, d
             in zip((NCHW_HEIGHT, NCHW_WIDTH), (WEIGHT_HEIGHT, WEIGHT_WIDTH), _pair(stride), _pair(padding),
                    _pair(dilation), strict=True)]
    return _nchw_int8(input, (input.shape[0], weight.shape[DEPTHWISE_OUT], *sizes))


def quantized_transpose_conv2d(input, weight, bias, stride, padding, output_padding, dilation, input_offset,
                               output_offset, requantize_multipliers, requantize_shifts, activation_min,
                               activation_max, scratch, output_scratch):
    sizes = [transpose_conv_output_size(input.shape[axis], weight.shape[kernel_axis], s, p, op, d)
             for axis, kernel_axis, s, p, op, d in zip(
                 (NCHW_HEIGHT, NCHW_WIDTH), (WEIGHT_HEIGHT, WEIGHT_WIDTH), _pair(stride), _pair(padding),
                 _pair(output_padding), _pair(dilation), strict=True)]
    return _nchw_int8(input, (input.shape[0], weight.shape[WEIGHT_OUT], *sizes))


def quantized_avg_pool2d(input, kernel_size, stride, padding, ceil_mode, zero_point, multiplier, shift, scratch):
    sizes = [pool_output_size(input.shape[axis], k, s, p, 1, ceil_mode) for axis, k, s, p in zip(
        (NCHW_HEIGHT, NCHW_WIDTH), _pair(kernel_size), _pair(stride), _pair(padding), strict=True)]
    return _nchw_int8(input, (input.shape[0], input.shape[NCHW_CHANNELS], *sizes))


def quantized_max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, input_zero_point,
                         output_zero_point, activation_min, activation_max):
    sizes = [pool_output_size(input.shape[axis], k, s, p, d, ceil_mode) for axis, k, s, p, d in zip(
        (NCHW_HEIGHT, NCHW_WIDTH), _pair(kernel_size), _pair(stride), _pair(padding), _pair(dilation),
        strict=True)]
    return _nchw_int8(input, (input.shape[0], input.shape[NCHW_CHANNELS], *sizes))


quantized_conv2d_nhwc = _nhwc_of(quantized_conv2d)
quantized_depthwise_conv2d_nhwc = _nhwc_of(quantized_depthwise_conv2d)
quantized_transpose_conv2d_nhwc = _nhwc_of(quantized_transpose_conv2d)
quantized_avg_pool2d_nhwc = _nhwc_of(quantized_avg_pool2d)
quantized_max_pool2d_nhwc = _nhwc_of(quantized_max_pool2d)


def quantized_batch_matmul(lhs, lhs_zero_point, rhs_transposed, rhs_zero_point, output_zero_point,
                           output_multiplier, output_shift, scratch):
    batch, rows, _ = lhs.shape
    return torch.empty((batch, rows, rhs_transposed.shape[1]), dtype=torch.int8, device=lhs.device)
