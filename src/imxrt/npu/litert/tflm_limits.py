"""What TFLM's int8 kernels require of an operator so that they never abort.

TFLM checks these with ``TFLITE_CHECK``, which aborts the process (on the host and on a board running
TFLM), and our partitions must mean what TFLM computes. Each limit is a rule of the capability table
(``imxrt.npu.support``), which refuses a node that breaks it wherever the edge graph shows the numbers; the
lowering checks every operator it writes again (``LoweringContext.emit``), for what only it sees (a folded
constant's scale), so every ``.tflite`` we write prepares and runs on any input. One row per builtin that
can fail on valid qparams, shapes or data; the limits themselves are functions on plain numbers
(``imxrt.kernels.limits``), which the host runtime checks as well.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from imxrt.kernels import limits
from imxrt.kernels.limits import (  # the compiler's names for the shared limits
    BIAS_SCALE_TOLERANCE,
    MAX_CONCATENATION_INPUTS,
    REQUANTIZE_MAX_MULTIPLIER,
    SOFTMAX_MAX_ROW,
    add_sub_multiplier,
)
from imxrt.npu.litert.ir import PerTensor, Tensor

__all__ = ["BIAS_SCALE_TOLERANCE", "CHECKS", "MAX_CONCATENATION_INPUTS", "REQUANTIZE_MAX_MULTIPLIER",
           "SOFTMAX_MAX_ROW", "TflmCheck", "add_sub_multiplier", "problem"]


def _scale(tensor: Tensor | None) -> float | None:
    if tensor is None or tensor.dtype != np.int8 or not isinstance(tensor.quantization, PerTensor):
        return None
    return tensor.quantization.scale


def add_sub_output_multiplier(builtin: str, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor]) -> str | None:
    """ADD / SUB: the output scale must exceed the larger input scale / 2^19 (``add_sub_multiplier`` below 1)."""
    scales = [_scale(t) for t in (*inputs[:2], outputs[0])]
    if None in scales:
        return None
    return limits.add_sub_output_scale_problem(builtin, scales[:-1], scales[-1])


def hard_swish_output_multiplier(builtin: str, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor]
                                 ) -> str | None:
    """HARD_SWISH: the output scale must exceed the input scale / 128."""
    s_in, s_out = _scale(inputs[0]), _scale(outputs[0])
    if s_in is None or s_out is None:
        return None
    return limits.hard_swish_output_scale_problem(s_in, s_out)


def requantize_left_shift(builtin: str, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor]) -> str | None:
    """QUANTIZE (int8 to int8) and MUL: the multiplier s_in / s_out (s1 * s2 / s_out) below
    ``REQUANTIZE_MAX_MULTIPLIER``, so that the left shift stays inside int32."""
    scales = [_scale(t) for t in (*inputs[:1 if builtin == "QUANTIZE" else 2], outputs[0])]
    if None in scales:
        return None
    return limits.requantize_left_shift_problem(builtin, scales[:-1], scales[-1])


def fully_connected_bias_scale(builtin: str, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor]
                               ) -> str | None:
    """FULLY_CONNECTED with a per-tensor filter and a bias: |s_in * s_w - s_bias| / s_out at most 0.02."""
    bias = inputs[2] if len(inputs) > 2 else None
    s_in, s_w, s_out = _scale(inputs[0]), _scale(inputs[1]), _scale(outputs[0])
    if bias is None or not isinstance(bias.quantization, PerTensor) or None in (s_in, s_w, s_out):
        return None
    return limits.fully_connected_bias_scale_problem(s_in, s_w, bias.quantization.scale, s_out)


def softmax_row(builtin: str, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor]) -> str | None:
    """SOFTMAX (reference softmax.h): at most ``SOFTMAX_MAX_ROW`` values per row."""
    return limits.softmax_row_problem(outputs[0].shape[-1] if outputs[0].shape else 1)


def q4_input_scale(builtin: str, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor]) -> str | None:
    """LOGISTIC / TANH (reference_integer_ops): an input scale below 8."""
    s_in = _scale(inputs[0])
    return None if s_in is None else limits.q4_input_scale_problem(builtin, s_in)


@dataclass(frozen=True)
class TflmCheck:
    """The limit of one builtin: the capability table's rule that states it to the user (a constraint of
    ``imxrt.npu.support``, named here because the table imports this module; it lists the rule in the row of
    every op that emits the builtin, and refuses what it can see on the edge graph), and its check on the
    LiteRT tensors the lowering writes (folded constants, the builtin chosen)."""

    rule: str
    check: Callable[[str, Sequence[Tensor | None], Sequence[Tensor]], str | None]


CHECKS: dict[str, TflmCheck] = {
    "ADD": TflmCheck("add_sub_output_scale", add_sub_output_multiplier),
    "SUB": TflmCheck("add_sub_output_scale", add_sub_output_multiplier),
    "SOFTMAX": TflmCheck("softmax_row_tflm_can_sum", softmax_row),
    "HARD_SWISH": TflmCheck("hardswish_output_scale", hard_swish_output_multiplier),
    "QUANTIZE": TflmCheck("requantize_left_shift", requantize_left_shift),
    "MUL": TflmCheck("mul_output_scale", requantize_left_shift),
    "LOGISTIC": TflmCheck("q4_input_scale", q4_input_scale),
    "TANH": TflmCheck("q4_input_scale", q4_input_scale),
    "FULLY_CONNECTED": TflmCheck("fully_connected_bias_scale", fully_connected_bias_scale),
}


def problem(builtin: str, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor]) -> str | None:
    """Why TFLM could abort on this operator, or None."""
    entry = CHECKS.get(builtin)
    return entry.check(builtin, inputs, outputs) if entry else None
