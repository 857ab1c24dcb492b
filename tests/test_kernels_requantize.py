"""The exact-arithmetic identities the fast requantization relies on, checked against gemmlowp's literal
two-step form (SaturatingRoundingDoublingHighMul with its sign-dependent nudge and C truncation, then
RoundingDivideByPOT with its mask and threshold) on edge values: int32 extremes, multipliers 2**30 and
2**31 - 1, every shift from -31 to +7, and ties of both signs."""

from __future__ import annotations

import numpy as np
import pytest

from imxrt.kernels import conv
from imxrt.kernels.requantize import (
    FloatOutputStage,
    IntegerOutputStage,
    multiply_by_quantized_multiplier,
    prepare_output_stage,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
MULTIPLIERS = [0, 2**30, 2**30 + 1, 1518500250, 2**31 - 2, 2**31 - 1]
SHIFTS = range(-31, 8)


def two_step(x, multiplier, shift):
    """TFLite MultiplyByQuantizedMultiplier as gemmlowp writes it."""
    left, right = max(shift, 0), max(-shift, 0)
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(np.asarray(x, np.int64) << left, multiplier),
                                  right)


def edge_accumulators(shift: int, multiplier: int) -> np.ndarray:
    """int32 extremes, small values, random values, and values whose high product lands on a tie of the
    second rounding (h = +/-(k 2**r + 2**(r-1))), all with x << left inside int32 (TFLM's domain)."""
    rng = np.random.default_rng((shift + 31) * 7919 + multiplier % 7919)
    values = [INT32_MIN, INT32_MIN + 1, -(2**30), -65537, -2, -1, 0, 1, 2, 65535, 2**30, INT32_MAX]
    values += list(range(-300, 301))
    values += list(rng.integers(INT32_MIN, INT32_MAX, 3000, endpoint=True))
    right = max(-shift, 0)
    if right >= 1 and multiplier:
        ties = (np.arange(-40, 40) << right) + (1 << (right - 1))  # h with h mod 2**r == 2**(r-1)
        for h in ties[np.abs(ties) < 2**30]:
            x0 = (int(h) << 31) // multiplier  # x M / 2**31 close to h: search around it
            values += [x for x in range(x0 - 2, x0 + 3) if INT32_MIN <= x <= INT32_MAX]
    x = np.array(values, dtype=np.int64)
    return x >> max(shift, 0)


@pytest.mark.parametrize("multiplier", MULTIPLIERS)
def test_one_rounding_shift_equals_the_two_step_form(multiplier):
    for shift in SHIFTS:
        x = edge_accumulators(shift, multiplier)
        np.testing.assert_array_equal(multiply_by_quantized_multiplier(x, multiplier, shift),
                                      two_step(x, multiplier, shift), err_msg=f"shift {shift}")


def test_ties_are_exercised():
    """The tie search above really produces ties of both signs (else the test above proves less)."""
    x = edge_accumulators(-5, 2**30)
    high = saturating_rounding_doubling_high_mul(x, 2**30)
    tie = (high & 31) == 16
    assert (tie & (high > 0)).any() and (tie & (high < 0)).any()


def test_srdhm_is_a_floor_of_the_nudged_product():
    """Nudge-then-truncate equals floor((a M + 2**30) / 2**31) for every product sign and remainder."""
    a = np.array([INT32_MIN, INT32_MIN + 1, -(2**30) - 1, -(2**30), -3, -2, -1, 0, 1, 2, 3, 2**30, INT32_MAX],
                 np.int64)
    for multiplier in MULTIPLIERS:
        np.testing.assert_array_equal(saturating_rounding_doubling_high_mul(a, multiplier),
                                      (a * multiplier + (1 << 30)) >> 31)


def test_rounding_divide_by_pot_is_a_floor_with_a_sign_adjust():
    x = np.arange(-5000, 5001, dtype=np.int64)
    for exponent in range(1, 12):
        np.testing.assert_array_equal(rounding_divide_by_pot(x, exponent),
                                      (x + (1 << (exponent - 1)) - (x < 0)) >> exponent)


def _reference_stage(acc, bias, multipliers, shifts, zero_point, act_min, act_max):
    out = [two_step(acc[:, c] + bias[c], int(multipliers[c]), int(shifts[c])) for c in range(len(bias))]
    return np.clip(np.stack(out, axis=1) + zero_point, act_min, act_max).astype(np.int8)


@pytest.mark.parametrize("zero_point, act_min, act_max",
                         [(-128, -128, 127), (5, 5, 127), (-3, -128, 40), (127, 127, 127)])
def test_float_and_integer_output_stages_equal_the_two_step_form(zero_point, act_min, act_max):
    """Accumulators at the stage's declared bounds, around zero and on ties; shifts -12..+2."""
    multipliers = np.array([2**30, 2**31 - 1, 1518500250, 1 << 30, 1234567890, 2**30 + 1], np.int64)
    shifts = np.array([-12, -1, 0, 2, -7, -10], np.int64)
    bias = np.array([0, -1000, 77, 3, -(2**20), 2**19], np.int64)
    low, high = np.full(6, -(2**20)), np.full(6, 2**20)
    acc = np.concatenate([np.arange(-3000, 3000), np.arange(-(2**20), -(2**20) + 50), np.arange(2**20 - 50, 2**20 + 1),
                          np.arange(-40, 40) * 4096 + 2048, np.arange(-40, 40) * 2048 + 1024])
    acc = np.repeat(acc[:, None], 6, axis=1)
    want = _reference_stage(acc, bias, multipliers, shifts, zero_point, act_min, act_max)
    stages = [prepare_output_stage(multipliers, shifts, bias, low, high, zero_point, act_min, act_max),
              prepare_output_stage(multipliers, shifts, bias, None, None, zero_point, act_min, act_max)]
    assert [type(s) for s in stages] == [FloatOutputStage, IntegerOutputStage]
    for stage in stages:
        np.testing.assert_array_equal(stage(acc.astype(np.float64)), want, err_msg=type(stage).__name__)


def test_float_stage_only_where_every_value_is_below_2_53():
    """M = 2**31 - 1, shift -1 (S = 32), zp_out 0, act_min -128: the largest value, in units of 2**-S, is
    acc M' + K + 128 * 2**S plus the tie step; the float stage is taken up to the last acc that keeps it
    below 2**53, and is exact there."""
    multiplier, total_shift = 2**31 - 1, 32
    base = (1 << 30) + (1 << 31) + 128 * (1 << total_shift)
    last = (2**53 - 1 - (1 << 31) - base) // multiplier
    accepted = prepare_output_stage([multiplier], [-1], [0], [-last], [last], 0, -128, 127)
    rejected = prepare_output_stage([multiplier], [-1], [0], [-last], [last + 1], 0, -128, 127)
    assert isinstance(accepted, FloatOutputStage) and isinstance(rejected, IntegerOutputStage)
    acc = np.array([[-last], [-last + 1], [-1], [0], [1], [last - 1], [last]], np.int64)
    np.testing.assert_array_equal(accepted(acc.astype(np.float64)),
                                  _reference_stage(acc, [0], [multiplier], [-1], 0, -128, 127))


def test_matmul_float32_only_below_2_24():
    """128 * sum |w| is the largest partial sum of int8 inputs: float32 up to 2**24 - 1, float64 from 2**24."""
    fits = np.full((1, 1), (2**24 - 1) // 128, np.int64)
    low, high = conv.accumulator_range(fits, -128, 127)
    assert conv._sum_dtype(low, high) == np.float32
    low, high = conv.accumulator_range(fits + 1, -128, 127)
    assert conv._sum_dtype(low, high) == np.float64
