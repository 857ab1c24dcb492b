"""CONV_2D, DEPTHWISE_CONV_2D and TRANSPOSE_CONV on NHWC int8 tensors (TFLM reference_integer_ops).

acc[c] = bias[c] + sum over taps of w[c, tap] * (q_in[tap] - zp_in)   (taps outside the input add nothing)
q_out  = clamp(MBQM(acc, M[c], shift[c]) + zp_out, act_min, act_max),  M[c] = s_in * s_w[c] / s_out
CONV_2D and DEPTHWISE fold the zero point into the bias when preparing,
    acc[c] = (bias[c] - zp_in * sum_tap w[c, tap]) + sum_tap w[c, tap] * q_in[tap],
padding the input with zp_in (whose centered value is 0), so the sums read the raw int8 values.
The sums run in float over integer operands: exact while every partial sum stays below the float's integer
range (2**24 for float32, 2**53 for float64), which ``_sum_dtype`` checks from the weights when preparing.
The output stage (``requantize.prepare_output_stage``) is prepared once per layer, from the same bounds.

Where the C extension is built (``_native.c``), CONV_2D and DEPTHWISE_CONV_2D run there instead, each layer in
one call: the same sums over the centered input q - zp_in (a tap outside the input adds nothing, so the bias is
not folded) in int32, the integer output stage in int64. numpy copies every window and sums in float through
BLAS; in C a window is gathered once and summed in integers. The numpy path stays, computing the same numbers,
for an install without a C compiler and for layers outside the C kernels' integers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from imxrt.kernels.requantize import (
    INT8_MAX,
    INT8_MIN,
    OutputStage,
    integer_stage_constants,
    multiply_by_quantized_multiplier,
    prepare_output_stage,
    to_int8,
)
from imxrt.kernels.scratch import Scratch

try:
    from imxrt.kernels import _native
except ImportError:  # installed without a C compiler: the numpy path computes the same numbers, slower
    _native = None

# NHWC dimension positions
BATCH, HEIGHT, WIDTH, CHANNELS = 0, 1, 2, 3
FLOAT32_EXACT = 1 << 24
# _native.c: int32 sums of products of a centered int8 input (|q - zp_in| <= 255) and an int8 weight stay below
# 2**31 up to this many terms.
NATIVE_MAX_TERMS = 65793


def _exact_float(terms: int, max_abs_product: int) -> type:
    """The cheapest float type whose integer range holds any sum of ``terms`` products."""
    return np.float32 if terms * max_abs_product < FLOAT32_EXACT else np.float64


def _input_range(zero_point: int) -> tuple[int, int]:
    """The values a raw input (or its zero-point padding) can hold."""
    return min(INT8_MIN, int(zero_point)), max(INT8_MAX, int(zero_point))


def accumulator_range(weights: np.ndarray, input_min: int, input_max: int) -> tuple[np.ndarray, np.ndarray]:
    """Per output channel, the least and greatest sum_i w[c, i] * q_i over inputs q_i in [input_min,
    input_max]; ``weights`` is [C, K] integer."""
    w = weights.astype(np.int64)
    positive = np.where(w > 0, w, 0).sum(axis=1)
    negative = np.where(w < 0, w, 0).sum(axis=1)
    return positive * input_min + negative * input_max, positive * input_max + negative * input_min


def _sum_dtype(low: np.ndarray, high: np.ndarray) -> type:
    """float32 when no partial sum can reach 2**24: every partial sum lies between the sums of its negative
    and of its positive terms, which ``low`` / ``high`` bound."""
    bound = max(int(np.abs(low).max(initial=0)), int(np.abs(high).max(initial=0)))
    return np.float32 if bound < FLOAT32_EXACT else np.float64


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

    def native_form(self) -> tuple[int, ...]:
        """As ``_native.c`` takes a window: (filter_h, filter_w, stride_h, stride_w, dilation_h, dilation_w,
        pad_top, pad_left, out_h, out_w)."""
        return tuple(int(v) for v in (*self.filter_size, *self.stride, *self.dilation, *self.pad_before,
                                      *self.output_size))

    def padding(self, input_hw: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
        """((top, bottom), (left, right)): enough for every tap of every output position to be in range."""
        after = []
        for axis in (0, 1):
            needed = (self.output_size[axis] - 1) * self.stride[axis] \
                + (self.filter_size[axis] - 1) * self.dilation[axis] + 1
            after.append(max(needed - self.pad_before[axis] - input_hw[axis], 0))
        return (self.pad_before[0], after[0]), (self.pad_before[1], after[1])

    def padded(self, x: np.ndarray, value=0) -> np.ndarray:
        """``x`` (NHWC) padded with ``value`` so that every tap of every output position is in range."""
        (top, bottom), (left, right) = self.padding(x.shape[HEIGHT:CHANNELS])
        if not (top or left or bottom or right):
            return x
        batch, height, width, channels = x.shape
        padded = np.full((batch, top + height + bottom, left + width + right, channels), value, x.dtype)
        padded[:, top:top + height, left:left + width, :] = x
        return padded

    def windows(self, padded: np.ndarray) -> np.ndarray:
        """Every output position's window of ``padded``: a read-only view [N, out_h, out_w, kh, kw, C]."""
        batch_step, row_step, column_step, channel_step = padded.strides
        (stride_h, stride_w), (dilation_h, dilation_w) = self.stride, self.dilation
        return np.lib.stride_tricks.as_strided(
            padded, (padded.shape[BATCH], *self.output_size, *self.filter_size, padded.shape[CHANNELS]),
            (batch_step, row_step * stride_h, column_step * stride_w, row_step * dilation_h,
             column_step * dilation_w, channel_step), writeable=False)

    def tap(self, padded: np.ndarray, filter_y: int, filter_x: int) -> np.ndarray:
        """The strided view of ``padded`` that tap (filter_y, filter_x) reads for every output position."""
        out_h, out_w = self.output_size
        start_y, start_x = filter_y * self.dilation[0], filter_x * self.dilation[1]
        return padded[:, start_y:start_y + (out_h - 1) * self.stride[0] + 1:self.stride[0],
                      start_x:start_x + (out_w - 1) * self.stride[1] + 1:self.stride[1], :]


    def tap_rows(self, padded: np.ndarray) -> list[np.ndarray]:
        """Every tap's view of ``padded`` (kh * kw of them, row-major), each as [N, out_h, out_w * C] with
        contiguous rows: numpy then runs long inner loops instead of one per output pixel (C elements).
        With a horizontal stride, the padded columns are first split by phase (column mod stride), so that
        the columns a tap reads are adjacent."""
        stride_h, stride_w = self.stride
        dilation_h, dilation_w = self.dilation
        out_h, out_w = self.output_size
        batch, _, _, channels = padded.shape
        phases = {}
        views = []
        for filter_y in range(self.filter_size[0]):
            start_y = filter_y * dilation_h
            for filter_x in range(self.filter_size[1]):
                column = filter_x * dilation_w
                phase = column % stride_w
                if phase not in phases:
                    phases[phase] = padded if stride_w == 1 else np.ascontiguousarray(padded[:, :, phase::stride_w, :])
                first = column // stride_w
                view = phases[phase][:, start_y:start_y + (out_h - 1) * stride_h + 1:stride_h, first:first + out_w, :]
                views.append(view.reshape(batch, out_h, out_w * channels))
        return views


# Bounds of what the host's kernels take: they make one numpy pass per tap of a window, over a padded copy of
# the input (or, for TRANSPOSE_CONV, into an uncropped result). Far above any model for a microcontroller (a
# 512 x 512 window, a 128M-value tensor); a file beyond them would take unbounded time or memory.
MAX_WINDOW_TAPS = 1 << 18
MAX_PADDED_VALUES = 1 << 27


def check_steps(filter_hw, stride, dilation) -> None:
    """Filter sizes, strides and dilations must be at least 1 in both dimensions (raises ``ValueError``)."""
    for name, values in (("filter size", filter_hw), ("stride", stride), ("dilation", dilation)):
        if min(int(v) for v in values) < 1:
            raise ValueError(f"its {name} is {_hw(values)}; it must be at least 1")


def check_window(input_shape, filter_hw, stride, dilation, padding) -> None:
    """A window the kernels can slide over an NHWC input of ``input_shape`` padded by ``padding`` ((top, bottom),
    (left, right)): filter size, stride and dilation at least 1, padding at least 0, the dilated filter no
    larger than the padded input, at most ``MAX_WINDOW_TAPS`` taps and ``MAX_PADDED_VALUES`` padded values
    (raises ``ValueError`` saying which)."""
    check_steps(filter_hw, stride, dilation)
    if min(int(side) for pair in padding for side in pair) < 0:
        raise ValueError(f"its padding is {[list(pair) for pair in padding]}; it must be at least 0")
    batch, height, width, channels = (int(size) for size in input_shape)
    padded = tuple(size + int(before) + int(after) for size, (before, after) in zip((height, width), padding,
                                                                                    strict=True))
    dilated = tuple((int(f) - 1) * int(d) + 1 for f, d in zip(filter_hw, dilation, strict=True))
    if dilated[0] > padded[0] or dilated[1] > padded[1]:
        raise ValueError(f"its {_hw(dilated)} window (dilation {_hw(dilation)}) is larger than its "
                         f"{_hw(padded)} padded input")
    _check_work(int(filter_hw[0]) * int(filter_hw[1]), batch * padded[0] * padded[1] * channels,
                f"its {_hw(filter_hw)} window", f"its {_hw(padded)} padded input")


def check_transpose_window(input_shape, filter_hw, stride, pad_before, output_shape) -> None:
    """``check_window`` for TRANSPOSE_CONV: filter size and stride at least 1, padding at least 0, and its
    uncropped result ((input - 1) x stride + filter, or padding + output) within ``MAX_PADDED_VALUES``."""
    check_steps(filter_hw, stride, (1, 1))
    if min(int(p) for p in pad_before) < 0:
        raise ValueError(f"its padding is {_hw(pad_before)}; it must be at least 0")
    full = tuple(max((int(size) - 1) * int(s) + int(f), int(p) + int(out)) for size, s, f, p, out in zip(
        input_shape[HEIGHT:CHANNELS], stride, filter_hw, pad_before, output_shape[HEIGHT:CHANNELS], strict=True))
    _check_work(int(filter_hw[0]) * int(filter_hw[1]), int(input_shape[BATCH]) * full[0] * full[1]
                * int(output_shape[CHANNELS]), f"its {_hw(filter_hw)} window", f"its {_hw(full)} uncropped result")


def _check_work(taps: int, values: int, window: str, buffer: str) -> None:
    if taps > MAX_WINDOW_TAPS:
        raise ValueError(f"{window} has {taps:,} taps, more than the host's kernels take ({MAX_WINDOW_TAPS:,})")
    if values > MAX_PADDED_VALUES:
        raise ValueError(f"{buffer} holds {values:,} values, more than the host's kernels take "
                         f"({MAX_PADDED_VALUES:,})")


def _hw(values) -> str:
    return "x".join(str(int(v)) for v in values)


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


def _padded_values(x: np.ndarray, window: Window, zero_point: int, dtype: type, scratch: Scratch) -> np.ndarray:
    """``x`` as exact floats of ``dtype``, padded with the zero point (its centered value 0): one copy into a
    buffer kept from call to call, whose border was filled once."""
    (top, bottom), (left, right) = window.padding(x.shape[HEIGHT:CHANNELS])
    batch, height, width, channels = x.shape
    padded = scratch.get("padded", (batch, top + height + bottom, left + width + right, channels), dtype,
                         fill=zero_point)
    np.copyto(padded[:, top:top + height, left:left + width, :], x)
    return padded


@dataclass(frozen=True)
class ConvParams:
    window: Window
    weights: np.ndarray  # [K = kh * kw * C_in, C_out] float (exact integers), rows in (filter_y, filter_x, c) order
    input_zero_point: int
    output: OutputStage  # the bias folded with -zp_in * sum_tap w, MBQM, zp_out, clamp
    scratch: Scratch = field(default_factory=Scratch, repr=False, compare=False)
    native: object | None = field(default=None, repr=False, compare=False)  # _native.Convolution, when built


def prepare_conv(filters: np.ndarray, bias: np.ndarray | None, window: Window, input_zero_point: int,
                 multipliers, shifts, output_zero_point: int, act_min: int, act_max: int,
                 native: bool = True) -> ConvParams:
    """``filters`` OHWI int8. ``native``: run in the C extension when it is built and the layer fits its
    integers (``_centered_stage``); False keeps the numpy path."""
    out_channels = filters.shape[0]
    by_channel = filters.reshape(out_channels, -1).astype(np.int64)
    low, high = accumulator_range(by_channel, *_input_range(input_zero_point))
    bias = np.zeros(out_channels, np.int64) if bias is None else bias.astype(np.int64)
    folded = bias - int(input_zero_point) * by_channel.sum(axis=1)
    output = prepare_output_stage(multipliers, shifts, folded, low, high, output_zero_point, act_min, act_max)
    weights = np.ascontiguousarray(by_channel.T.astype(_sum_dtype(low, high)))
    layer = None
    stage = _centered_stage(by_channel, bias, input_zero_point, multipliers, shifts, act_min, act_max) if native \
        else None
    if stage is not None:
        layer = _native.Convolution(np.ascontiguousarray(filters, dtype=np.int8), int(filters.shape[3]),
                                    window.native_form(), int(input_zero_point), *stage, int(output_zero_point),
                                    int(act_min), int(act_max))
    return ConvParams(window, weights, int(input_zero_point), output, native=layer)


def _centered_stage(by_channel: np.ndarray, bias: np.ndarray, input_zero_point: int, multipliers, shifts,
                    act_min: int, act_max: int) -> tuple[np.ndarray, ...] | None:
    """The C kernels' output stage constants for sums of w[c, i] (q_i - zp_in) (``by_channel`` [C, terms]
    integer, the bias not folded), or None when the extension is not built or the layer is outside what its
    integers hold: an input zero point or a weight outside int8, more than ``NATIVE_MAX_TERMS`` terms, an output
    stage value reaching 2**63 or a clamp outside int8 (``integer_stage_constants``)."""
    if _native is None or not INT8_MIN <= int(input_zero_point) <= INT8_MAX:
        return None
    if (by_channel.shape[1] > NATIVE_MAX_TERMS or by_channel.min(initial=0) < INT8_MIN
            or by_channel.max(initial=0) > INT8_MAX):
        return None
    low, high = accumulator_range(by_channel, INT8_MIN - int(input_zero_point), INT8_MAX - int(input_zero_point))
    return integer_stage_constants(bias, multipliers, shifts, low, high, by_channel.shape[0], act_min, act_max)


def conv2d(x: np.ndarray, params: ConvParams) -> np.ndarray:
    """NHWC int8 -> NHWC int8: the C kernel where it is built, else im2col (every window copied, as one strided
    copy) and one matmul."""
    window = params.window
    batch, (out_h, out_w) = x.shape[BATCH], window.output_size
    if params.native is not None:
        out = np.empty((batch, out_h, out_w, params.weights.shape[1]), np.int8)
        params.native.run(np.ascontiguousarray(x), out)
        return out
    weights = params.weights
    padded = _padded_values(x, window, params.input_zero_point, weights.dtype, params.scratch)
    positions = batch * out_h * out_w
    if window.filter_size == (1, 1) and window.stride == (1, 1) and padded.shape[1:3] == (out_h, out_w):
        columns = padded.reshape(positions, -1)  # a pointwise conv reads the input as it is
    else:
        columns = params.scratch.get("columns", (positions, weights.shape[0]), weights.dtype)
        np.copyto(columns.reshape(batch, out_h, out_w, *window.filter_size, -1), window.windows(padded))
    acc = params.scratch.get("acc", (positions, weights.shape[1]), weights.dtype)
    np.matmul(columns, weights, out=acc)
    return params.output(acc).reshape(batch, out_h, out_w, -1)


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
    # Derived when constructed: the weights as exact floats (one row of out_w * C_out per tap, to match
    # ``Window.tap_rows``), the output stage with the folded bias, and the layer in C where the extension is
    # built and the layer fits its integers (``_centered_stage``).
    taps: np.ndarray = field(init=False, repr=False, compare=False)  # float[kh, kw, C_out]
    row_taps: np.ndarray = field(init=False, repr=False, compare=False)  # float[kh * kw, out_w * C_out]
    output: OutputStage = field(init=False, repr=False, compare=False)
    scratch: Scratch = field(init=False, repr=False, compare=False)
    native: object | None = field(init=False, repr=False, compare=False)  # _native.DepthwiseConvolution

    def __post_init__(self):
        filter_h, filter_w, out_channels = self.weights.shape
        by_channel = self.weights.reshape(filter_h * filter_w, out_channels).T.astype(np.int64)
        stage = _centered_stage(by_channel, np.asarray(self.bias, np.int64), self.input_zero_point, self.multipliers,
                                self.shifts, self.act_min, self.act_max)
        layer = None
        if stage is not None and out_channels == self.depth_multiplier:  # one input channel: a convolution
            layer = _native.Convolution(np.ascontiguousarray(self.weights.transpose(2, 0, 1)[..., None], np.int8), 1,
                                        self.window.native_form(), int(self.input_zero_point), *stage,
                                        int(self.output_zero_point), int(self.act_min), int(self.act_max))
        elif stage is not None:
            layer = _native.DepthwiseConvolution(
                np.ascontiguousarray(self.weights, dtype=np.int8), int(self.depth_multiplier),
                self.window.native_form(), int(self.input_zero_point), *stage, int(self.output_zero_point),
                int(self.act_min), int(self.act_max))
        object.__setattr__(self, "native", layer)
        low, high = accumulator_range(by_channel, *_input_range(self.input_zero_point))
        folded = np.asarray(self.bias, np.int64) - int(self.input_zero_point) * by_channel.sum(axis=1)
        taps = self.weights.astype(_sum_dtype(low, high))
        object.__setattr__(self, "taps", taps)
        object.__setattr__(self, "row_taps", np.tile(taps, (1, 1, self.window.output_size[1])).reshape(
            filter_h * filter_w, -1))
        object.__setattr__(self, "scratch", Scratch())
        object.__setattr__(self, "output", prepare_output_stage(
            self.multipliers, self.shifts, folded, low, high, self.output_zero_point, self.act_min, self.act_max))


SUMMED_WINDOWS = 256  # up to this many output positions, one einsum over the windows beats a loop over taps


def depthwise_conv2d(x: np.ndarray, params: DepthwiseParams) -> np.ndarray:
    """Output channel c reads input channel c // depth_multiplier. Few output positions: one einsum over the
    windows (few numpy calls); many: one multiply-add per tap over every output position (rows of
    out_w * C values, see ``Window.tap_rows``), in place."""
    window = params.window
    if params.native is not None:
        out = np.empty((x.shape[BATCH], *window.output_size, params.taps.shape[-1]), np.int8)
        params.native.run(np.ascontiguousarray(x), out)
        return out
    padded = _padded_values(x, window, params.input_zero_point, params.taps.dtype, params.scratch)
    if params.depth_multiplier > 1:
        padded = np.repeat(padded, params.depth_multiplier, axis=CHANNELS)
    batch, (out_h, out_w), channels = x.shape[BATCH], window.output_size, params.taps.shape[-1]
    if out_h * out_w <= SUMMED_WINDOWS:
        acc = params.scratch.get("acc", (batch, out_h, out_w, channels), params.taps.dtype)
        np.einsum("nhwijc,ijc->nhwc", window.windows(padded), params.taps, out=acc)
        return params.output(acc)
    shape = (batch, out_h, out_w * channels)
    acc = params.scratch.get("acc", shape, params.taps.dtype)
    term = params.scratch.get("term", shape, params.taps.dtype)
    for tap, (view, weights) in enumerate(zip(window.tap_rows(padded), params.row_taps, strict=True)):
        if tap == 0:
            np.multiply(view, weights, out=acc)
        else:
            np.multiply(view, weights, out=term)
            acc += term
    return params.output(acc.reshape(batch, out_h, out_w, channels))


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
