"""Quantization specs of the int8 scheme every imxrt program uses.

Activations: int8 per-tensor asymmetric. Weights: int8 symmetric ([-127, 127], so the CMSIS-NN and Neutron
kernels can treat the filter offset as 0), per output channel for convolutions and per tensor for linear
layers. Bias: int32 at s_in * s_w[c] with zero point 0.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch
from torch.fx import Node
from torchao.quantization.pt2e import (
    FakeQuantize,
    MinMaxObserver,
    MovingAverageMinMaxObserver,
    MovingAveragePerChannelMinMaxObserver,
    PerChannelMinMaxObserver,
)
from torchao.quantization.pt2e.quantizer import (
    DerivedQuantizationSpec,
    FixedQParamsQuantizationSpec,
    QuantizationSpec,
)

from imxrt.quantization.observers import FiniteMinMaxObserver, QatMovingAverageMinMaxObserver
from imxrt.quantization.ranges import ClippedRangeObserver

INT8_MIN, INT8_MAX = -128, 127
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def activation_spec(qat: bool = False, symmetric: bool = False, ranges: str = "minmax") -> QuantizationSpec:
    """Per-tensor asymmetric int8, calibrated by min/max of the finite values (TFLite's converter does the
    same) or, ``ranges="mse"``, by the range of least int8 error over their histogram
    (``ranges.ClippedRangeObserver``); ``symmetric``: zero point 0, for the operands of a batch matmul, which
    Neutron's BATCH_MATMUL takes only with zero points 0. QAT starts from min/max and learns from there."""
    if qat:
        observer = FakeQuantize.with_args(observer=QatMovingAverageMinMaxObserver)
    else:
        observer = ClippedRangeObserver if ranges == "mse" else FiniteMinMaxObserver
    return QuantizationSpec(
        dtype=torch.int8,
        quant_min=INT8_MIN,
        quant_max=INT8_MAX,
        qscheme=torch.per_tensor_symmetric if symmetric else torch.per_tensor_affine,
        is_dynamic=False,
        observer_or_fake_quant_ctr=observer,
    )


def weight_spec(channel_axis: int, qat: bool = False, per_channel: bool = True) -> QuantizationSpec:
    """Symmetric int8 in [-127, 127]: one scale per output channel (axis ``channel_axis``), or one."""
    if per_channel:
        observer = (FakeQuantize.with_args(observer=MovingAveragePerChannelMinMaxObserver) if qat
                    else PerChannelMinMaxObserver)
        return QuantizationSpec(dtype=torch.int8, quant_min=-127, quant_max=INT8_MAX,
                                qscheme=torch.per_channel_symmetric, ch_axis=channel_axis, is_dynamic=False,
                                observer_or_fake_quant_ctr=observer)
    observer = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver) if qat else MinMaxObserver
    return QuantizationSpec(dtype=torch.int8, quant_min=-127, quant_max=INT8_MAX,
                            qscheme=torch.per_tensor_symmetric, is_dynamic=False,
                            observer_or_fake_quant_ctr=observer)


def _bias_qparams(observers, groups: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Bias scale per output channel: s_in * s_w[c], zero point 0 (TFLite and CMSIS-NN require it). A
    grouped transposed conv's weight [C_in, C_out / groups, kh, kw] has one scale per output channel of a
    group, shared by every group: its C_out bias channels repeat them ``groups`` times (one scale for
    three channels made a program ExecuTorch's dequantize kernel aborts on)."""
    input_observer, weight_observer = observers
    input_scale, _ = input_observer.calculate_qparams()
    weight_scale, _ = weight_observer.calculate_qparams()
    scale = (input_scale * weight_scale).to(torch.float32)
    if groups > 1:
        scale = scale.reshape(-1).repeat(groups)
    return scale, torch.zeros_like(scale, dtype=torch.int32)


def bias_limit(weight_shape: Sequence[int], weight_axis: int = 0) -> int:
    """The largest |int32 bias| of a layer whose weight has ``weight_shape`` (output channels on
    ``weight_axis``): room left for the K products an output adds to it in TFLM's and CMSIS-NN's int32
    accumulator (each |q_in - zp| * |q_w| <= 255 * 127), and a multiple of 128, which float32 holds exactly.

    pt2e clamps and rounds the bias in float32, where INT32_MAX reads as 2^31: a bias past it became
    -2^31 when cast (a large positive bias changed sign), and one at -2^31 left the accumulator no room."""
    products = math.prod(weight_shape) // max(int(weight_shape[weight_axis]), 1)
    limit = INT32_MAX - products * 255 * 127
    return max(limit, 1 << 24) // 128 * 128


def bias_spec(op_node: Node, input_node: Node, weight_node: Node, per_channel: bool = True, weight_axis: int = 0
              ) -> DerivedQuantizationSpec:
    """int32 at s_in * s_w: per output channel when the weight is, else one scale (a per-channel bias with
    a single scale is a program ExecuTorch's dequantize kernel refuses); within ``bias_limit``."""
    transposed_groups = op_node.args[6] if op_node.target == torch.ops.aten.conv_transpose2d.input and len(
        op_node.args) > 6 else 1
    limit = bias_limit(tuple(weight_node.meta["val"].shape), weight_axis)
    return DerivedQuantizationSpec(
        derived_from=[(input_node, op_node), (weight_node, op_node)],
        derive_qparams_fn=functools.partial(_bias_qparams, groups=int(transposed_groups)),
        dtype=torch.int32,
        quant_min=-limit,
        quant_max=limit,
        qscheme=torch.per_channel_symmetric if per_channel else torch.per_tensor_symmetric,
        ch_axis=0,
    )


def _same_qparams(observers) -> tuple[torch.Tensor, torch.Tensor]:
    (observer,) = observers
    return observer.calculate_qparams()


def same_qparams_spec(input_node: Node, op_node: Node) -> DerivedQuantizationSpec:
    """int8 with the qparams of ``input_node`` as ``op_node`` reads it, observing nothing itself (the output
    of an op whose other values must not widen its input's range)."""
    return DerivedQuantizationSpec(
        derived_from=[(input_node, op_node)],
        derive_qparams_fn=_same_qparams,
        dtype=torch.int8,
        quant_min=INT8_MIN,
        quant_max=INT8_MAX,
        qscheme=torch.per_tensor_affine,
    )


def fixed_spec(scale: float, zero_point: int) -> FixedQParamsQuantizationSpec:
    """Output qparams the int8 kernel itself dictates (softmax, logistic, tanh)."""
    return FixedQParamsQuantizationSpec(
        dtype=torch.int8,
        scale=scale,
        zero_point=zero_point,
        quant_min=INT8_MIN,
        quant_max=INT8_MAX,
        qscheme=torch.per_tensor_affine,
    )
