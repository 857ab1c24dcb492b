"""TFLM's limits on an int8 operator's numbers, one function each on plain numbers (scales as the flatbuffer
stores them, row lengths, input counts): what TFLM's prepare refuses, or what its kernels cannot compute.

Two sides keep them: the compiler never writes an operator that breaks one (``npu/litert/tflm_limits.py``:
the node stays on the CPU), and the host runtime refuses a LiteRT subgraph that does
(``runtime/litert_rules.py``). Each ``*_problem`` function returns what is wrong, or None.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np  # the flatbuffer stores scales as float32: TFLM computes from those

from imxrt.kernels import activations
from imxrt.kernels.elementwise import ADD_LEFT_SHIFT


def _stored(scale: float) -> float:
    return float(np.float32(scale))


def add_sub_multiplier(input_scales: Sequence[float], output_scale: float) -> float:
    """TFLM's int8 ADD / SUB output multiplier (add_common.cc, sub_common.cc): 2 * max(s1, s2) / (2^20 * s_out),
    which ``QuantizeMultiplierSmallerThanOneExp`` requires below 1."""
    as_stored = [_stored(s) for s in (*input_scales, output_scale)]
    return 2 * max(as_stored[:-1]) / ((1 << ADD_LEFT_SHIFT) * as_stored[-1])


def add_sub_output_scale_problem(builtin: str, input_scales: Sequence[float], output_scale: float) -> str | None:
    """ADD / SUB: the output scale must exceed the larger input scale / 2^19 (``add_sub_multiplier`` below 1;
    quantization_util.cc, QuantizeMultiplierSmallerThanOneExp: TFLITE_CHECK_LT aborts)."""
    multiplier = add_sub_multiplier(input_scales, output_scale)
    if multiplier < 1:
        return None
    return (f"TFLM's int8 {builtin} needs an output scale above "
            f"{max(input_scales) / (1 << (ADD_LEFT_SHIFT - 1)):.3g} (the larger input scale / "
            f"2^{ADD_LEFT_SHIFT - 1}); the output scale is {output_scale:.3g}, an output range {multiplier:.3g}x "
            "too narrow")


def hard_swish_output_scale_problem(input_scale: float, output_scale: float) -> str | None:
    """HARD_SWISH (hard_swish_common.cc, HardSwishPrepare): the output multiplier (s_in / 128) / s_out must be
    below 1, its exponent at most 0 (``TF_LITE_ENSURE``): the output scale must exceed the input scale / 128."""
    if activations.hard_swish_output_multiplier(input_scale, output_scale) < 1:
        return None
    return (f"TFLM's int8 HARD_SWISH needs an output scale above {float(input_scale) / 128:.3g} (the input scale "
            f"/ 128); the output scale is {output_scale:.3g}")


# TFLM's MultiplyByQuantizedMultiplier shifts its int32 operand left by the multiplier's exponent before the
# fixed-point multiply: a centred int8 value (|q - zp| <= 255) overflows from 2^24 on, a MUL's product of two
# (<= 65025) from 2^16 on, undefined in C++ (TFLM's result wraps: a value due at -128 came out at 127).
REQUANTIZE_MAX_MULTIPLIER = {"QUANTIZE": 2.0**23, "MUL": 2.0**15}


def requantize_left_shift_problem(builtin: str, input_scales: Sequence[float], output_scale: float) -> str | None:
    """QUANTIZE (int8 to int8) and MUL: the multiplier s_in / s_out (s1 * s2 / s_out) below
    ``REQUANTIZE_MAX_MULTIPLIER``, so that the left shift stays inside int32."""
    multiplier = float(np.prod([_stored(s) for s in input_scales])) / _stored(output_scale)
    limit = REQUANTIZE_MAX_MULTIPLIER[builtin]
    if multiplier < limit:
        return None
    return (f"TFLM's int8 {builtin} would shift past int32 with an output multiplier of {multiplier:.3g} (at most "
            f"2^{int(np.log2(limit))}): an output scale of {_stored(output_scale):.3g} is too fine for its input's")


# TFLM's per-tensor int8 FULLY_CONNECTED (GetQuantizedConvolutionMultipler, kernel_util.cc) refuses to prepare
# unless the bias scale is s_in * s_w to within 2% of an output step. The bias scale is a float32, within half
# its last place (6e-8) of the exact product, so an output scale about 3e5 times finer than s_in * s_w fails:
# a layer whose outputs calibration saw as nearly constant, from wide inputs (two inputs that cancel).
# Convolutions (PopulateConvolutionQuantizationParams) check this for uint8 only; per-channel FC not at all.
BIAS_SCALE_TOLERANCE = 0.02


def fully_connected_bias_scale_problem(input_scale: float, weight_scale: float, bias_scale: float,
                                       output_scale: float) -> str | None:
    """FULLY_CONNECTED with a per-tensor filter and a bias: |s_in * s_w - s_bias| / s_out at most 0.02, in
    double from the stored float32 scales."""
    product = _stored(input_scale) * _stored(weight_scale)
    ratio = abs(product - _stored(bias_scale)) / _stored(output_scale)
    if ratio <= BIAS_SCALE_TOLERANCE:
        return None
    return (f"TFLM's int8 FULLY_CONNECTED prepares only a bias scale within {BIAS_SCALE_TOLERANCE:g} of an "
            f"output step of s_in * s_w: an output scale of {_stored(output_scale):.3g}, "
            f"{product / _stored(output_scale):.3g} times finer than s_in * s_w, leaves {ratio:.3g}")


# TFLM's int8 SOFTMAX sums a row's exponentials (each at most 1) in Q12 and divides by a power of two whose
# exponent, num_bits_over_unit + 23, it checks is at most 31: a sum of 512 or more aborts. Only a row of 512
# or more values can reach it (all equal ones do: a constant or zero input).
SOFTMAX_MAX_ROW = 511


def softmax_row_problem(row: int) -> str | None:
    """SOFTMAX (reference softmax.h): at most ``SOFTMAX_MAX_ROW`` values per row."""
    if row <= SOFTMAX_MAX_ROW:
        return None
    return (f"TFLM's int8 SOFTMAX aborts on a row of {row} values once their exponentials sum to 512 (equal "
            f"values do): at most {SOFTMAX_MAX_ROW} per row")


def q4_input_scale_problem(builtin: str, input_scale: float) -> str | None:
    """LOGISTIC / TANH (reference_integer_ops): an input scale below 8. From 8 on TFLM's input radius is 0 and it
    saturates every value, its zero point included, to the low end: a silently wrong 0."""
    if activations.q4_input_radius(input_scale) > 0:
        return None
    return (f"TFLM's int8 {builtin} saturates every value, 0 included, at an input scale of 8 or more; the "
            f"input scale is {input_scale:.3g}")


MAX_CONCATENATION_INPUTS = 10  # TFLM's concatenation kernel (concatenation.cc, kMaxInputNum); its prepare refuses more


def concatenation_inputs_problem(count: int) -> str | None:
    """CONCATENATION (concatenation.cc, ConcatenationPrepare): at most ``MAX_CONCATENATION_INPUTS`` inputs."""
    if count <= MAX_CONCATENATION_INPUTS:
        return None
    return f"TFLM's CONCATENATION takes at most {MAX_CONCATENATION_INPUTS} inputs; it has {count}"
