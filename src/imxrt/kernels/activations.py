"""Unary int8 activations and math as 256-entry lookup tables.

An int8 input takes only 256 values, so every unary op is prepared by running TFLM's integer algorithm
(or LiteRT's float LUT recipe where TFLM has no int8 kernel) once on all of them; evaluation is one
table lookup, bit-identical to running the algorithm per element. ``lut[q + 128]`` is the output for q.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from imxrt.kernels import fixedpoint
from imxrt.kernels.requantize import (
    INT8_MAX,
    INT8_MIN,
    multiply_by_quantized_multiplier,
    quantize_multiplier_scalar,
    round_half_away,
    rounding_divide_by_pot,
)

ALL_INT8 = np.arange(INT8_MIN, INT8_MAX + 1, dtype=np.int64)  # every int8 value, lut index = q + 128


@dataclass(frozen=True)
class Lut:
    table: np.ndarray  # int8[256], table[q + 128] = f(q)
    by_byte: np.ndarray = field(init=False, repr=False, compare=False)  # by_byte[q & 0xFF] = f(q)

    def __post_init__(self):
        object.__setattr__(self, "by_byte", self.table[np.arange(256) ^ 0x80])  # (q & 0xFF) ^ 0x80 = q + 128


def apply_lut(x: np.ndarray, params: Lut) -> np.ndarray:
    return np.take(params.by_byte, x.view(np.uint8))


def _lut(values) -> Lut:
    table = np.clip(np.asarray(values, dtype=np.int64), INT8_MIN, INT8_MAX).astype(np.int8)
    table.setflags(write=False)
    return Lut(table)


def _input_radius(integer_bits: int, left_shift: int, total_signed_bits: int = 31) -> int:
    """CalculateInputRadius: the largest |q - zp| whose rescaled value still fits ``integer_bits``."""
    max_rescaled = ((1 << integer_bits) - 1) * (1 << (total_signed_bits - integer_bits)) / (1 << left_shift)
    return int(np.floor(max_rescaled))


def _q4_input_rescale(input_scale: float) -> tuple[int, int, int]:
    """(multiplier, left_shift, radius) mapping q - zp onto FixedPoint<int32, 4> (TFLM logistic / tanh
    Prepare: frexp of s_in * 2**27, multiplier rounded without the 2**31 fix-up)."""
    fraction, left_shift = np.frexp(float(input_scale) * float(1 << 27))
    multiplier = int(round_half_away(fraction * float(1 << 31)))
    return multiplier, int(left_shift), _input_radius(4, int(left_shift))


def q4_input_radius(input_scale: float) -> int:
    """The |q - zp| at and beyond which TFLM's int8 LOGISTIC / TANH saturate. It is 0 from an input scale of 8
    on: every value saturates, the zero point itself to the low end (tanh(0) comes out -1, sigmoid(0) 0)."""
    return _q4_input_rescale(input_scale)[2]


def _q4_inputs(input_scale: float, input_zero_point: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Every int8 value centred, rescaled into Q4.27, and ``q4_input_radius``. At radius 0 TFLM rescales no
    value (the left shift, 31 or more, would shift past int32)."""
    multiplier, left_shift, radius = _q4_input_rescale(input_scale)
    centered = ALL_INT8 - input_zero_point
    if radius == 0:
        return centered, np.zeros_like(centered), radius
    return centered, multiply_by_quantized_multiplier(centered, multiplier, left_shift), radius


def logistic_lut(input_scale: float, input_zero_point: int) -> Lut:
    """TFLM int8 LOGISTIC (reference_integer_ops::Logistic): the output is on scale 1/256, zero point -128
    whatever the output tensor says. x = MBQM(q - zp) in Q4.27, y = gemmlowp logistic(x) in Q0.31,
    q_out = RDBPOT(y, 23) - 128; |q - zp| at or beyond the radius saturates."""
    centered, x, radius = _q4_inputs(input_scale, input_zero_point)
    y = rounding_divide_by_pot(fixedpoint.logistic(x, 4), 31 - 8) - 128
    y = np.where(centered <= -radius, INT8_MIN, np.where(centered >= radius, INT8_MAX, y))
    return _lut(y)


def tanh_lut(input_scale: float, input_zero_point: int) -> Lut:
    """TFLM int8 TANH (reference_integer_ops::Tanh): output scale 1/128, zero point 0. x in Q4.27,
    y = gemmlowp tanh(x) in Q0.31, q_out = RDBPOT(y, 24)."""
    centered, x, radius = _q4_inputs(input_scale, input_zero_point)
    y = rounding_divide_by_pot(fixedpoint.tanh(x, 4), 31 - 7)
    y = np.where(centered <= -radius, INT8_MIN, np.where(centered >= radius, INT8_MAX, y))
    return _lut(y)


def _srdhm16(a, b):
    """gemmlowp SaturatingRoundingDoublingHighMul for int16 operands."""
    ab = np.asarray(a, dtype=np.int64) * b
    nudged = ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    high = np.where(nudged >= 0, nudged >> 15, -((-nudged) >> 15))
    return np.where((np.asarray(a) == -32768) & (np.asarray(b) == -32768), 32767, high)


def _sdhm16(a, b):
    """SaturatingDoublingHighMul (no rounding) for int16: (a * b) / 2**15 truncated toward zero."""
    ab = np.asarray(a, dtype=np.int64) * b
    high = np.where(ab >= 0, ab >> 15, -((-ab) >> 15))
    return np.where((np.asarray(a) == -32768) & (np.asarray(b) == -32768), 32767, high)


def _saturating_left_shift16(x, amount: int):
    return np.clip(np.asarray(x, dtype=np.int64) << amount, -32768, 32767)


def _wrap16(x):
    """A value as C's int16_t holds it: the low 16 bits, signed."""
    return ((np.asarray(x, dtype=np.int64) + 32768) & 0xFFFF) - 32768


def _rounding_divide_by_pot16(x, exponent: int):
    """gemmlowp RoundingDivideByPOT on int16 operands, as TFLM's HARD_SWISH calls it: the mask
    (1 << exponent) - 1 is truncated to int16, so from an exponent of 16 on it is -1 and the value rounds
    to 1 when it is at least 0, else to -1 (what TFLM gives for a multiplier that small)."""
    x = np.asarray(x, dtype=np.int64)
    mask = int(_wrap16((1 << exponent) - 1))
    threshold = _wrap16((mask >> 1) + (x < 0))
    return _wrap16((x >> exponent) + (_wrap16(x & mask) > threshold))


def _int16_multiplier(multiplier_int32: int) -> int:
    """DownScaleInt32ToInt16Multiplier: round the Q31 multiplier to Q15."""
    if multiplier_int32 >= (2**31 - 1) - (1 << 15):
        return 32767
    return (multiplier_int32 + (1 << 15)) >> 16


def hard_swish_output_multiplier(input_scale: float, output_scale: float) -> float:
    """TFLM's int8 HARD_SWISH output multiplier (s_in / 128) / s_out, in float32 as TFLM computes it; TFLM
    prepares the op only when it is below 1 (its exponent at most 0)."""
    return float(np.float32(1.0 / 128.0) * np.float32(input_scale) / np.float32(output_scale))


def hard_swish_lut(input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int
                   ) -> Lut:
    """TFLM int8 HARD_SWISH (reference_ops::HardSwish): int16 fixed point. The input goes to a 'hires'
    scale s_in / 128, a 'reluish' factor in [0, 1] is relu6(x + 3) / 6 computed on the scale where 3.0 is
    32768, and the product is shifted to the output scale. Multipliers are computed in float32 as TFLM does."""
    hires_input_scale = np.float32(1.0 / 128.0) * np.float32(input_scale)
    reluish_scale = np.float32(3.0) / np.float32(32768.0)
    output_multiplier, output_exponent = quantize_multiplier_scalar(float(hires_input_scale / np.float32(output_scale)))
    reluish_multiplier, reluish_exponent = quantize_multiplier_scalar(float(hires_input_scale / reluish_scale))
    output_multiplier16 = _int16_multiplier(output_multiplier)
    reluish_multiplier16 = _int16_multiplier(reluish_multiplier)
    assert output_exponent <= 0, "TFLM requires the hard swish output multiplier below one"

    input_value = ALL_INT8 - input_zero_point
    on_hires_scale = input_value * (1 << 7)  # |.| <= 255 * 128 fits int16
    on_preshift_output_scale = _srdhm16(on_hires_scale, output_multiplier16)
    reluish = on_hires_scale
    if reluish_exponent > 0:
        reluish = _saturating_left_shift16(reluish, reluish_exponent - 1)
    reluish = _srdhm16(reluish, reluish_multiplier16)
    if reluish_exponent > 0:
        reluish = _saturating_left_shift16(reluish, 1)
    if reluish_exponent < 0:
        reluish = _rounding_divide_by_pot16(reluish, -reluish_exponent)
    reluish = (reluish + (1 << 15)) >> 1  # [-1, 1] -> [0, 1]
    preshift_output = _sdhm16(reluish, on_preshift_output_scale)
    output = _rounding_divide_by_pot16(preshift_output, -output_exponent) + output_zero_point
    return _lut(output)


# A LEAKY_RELU alpha multiplier s_in * alpha / s_out of magnitude >= 256 sends every negative code
# (q - zp_in in -255..-1) past the int8 range, whatever zp_out is; 512 keeps a margin for float32 rounding.
_SATURATING_ALPHA_MULTIPLIER = 512.0


def saturating_leaky_alpha(input_scale: float, output_scale: float, alpha: float) -> float:
    """The alpha a LEAKY_RELU is written and run with: ``alpha`` itself, or, when its multiplier is beyond
    what changes any int8 result (an infinite slope, or a finite one past 512x the scale ratio), the finite
    alpha of multiplier 512, which saturates the same codes. TFLite's QuantizeMultiplier cannot hold the
    original (an infinite double, or a shift past 31: undefined behaviour in TFLM's C++), so neither the
    .tflite nor a lookup table may carry it. NaN has no int8 meaning: ValueError."""
    if np.isnan(alpha):
        raise ValueError("a leaky_relu negative_slope of NaN has no int8 value")
    s_in, s_out = np.float32(input_scale), np.float32(output_scale)
    if abs(float(s_in) * float(alpha) / float(s_out)) <= _SATURATING_ALPHA_MULTIPLIER:
        return float(alpha)
    return float(np.copysign(np.float32(_SATURATING_ALPHA_MULTIPLIER) * s_out / s_in, alpha))


def leaky_relu_lut(input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int,
                   alpha: float) -> Lut:
    """TFLM int8 LEAKY_RELU: q - zp_in >= 0 uses M = s_in / s_out, else M = s_in * alpha / s_out (both
    computed in float32). ``alpha`` is first made one TFLite can hold (``saturating_leaky_alpha``)."""
    alpha = saturating_leaky_alpha(input_scale, output_scale, alpha)
    s_in, s_out = np.float32(input_scale), np.float32(output_scale)
    identity = quantize_multiplier_scalar(float(s_in / s_out))
    with_alpha = quantize_multiplier_scalar(float(s_in * np.float32(alpha) / s_out))
    centered = ALL_INT8 - input_zero_point
    positive = multiply_by_quantized_multiplier(centered, *identity)
    negative = multiply_by_quantized_multiplier(centered, *with_alpha)
    return _lut(np.where(centered >= 0, positive, negative) + output_zero_point)


def relu_lut(input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int,
             low: float = 0.0, high: float | None = None) -> Lut:
    """TFLM int8 RELU (and LiteRT's RELU_N1_TO_1 / RELU_0_TO_1): requantize with M = s_in / s_out, then
    clamp to [zp_out + round(low / s_out), zp_out + round(high / s_out)]."""
    multiplier, shift = quantize_multiplier_scalar(float(input_scale) / float(output_scale))
    act_min = max(INT8_MIN, output_zero_point + int(round_half_away(np.float32(low) / np.float32(output_scale))))
    act_max = INT8_MAX
    if high is not None:
        act_max = min(INT8_MAX, output_zero_point + int(round_half_away(np.float32(high) / np.float32(output_scale))))
    y = output_zero_point + multiply_by_quantized_multiplier(ALL_INT8 - input_zero_point, multiplier, shift)
    return _lut(np.clip(y, act_min, act_max))


def relu6_lut(input_scale: float, input_zero_point: int) -> Lut:
    """TFLM int8 RELU6: no requantization, clamp to [zp, quantize(6.0)] on the input scale."""
    six = int(round_half_away(np.float32(6.0) / np.float32(input_scale))) + input_zero_point
    six = min(max(six, INT8_MIN), INT8_MAX)
    return _lut(np.clip(ALL_INT8, input_zero_point, six))


def abs_lut(input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int) -> Lut:
    """TFLM int8 ABS: |q - zp_in|, requantized with M = s_in / s_out (float32) only if the scales differ."""
    value = np.abs(ALL_INT8 - input_zero_point)
    if np.float32(input_scale) != np.float32(output_scale):
        multiplier, shift = quantize_multiplier_scalar(float(np.float32(input_scale) / np.float32(output_scale)))
        value = multiply_by_quantized_multiplier(value, multiplier, shift)
    return _lut(value + output_zero_point)


def rsqrt_lut(input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int) -> Lut:
    """TFLM int8 RSQRT: 1 / sqrt(q - zp) by GetInvSqrtQuantizedMultiplierExp, carried with 20 extra bits,
    then M = 1 / (sqrt(s_in) * s_out). q == zp gives 127; q < zp (negative input, an error in TFLM) too."""
    k_shift = 20
    scale = 1.0 / float(np.sqrt(np.float32(input_scale)) * np.float32(output_scale))
    multiplier, shift = quantize_multiplier_scalar(scale)
    value = ALL_INT8 - input_zero_point
    inv_sqrt, inv_sqrt_shift = fixedpoint.inv_sqrt_quantized_multiplier_exp(np.maximum(value, 0))
    data = multiply_by_quantized_multiplier(np.ones_like(value), inv_sqrt, inv_sqrt_shift + k_shift)
    output = multiply_by_quantized_multiplier(data, multiplier, shift - k_shift) + output_zero_point
    return _lut(np.where(value <= 0, INT8_MAX, output))


def float_function_lut(function, input_scale: float, input_zero_point: int, output_scale: float,
                       output_zero_point: int) -> Lut:
    """LiteRT's LUTPopulate<int8_t> (float32 throughout): q_out = clamp((int)(round(f(s_in (q - zp_in)) /
    s_out) + zp_out)). Used where TFLM has no int8 kernel (EXP, LOG)."""
    dequantized = np.float32(input_scale) * (ALL_INT8 - input_zero_point).astype(np.float32)
    transformed = function(dequantized).astype(np.float32)
    rescaled = round_half_away(transformed * (np.float32(1.0) / np.float32(output_scale)))
    quantized = np.clip(rescaled + np.float32(output_zero_point), INT8_MIN, INT8_MAX)
    return _lut(quantized.astype(np.int64))


def exp_lut(input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int) -> Lut:
    """LiteRT int8 EXP (TFLM has none)."""
    return float_function_lut(np.exp, input_scale, input_zero_point, output_scale, output_zero_point)


def log_lut(input_scale: float, input_zero_point: int, output_scale: float, output_zero_point: int) -> Lut:
    """LiteRT int8 LOG (TFLM has none): log(x) for x > 0, the lowest representable output otherwise."""
    output_min = np.float32(INT8_MIN - output_zero_point) * np.float32(output_scale)

    def safe_log(values):
        positive = values > 0
        return np.where(positive, np.log(np.where(positive, values, np.float32(1))), output_min)

    return float_function_lut(safe_log, input_scale, input_zero_point, output_scale, output_zero_point)
