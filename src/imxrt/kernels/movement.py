"""Data movement on int8 (or any dtype): PAD / PADV2 / MIRROR_PAD, TRANSPOSE, RESHAPE, SLICE, STRIDED_SLICE,
CONCATENATION, SPLIT, RESIZE_NEAREST_NEIGHBOR and RESIZE_BILINEAR (TFLM reference kernels).

Only the two resizes compute: nearest picks source indices with TFLite's float32 formula, bilinear
interpolates in 10-bit fixed point and rounds half away from zero (reference_ops::ResizeBilinearInteger).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from imxrt.kernels.requantize import round_half_away

# NHWC dimension positions
BATCH, HEIGHT, WIDTH, CHANNELS = 0, 1, 2, 3


def pad(x: np.ndarray, paddings: tuple[tuple[int, int], ...], value: int) -> np.ndarray:
    """Constant padding (non-negative amounts), as one fill and one copy (``np.pad`` costs several times more)."""
    shape = tuple(size + before + after for size, (before, after) in zip(x.shape, paddings, strict=True))
    padded = np.full(shape, value, x.dtype)
    padded[tuple(slice(before, before + size) for size, (before, _) in zip(x.shape, paddings, strict=True))] = x
    return padded


def mirror_pad(x: np.ndarray, paddings: tuple[tuple[int, int], ...], symmetric: bool) -> np.ndarray:
    return np.pad(x, paddings, mode="symmetric" if symmetric else "reflect")


def transpose(x: np.ndarray, perm: tuple[int, ...]) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(perm))


def reshape(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return x.reshape(shape)


def slice_(x: np.ndarray, index: tuple[slice, ...]) -> np.ndarray:
    return np.ascontiguousarray(x[index])


def strided_slice_index(shape, begin, end, strides, begin_mask: int, end_mask: int, shrink_axis_mask: int,
                        offset: bool = False) -> tuple[tuple, tuple[int, ...]]:
    """The numpy index of a STRIDED_SLICE (no ellipsis / new-axis masks) and the axes it shrinks."""
    index, shrink = [], []
    for axis, size in enumerate(shape):
        b, e, s = int(begin[axis]), int(end[axis]), int(strides[axis])
        if offset:
            e = b + e
        if shrink_axis_mask >> axis & 1:
            b = b + size if b < 0 else b
            index.append(slice(b, b + 1, 1))
            shrink.append(axis)
            continue
        start = None if begin_mask >> axis & 1 else b
        stop = None if end_mask >> axis & 1 else e
        index.append(slice(start, stop, s))
    return tuple(index), tuple(shrink)


def strided_slice(x: np.ndarray, index: tuple, shrink: tuple[int, ...]) -> np.ndarray:
    result = x[index]
    return np.ascontiguousarray(result.squeeze(axis=shrink) if shrink else result)


def concatenation(xs: list[np.ndarray], axis: int) -> np.ndarray:
    return np.concatenate(xs, axis=axis)


def split(x: np.ndarray, sizes: tuple[int, ...], axis: int) -> list[np.ndarray]:
    bounds = np.cumsum(sizes)[:-1]
    return [np.ascontiguousarray(part) for part in np.split(x, bounds, axis=axis)]


def nearest_indices(input_size: int, output_size: int, align_corners: bool, half_pixel_centers: bool
                    ) -> np.ndarray:
    """reference_ops GetNearestNeighbor for every output index, in float32 as TFLite computes it."""
    if align_corners and output_size > 1:
        scale = np.float32(input_size - 1) / np.float32(output_size - 1)
    else:
        scale = np.float32(input_size) / np.float32(output_size)
    offset = np.float32(0.5 if half_pixel_centers else 0.0)
    positions = (np.arange(output_size, dtype=np.float32) + offset) * scale
    source = round_half_away(positions) if align_corners else np.floor(positions)
    source = np.minimum(source.astype(np.int64), input_size - 1)
    return np.maximum(source, 0) if half_pixel_centers else source


def resize_nearest(x: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x[:, rows][:, :, cols])


@dataclass(frozen=True)
class BilinearAxis:
    """Per output index along one axis: the two source indices and their 10-bit weights."""

    lower: np.ndarray
    upper: np.ndarray
    weight_lower: np.ndarray  # 1024 - (scaled - 1024 * lower)
    weight_upper: np.ndarray  # scaled - 1024 * lower


def _c_div(a, b):
    return np.sign(a) * (np.abs(a) // b)


def bilinear_axis(input_size: int, output_size: int, align_corners: bool, half_pixel_centers: bool
                  ) -> BilinearAxis:
    """ComputeInterpolationValuesInteger with scale_10 = round(1024 in / out) (align_corners: (in-1)/(out-1))."""
    scale_10 = ((1 << 10) * input_size + output_size // 2) // output_size
    if align_corners and output_size > 1:
        scale_10 = ((1 << 10) * (input_size - 1) + (output_size - 1) // 2) // (output_size - 1)
    index = np.arange(output_size, dtype=np.int64)
    scaled = index * scale_10 + (scale_10 // 2 - (1 << 9) if half_pixel_centers else 0)
    lower = np.maximum(_c_div(scaled, 1 << 10), 0)
    upper = np.minimum(_c_div(scaled + (1 << 10) - 1, 1 << 10), input_size - 1)
    fraction = scaled - (1 << 10) * lower
    return BilinearAxis(lower, upper, (1 << 10) - fraction, fraction)


def resize_bilinear(x: np.ndarray, rows: BilinearAxis, cols: BilinearAxis) -> np.ndarray:
    """out = (sum of the four neighbours * their weight products + 2**19 sign) / 2**20 (C division)."""
    values = x.astype(np.int64)
    top, bottom = values[:, rows.lower], values[:, rows.upper]
    wy_top = rows.weight_lower[None, :, None, None]
    wy_bottom = rows.weight_upper[None, :, None, None]
    wx_left = cols.weight_lower[None, None, :, None]
    wx_right = cols.weight_upper[None, None, :, None]
    output_20 = (top[:, :, cols.lower] * wy_top * wx_left + bottom[:, :, cols.lower] * wy_bottom * wx_left
                 + top[:, :, cols.upper] * wy_top * wx_right + bottom[:, :, cols.upper] * wy_bottom * wx_right)
    rounded = output_20 + np.where(output_20 > 0, 1 << 19, -(1 << 19))
    return _c_div(rounded, 1 << 20).astype(x.dtype)
