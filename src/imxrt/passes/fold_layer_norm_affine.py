"""FoldLayerNormAffinePass: move a layer norm's γ and β into the linear layers that read its output.

    %n = layer_norm(%x, [C], γ, β, eps)         %n = layer_norm(%x, [C], None, None, eps)
    %y = linear(%n, W, b)                  →    %y = linear(%n, W · diag(γ), b + W · β)

exact in float, since W (γ ⊙ n + β) + b = (W diag(γ)) n + (W β + b). Only when every user is such a
linear layer (a transformer's pre-norm feeding its attention projections or its MLP): the norm then
ends at its normalized value, and the two int8 steps of the affine map (a MUL and an ADD, each a
requantization) disappear on both devices.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import calls_to, constant_value, finish, layer_parameters, set_layer_parameters

aten = torch.ops.aten

_WEIGHT, _BIAS = 2, 3  # layer_norm argument positions


class FoldLayerNormAffinePass(PassBase):
    """Requires: functional graph with constant weights. Ensures: a ``layer_norm`` over one dim whose every
    user is a linear layer with constant parameters reading it as its input has no weight and no bias."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in calls_to(gm, aten.layer_norm.default):
            modified |= _fold_into_users(gm, node)
        return PassResult(finish(gm) if modified else gm, modified)


def _fold_into_users(gm: GraphModule, norm: Node) -> bool:
    args = list(norm.args) + [None] * (4 - len(norm.args))
    weight_node, bias_node = args[_WEIGHT], args[_BIAS]
    if (weight_node is None and bias_node is None) or len(args[1]) != 1:
        return False  # a norm over several dims has a γ per position, not per input feature of a linear
    gamma, beta = constant_value(gm, weight_node), constant_value(gm, bias_node)
    if (weight_node is not None and gamma is None) or (bias_node is not None and beta is None):
        return False
    users = list(norm.users)
    layers = [layer_parameters(gm, user) if _reads_as_input(user, norm) else None for user in users]
    if not users or any(parameters is None for parameters in layers):
        return False
    for user, (weight, bias, _) in zip(users, layers, strict=True):
        wide = weight.to(torch.float64)
        new_weight = wide * gamma.to(torch.float64) if gamma is not None else wide
        new_bias = bias.to(torch.float64) if bias is not None else torch.zeros(weight.shape[0], dtype=torch.float64)
        if beta is not None:
            new_bias = new_bias + wide @ beta.to(torch.float64)
        set_layer_parameters(gm, user, "layer_norm", new_weight.to(weight.dtype), new_bias.to(weight.dtype))
    norm.args = (*args[:_WEIGHT], None, None, *norm.args[4:])
    return True


def _reads_as_input(user: Node, norm: Node) -> bool:
    """``user`` is a linear layer whose input, and only its input, is ``norm``."""
    return (user.op == "call_function" and user.target == aten.linear.default and user.args[0] is norm
            and norm not in user.args[1:])
