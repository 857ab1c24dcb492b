"""gemmlowp's int32 fixed-point arithmetic, elementwise on int64 arrays holding int32 values.

A ``FixedPoint<int32, I>`` value is its raw int32: real = raw / 2**(31 - I). Multiplying two of them is
SaturatingRoundingDoublingHighMul of the raws (integer bits add up); Rescale<J> of an I-bit value is a
rounding divide (J > I) or a saturating left shift (J < I) of the raw by |I - J| bits. These are the
building blocks of TFLM's int8 softmax, logistic, tanh and rsqrt; the functions here follow
gemmlowp/fixedpoint/fixedpoint.h step by step.
"""

from __future__ import annotations

import numpy as np

from imxrt.kernels.requantize import INT32_MAX, INT32_MIN, rounding_divide_by_pot
from imxrt.kernels.requantize import saturating_rounding_doubling_high_mul as mul


def wrap_int32(x):
    """Two's complement int32 wrap of int64 values (C's int32 add / sub overflow)."""
    return ((np.asarray(x, dtype=np.int64) + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def saturating_rounding_multiply_by_pot(x, exponent: int):
    """SaturatingRoundingMultiplyByPOT<exponent>: rounding right shift for exponent < 0, saturating left
    shift for exponent > 0."""
    x = np.asarray(x, dtype=np.int64)
    if exponent == 0:
        return x
    if exponent < 0:
        return rounding_divide_by_pot(x, -exponent)
    threshold = (1 << (31 - exponent)) - 1
    result = wrap_int32(x << exponent)
    result = np.where(x > threshold, INT32_MAX, result)
    return np.where(x < -threshold, INT32_MIN, result)


def rescale(x, src_integer_bits: int, dst_integer_bits: int):
    """gemmlowp Rescale<dst>(FixedPoint<src>)."""
    return saturating_rounding_multiply_by_pot(x, src_integer_bits - dst_integer_bits)


def one(integer_bits: int) -> int:
    """FixedPoint<int32, I>::One(): INT32_MAX when I == 0 (1.0 is not representable), else 2**(31 - I)."""
    return INT32_MAX if integer_bits == 0 else 1 << (31 - integer_bits)


def rounding_half_sum(a, b):
    """gemmlowp RoundingHalfSum for int32: (a + b + sign) / 2 with C truncation."""
    total = np.asarray(a, dtype=np.int64) + b
    total = total + np.where(total >= 0, 1, -1)
    return np.where(total >= 0, total // 2, -((-total) // 2))


def exp_on_interval_between_negative_one_quarter_and_0_excl(a):
    """exp(a) for a in [-1/4, 0), both FixedPoint<0>: Taylor expansion around -1/8."""
    constant_term = 1895147668  # exp(-1/8)
    constant_1_over_3 = 715827883
    x = a + (1 << 28)  # a + 1/8
    x2 = mul(x, x)
    x3 = mul(x2, x)
    x4 = mul(x2, x2)
    x4_over_4 = rounding_divide_by_pot(x4, 2)
    poly = rounding_divide_by_pot(mul(x4_over_4 + x3, constant_1_over_3) + x2, 1)
    return constant_term + mul(constant_term, x + poly)


# (exponent, multiplier) of exp(-2**exponent) in FixedPoint<0>: the barrel shifter of exp_on_negative_values.
_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535),
               (3, 720401), (4, 242))


def exp_on_negative_values(a, integer_bits: int):
    """exp(a) for a <= 0 in FixedPoint<integer_bits>; the result is FixedPoint<0>."""
    a = np.asarray(a, dtype=np.int64)
    fractional_bits = 31 - integer_bits
    one_quarter = 1 << (fractional_bits - 2)
    a_mod_quarter_minus_one_quarter = (a & (one_quarter - 1)) - one_quarter
    result = exp_on_interval_between_negative_one_quarter_and_0_excl(
        rescale(a_mod_quarter_minus_one_quarter, integer_bits, 0))
    remainder = a_mod_quarter_minus_one_quarter - a
    for exponent, multiplier in _EXP_BARREL:
        if integer_bits > exponent:
            bit = (remainder & (1 << (fractional_bits + exponent))) != 0
            result = np.where(bit, mul(result, multiplier), result)
    assert integer_bits <= 5, "exp_on_negative_values clamp for > 5 integer bits is not needed for int8"
    return np.where(a == 0, one(0), result)


def _newton_reciprocal_of_half_denominator(half_denominator):
    """x ~ 1 / half_denominator in FixedPoint<2> after three Newton-Raphson steps from 48/17 - 32/17 d."""
    x = 1515870810 + mul(half_denominator, -1010580540)
    for _ in range(3):
        one_minus = one(2) - mul(half_denominator, x)
        x = x + rescale(mul(x, one_minus), 4, 2)
    return x


def one_over_one_plus_x_for_x_in_0_1(a):
    """1 / (1 + a) for a in [0, 1), FixedPoint<0> in and out."""
    x = _newton_reciprocal_of_half_denominator(rounding_half_sum(a, one(0)))
    return rescale(x, 1, 0)  # ExactMulByPot<-1> makes the FixedPoint<2> raw a FixedPoint<1>


def one_minus_x_over_one_plus_x_for_x_in_0_1(a):
    """(1 - a) / (1 + a) for a in [0, 1), FixedPoint<0> in and out."""
    x = _newton_reciprocal_of_half_denominator(rounding_half_sum(a, one(0)))
    return rescale(x - one(2), 2, 0)


def logistic(a, integer_bits: int):
    """gemmlowp logistic: FixedPoint<integer_bits> in, FixedPoint<0> out."""
    a = np.asarray(a, dtype=np.int64)
    positive = a > 0
    abs_input = np.where(positive, a, -a)
    result_if_positive = one_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(-abs_input, integer_bits))
    result_if_negative = one(0) - result_if_positive
    return np.where(a == 0, 1 << 30, np.where(positive, result_if_positive, result_if_negative))


def tanh(a, integer_bits: int):
    """gemmlowp tanh: FixedPoint<integer_bits> in, FixedPoint<0> out."""
    a = np.asarray(a, dtype=np.int64)
    negative = a < 0
    n = np.where(negative, a, -a)  # -|a|
    # ExactMulByPot<1>: the same raw read with one more integer bit, i.e. 2n
    t = one_minus_x_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(n, integer_bits + 1))
    return np.where(a == 0, 0, np.where(negative, -t, t))


def count_leading_zeros_u32(x):
    """CountLeadingZeros(uint32) of non-negative int64 values (32 for 0)."""
    x = np.asarray(x, dtype=np.int64)
    bits = np.frexp(x.astype(np.float64))[1]  # bit length, exact for x < 2**53
    return np.where(x == 0, 32, 32 - bits)


def inv_sqrt_quantized_multiplier_exp(value):
    """GetInvSqrtQuantizedMultiplierExp(value, reverse_shift=-1) for 1 < value < 2**29 (and 0, 1):
    (multiplier, shift) with 1 / sqrt(value) = multiplier * 2**(shift - 31)."""
    value = np.asarray(value, dtype=np.int64)
    assert np.all(value < (1 << 29)), "inv sqrt of values >= 2**29 needs the divide-by-4 loop"
    small = value <= 1
    v = np.where(small, 2, value)
    output_shift = np.full(v.shape, 11, dtype=np.int64)
    max_left_shift_bits = count_leading_zeros_u32(v) - 1
    left_shift_bit_pairs = max_left_shift_bits // 2 - 1
    output_shift = output_shift - left_shift_bit_pairs
    v = v << (2 * left_shift_bit_pairs)
    # Newton-Raphson on FixedPoint<3>: x <- 1.5 x - (v / 2) x^3, five steps from x = 1
    fixedpoint_input = v >> 1
    half_input = rounding_divide_by_pot(fixedpoint_input, 1)
    half_three = (1 << 28) + (1 << 27)
    x = np.full(v.shape, one(3), dtype=np.int64)
    for _ in range(5):
        x3 = rescale(mul(mul(x, x), x), 9, 3)
        x = rescale(wrap_int32(mul(half_three, x) - mul(half_input, x3)), 6, 3)
    x = mul(x, 1518500250)  # sqrt(2) / 2 in FixedPoint<0>
    negative_shift = output_shift < 0
    x = np.where(negative_shift, wrap_int32(x << np.where(negative_shift, -output_shift, 0)), x)
    output_shift = np.where(negative_shift, 0, output_shift)
    return np.where(small, INT32_MAX, x), np.where(small, 0, -output_shift)
