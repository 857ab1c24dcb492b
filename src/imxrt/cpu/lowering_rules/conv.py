"""CPU lowering, convolutions: convolution -> quantized_conv2d, quantized_depthwise_conv2d or
quantized_transpose_conv2d, weights in CMSIS layouts and per-channel requantization."""

from __future__ import annotations

import numpy as np
import torch
from torch.fx import Node

from imxrt.cpu import scratch
from imxrt.cpu.lowering_rules.common import NotLowered, Rewrite, cortex_m, nhwc, pair, shape_of
from imxrt.kernels.requantize import quantize_multiplier


def _per_channel(s_in: float, weight_scales: np.ndarray, s_out: float) -> tuple[torch.Tensor, torch.Tensor]:
    """M[c] = s_in * s_w[c] / s_out in double (TFLM's PopulateConvolutionQuantizationParams) as int32 tensors."""
    multipliers, shifts = quantize_multiplier(np.float64(s_in) * weight_scales / np.float64(s_out))
    return torch.tensor(multipliers, dtype=torch.int32), torch.tensor(shifts, dtype=torch.int32)


def lower_convolution(rw: Rewrite) -> Node:
    """convolution -> quantized_conv2d (groups 1, or grouped), quantized_depthwise_conv2d (groups = C_in)
    or quantized_transpose_conv2d."""
    x_dq, w_dq, b_dq, stride, padding, dilation, transposed, output_padding, groups = rw.anchor.args[:9]
    in_shape, out_shape = shape_of(x_dq), shape_of(rw.cluster.quantizes[0])
    if len(in_shape) != 4:
        raise NotLowered(f"only 2-D convolutions have a CMSIS-NN kernel (input rank {len(in_shape)})")
    x, q_in, out = rw.int8(x_dq), rw.qparams(x_dq), rw.output_qparams()
    act_min, act_max = rw.activation_range(out)
    stride, padding, dilation = pair(stride, (1, 1)), pair(padding, (0, 0)), pair(dilation, (1, 1))
    if transposed:
        return _transpose_conv(rw, x, w_dq, b_dq, in_shape, out_shape, q_in, out, (act_min, act_max), stride,
                               padding, pair(output_padding, (0, 0)), dilation, groups)
    weight, scales = rw.weight(w_dq, axis=0)
    bias = rw.bias(b_dq)
    in_channels, out_channels = in_shape[1], weight.shape[0]
    multipliers, shifts = _per_channel(q_in.scale, scales, out.scale)
    window = (tuple(stride), tuple(padding), tuple(dilation))
    depthwise_layout = weight.permute(1, 2, 3, 0)  # [1, kh, kw, C_out]
    depthwise_bytes = scratch.depthwise_conv2d_scratch_bytes(rw.isa, nhwc(in_shape), tuple(depthwise_layout.shape),
                                                             nhwc(out_shape), *window)
    depthwise = groups == in_channels and weight.shape[1] == 1 and groups > 1
    if not depthwise:
        # OHWI; a grouped conv's I is C_in / groups, and arm_convolve_s8 runs each group on its channels
        op, layout = cortex_m("quantized_conv2d"), weight.permute(0, 2, 3, 1)
        nbytes = scratch.conv2d_scratch_bytes(rw.isa, nhwc(in_shape), tuple(layout.shape), nhwc(out_shape),
                                              *window)
        extra = ()
        # One input channel: the same sums as a depthwise conv with multiplier C_out, which may need less
        # scratch on this ISA (none on DSP, where the im2col conv needs a column buffer).
        depthwise = in_channels == 1 and depthwise_bytes < nbytes
    if depthwise:
        op, layout, nbytes = cortex_m("quantized_depthwise_conv2d"), depthwise_layout, depthwise_bytes
        extra = (out_channels // in_channels,)  # depth_multiplier
    if bias is None and (depthwise or groups > 1):  # these kernels offset the bias per group: a real one
        bias = rw.constant("bias", torch.zeros(out_channels, dtype=torch.int32))
    args = (x, rw.constant("weight", layout.contiguous()), bias, stride, padding, dilation, *extra,
            -q_in.zero_point, out.zero_point, rw.constant("multipliers", multipliers),
            rw.constant("shifts", shifts), act_min, act_max, rw.scratch(nbytes))
    return rw.emit(op, args)


def _transpose_conv(rw: Rewrite, x, w_dq, b_dq, in_shape, out_shape, q_in, out, act, stride, padding,
                    output_padding, dilation, groups) -> Node:
    if groups != 1:
        raise NotLowered(f"a grouped transposed convolution (groups={groups}) has no CMSIS-NN int8 kernel")
    if dilation != [1, 1]:
        raise NotLowered(f"a dilated transposed convolution (dilation={dilation}) has no CMSIS-NN int8 kernel")
    weight, scales = rw.weight(w_dq, axis=1)  # PyTorch [C_in, C_out, kh, kw]
    layout = weight.permute(1, 2, 3, 0).contiguous()  # [C_out, kh, kw, C_in]
    multipliers, shifts = _per_channel(q_in.scale, scales, out.scale)
    nbytes, out_nbytes = scratch.transpose_conv2d_scratch_bytes(rw.isa, nhwc(in_shape), tuple(layout.shape),
                                                                nhwc(out_shape), tuple(stride), tuple(padding))
    args = (x, rw.constant("weight", layout), rw.bias(b_dq), stride, padding, output_padding, dilation,
            -q_in.zero_point, out.zero_point, rw.constant("multipliers", multipliers),
            rw.constant("shifts", shifts), *act, rw.scratch(nbytes), rw.scratch(out_nbytes))
    return rw.emit(cortex_m("quantized_transpose_conv2d"), args)
