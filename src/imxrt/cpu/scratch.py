"""CMSIS-NN scratch-buffer sizes per ISA: the bytes of each cortex_m op's ``scratch`` alloc (CPU lowering).

A cortex_m op that needs working memory takes it as trailing ``uint8[N]`` tensors, memory-planned for the
op's lifetime. With runtime checks on, the device kernel compares N with CMSIS-NN's own
``arm_*_get_buffer_size`` for the path it was built for, so N here must be that number exactly: these
functions restate those formulas, one per kernel, and dispatch on the ``Isa`` where the formulas differ.

Conventions: shapes are NHWC tuples of ints (``input_nhwc = (N, H, W, C)``); ``stride``, ``padding`` and
``dilation`` are ``(h, w)`` pairs as the cortex_m ops take them (``padding`` is the symmetric pad before
each spatial dimension). ``K = kh*kw*C_in`` is one im2col column, ``A4(x)`` rounds ``x`` up to a multiple
of 4. The device toolchain is GCC or clang; where Arm Compiler 6 would change a size, the docstring says
so. Example (checked by the tests)::

    >>> conv2d_scratch_bytes(Isa.DSP, (1, 32, 32, 3), (16, 3, 3, 3), (1, 32, 32, 16), (1, 1), (1, 1), (1, 1))
    112
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from imxrt.cpu.isa import Isa

Nhwc = tuple[int, int, int, int]
Pair = tuple[int, int]  # (h, w)

_MVE_DEPTHWISE_CHANNEL_BLOCK = 124  # CH_IN_BLOCK_MVE: channels arm_depthwise_conv_s8_opt keeps in flight
_REVERSE_CONV_MIN_CHANNELS = 17  # REVERSE_TCOL_EFFICIENT_THRESHOLD is 16: the reverse conv pays off above it


def _align4(x: int) -> int:
    return (x + 3) // 4 * 4


def _c_div(a: int, b: int) -> int:
    """C's integer division (truncates toward zero), which the 1xN formula relies on for negative pads."""
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b > 0) else -quotient


def _c_rem(a: int, b: int) -> int:
    """C's ``%``: the sign follows the dividend."""
    return a - b * _c_div(a, b)


# --- im2col: arm_convolve_s8_get_buffer_size ---------------------------------------------------------------


def _im2col_q15_bytes(column: int) -> int:
    """Two im2col columns widened to int16: ``2 * A4(K) * sizeof(int16) = 4 * A4(K)`` (plain C and DSP)."""
    return 4 * _align4(column)


def _im2col_mve_bytes(column: int) -> int:
    """Four im2col columns of int8, each padded to whole 16-byte Q registers: ``4 * 16 * ceil(K / 16)``."""
    return 64 * ((column + 15) // 16)


_IM2COL_BYTES: dict[Isa, Callable[[int], int]] = {
    Isa.SCALAR: _im2col_q15_bytes,
    Isa.DSP: _im2col_q15_bytes,
    Isa.MVE: _im2col_mve_bytes,
}


def _im2col_bytes(isa: Isa, input_channels: int, kernel_h: int, kernel_w: int) -> int:
    return _IM2COL_BYTES[isa](kernel_h * kernel_w * input_channels)


# --- convolution: arm_convolve_wrapper_s8_get_buffer_size --------------------------------------------------


class ConvKernel(enum.Enum):
    """The kernel ``arm_convolve_wrapper_s8`` dispatches to (and whose buffer size it reports)."""

    ONE_BY_ONE_FAST = "arm_convolve_1x1_s8_fast"  # 1x1, pad 0, stride 1, dilation 1
    ONE_BY_ONE = "arm_convolve_1x1_s8"  # 1x1, pad 0, dilation 1, strided
    ONE_BY_N = "arm_convolve_1_x_n_s8"  # one input row, kh = 1, dilation_w 1, stride_w*C_in % 4 == 0
    IM2COL = "arm_convolve_s8"  # everything else, grouped convolutions included


def conv2d_kernel(input_nhwc: Nhwc, filter_ohwi: Nhwc, stride: Pair, padding: Pair, dilation: Pair) -> ConvKernel:
    """Which CMSIS-NN kernel runs a convolution; the same on every ISA. Grouped (``filter C < input C``)
    convolutions always take the im2col kernel."""
    _, input_h, _, input_c = input_nhwc
    _, kernel_h, kernel_w, filter_c = filter_ohwi
    stride_h, stride_w = stride
    pad_h, pad_w = padding
    dilation_h, dilation_w = dilation
    ungrouped = filter_c == input_c
    if ungrouped and (pad_h, pad_w, kernel_h, kernel_w, dilation_h, dilation_w) == (0, 0, 1, 1, 1, 1):
        return ConvKernel.ONE_BY_ONE_FAST if (stride_h, stride_w) == (1, 1) else ConvKernel.ONE_BY_ONE
    if ungrouped and input_h == 1 and kernel_h == 1 and dilation_w == 1 and (stride_w * input_c) % 4 == 0:
        return ConvKernel.ONE_BY_N
    return ConvKernel.IM2COL


def _conv_1xn_mve_bytes(input_w: int, input_c: int, kernel_w: int, output_w: int, stride_w: int, pad_w: int) -> int:
    """The row buffer of the Helium 1xN kernel, which runs the left-padded, unpadded and right-padded output
    columns separately::

        total_pad = (W_out - 1)*stride_w + kw - W_in;  asym = total_pad % 2   (C remainder)
        right = max(1, ceil((pad_w + asym) / stride_w)) if pad_w + asym else 0
        left  = max(1, ceil(pad_w / stride_w)) if pad_w else 0
        if right + left + max(W_out - right - left, 0) != W_out:  the im2col size instead
        bytes = max(kw*C + pad_w*C, (kw - 1)*C + (right*C if asym else pad_w*C))
    """
    total_pad = (output_w - 1) * stride_w + kernel_w - input_w
    asym_pad = _c_rem(total_pad, 2)
    right_columns = max(1, _c_div(pad_w + asym_pad + stride_w - 1, stride_w)) if pad_w + asym_pad != 0 else 0
    left_columns = max(1, _c_div(pad_w + stride_w - 1, stride_w)) if pad_w != 0 else 0
    unpadded_columns = max(output_w - (right_columns + left_columns), 0)
    if right_columns + unpadded_columns + left_columns != output_w:
        return _im2col_mve_bytes(kernel_w * input_c)
    pad_left = pad_w * input_c
    pad_right = right_columns * input_c if asym_pad else pad_left
    return max(kernel_w * input_c + pad_left, (kernel_w - 1) * input_c + pad_right)


def conv2d_scratch_bytes(
    isa: Isa,
    input_nhwc: Nhwc,
    filter_ohwi: Nhwc,
    output_nhwc: Nhwc,
    stride: Pair,
    padding: Pair,
    dilation: Pair,
) -> int:
    """Scratch of ``quantized_conv2d`` (``arm_convolve_wrapper_s8``), per kernel (``conv2d_kernel``):

    - 1x1 fast: 0 (GCC/clang; a DSP build by Arm Compiler 6 would need ``4 * C_in``); 1x1 strided: 0.
    - 1xN: on SCALAR and DSP the im2col size; on MVE the row buffer of ``_conv_1xn_mve_bytes``.
    - im2col: ``4 * A4(K)`` on SCALAR and DSP, ``64 * ceil(K / 16)`` on MVE, with ``K = kh*kw*C_in`` (the
      input's channels, also for grouped convolutions).
    """
    kernel = conv2d_kernel(input_nhwc, filter_ohwi, stride, padding, dilation)
    _, _, input_w, input_c = input_nhwc
    _, kernel_h, kernel_w, _ = filter_ohwi
    if kernel in (ConvKernel.ONE_BY_ONE_FAST, ConvKernel.ONE_BY_ONE):
        return 0
    if kernel is ConvKernel.ONE_BY_N and isa is Isa.MVE:
        return _conv_1xn_mve_bytes(input_w, input_c, kernel_w, output_nhwc[2], stride[1], padding[1])
    return _im2col_bytes(isa, input_c, kernel_h, kernel_w)


# --- depthwise: arm_depthwise_conv_wrapper_s8_get_buffer_size ----------------------------------------------


def _depthwise_scalar_bytes(input_nhwc: Nhwc, kernel: Pair, output_c: int, padding: Pair, dilation: Pair) -> int:
    """Plain C depthwise kernels need no buffer: 0."""
    return 0


def _depthwise_dsp_bytes(input_nhwc: Nhwc, kernel: Pair, output_c: int, padding: Pair, dilation: Pair) -> int:
    """With ``C_out == C_in``, batch 1 and dilation 1: 0 for 3x3 with pads <= 1 (``arm_depthwise_conv_3x3_s8``),
    else ``2 * C_in * kh * kw`` (``arm_depthwise_conv_s8_opt`` widens one patch to int16). Otherwise 0."""
    batch, _, _, input_c = input_nhwc
    if not (input_c == output_c and batch == 1 and dilation == (1, 1)):
        return 0
    if kernel == (3, 3) and max(padding) <= 1:
        return 0
    return 2 * input_c * kernel[0] * kernel[1]


def _depthwise_mve_bytes(input_nhwc: Nhwc, kernel: Pair, output_c: int, padding: Pair, dilation: Pair) -> int:
    """With ``C_out == C_in``, batch 1 and dilation 1: ``4 * 124 * kh * kw`` (``arm_depthwise_conv_s8_opt``,
    blocks of 124 channels). With ``C_in == 1`` and ``C_out > 1``, run as a convolution: its im2col size for
    ``K = kh*kw`` plus ``C_out * kh * kw`` for the reordered weights. Otherwise 0."""
    batch, _, _, input_c = input_nhwc
    kernel_h, kernel_w = kernel
    if input_c == output_c and batch == 1 and dilation == (1, 1):
        return 4 * _MVE_DEPTHWISE_CHANNEL_BLOCK * kernel_h * kernel_w
    if input_c == 1 and output_c > 1:
        return _im2col_mve_bytes(kernel_h * kernel_w) + output_c * kernel_h * kernel_w
    return 0


_DEPTHWISE_BYTES: dict[Isa, Callable[[Nhwc, Pair, int, Pair, Pair], int]] = {
    Isa.SCALAR: _depthwise_scalar_bytes,
    Isa.DSP: _depthwise_dsp_bytes,
    Isa.MVE: _depthwise_mve_bytes,
}


def depthwise_conv2d_scratch_bytes(
    isa: Isa,
    input_nhwc: Nhwc,
    filter_shape: Nhwc,
    output_nhwc: Nhwc,
    stride: Pair,
    padding: Pair,
    dilation: Pair,
) -> int:
    """Scratch of ``quantized_depthwise_conv2d``; ``filter_shape`` is its weight layout ``(1, kh, kw, C_out)``.
    The size does not depend on the stride. Per ISA see ``_depthwise_scalar_bytes``, ``_depthwise_dsp_bytes``
    and ``_depthwise_mve_bytes``."""
    _, kernel_h, kernel_w, _ = filter_shape
    return _DEPTHWISE_BYTES[isa](
        tuple(input_nhwc), (kernel_h, kernel_w), output_nhwc[3], tuple(padding), tuple(dilation)
    )


# --- transpose convolution: arm_transpose_conv_s8_get_buffer_size and _get_reverse_conv_buffer_size --------


def _uses_reverse_conv(input_c: int, stride: Pair) -> bool:
    """``arm_transpose_conv_wrapper_s8`` runs a convolution over the zero-stuffed input when both strides are
    at most 2 and more than 16 input channels make that cheaper than scattering products."""
    return max(stride) <= 2 and input_c >= _REVERSE_CONV_MIN_CHANNELS


def transpose_conv2d_scratch_bytes(
    isa: Isa,
    input_nhwc: Nhwc,
    filter_shape: Nhwc,
    output_nhwc: Nhwc,
    stride: Pair,
    padding: Pair,
) -> tuple[int, int]:
    """``(scratch, output_scratch)`` of ``quantized_transpose_conv2d``; ``filter_shape`` is its weight layout
    ``(C_out, kh, kw, C_in)``. Padding does not enter either size.

    Reverse-conv path (``_uses_reverse_conv``): scratch is the im2col size of the convolution over the
    zero-stuffed input, ``4 * A4(K)`` (``64 * ceil(K / 16)`` on MVE) with ``K = kh*kw*C_in``, and
    output_scratch holds the reversed weights, ``C_in * kh * kw * C_out``. Otherwise scratch is an int32
    accumulator band ``((W - 1)*stride_w + max(kw, stride_h)) * C_out * max(kh, stride_h) * 4`` on every ISA
    (CMSIS-NN takes ``stride_h`` in the width term too) and output_scratch is 0.
    """
    _, _, input_w, input_c = input_nhwc
    filter_out, kernel_h, kernel_w, _ = filter_shape
    stride_h, stride_w = stride
    if _uses_reverse_conv(input_c, stride):
        return _im2col_bytes(isa, input_c, kernel_h, kernel_w), input_c * kernel_w * kernel_h * filter_out
    band_w = ((input_w - 1) * stride_w + max(kernel_w, stride_h)) * output_nhwc[3]
    band_h = max(kernel_h, stride_h)
    return band_w * band_h * 4, 0


# --- fully connected, batch matmul, average pool -----------------------------------------------------------

# Helium kernels keep one int32 per output column (arm_fully_connected_s8_get_buffer_size_mve); the others
# need nothing.
_FULLY_CONNECTED_BYTES_PER_OUTPUT: dict[Isa, int] = {Isa.SCALAR: 0, Isa.DSP: 0, Isa.MVE: 4}


def fully_connected_scratch_bytes(isa: Isa, in_features: int, out_features: int) -> int:
    """Scratch of ``arm_fully_connected_s8``: ``4 * out_features`` on MVE, else 0 (``in_features`` does not
    enter). The stock ``quantized_linear`` takes no scratch tensor: on MVE its kernel sums come as the
    constant ``kernel_sum`` instead."""
    return _FULLY_CONNECTED_BYTES_PER_OUTPUT[isa] * out_features


def batch_matmul_scratch_bytes(isa: Isa, lhs_shape: tuple[int, ...], rhs_transposed_shape: tuple[int, ...]) -> int:
    """Scratch of ``quantized_batch_matmul`` (``lhs [B, M, K]``, ``rhs_transposed [B, N, K]``): the fully
    connected size for ``N`` output columns, ``4 * N`` on MVE, else 0."""
    return fully_connected_scratch_bytes(isa, rhs_transposed_shape[-1], rhs_transposed_shape[-2])


# The DSP kernel sums one output pixel's window in int32 per channel (arm_avgpool_s8_get_buffer_size_dsp).
_AVG_POOL_BYTES_PER_CHANNEL: dict[Isa, int] = {Isa.SCALAR: 0, Isa.DSP: 4, Isa.MVE: 0}


def avg_pool2d_scratch_bytes(
    isa: Isa, input_nhwc: Nhwc, output_nhwc: Nhwc, kernel: Pair, stride: Pair, padding: Pair
) -> int:
    """Scratch of ``quantized_avg_pool2d`` (``arm_avgpool_s8``): ``4 * C`` on DSP, else 0. Only the channel
    count enters."""
    return _AVG_POOL_BYTES_PER_CHANNEL[isa] * input_nhwc[3]


# --- which ops take scratch ---------------------------------------------------------------------------------

# Trailing scratch arguments of every op of the stock cortex_m library, by op name.
SCRATCH_ARGUMENTS: dict[str, tuple[str, ...]] = {
    "quantized_conv2d": ("scratch",),
    "quantized_conv2d_nhwc": ("scratch",),
    "quantized_depthwise_conv2d": ("scratch",),
    "quantized_depthwise_conv2d_nhwc": ("scratch",),
    "quantized_transpose_conv2d": ("scratch", "output_scratch"),
    "quantized_transpose_conv2d_nhwc": ("scratch", "output_scratch"),
    "quantized_avg_pool2d": ("scratch",),
    "quantized_avg_pool2d_nhwc": ("scratch",),
    "quantized_batch_matmul": ("scratch",),
    "quantized_max_pool2d": (),
    "quantized_max_pool2d_nhwc": (),
    "quantized_linear": (),  # MVE kernel sums are a constant input, not scratch
    "softmax": (),
    "quantized_add": (),
    "quantized_mul": (),
    "quantized_div": (),
    "pad": (),
    "transpose": (),
    "minimum": (),
    "maximum": (),
    "quantized_activation": (),
    "quantize_per_tensor": (),
    "dequantize_per_tensor": (),
}


def needs_scratch(op_name: str) -> bool:
    """Whether the cortex_m op ``op_name`` (e.g. ``"quantized_conv2d"``) takes scratch tensors."""
    try:
        return bool(SCRATCH_ARGUMENTS[op_name])
    except KeyError:
        raise KeyError(f"{op_name!r} is not a cortex_m op; known: {', '.join(sorted(SCRATCH_ARGUMENTS))}") from None
