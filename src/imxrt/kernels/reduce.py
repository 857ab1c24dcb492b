"""MEAN, SUM, REDUCE_MAX, REDUCE_MIN over int8 (TFLM reduce_common.cc + reference_ops reduce.h).

MEAN: M = s_in / s_out folded with 1 / count (shift = min(floor(log2 count), 32, 31 + shift_M),
    M' = (M << shift) / count, shift' = shift_M - shift), then q_out = MBQM(sum - zp_in * count, M', shift') + zp_out.
SUM: q_out = MBQM(sum - zp_in * count, M, shift_M) + zp_out.
REDUCE_MAX / REDUCE_MIN: raw values (shared qparams).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from imxrt.kernels.requantize import INT8_MAX, INT8_MIN, multiply_by_quantized_multiplier, quantize_multiplier_scalar


@dataclass(frozen=True)
class ReduceParams:
    axes: tuple[int, ...]  # resolved, non-negative, unique
    keep_dims: bool
    count: int  # elements reduced into each output
    input_zero_point: int
    output_zero_point: int
    multiplier: int
    shift: int


def prepare_reduce(axes, rank: int, input_shape, keep_dims: bool, input_scale: float, input_zero_point: int,
                   output_scale: float, output_zero_point: int, mean: bool) -> ReduceParams:
    resolved = tuple(sorted({int(a) % rank for a in np.atleast_1d(axes)}))
    count = int(np.prod([input_shape[a] for a in resolved], dtype=np.int64))
    multiplier, shift = quantize_multiplier_scalar(float(input_scale) / float(output_scale))
    if mean and count > 0:
        fold = min(count.bit_length() - 1, 32, 31 + shift)
        multiplier = (multiplier << fold) // count
        shift = shift - fold
    return ReduceParams(resolved, keep_dims, count, int(input_zero_point), int(output_zero_point), multiplier,
                        shift)


def mean_or_sum(x: np.ndarray, params: ReduceParams) -> np.ndarray:
    total = x.astype(np.int64).sum(axis=params.axes, keepdims=params.keep_dims)
    shifted = total - params.input_zero_point * params.count
    acc = multiply_by_quantized_multiplier(shifted, params.multiplier, params.shift) + params.output_zero_point
    return np.clip(acc, INT8_MIN, INT8_MAX).astype(np.int8)


def reduce_max(x: np.ndarray, params: ReduceParams) -> np.ndarray:
    return x.max(axis=params.axes, keepdims=params.keep_dims)


def reduce_min(x: np.ndarray, params: ReduceParams) -> np.ndarray:
    return x.min(axis=params.axes, keepdims=params.keep_dims)
