"""What TFLM's int8 kernels require of an operator so that they never abort.

TFLM checks these with ``TFLITE_CHECK``, which aborts the process (on the host and on a board running
TFLM), and our partitions must mean what TFLM computes. The lowering refuses an operator that can fail one
(``LoweringContext.emit``), so its node stays on the CPU, and every ``.tflite`` we write prepares and runs
on any input. One row per builtin that can fail on valid qparams, shapes or data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np  # the flatbuffer stores scales as float32: TFLM computes from those

from imxrt.kernels import activations
from imxrt.kernels.elementwise import ADD_LEFT_SHIFT
from imxrt.npu.litert.ir import PerTensor, Tensor


def _scale(tensor: Tensor | None) -> float | None:
    if tensor is None or tensor.dtype != np.int8 or not isinstance(tensor.quantization, PerTensor):
        return None
    return tensor.quantization.scale


def add_sub_multiplier(input_scales: Sequence[float], output_scale: float) -> float:
    """TFLM's int8 ADD / SUB output multiplier (add_common.cc, sub_common.cc): 2 * max(s1, s2) / (2^20 * s_out),
    which ``QuantizeMultiplierSmallerThanOneExp`` requires below 1."""
    as_stored = [float(np.float32(s)) for s in (*input_scales, output_scale)]
    return 2 * max(as_stored[:-1]) / ((1 << ADD_LEFT_SHIFT) * as_stored[-1])


def add_sub_output_multiplier(builtin: str, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor]) -> str | None:
    """ADD / SUB: the output scale must exceed the larger input scale / 2^19 (``add_sub_multiplier`` below 1)."""
    scales = [_scale(t) for t in (*inputs[:2], outputs[0])]
    if None in scales:
        return None
    multiplier = add_sub_multiplier(scales[:-1], scales[-1])
    if multiplier < 1:
        return None
    return (f"TFLM's int8 {builtin} needs an output scale above {max(scales[:-1]) / (1 << (ADD_LEFT_SHIFT - 1)):.3g} "
            f"(the larger input scale / 2^{ADD_LEFT_SHIFT - 1}); calibration gave {scales[-1]:.3g}, an output "
            f"range {multiplier:.3g}x too narrow")


def hard_swish_output_multiplier(builtin: str, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor]
                                 ) -> str | None:
    """HARD_SWISH (hard_swish_common.cc): the output multiplier (s_in / 128) / s_out must be below 1, its
    exponent at most 0 (``TF_LITE_ENSURE``: TFLM refuses to prepare the model): the output scale must exceed
    the input scale / 128."""
    s_in, s_out = _scale(inputs[0]), _scale(outputs[0])
    if s_in is None or s_out is None:
        return None
    if activations.hard_swish_output_multiplier(s_in, s_out) < 1:
        return None
    return (f"TFLM's int8 HARD_SWISH needs an output scale above {float(s_in) / 128:.3g} (the input scale / 128); "
            f"calibration gave {s_out:.3g}")


# TFLM's MultiplyByQuantizedMultiplier shifts its int32 operand left by the multiplier's exponent before the
# fixed-point multiply: a centred int8 value (|q - zp| <= 255) overflows from 2^24 on, a MUL's product of two
# (<= 65025) from 2^16 on, undefined in C++ (TFLM's result wraps: a value due at -128 came out at 127).
REQUANTIZE_MAX_MULTIPLIER = {"QUANTIZE": 2.0**23, "MUL": 2.0**15}


def requantize_left_shift(builtin: str, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor]) -> str | None:
    """QUANTIZE (int8 to int8) and MUL: the multiplier s_in / s_out (s1 * s2 / s_out) below
    ``REQUANTIZE_MAX_MULTIPLIER``, so that the left shift stays inside int32."""
    scales = [_scale(t) for t in (*inputs[:1 if builtin == "QUANTIZE" else 2], outputs[0])]
    if None in scales:
        return None
    stored = [float(np.float32(s)) for s in scales]
    multiplier = float(np.prod(stored[:-1])) / stored[-1]
    limit = REQUANTIZE_MAX_MULTIPLIER[builtin]
    if multiplier < limit:
        return None
    return (f"TFLM's int8 {builtin} would shift past int32 with an output multiplier of {multiplier:.3g} (at most "
            f"2^{int(np.log2(limit))}): an output scale of {stored[-1]:.3g} is too fine for its input's")


# TFLM's per-tensor int8 FULLY_CONNECTED (GetQuantizedConvolutionMultipler, kernel_util.cc) refuses to prepare
# unless the bias scale is s_in * s_w to within 2% of an output step. The bias scale is a float32, within half
# its last place (6e-8) of the exact product, so an output scale about 3e5 times finer than s_in * s_w fails:
# a layer whose outputs calibration saw as nearly constant, from wide inputs (two inputs that cancel).
# Convolutions (PopulateConvolutionQuantizationParams) check this for uint8 only; per-channel FC not at all.
BIAS_SCALE_TOLERANCE = 0.02


def fully_connected_bias_scale(builtin: str, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor]
                               ) -> str | None:
    """FULLY_CONNECTED with a per-tensor filter and a bias: |s_in * s_w - s_bias| / s_out at most 0.02, in
    double from the stored float32 scales."""
    bias = inputs[2] if len(inputs) > 2 else None
    s_in, s_w, s_out = _scale(inputs[0]), _scale(inputs[1]), _scale(outputs[0])
    if bias is None or not isinstance(bias.quantization, PerTensor) or None in (s_in, s_w, s_out):
        return None
    product = float(np.float32(s_in)) * float(np.float32(s_w))
    ratio = abs(product - float(np.float32(bias.quantization.scale))) / float(np.float32(s_out))
    if ratio <= BIAS_SCALE_TOLERANCE:
        return None
    return (f"TFLM's int8 FULLY_CONNECTED prepares only a bias scale within {BIAS_SCALE_TOLERANCE:g} of an "
            f"output step of s_in * s_w: an output scale of {float(np.float32(s_out)):.3g}, "
            f"{product / float(np.float32(s_out)):.3g} times finer than s_in * s_w, leaves {ratio:.3g}")


# TFLM's int8 SOFTMAX sums a row's exponentials (each at most 1) in Q12 and divides by a power of two whose
# exponent, num_bits_over_unit + 23, it checks is at most 31: a sum of 512 or more aborts. Only a row of 512
# or more values can reach it (all equal ones do: a constant or zero input).
SOFTMAX_MAX_ROW = 511


def softmax_row(builtin: str, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor]) -> str | None:
    """SOFTMAX (reference softmax.h): at most ``SOFTMAX_MAX_ROW`` values per row."""
    row = outputs[0].shape[-1] if outputs[0].shape else 1
    if row <= SOFTMAX_MAX_ROW:
        return None
    return (f"TFLM's int8 SOFTMAX aborts on a row of {row} values once their exponentials sum to 512 (equal "
            f"values do): at most {SOFTMAX_MAX_ROW} per row")


def q4_input_scale(builtin: str, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor]) -> str | None:
    """LOGISTIC / TANH (reference_integer_ops): an input scale below 8. From 8 on TFLM's input radius is 0 and it
    saturates every value, its zero point included, to the low end: a silently wrong 0."""
    s_in = _scale(inputs[0])
    if s_in is None or activations.q4_input_radius(s_in) > 0:
        return None
    return (f"TFLM's int8 {builtin} saturates every value, 0 included, at an input scale of 8 or more; "
            f"calibration gave {s_in:.3g}")


CHECKS: dict[str, Callable[[str, Sequence[Tensor | None], Sequence[Tensor]], str | None]] = {
    "ADD": add_sub_output_multiplier,
    "SUB": add_sub_output_multiplier,
    "SOFTMAX": softmax_row,
    "HARD_SWISH": hard_swish_output_multiplier,
    "QUANTIZE": requantize_left_shift,
    "MUL": requantize_left_shift,
    "LOGISTIC": q4_input_scale,
    "TANH": q4_input_scale,
    "FULLY_CONNECTED": fully_connected_bias_scale,
}


def problem(builtin: str, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor]) -> str | None:
    """Why TFLM could abort on this operator, or None."""
    check = CHECKS.get(builtin)
    return check(builtin, inputs, outputs) if check else None
