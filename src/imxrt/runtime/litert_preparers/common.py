"""LiteRT preparers, shared by every op family: what a preparer returns (``Evaluate``, ``BlasFree``), the
per-channel multipliers and the optional bias of a weighted op, and the window of a convolution or pool
checked against what the kernels take."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from imxrt.kernels import conv
from imxrt.kernels.requantize import quantize_multiplier
from imxrt.runtime.litert_model import CHANNELS, CONV_INPUT, HEIGHT, OUTPUT, OperatorView

Evaluate = Callable[[list], list]  # operand arrays in operator order (None for an omitted operand) -> outputs


@dataclass(frozen=True)
class BlasFree:
    """What a preparer returns for an evaluation that calls no BLAS (a C kernel): a subgraph made only of
    such steps runs without switching BLAS to one thread and back, which costs more than a small layer."""

    evaluate: Evaluate


def requantize_multipliers(op: OperatorView, input_operand: int, weight_operand: int, channels: int):
    """Per-channel M[c] = s_in * s_w[c] / s_out in double (TFLM PopulateConvolutionQuantizationParams)."""
    weight_scales = op.scales(weight_operand)
    if len(weight_scales) == 1:
        weight_scales = np.repeat(weight_scales, channels)
    real = np.float64(op.scale(input_operand)) * weight_scales / np.float64(op.scale(OUTPUT, True))
    return quantize_multiplier(real)


def optional_bias(op: OperatorView, operand: int) -> np.ndarray | None:
    return op.constant(operand) if op.has_input(operand) else None


def checked_window(op: OperatorView, filter_hw, stride, dilation) -> conv.Window:
    """The op's window over its NHWC input (operand 0), checked against what the kernels take
    (``conv.check_window``) before anything is sized from it."""
    input_shape = op.shape(CONV_INPUT)
    if len(input_shape) != 4:
        raise op.invalid(f"its input is {input_shape}; it must be 4-D (NHWC)")
    same = op.options.padding == schema.Padding.SAME
    try:
        conv.check_steps(filter_hw, stride, dilation)
        window = conv.make_window(input_shape[HEIGHT:CHANNELS], filter_hw, stride, dilation, same)
        padding = window.padding(input_shape[HEIGHT:CHANNELS]) if same else ((0, 0), (0, 0))
        conv.check_window(input_shape, filter_hw, stride, dilation, padding)
    except ValueError as e:
        raise op.invalid(str(e)) from None
    return window


def check_output(op: OperatorView, window: conv.Window, channels: int) -> None:
    """The output the subgraph declares is the one the window gives (the result is written into it)."""
    expected = (op.shape(CONV_INPUT)[0], *window.output_size, channels)
    if op.shape(OUTPUT, True) != expected:
        raise op.invalid(f"declares output {op.shape(OUTPUT, True)}, its input and window give {expected}")
