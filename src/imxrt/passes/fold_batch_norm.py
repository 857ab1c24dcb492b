"""FoldBatchNormPass: fold an inference batch norm into the conv or linear that feeds it.

    %y = conv2d(%x, %w, %b)                   %y = conv2d(%x, %w', %b')
    %z = batch_norm(%y, γ, β, μ, σ², eps)  →  (%z replaced by %y)
with w' = w · γ/√(σ²+eps) per output channel and b' = (b − μ) · γ/√(σ²+eps) + β. A batch norm with no
such producer is a per-channel affine map, so it becomes a depthwise 1x1 convolution (int8 on the NPU and
on the Cortex-M; it stayed float, and torchao's QAT conv-BN matcher spent 40-110 s on it):

    %z = batch_norm(%x, γ, β, μ, σ², eps)  →  %z = conv2d(%x, γ/√(σ²+eps), β − μ·γ/√(σ²+eps), groups=C)

A ``BatchNorm1d`` on [N, C] features (RepViT's and LeViT's classifier heads normalize before their linear
layer) is the same convolution over a length of 1, between two views.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import (
    add_constant,
    call,
    constant_value,
    finish,
    foldable_layer,
    layer_parameters,
    set_layer_parameters,
)

aten = torch.ops.aten

class FoldBatchNormPass(PassBase):
    """Requires: eval-mode ``aten.batch_norm`` with constant statistics. Ensures: no such batch norm
    remains directly after a conv / linear whose only user it is."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for bn in list(gm.graph.nodes):
            if bn.op != "call_function" or bn.target != aten.batch_norm.default:
                continue
            producer = bn.args[0]
            if not foldable_layer(producer) or bn.args[5]:  # training mode: statistics are not constants
                modified |= _as_depthwise_conv(gm, bn)
                continue
            gamma, beta, mean, var = (constant_value(gm, a) for a in bn.args[1:5])
            parameters = layer_parameters(gm, producer)
            if parameters is None or mean is None or var is None:
                continue
            weight, bias, axis = parameters
            channels = mean.numel()
            eps = bn.args[7]
            gamma = gamma if gamma is not None else torch.ones(channels)
            beta = beta if beta is not None else torch.zeros(channels)
            bias = bias if bias is not None else torch.zeros(channels)
            factor = (gamma / torch.sqrt(var + eps)).to(torch.float64)
            shape = [1] * weight.dim()
            shape[axis] = -1
            new_weight = (weight.to(torch.float64) * factor.reshape(shape)).to(weight.dtype)
            new_bias = ((bias.to(torch.float64) - mean) * factor + beta).to(weight.dtype)
            set_layer_parameters(gm, producer, "folded", new_weight, new_bias)
            bn.replace_all_uses_with(producer)
            gm.graph.erase_node(bn)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)


# input rank -> the depthwise convolution a standalone batch norm becomes (1-D becomes 2-D after this pass;
# [N, C] features are viewed as [N, C, 1])
_DEPTHWISE = {2: aten.conv1d.default, 3: aten.conv1d.default, 4: aten.conv2d.default}


def _as_depthwise_conv(gm: GraphModule, bn) -> bool:
    """An eval-mode batch norm with constant statistics on an [N, C], [N, C, L] or [N, C, H, W] tensor -> a
    depthwise 1x1 convolution with the same per-channel scale and shift."""
    value = bn.args[0].meta.get("val") if hasattr(bn.args[0], "meta") else None
    if bn.args[5] or not isinstance(value, torch.Tensor) or value.dim() not in _DEPTHWISE:
        return False
    if value.dim() == 2:
        return _as_depthwise_conv_over_length_1(gm, bn, value)
    gamma, beta, mean, var = (constant_value(gm, a) for a in bn.args[1:5])
    if mean is None or var is None:
        return False
    channels = mean.numel()
    gamma = gamma if gamma is not None else torch.ones(channels)
    beta = beta if beta is not None else torch.zeros(channels)
    factor = gamma.to(torch.float64) / torch.sqrt(var.to(torch.float64) + bn.args[7])
    weight = factor.reshape([channels] + [1] * (value.dim() - 1)).to(value.dtype)
    bias = (beta.to(torch.float64) - mean.to(torch.float64) * factor).to(value.dtype)
    weight_node = add_constant(gm, bn, "batch_norm_weight", weight)
    bias_node = add_constant(gm, bn, "batch_norm_bias", bias)
    spatial = value.dim() - 2
    with gm.graph.inserting_before(bn):
        conv = gm.graph.call_function(_DEPTHWISE[value.dim()], (bn.args[0], weight_node, bias_node, [1] * spatial,
                                                                 [0] * spatial, [1] * spatial, channels))
    conv.meta.update({k: v for k, v in bn.meta.items() if k != "val"})
    conv.meta["val"] = bn.meta.get("val")
    bn.replace_all_uses_with(conv)
    gm.graph.erase_node(bn)
    return True


def _as_depthwise_conv_over_length_1(gm: GraphModule, bn, value: torch.Tensor) -> bool:
    """A batch norm on [N, C] features: the [N, C, 1] view's batch norm, viewed back."""
    with gm.graph.inserting_before(bn):
        viewed = call(gm, aten.view.default, (bn.args[0], [*value.shape, 1]), like=bn)
        norm = call(gm, aten.batch_norm.default, (viewed, *bn.args[1:]), like=bn)
        flat = call(gm, aten.view.default, (norm, list(value.shape)), like=bn)
    bn.replace_all_uses_with(flat)
    gm.graph.erase_node(bn)
    return _as_depthwise_conv(gm, norm)
