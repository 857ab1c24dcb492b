"""SOFTMAX over the last axis of int8 (TFLM / reference_ops::Softmax, gemmlowp fixed point).

Per row: d = q - max(row) in [-255, 0]. Rows entries with d < diff_min contribute nothing and output -128.
    e(d)    = exp_on_negative_values(SRDHM(d << left_shift, M)) in Q0.31   (input_diff in Q5.26)
    sum     = sum of Rescale<12>(e(d)) in Q12.19
    1 / sum = one_over_one_plus_x (sum normalised to [1, 2)), num_bits_over_unit from its headroom
    q_out   = clamp(RDBPOT(SRDHM(1 / sum, e(d)), num_bits_over_unit + 23) - 128)
Since d takes only 256 values, e(d) and its Q12 rescale are tables built when preparing.
The output must be scale 1/256, zero point -128 (TFLM checks it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from imxrt.kernels import fixedpoint
from imxrt.kernels.requantize import (
    INT8_MAX,
    INT8_MIN,
    quantize_multiplier_scalar,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
)

SCALED_DIFF_INTEGER_BITS = 5
ACCUMULATION_INTEGER_BITS = 12


@dataclass(frozen=True)
class SoftmaxParams:
    exp_of_diff: np.ndarray  # int64[256]: e(-index) in Q0.31, 0 where -index < diff_min
    exp_of_diff_q12: np.ndarray  # int64[256]: Rescale<12> of the same, 0 where excluded
    included: np.ndarray  # bool[256]: -index >= diff_min


def prepare_softmax(input_scale: float, beta: float) -> SoftmaxParams:
    # PreprocessSoftmaxScaling: M = min(beta * s_in * 2**26, 2**31 - 1), a multiplier greater than one.
    real = min(float(beta) * float(input_scale) * float(1 << (31 - SCALED_DIFF_INTEGER_BITS)), float((1 << 31) - 1))
    multiplier, left_shift = quantize_multiplier_scalar(real)
    assert left_shift >= 0
    # CalculateInputRadius(5, left_shift): diff_min = -floor(31 * 2**26 / 2**left_shift)
    diff_min = -int(np.floor(((1 << SCALED_DIFF_INTEGER_BITS) - 1) * (1 << (31 - SCALED_DIFF_INTEGER_BITS))
                             / (1 << left_shift)))
    diffs = -np.arange(256, dtype=np.int64)
    rescaled = saturating_rounding_doubling_high_mul(diffs << left_shift, multiplier)
    exp = fixedpoint.exp_on_negative_values(rescaled, SCALED_DIFF_INTEGER_BITS)
    included = diffs >= diff_min
    exp = np.where(included, exp, 0)
    exp_q12 = np.where(included, fixedpoint.rescale(exp, 0, ACCUMULATION_INTEGER_BITS), 0)
    return SoftmaxParams(exp, exp_q12, included)


def softmax(x: np.ndarray, params: SoftmaxParams) -> np.ndarray:
    values = x.astype(np.int64)
    index = values.max(axis=-1, keepdims=True) - values  # -d
    sum_of_exps = params.exp_of_diff_q12[index].sum(axis=-1, keepdims=True)
    # GetReciprocal(sum, 12): normalise the sum to [1, 2) as Q0.31 of (sum - 1), then 1 / (1 + x).
    headroom_plus_one = fixedpoint.count_leading_zeros_u32(sum_of_exps)
    num_bits_over_unit = ACCUMULATION_INTEGER_BITS - headroom_plus_one
    shifted_sum_minus_one = fixedpoint.wrap_int32((sum_of_exps << headroom_plus_one) - (1 << 31))
    shifted_scale = fixedpoint.one_over_one_plus_x_for_x_in_0_1(shifted_sum_minus_one)
    product = saturating_rounding_doubling_high_mul(shifted_scale, params.exp_of_diff[index])
    output = rounding_divide_by_pot(product, num_bits_over_unit + 31 - 8) + INT8_MIN
    output = np.where(params.included[index], output, INT8_MIN)
    return np.clip(output, INT8_MIN, INT8_MAX).astype(np.int8)


def prepare_softmax_fixed_point(multiplier: int, left_shift: int, diff_min: int) -> SoftmaxParams:
    """The same tables from the integer parameters CMSIS-NN's ``arm_softmax_s8`` takes (the ones
    ``prepare_softmax`` derives from the input scale)."""
    diffs = -np.arange(256, dtype=np.int64)
    rescaled = saturating_rounding_doubling_high_mul(diffs << left_shift, multiplier)
    exp = fixedpoint.exp_on_negative_values(rescaled, SCALED_DIFF_INTEGER_BITS)
    included = diffs >= diff_min
    exp = np.where(included, exp, 0)
    exp_q12 = np.where(included, fixedpoint.rescale(exp, 0, ACCUMULATION_INTEGER_BITS), 0)
    return SoftmaxParams(exp, exp_q12, included)
