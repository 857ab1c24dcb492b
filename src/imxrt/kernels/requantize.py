"""Requantization: TFLite's QuantizeMultiplier and MultiplyByQuantizedMultiplier with double rounding
(saturating rounding doubling high multiply, then rounding divide by a power of two), as TFLM's reference
kernels and CMSIS-NN's default ``arm_nn_requantize`` compute them.

Values are int64 numpy arrays holding int32 quantities, so products of two int32 never overflow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT8_MIN, INT8_MAX = -128, 127

# TFLite ActivationFunctionType values (schema) for the fused activations an int8 op can carry.
ACT_NONE, ACT_RELU, ACT_RELU_N1_TO_1, ACT_RELU6 = 0, 1, 2, 3


def round_half_away(x):
    """C's std::round / TfLiteRound: halves away from zero (numpy's rint rounds halves to even)."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def quantize_multiplier(real_multipliers) -> tuple[np.ndarray, np.ndarray]:
    """TFLite QuantizeMultiplier, elementwise: real = q * 2**(shift - 31), q in [2**30, 2**31).

    ``real`` is a double. frexp gives m in [0.5, 1); q = round(m * 2**31) (if q == 2**31: halve it and
    increment the shift); shifts below -31 flush to (0, 0); zero gives (0, 0). Shift > 0 is a left shift.
    """
    real = np.atleast_1d(np.asarray(real_multipliers, dtype=np.float64))
    fraction, shift = np.frexp(real)
    q = round_half_away(fraction * float(1 << 31)).astype(np.int64)
    shift = shift.astype(np.int64)
    full = q == (1 << 31)
    q = np.where(full, q // 2, q)
    shift = np.where(full, shift + 1, shift)
    flushed = (shift < -31) | (real == 0.0)
    return np.where(flushed, 0, q), np.where(flushed, 0, shift)


def quantize_multiplier_scalar(real: float) -> tuple[int, int]:
    multiplier, shift = quantize_multiplier(real)
    return int(multiplier[0]), int(shift[0])


def saturating_rounding_doubling_high_mul(a, b):
    """gemmlowp SaturatingRoundingDoublingHighMul for int32 operands: round(a * b / 2**31), ties away from
    zero, with the nudge-then-truncate of the C code. (a == b == INT32_MIN saturates in C; a multiplier
    is never INT32_MIN, so it cannot happen here.)"""
    ab = np.asarray(a, dtype=np.int64) * b
    nudged = ab + np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    # C division truncates toward zero: add 2**31 - 1 to negatives before the arithmetic shift.
    return (nudged + ((nudged >> 63) & ((1 << 31) - 1))) >> 31


def rounding_divide_by_pot(x, exponent):
    """gemmlowp RoundingDivideByPOT: x / 2**exponent rounded to nearest, ties away from zero."""
    x = np.asarray(x, dtype=np.int64)
    exponent = np.asarray(exponent, dtype=np.int64)
    mask = (np.int64(1) << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def multiply_by_quantized_multiplier(x, multiplier, shift):
    """TFLite MultiplyByQuantizedMultiplier (double rounding):
    RoundingDivideByPOT(SRDHM(x * 2**max(shift, 0), multiplier), max(-shift, 0)).
    ``multiplier`` / ``shift`` broadcast against x (per-channel: shape [C] against a trailing C axis)."""
    shift = np.asarray(shift, dtype=np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    x = np.asarray(x, dtype=np.int64)
    if np.any(left):
        x = x << left
    high = saturating_rounding_doubling_high_mul(x, multiplier)
    if not np.any(right):
        return high
    return rounding_divide_by_pot(high, right)


def quantize_value(value: float, scale: float, zero_point: int) -> int:
    """TFLite's Quantize in CalculateActivationRangeQuantized: zp + (int)round(value / scale), in float32."""
    return int(zero_point) + int(round_half_away(np.float32(value) / np.float32(scale)))


def activation_range(fused: int, scale: float, zero_point: int, qmin: int = INT8_MIN, qmax: int = INT8_MAX
                     ) -> tuple[int, int]:
    """CalculateActivationRangeQuantized: the int range a fused activation leaves on the output scale."""
    if fused == ACT_NONE:
        return qmin, qmax
    if fused == ACT_RELU:
        return max(qmin, quantize_value(0.0, scale, zero_point)), qmax
    if fused == ACT_RELU6:
        return (max(qmin, quantize_value(0.0, scale, zero_point)),
                min(qmax, quantize_value(6.0, scale, zero_point)))
    if fused == ACT_RELU_N1_TO_1:
        return (max(qmin, quantize_value(-1.0, scale, zero_point)),
                min(qmax, quantize_value(1.0, scale, zero_point)))
    raise ValueError(f"fused activation {fused} has no int8 range")


@dataclass(frozen=True)
class Requantize:
    """q_out = clamp(MBQM(q_in - zp_in, M, shift) + zp_out), M = s_in / s_out (TFLM QUANTIZE int8 -> int8)."""

    input_zero_point: int
    multiplier: int
    shift: int
    output_zero_point: int
    qmin: int = INT8_MIN
    qmax: int = INT8_MAX


def prepare_requantize(input_scale: float, input_zero_point: int, output_scale: float,
                       output_zero_point: int) -> Requantize:
    multiplier, shift = quantize_multiplier_scalar(float(input_scale) / float(output_scale))
    return Requantize(int(input_zero_point), multiplier, shift, int(output_zero_point))


def requantize(x: np.ndarray, params: Requantize) -> np.ndarray:
    acc = multiply_by_quantized_multiplier(x.astype(np.int64) - params.input_zero_point, params.multiplier,
                                           params.shift)
    return np.clip(acc + params.output_zero_point, params.qmin, params.qmax).astype(np.int8)


def to_int8(acc: np.ndarray, output_zero_point: int, act_min: int, act_max: int) -> np.ndarray:
    """The common tail of every requantizing kernel: add the output zero point, clamp, narrow."""
    return np.clip(acc + output_zero_point, act_min, act_max).astype(np.int8)
