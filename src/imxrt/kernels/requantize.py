"""Requantization: TFLite's QuantizeMultiplier and MultiplyByQuantizedMultiplier with double rounding
(saturating rounding doubling high multiply, then rounding divide by a power of two), as TFLM's reference
kernels and CMSIS-NN's default ``arm_nn_requantize`` compute them.

Values are int64 numpy arrays holding int32 quantities, so products of two int32 never overflow.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from imxrt.kernels.scratch import Scratch

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


def fully_connected_multiplier(input_scale: float, weight_scale: float, output_scale: float) -> float:
    """TFLM's real FULLY_CONNECTED multiplier (GetQuantizedConvolutionMultipler): the float32 scales the
    .tflite stores, multiplied and divided in double. A float32 product (1711515934 instead of 1711515903 on
    one of ExecuTorch's test models) moves results that sit on a rounding boundary by one."""
    return float(np.float32(input_scale)) * float(np.float32(weight_scale)) / float(np.float32(output_scale))


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
    ``multiplier`` / ``shift`` broadcast against x (per-channel: shape [C] against a trailing C axis).

    Computed as one rounding shift (``rounding_constants`` derives it), exact for every x with
    |x * 2**left * multiplier| < 2**62, which holds for int32 x whenever TFLM's own int32 ``x << left`` does
    not overflow."""
    multiplier, offset, tie_threshold, tie_step, total_shift = rounding_constants(multiplier, shift)
    value = np.asarray(x, dtype=np.int64) * multiplier + offset
    value -= np.where(value < tie_threshold, tie_step, 0)
    return value >> total_shift


def rounding_constants(multiplier, shift):
    """MBQM as one floor: MBQM(x) = (x * M' + K - [h < 0] * 2**31) >> S, elementwise over multiplier/shift.

    M' = M * 2**left, S = 31 + right. SRDHM's nudge-then-truncate equals the floor (x M' + 2**30) >> 31 for
    every integer product, and RoundingDivideByPOT(h, right) = (h + 2**(right - 1) - [h < 0]) >> right for
    right >= 1; nested floors fold, floor(floor(a / 2**31) + c) / 2**r) = floor((a + c 2**31) / 2**(31 + r)),
    so K = 2**30 + 2**(30 + right) (2**30 alone when right = 0). h < 0 exactly when x M' + 2**30 < 0, that is
    when x M' + K < 2**(30 + right): below ``tie_threshold`` subtract ``tie_step`` (2**31, or 0 when
    right = 0). Returns int64 arrays (M', K, tie_threshold, tie_step, S)."""
    shift = np.asarray(shift, dtype=np.int64)
    multiplier = np.asarray(multiplier, dtype=np.int64)
    # What a requantization can hold (TFLite / CMSIS-NN: a Q31 multiplier, shifts within 31); outside it the
    # arithmetic below overflows int64 or, in Python integers, grows without bound.
    if shift.size and (shift.min() < -31 or shift.max() > 31):
        raise ValueError(f"a requantization shift of {int(shift.min() if shift.min() < -31 else shift.max())} "
                         "is outside -31..31")
    if multiplier.size and (multiplier.min() < -(1 << 31) or multiplier.max() >= 1 << 31):
        raise ValueError("a requantization multiplier is outside the 32-bit range")
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    scaled = multiplier << left
    rounds_twice = right >= 1
    offset = (1 << 30) + np.where(rounds_twice, np.int64(1) << (30 + right), 0)
    tie_threshold = np.int64(1) << (30 + right)
    tie_step = np.where(rounds_twice, np.int64(1) << 31, 0)
    return scaled, offset, tie_threshold, tie_step, 31 + right


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


# ---- the output stage of conv / depthwise / fully connected: acc -> q_out, prepared once per layer ----

FLOAT_EXACT = 1 << 53  # integers below this are exact in float64, and so are products and sums below it


SMALL = 4096  # below this many elements a numpy call costs more than its loop: prefer the cheapest calls


@dataclass(frozen=True)
class FloatOutputStage:
    """q_out = clamp(MBQM(acc + bias, M, shift) + zp_out) in float64, bit-exact where ``prepare_output_stage``
    proved it: with z = (acc + bias) M' 2**-S + K 2**-S (see ``rounding_constants``), every value is a
    multiple of 2**-S below 2**53 * 2**-S in magnitude, so the product, the sums and the floor are exact.

        z = acc * scale + offset                 (offset holds bias, K and zp_out - act_min)
        z -= tie_step where z < tie_threshold    (RoundingDivideByPOT's ties of negative values)
        q_out = act_min + floor(clamp(z, 0, act_max - act_min))   (truncation = floor on values >= 0)

    The tie step only moves values below MBQM = 0 down; when act_min >= zp_out the clamp sends all of them
    to act_min anyway, and the step is left out (``tie_step`` None).
    """

    scale: np.ndarray  # float64[C]: M' * 2**-S
    offset: np.ndarray  # float64[C]: (bias M' + K) * 2**-S + zp_out - act_min
    tie_threshold: float  # 1/2 + zp_out - act_min
    tie_step: np.ndarray | None  # float64[C]: 2**31 * 2**-S (0 where right = 0), or None
    levels: float  # act_max - act_min
    act_min: int
    foldable: bool = False  # ``fold`` is exact: |offset| + |acc M'| < 2**53 in units of 2**-S
    scratch: Scratch = field(default_factory=Scratch, repr=False, compare=False)
    byte_offset: np.uint8 = field(init=False, repr=False, compare=False)  # act_min & 0xFF, as a numpy scalar

    def __post_init__(self):
        object.__setattr__(self, "byte_offset", np.uint8(self.act_min & 0xFF))

    def __call__(self, acc: np.ndarray) -> np.ndarray:
        z = self.scratch.get("z", acc.shape, np.float64)
        np.multiply(acc, self.scale, out=z)
        z += self.offset
        return self.finish(z)

    def fold(self, weights: np.ndarray) -> np.ndarray | None:
        """``weights`` [K, C] (integers) as float64 [K + 1, C]: each column times its scale, then the offset
        as a last row, so that ``[q, 1] @ folded`` is z itself (``finish`` takes it from there). None unless
        every partial sum of that product is, in units of 2**-S, an integer below 2**53 (so exact)."""
        if not self.foldable:
            return None
        return np.vstack([weights * self.scale, self.offset[None, :]])

    def finish(self, z: np.ndarray) -> np.ndarray:
        """z (float64, overwritten) -> int8."""
        if self.tie_step is not None:
            below = np.less(z, self.tie_threshold, out=self.scratch.get("below", z.shape, np.bool_))
            step = np.multiply(below, self.tie_step, out=self.scratch.get("step", z.shape, np.float64))
            z -= step  # (a masked subtract, ``where=``, is several times slower on mixed signs)
        q = np.empty(z.shape, np.uint8)
        if z.size < SMALL:
            np.maximum(z, 0.0, out=z)
            np.minimum(z, self.levels, out=z)
            np.copyto(q, z, casting="unsafe")  # z in [0, 255]: C truncation is the floor
        else:
            np.clip(z, 0.0, self.levels, out=q, casting="unsafe")
        if self.byte_offset:
            np.add(q, self.byte_offset, out=q)  # uint8 wrap-around: q - 256 + act_min, read back as int8
        return q.view(np.int8)


@dataclass(frozen=True)
class IntegerOutputStage:
    """The same output stage in int64 (``rounding_constants``): for accumulators whose float64 form could
    round."""

    bias: np.ndarray  # int64[C]
    multiplier: np.ndarray  # int64[C]: M'
    offset: np.ndarray  # int64[C]: K
    tie_threshold: np.ndarray
    tie_step: np.ndarray
    total_shift: np.ndarray  # int64[C]: S
    output_zero_point: int
    act_min: int
    act_max: int

    def __call__(self, acc: np.ndarray) -> np.ndarray:
        value = acc.astype(np.int64)
        value += self.bias
        value *= self.multiplier
        value += self.offset
        value -= np.where(value < self.tie_threshold, self.tie_step, 0)
        value >>= self.total_shift
        value += self.output_zero_point
        np.clip(value, self.act_min, self.act_max, out=value)
        return value.astype(np.int8)


OutputStage = FloatOutputStage | IntegerOutputStage


def prepare_output_stage(multipliers, shifts, bias, acc_min, acc_max, output_zero_point: int, act_min: int,
                         act_max: int) -> OutputStage:
    """The output stage of a layer with ``C = len(bias)`` channels (on the last axis; one multiplier / shift
    broadcasts). ``acc_min`` / ``acc_max`` bound, per channel, the accumulator the stage will be given
    (without the bias): the float64 stage is used when every value it computes provably stays exact,
    the int64 one otherwise."""
    bias = np.asarray(bias, dtype=np.int64)
    channels = bias.shape[0]
    multiplier, offset, tie_threshold, tie_step, total_shift = (
        np.broadcast_to(v, (channels,)).astype(np.int64) for v in rounding_constants(multipliers, shifts))
    exact = _float_exact(bias, multiplier, offset, total_shift, acc_min, acc_max, output_zero_point - act_min)
    if exact is not None:
        unit = np.ldexp(1.0, -total_shift)  # 2**-S, exact
        twice = tie_step != 0
        return FloatOutputStage(
            scale=multiplier.astype(np.float64) * unit,
            offset=(bias * multiplier + offset).astype(np.float64) * unit + float(output_zero_point - act_min),
            tie_threshold=0.5 + float(output_zero_point - act_min),
            tie_step=(np.where(twice, np.ldexp(1.0, 31 - total_shift), 0.0)
                      if twice.any() and act_min < output_zero_point else None),
            levels=float(act_max - act_min), act_min=int(act_min), foldable=exact)
    return IntegerOutputStage(bias, multiplier, offset, tie_threshold, tie_step, total_shift, int(output_zero_point),
                              int(act_min), int(act_max))


def _float_exact(bias, multiplier, offset, total_shift, acc_min, acc_max, level_offset: int) -> bool | None:
    """None unless every value of FloatOutputStage, counted in units of 2**-S, is an integer below 2**53 in
    magnitude: the product acc M', the offset, and their sums for any acc in [acc_min, acc_max] (plus or
    minus the tie step, and the level offset zp_out - act_min), computed with Python's exact integers.
    Otherwise whether folding into the matmul is exact too: |offset| + |acc M'| stays below 2**53."""
    if acc_min is None or acc_max is None:
        return None
    lows = np.broadcast_to(np.asarray(acc_min, dtype=np.int64), bias.shape)
    highs = np.broadcast_to(np.asarray(acc_max, dtype=np.int64), bias.shape)
    foldable = True
    for channel in range(bias.shape[0]):
        m, s = int(multiplier[channel]), int(total_shift[channel])
        low, high = int(lows[channel]), int(highs[channel])
        base = int(bias[channel]) * m + int(offset[channel]) + level_offset * (1 << s)
        largest_product = max(abs(low), abs(high)) * m
        worst = max(largest_product, abs(base), abs(base + low * m) + (1 << 31), abs(base + high * m) + (1 << 31))
        if worst >= FLOAT_EXACT:
            return None
        foldable = foldable and abs(base) + largest_product + (1 << 31) < FLOAT_EXACT
    return foldable


INT64_LIMIT = 1 << 63


def integer_stage_constants(bias, multipliers, shifts, acc_min, acc_max, channels: int, act_min: int, act_max: int
                            ) -> tuple[np.ndarray, ...] | None:
    """The int64 constants (bias, M', K, tie_threshold, tie_step, S) of the integer output stage a C kernel runs
    (``_native.c``: v = (acc + bias) M' + K, less the tie step, shifted right by S, clamped to [act_min, act_max])
    for ``channels`` channels, each contiguous; None when a value it computes for an accumulator in
    [acc_min, acc_max] (per channel) could reach 2**63, a shift is outside what a 64-bit shift takes, or the clamp
    is not a range of int8 (numpy wraps a value past int8 where the C kernels' vector loops saturate it)."""
    if not INT8_MIN <= int(act_min) <= int(act_max) <= INT8_MAX:
        return None
    bias = np.ascontiguousarray(np.broadcast_to(np.asarray(bias, dtype=np.int64), (channels,)))
    multiplier, offset, tie_threshold, tie_step, total_shift = (
        np.ascontiguousarray(np.broadcast_to(v, (channels,)), dtype=np.int64)
        for v in rounding_constants(multipliers, shifts))
    lows = np.broadcast_to(np.asarray(acc_min, dtype=np.int64), (channels,))
    highs = np.broadcast_to(np.asarray(acc_max, dtype=np.int64), (channels,))
    for channel in range(channels):
        reach = max(abs(int(lows[channel]) + int(bias[channel])), abs(int(highs[channel]) + int(bias[channel])))
        if reach * int(multiplier[channel]) + int(offset[channel]) + int(tie_step[channel]) >= INT64_LIMIT:
            return None
        if not 0 <= int(total_shift[channel]) <= 62:
            return None
    return bias, multiplier, offset, tie_threshold, tie_step, total_shift
