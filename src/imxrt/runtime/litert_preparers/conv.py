"""LiteRT preparers, convolutions: CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV (windows checked against the
input and the declared output before anything is sized)."""

from __future__ import annotations

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from imxrt.kernels import conv
from imxrt.runtime.litert_model import (
    CHANNELS,
    CONV_BIAS,
    CONV_FILTER,
    CONV_INPUT,
    DEPTHWISE_CHANNELS,
    OUTPUT,
    TRANSPOSE_CONV_BIAS,
    TRANSPOSE_CONV_FILTER,
    TRANSPOSE_CONV_INPUT,
    OperatorView,
)
from imxrt.runtime.litert_preparers.common import (
    Evaluate,
    check_output,
    checked_window,
    optional_bias,
    requantize_multipliers,
)


def prepare_conv2d(op: OperatorView) -> Evaluate:
    op.require_int8(CONV_INPUT, CONV_FILTER)
    options = op.options
    filters = op.constant(CONV_FILTER)  # OHWI
    input_shape = op.shape(CONV_INPUT)
    if input_shape[CHANNELS] != filters.shape[3]:
        raise op.unsupported(f"is a grouped convolution ({input_shape[CHANNELS]} input channels, filters take "
                             f"{filters.shape[3]})")
    window = checked_window(op, filters.shape[1:3], (options.strideH, options.strideW),
                     (options.dilationHFactor, options.dilationWFactor))
    check_output(op, window, filters.shape[0])
    multipliers, shifts = requantize_multipliers(op, CONV_INPUT, CONV_FILTER, filters.shape[0])
    params = conv.prepare_conv(filters, optional_bias(op, CONV_BIAS), window, op.zero_point(CONV_INPUT),
                               multipliers, shifts, op.zero_point(OUTPUT, True), *op.fused())
    return lambda args: [conv.conv2d(args[CONV_INPUT], params)]


def prepare_depthwise_conv2d(op: OperatorView) -> Evaluate:
    op.require_int8(CONV_INPUT, CONV_FILTER)
    options = op.options
    filters = op.constant(CONV_FILTER)  # [1, kh, kw, C_out]
    input_shape = op.shape(CONV_INPUT)
    out_channels = filters.shape[DEPTHWISE_CHANNELS]
    window = checked_window(op, filters.shape[1:3], (options.strideH, options.strideW),
                     (options.dilationHFactor, options.dilationWFactor))
    if out_channels % input_shape[CHANNELS]:
        raise op.invalid(f"has {out_channels} output channels for {input_shape[CHANNELS]} input channels; they "
                         "must be a multiple")
    depth_multiplier = out_channels // input_shape[CHANNELS]
    check_output(op, window, out_channels)
    multipliers, shifts = requantize_multipliers(op, CONV_INPUT, CONV_FILTER, out_channels)
    bias = optional_bias(op, CONV_BIAS)
    params = conv.DepthwiseParams(
        window, depth_multiplier, filters[0].astype(np.int32),
        np.zeros(out_channels, np.int64) if bias is None else bias.astype(np.int64), op.zero_point(CONV_INPUT),
        multipliers, shifts, op.zero_point(OUTPUT, True), *op.fused())
    return lambda args: [conv.depthwise_conv2d(args[CONV_INPUT], params)]


def prepare_transpose_conv(op: OperatorView) -> Evaluate:
    op.require_int8(TRANSPOSE_CONV_INPUT, TRANSPOSE_CONV_FILTER)
    options = op.options
    filters = op.constant(TRANSPOSE_CONV_FILTER)  # [C_out, kh, kw, C_in]
    input_shape, output_shape = op.shape(TRANSPOSE_CONV_INPUT), op.shape(OUTPUT, True)
    if len(input_shape) != 4 or len(output_shape) != 4:
        raise op.invalid(f"maps {input_shape} to {output_shape}; both must be 4-D (NHWC)")
    try:  # the padding before is SAME's on the output, less than the filter: bounded by it here
        conv.check_transpose_window(input_shape, filters.shape[1:3], (options.strideH, options.strideW),
                                    filters.shape[1:3], output_shape)
    except ValueError as e:
        raise op.invalid(str(e)) from None
    multipliers, shifts = requantize_multipliers(op, TRANSPOSE_CONV_INPUT, TRANSPOSE_CONV_FILTER, filters.shape[0])
    params = conv.prepare_transpose_conv(
        filters, optional_bias(op, TRANSPOSE_CONV_BIAS), (options.strideH, options.strideW),
        options.padding == schema.Padding.SAME, op.shape(OUTPUT, True), op.zero_point(TRANSPOSE_CONV_INPUT),
        multipliers, shifts, op.zero_point(OUTPUT, True), *op.fused())
    return lambda args: [conv.transpose_conv2d(args[TRANSPOSE_CONV_INPUT], params)]
