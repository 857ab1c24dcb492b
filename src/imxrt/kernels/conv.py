"""CONV_2D, DEPTHWISE_CONV_2D and TRANSPOSE_CONV on NHWC int8 tensors (TFLM reference_integer_ops).

acc[c] = bias[c] + sum over taps of w[c, tap] * (q_in[tap] - zp_in)   (taps outside the input add nothing)
q_out  = clamp(MBQM(acc, M[c], shift[c]) + zp_out, act_min, act_max),  M[c] = s_in * s_w[c] / s_out
The sums run as float matmuls over integer operands: exact while every partial sum stays below the float's
integer range (2**24 for float32, 2**53 for float64), which ``_exact_float`` checks when preparing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from imxrt.kernels.requantize import multiply_by_quantized_multiplier, to_int8

# NHWC dimension positions
BATCH, HEIGHT, WIDTH, CHANNELS = 0, 1, 2, 3


def _exact_float(terms: int, max_abs_product: int) -> type:
    """The cheapest float type whose integer range holds any sum of ``terms`` products."""
    return np.float32 if terms * max_abs_product < (1 << 24) else np.float64


def same_padding(in_size: int, filter_size: int, stride: int, dilation: int) -> tuple[int, int]:
    """TFLite SAME: (output size, padding before); the odd extra padding goes after."""
    out_size = (in_size + stride - 1) // stride
    effective_filter = (filter_size - 1) * dilation + 1
    total = max((out_size - 1) * stride + effective_filter - in_size, 0)
    return out_size, total // 2


def valid_output_size(in_size: int, filter_size: int, stride: int, dilation: int) -> int:
    effective_filter = (filter_size - 1) * dilation + 1
    return (in_size - effective_filter + stride) // stride


@dataclass(frozen=True)
class Window:
    """A sliding window over H and W: strides, dilations, padding before, and the output size."""

    stride: tuple[int, int]
    dilation: tuple[int, int]
    pad_before: tuple[int, int]
    output_size: tuple[int, int]
    filter_size: tuple[int, int]

    def padded(self, x: np.ndarray, value=0) -> np.ndarray:
        """``x`` (NHWC) padded with ``value`` so that every tap of every output position is in range."""
        pads = [(0, 0)]
        for axis in (0, 1):
            needed = (self.output_size[axis] - 1) * self.stride[axis] \
                + (self.filter_size[axis] - 1) * self.dilation[axis] + 1
            after = max(needed - self.pad_before[axis] - x.shape[HEIGHT + axis], 0)
            pads.append((self.pad_before[axis], after))
        pads.append((0, 0))
        if not any(before or after for before, after in pads):
            return x
        return np.pad(x, pads, constant_values=value)

    def tap(self, padded: np.ndarray, filter_y: int, filter_x: int) -> np.ndarray:
        """The strided view of ``padded`` that tap (filter_y, filter_x) reads for every output position."""
        out_h, out_w = self.output_size
        start_y, start_x = filter_y * self.dilation[0], filter_x * self.dilation[1]
        return padded[:, start_y:start_y + (out_h - 1) * self.stride[0] + 1:self.stride[0],
                      start_x:start_x + (out_w - 1) * self.stride[1] + 1:self.stride[1], :]


def make_window(input_hw, filter_hw, stride, dilation, same: bool) -> Window:
    sizes, pads = [], []
    for axis in (0, 1):
        if same:
            out, before = same_padding(input_hw[axis], filter_hw[axis], stride[axis], dilation[axis])
        else:
            out, before = valid_output_size(input_hw[axis], filter_hw[axis], stride[axis], dilation[axis]), 0
        sizes.append(out)
        pads.append(before)
    return Window(tuple(stride), tuple(dilation), tuple(pads), tuple(sizes), tuple(filter_hw))


@dataclass(frozen=True)
class ConvParams:
    window: Window
    weights: np.ndarray  # [K = kh * kw * C_in, C_out] float (exact integers), rows in (filter_y, filter_x, c) order
    bias: np.ndarray  # int64[C_out]
    input_zero_point: int
    multipliers: np.ndarray  # int64[C_out]
    shifts: np.ndarray  # int64[C_out]
    output_zero_point: int
    act_min: int
    act_max: int


def prepare_conv(filters: np.ndarray, bias: np.ndarray | None, window: Window, input_zero_point: int,
                 multipliers, shifts, output_zero_point: int, act_min: int, act_max: int) -> ConvParams:
    """``filters`` OHWI int8."""
    out_channels = filters.shape[0]
    depth = int(np.prod(filters.shape[1:]))
    dtype = _exact_float(depth, 255 * 128)
    weights = filters.reshape(out_channels, depth).T.astype(dtype)
    bias = np.zeros(out_channels, np.int64) if bias is None else bias.astype(np.int64)
    return ConvParams(window, np.ascontiguousarray(weights), bias, int(input_zero_point),
                      np.asarray(multipliers, np.int64), np.asarray(shifts, np.int64), int(output_zero_point),
                      act_min, act_max)


def conv2d(x: np.ndarray, params: ConvParams) -> np.ndarray:
    """NHWC int8 -> NHWC int8; im2col (one strided view per tap) and one matmul."""
    window = params.window
    centered = x.astype(params.weights.dtype) - params.input_zero_point  # padding then adds 0 * w
    padded = window.padded(centered)
    filter_h, filter_w = window.filter_size
    taps = [window.tap(padded, filter_y, filter_x) for filter_y in range(filter_h) for filter_x in range(filter_w)]
    columns = taps[0] if len(taps) == 1 else np.concatenate(taps, axis=CHANNELS)
    batch, out_h, out_w = columns.shape[:3]
    acc = columns.reshape(batch * out_h * out_w, -1) @ params.weights
    acc = acc.astype(np.int64) + params.bias
    acc = multiply_by_quantized_multiplier(acc, params.multipliers, params.shifts)
    return to_int8(acc, params.output_zero_point, params.act_min, params.act_max).reshape(batch, out_h, out_w, -1)


@dataclass(frozen=True)
class DepthwiseParams:
    window: Window
    depth_multiplier: int
    weights: np.ndarray  # int32[kh, kw, C_out]
    bias: np.ndarray  # int64[C_out]
    input_zero_point: int
    multipliers: np.ndarray
    shifts: np.ndarray
    output_zero_point: int
    act_min: int
    act_max: int


def depthwise_conv2d(x: np.ndarray, params: DepthwiseParams) -> np.ndarray:
    """Output channel c reads input channel c // depth_multiplier; one multiply-add per tap, in int32
    (|acc| <= kh * kw * 255 * 128 < 2**31 for any window TFLite allows)."""
    window = params.window
    centered = x.astype(np.int32) - params.input_zero_point
    if params.depth_multiplier > 1:
        centered = np.repeat(centered, params.depth_multiplier, axis=CHANNELS)
    padded = window.padded(centered)
    filter_h, filter_w = window.filter_size
    acc = None
    for filter_y in range(filter_h):
        for filter_x in range(filter_w):
            term = window.tap(padded, filter_y, filter_x) * params.weights[filter_y, filter_x]
            acc = term if acc is None else acc + term
    acc = acc.astype(np.int64) + params.bias
    acc = multiply_by_quantized_multiplier(acc, params.multipliers, params.shifts)
    return to_int8(acc, params.output_zero_point, params.act_min, params.act_max)


@dataclass(frozen=True)
class TransposeConvParams:
    stride: tuple[int, int]
    pad_before: tuple[int, int]
    output_shape: tuple[int, int, int, int]  # NHWC
    filter_size: tuple[int, int]
    weights: np.ndarray  # [C_in, kh * kw * C_out] float (exact integers)
    bias: np.ndarray  # int64[C_out]
    input_zero_point: int
    multipliers: np.ndarray
    shifts: np.ndarray
    output_zero_point: int
    act_min: int
    act_max: int


def prepare_transpose_conv(filters: np.ndarray, bias: np.ndarray | None, stride, same: bool, output_shape,
                           input_zero_point: int, multipliers, shifts, output_zero_point: int, act_min: int,
                           act_max: int) -> TransposeConvParams:
    """``filters`` [C_out, kh, kw, C_in] int8. Padding as TFLM derives it: SAME padding of a conv whose
    input is the transpose conv's output (dilation 1)."""
    out_channels, filter_h, filter_w, in_channels = filters.shape
    pads = []
    for axis, filter_size in ((0, filter_h), (1, filter_w)):
        pads.append(same_padding(output_shape[HEIGHT + axis], filter_size, stride[axis], 1)[1] if same else 0)
    weights = filters.transpose(3, 1, 2, 0).reshape(in_channels, filter_h * filter_w * out_channels)
    bias = np.zeros(out_channels, np.int64) if bias is None else bias.astype(np.int64)
    dtype = _exact_float(in_channels * filter_h * filter_w, 255 * 128)
    return TransposeConvParams(tuple(stride), tuple(pads), tuple(output_shape), (filter_h, filter_w),
                               np.ascontiguousarray(weights.astype(dtype)), bias, int(input_zero_point),
                               np.asarray(multipliers, np.int64), np.asarray(shifts, np.int64),
                               int(output_zero_point), act_min, act_max)


def transpose_conv2d(x: np.ndarray, params: TransposeConvParams) -> np.ndarray:
    """Scatter form (TFLM reference): input pixel (y, x) adds w[:, fy, fx, :] (q - zp) to output
    (y * stride + fy - pad, x * stride + fx - pad). One matmul gives every tap's contribution; a loop over
    taps adds them into a buffer that covers the full, unpadded result."""
    batch, in_h, in_w, _ = x.shape
    filter_h, filter_w = params.filter_size
    stride_h, stride_w = params.stride
    _, out_h, out_w, out_channels = params.output_shape
    centered = x.astype(params.weights.dtype) - params.input_zero_point
    products = (centered.reshape(-1, centered.shape[CHANNELS]) @ params.weights)
    products = products.reshape(batch, in_h, in_w, filter_h, filter_w, out_channels)
    pad_h, pad_w = params.pad_before
    full_h = max((in_h - 1) * stride_h + filter_h, pad_h + out_h)
    full_w = max((in_w - 1) * stride_w + filter_w, pad_w + out_w)
    full = np.zeros((batch, full_h, full_w, out_channels), np.float64)
    for filter_y in range(filter_h):
        for filter_x in range(filter_w):
            full[:, filter_y:filter_y + (in_h - 1) * stride_h + 1:stride_h,
                 filter_x:filter_x + (in_w - 1) * stride_w + 1:stride_w, :] += products[:, :, :, filter_y, filter_x]
    acc = full[:, pad_h:pad_h + out_h, pad_w:pad_w + out_w, :].astype(np.int64) + params.bias
    acc = multiply_by_quantized_multiplier(acc, params.multipliers, params.shifts)
    return to_int8(acc, params.output_zero_point, params.act_min, params.act_max)
