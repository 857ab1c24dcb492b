"""AVERAGE_POOL_2D and MAX_POOL_2D on NHWC int8 (TFLM reference_integer_ops pooling).

Average: sum of the window taps inside the input divided by their count, rounded half away from zero:
    q_out = clamp((sum + sign(sum) * (count / 2)) / count)   (C division, truncating)
Max: the largest tap inside the input, clamped to the fused activation range. No requantization in either:
input and output share qparams. Where the C extension is built (``_native.c``), both run there (one pass over
the input instead of one numpy pass per tap); the numpy path computes the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from imxrt.kernels.conv import BATCH, CHANNELS, Window

try:
    from imxrt.kernels import _native
except ImportError:  # installed without a C compiler: the numpy path computes the same numbers, slower
    _native = None


def pool_output_size(in_size: int, kernel: int, stride: int, padding: int, dilation: int, ceil_mode: bool
                     ) -> int:
    """PyTorch's pooling size: ceil_mode rounds up, but a last window starting in the right padding is
    dropped (pooling_output_shape in ATen). The cortex_m ops' shapes, the CPU lowering and the LiteRT pool
    converters all size a pool's output with it."""
    span = in_size + 2 * padding - dilation * (kernel - 1) - 1
    size = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (size - 1) * stride >= in_size + padding:
        size -= 1
    return size


@dataclass(frozen=True)
class PoolParams:
    window: Window
    counts: np.ndarray  # int64[1, out_h, out_w, 1]: taps inside the input per output position
    act_min: int
    act_max: int
    whole_input: bool = False  # one output position whose window is exactly the input
    native: object | None = field(default=None, repr=False, compare=False)  # _native.Pool, when built


def prepare_pool(window: Window, input_hw: tuple[int, int], act_min: int, act_max: int, native: bool = True
                 ) -> PoolParams:
    """``native``: run in the C extension when it is built; False keeps the numpy path."""
    ones = np.ones((1, input_hw[0], input_hw[1], 1), np.int64)
    padded = window.padded(ones)
    filter_h, filter_w = window.filter_size
    counts = sum(window.tap(padded, filter_y, filter_x) for filter_y in range(filter_h)
                 for filter_x in range(filter_w))
    if not np.all(counts > 0):  # TFLM fails such a model; the average would divide by zero
        raise ValueError("a window of the pool covers only padding, no input value")
    whole_input = window.output_size == (1, 1) and int(counts.reshape(-1)[0]) == input_hw[0] * input_hw[1]
    layer = _native.Pool(window.native_form(), int(act_min), int(act_max)) if native and _native is not None else None
    return PoolParams(window, counts, act_min, act_max, whole_input, native=layer)


def _native_result(x: np.ndarray, params: PoolParams) -> tuple[np.ndarray, np.ndarray]:
    """(x as the C kernel reads it, the array it writes)."""
    return np.ascontiguousarray(x), np.empty((x.shape[BATCH], *params.window.output_size, x.shape[CHANNELS]),
                                             np.int8)


def average_pool(x: np.ndarray, params: PoolParams) -> np.ndarray:
    if params.native is not None:
        x, out = _native_result(x, params)
        params.native.average(x, out)
        return out
    window = params.window
    if params.whole_input:  # one window over all of H x W (a global average): a single reduction
        total = x.sum(axis=(1, 2), keepdims=True, dtype=np.int64)
    else:
        padded = window.padded(x.astype(np.int32))
        filter_h, filter_w = window.filter_size
        total = sum(window.tap(padded, filter_y, filter_x) for filter_y in range(filter_h)
                    for filter_x in range(filter_w)).astype(np.int64)
    half = params.counts // 2
    numerator = np.where(total > 0, total + half, total - half)
    average = np.sign(numerator) * (np.abs(numerator) // params.counts)
    return np.clip(average, params.act_min, params.act_max).astype(np.int8)


def max_pool(x: np.ndarray, params: PoolParams) -> np.ndarray:
    if params.native is not None:
        x, out = _native_result(x, params)
        params.native.maximum(x, out)
        return out
    window = params.window
    padded = window.padded(x, value=np.iinfo(x.dtype).min)  # every window has an input tap
    filter_h, filter_w = window.filter_size
    result = None
    for filter_y in range(filter_h):
        for filter_x in range(filter_w):
            tap = window.tap(padded, filter_y, filter_x)
            result = tap if result is None else np.maximum(result, tap)
    return np.clip(result, params.act_min, params.act_max).astype(x.dtype)
