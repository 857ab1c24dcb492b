"""convolution -> CONV_2D (grouped: SLICE + CONV_2D per group + CONCATENATION), DEPTHWISE_CONV_2D or
TRANSPOSE_CONV; explicit padding TFLite cannot express becomes a PAD in front (padding = zero point)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from ai_edge_litert import schema_py_generated as schema
from torch.fx import Node

from imxrt.npu.litert import expressible
from imxrt.npu.litert.context import LoweringContext, Output, edge_shape
from imxrt.npu.litert.converters.common import Padding, options, window_padding
from imxrt.npu.litert.converters.pad import pad_tensor
from imxrt.npu.litert.ir import PerChannel, PerTensor, Tensor

CONV_INPUT, CONV_WEIGHT, CONV_BIAS = 0, 1, 2
_NHWC_CHANNELS = 3


@dataclass(frozen=True)
class ConvArgs:
    """convolution.default(input, weight, bias, stride, padding, dilation, transposed, output_padding,
    groups), spatial lists as (h, w)."""

    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    transposed: bool
    output_padding: tuple[int, int]
    groups: int

    @staticmethod
    def of(node: Node) -> ConvArgs:
        stride, padding, dilation, transposed, output_padding, groups = node.args[3:9]
        assert len(stride) == expressible.SPATIAL_DIMS, "support.conv_is_2d admits 2-D convolutions only"
        pair = lambda v: (int(v[0]), int(v[1]))  # noqa: E731
        return ConvArgs(pair(stride), pair(padding), pair(dilation), bool(transposed), pair(output_padding),
                        int(groups))


def convert_convolution(ctx: LoweringContext, node: Node) -> None:
    args = ConvArgs.of(node)
    if args.transposed:
        _transpose_conv(ctx, node, args)
        return
    x = ctx.tensor(node.args[CONV_INPUT], node)
    out = ctx.output(node, fusable=True)
    weight, scales, axis = ctx.weight(node.args[CONV_WEIGHT], node)
    assert expressible.conv_weight_axis_ok(axis, transposed=False), "support.conv_weight_per_output_channel"
    in_channels = edge_shape(node.args[CONV_INPUT])[1]
    out_channels, _, kernel_h, kernel_w = weight.shape
    x, padding = _padded_input(ctx, node, x, args, (kernel_h, kernel_w), out.sources)
    bias = node.args[CONV_BIAS]

    if args.groups == in_channels and in_channels > 1 and out_channels % in_channels == 0:
        _depthwise(ctx, node, x, weight, scales, bias, args, padding, out)
    else:
        _conv_2d(ctx, node, x, weight, scales, bias, args, padding, out)


def _padded_input(ctx, node, x, args: ConvArgs, kernel, sources) -> tuple[Tensor, int]:
    """The input and the TFLite padding to use: SAME / VALID if it matches, else PAD then VALID."""
    _, _, height, width = edge_shape(node.args[CONV_INPUT])
    padding = window_padding((height, width), kernel, args.stride, args.dilation, args.padding)
    if padding is not None:
        return x, padding
    pad_h, pad_w = args.padding
    return pad_tensor(ctx, x, [(0, 0), (pad_h, pad_h), (pad_w, pad_w), (0, 0)], sources), Padding.VALID


def _window_fields(args: ConvArgs, padding: int, fused: int) -> dict:
    """The option fields CONV_2D and DEPTHWISE_CONV_2D share."""
    return dict(padding=padding, strideH=args.stride[0], strideW=args.stride[1], dilationHFactor=args.dilation[0],
                dilationWFactor=args.dilation[1], fusedActivationFunction=fused)


def _conv_options(args: ConvArgs, padding: int, fused: int) -> object:
    return options(schema.Conv2DOptionsT, **_window_fields(args, padding, fused))


def _conv_2d(ctx, node, x, weight, scales, bias, args, padding, out: Output) -> None:
    """OIHW int8 weights -> OHWI, per-channel along dim 0.

    Grouped (1 < groups < C_in): one SLICE of the input channels and one CONV_2D per group, joined by a
    CONCATENATION along channels, all inside the partition. Every part carries the output's qparams, so
    the join copies bytes. The Neutron converter takes per-group convolutions (upstream also splits
    groups, but leaves its split on the CPU, which fragments the partition)."""
    bias_scales = _bias_scales(x, scales)
    bias_values = ctx.bias_values(bias, node, len(scales))
    conv_options = _conv_options(args, padding, out.fused)
    if args.groups == 1:
        filters = ctx.constant_tensor(
            node.args[CONV_WEIGHT].name, weight.transpose(0, 2, 3, 1), PerChannel(tuple(scales), axis=0)
        )
        bias_tensor = ctx.constant_tensor(f"{node.name}_bias", bias_values, PerChannel(tuple(bias_scales), axis=0))
        ctx.emit_result("CONV_2D", [x, filters, bias_tensor], out, conv_options)
        return
    batch, height, width, in_channels = x.shape
    in_per_group = in_channels // args.groups
    out_per_group = weight.shape[0] // args.groups
    parts = []
    for group in range(args.groups):
        part_input = ctx.activation_tensor(f"{x.name}_group{group}", (batch, height, width, in_per_group),
                                           x.quantization)
        begin = ctx.int32_constant("begin", [0, 0, 0, group * in_per_group])
        size = ctx.int32_constant("size", [batch, height, width, in_per_group])
        ctx.emit("SLICE", [x, begin, size], [part_input], None, out.sources)
        channels = slice(group * out_per_group, (group + 1) * out_per_group)
        filters = ctx.constant_tensor(f"{node.args[CONV_WEIGHT].name}_group{group}",
                                      weight[channels].transpose(0, 2, 3, 1),
                                      PerChannel(tuple(scales[channels]), axis=0))
        bias_tensor = ctx.constant_tensor(f"{node.name}_bias_group{group}", bias_values[channels],
                                          PerChannel(tuple(bias_scales[channels]), axis=0))
        part = ctx.activation_tensor(f"{out.anchor.name}_group{group}", (*out.shape[:3], out_per_group),
                                     out.quantization)
        ctx.emit("CONV_2D", [part_input, filters, bias_tensor], [part], conv_options, out.sources)
        parts.append(part)
    joined = ctx.activation_tensor(out.anchor.name, out.shape, out.quantization)
    ctx.bind(out, ctx.concatenate(parts, joined, _NHWC_CHANNELS, out.sources))


def _depthwise(ctx, node, x, weight, scales, bias, args, padding, out: Output) -> None:
    """(C_out, 1, kh, kw) -> [1, kh, kw, C_out], per-channel along dim 3. Output channel c reads input
    channel c // depth_multiplier in both PyTorch and TFLite."""
    in_channels = x.shape[_NHWC_CHANNELS]
    filters = ctx.constant_tensor(
        node.args[CONV_WEIGHT].name, weight.transpose(1, 2, 3, 0), PerChannel(tuple(scales), axis=3)
    )
    bias_tensor = ctx.bias(bias, node, _bias_scales(x, scales))
    depthwise_options = options(schema.DepthwiseConv2DOptionsT, depthMultiplier=weight.shape[0] // in_channels,
                                **_window_fields(args, padding, out.fused))
    ctx.emit_result("DEPTHWISE_CONV_2D", [x, filters, bias_tensor], out, depthwise_options)


def _bias_scales(x: Tensor, weight_scales: np.ndarray) -> np.ndarray:
    """TFLite's bias scale: s_in * s_w[c] (what the quantizer derived the int32 bias with)."""
    assert isinstance(x.quantization, PerTensor)
    return np.float32(x.quantization.scale) * weight_scales.astype(np.float32)


# ---- transposed convolution ----------------------------------------------------------------------


def _transpose_implied_input(padding: int, out_size: int, kernel: int, stride: int) -> int:
    """The input size TFLite's TRANSPOSE_CONV derives from the output size (LiteRT's prepare refuses the op
    unless it is the input's: "computed_input_height != ...")."""
    if padding == Padding.SAME:
        return math.ceil(out_size / stride)
    return (out_size - kernel + stride) // stride


def _transpose_pad_before(padding: int, out_size: int, kernel: int, stride: int) -> int:
    """The padding TFLite's TRANSPOSE_CONV derives from the output size (TFLite padding.h)."""
    inner = _transpose_implied_input(padding, out_size, kernel, stride)
    return max((inner - 1) * stride + kernel - out_size, 0) // 2


def _transpose_conv(ctx: LoweringContext, node: Node, args: ConvArgs) -> None:
    """PyTorch weight (C_in, C_out, kh, kw) -> TFLite [C_out, kh, kw, C_in], per-channel along C_out.
    TFLite output row o = i * stride - pad + k, PyTorch o = i * stride - padding + k: we need TFLite's
    derived pad to equal PyTorch's padding; else a VALID full-size result is SLICEd."""
    assert args.groups == 1 and args.dilation == (1, 1), "support.transpose_conv_shape"
    x = ctx.tensor(node.args[CONV_INPUT], node)
    out = ctx.output(node, fusable=True)
    weight, scales, axis = ctx.weight(node.args[CONV_WEIGHT], node)
    assert expressible.conv_weight_axis_ok(axis, transposed=True), "support.conv_weight_per_output_channel"
    _, _, kernel_h, kernel_w = weight.shape
    kernels = (kernel_h, kernel_w)
    filters = ctx.constant_tensor(
        node.args[CONV_WEIGHT].name, weight.transpose(1, 2, 3, 0), PerChannel(tuple(scales), axis=0)
    )
    bias_tensor = ctx.bias(node.args[CONV_BIAS], node, _bias_scales(x, scales))
    out_hw = out.shape[1:3]
    in_hw = x.shape[1:3]

    def matches(padding: int) -> bool:
        return all(
            _transpose_pad_before(padding, out_hw[d], kernels[d], args.stride[d]) == args.padding[d]
            and _transpose_implied_input(padding, out_hw[d], kernels[d], args.stride[d]) == in_hw[d]
            for d in range(2)
        )

    padding = next((p for p in (Padding.VALID, Padding.SAME) if matches(p)), None)
    conv_options = lambda p: options(  # noqa: E731
        schema.TransposeConvOptionsT, padding=p, strideH=args.stride[0], strideW=args.stride[1],
        fusedActivationFunction=out.fused,
    )
    if padding is not None:
        output_shape = ctx.int32_constant("output_shape", out.shape)
        ctx.emit_result("TRANSPOSE_CONV", [output_shape, filters, x, bias_tensor], out, conv_options(padding))
        return
    full_hw = [(in_hw[d] - 1) * args.stride[d] + kernels[d] for d in range(2)]
    # output rows no input reaches (output_padding > padding) would be past the full result
    assert all(args.padding[d] + out_hw[d] <= full_hw[d] for d in range(2)), "support.transpose_conv_shape"
    full_shape = [out.shape[0], *full_hw, out.shape[3]]
    full = ctx.activation_tensor(out.anchor.name + "_full", full_shape, out.quantization)
    output_shape = ctx.int32_constant("output_shape", full_shape)
    ctx.emit("TRANSPOSE_CONV", [output_shape, filters, x, bias_tensor], [full], conv_options(Padding.VALID),
             out.sources)
    begin = ctx.int32_constant("begin", [0, args.padding[0], args.padding[1], 0])
    size = ctx.int32_constant("size", out.shape)
    ctx.emit_result("SLICE", [full, begin, size], out)

