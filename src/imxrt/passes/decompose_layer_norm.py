"""DecomposeLayerNormPass: ``layer_norm`` -> the int8 ops both devices run, on every target.

    %y = layer_norm(%x, [C], γ, β, eps)
  → %mean = linear(%x, [[1/C] * C])                      FULLY_CONNECTED, C -> 1
    %centred = sub(%x, %mean)                           SUB (broadcast over C)
    %square = mul(%centred, %centred)                   MUL
    %shifted = linear(%square, [[1/C] * C], [eps])      FULLY_CONNECTED: the variance plus eps
    %inverse = rsqrt(%shifted)                          RSQRT (input zero point -128: never negative)
    %normed = mul(%centred, %inverse)                   MUL (broadcast over C)
    %y = add(mul(%normed, γ), β)                        MUL, ADD (none when ``FoldLayerNormAffinePass``
                                                        moved γ and β into the linear layers after it)
A norm over several trailing dims does the same on a view that flattens them.

Neither Neutron nor CMSIS-NN has a layer-norm kernel: left whole it ran in float on the Cortex-M and split
the NPU graph of a transformer at every norm.

Precision, measured against the float module with the int8 output (LayerNorm(64) on [1, 16, 64], alone
and into a Linear(64, 64), per-token spread 0.5-2): the means are fully connected layers, not MEAN,
because MEAN keeps its input's qparams, and the variance at the square's scale (whose range is the largest
squared deviation, many times the mean one) kept a handful of int8 levels: 28.2-28.5 dB with MEAN,
31.5-32.2 dB with the 1/C layer, which rounds once into the variance's own calibrated range (its weight
1/C is exact in int8: 127 at scale 1/(127 C)); the exact norm of the int8 input rounded to the int8
output, the floor, is 35 dB. With three outlier channels (``test_norm_linear_int8_accuracy``): 23.8 dB
with MEAN, 29.5 dB with the layer, floor 34.1 dB.
eps rides in that layer's int32 bias instead of an ADD: eps is far below the variance's int8 step, so an
ADD would only requantize. The variance is the mean of the squared centred value, not E[x²] - E[x]²: that
difference of two rounded means cancels when the mean is large against the spread.
"""

from __future__ import annotations

import math
import operator

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import add_constant, arguments_by_name, call, finish, replace_results

aten = torch.ops.aten


def decompose(gm: GraphModule, node: Node, x: Node, normalized_shape, weight, bias, eps: float) -> Node:
    """Insert the decomposition of ``layer_norm(x, normalized_shape, weight, bias, eps)`` before ``node``;
    returns its output node."""
    shape = list(x.meta["val"].shape)
    count = math.prod(int(d) for d in normalized_shape)
    lead = shape[:len(shape) - len(normalized_shape)]
    averaging = torch.full((1, count), 1.0 / count)
    with gm.graph.inserting_before(node):
        flat = x if len(normalized_shape) == 1 else call(gm, aten.view.default, (x, [*lead, count]), like=node)
        mean = call(gm, aten.linear.default, (flat, add_constant(gm, node, "layer_norm_mean", averaging)), like=node)
        centred = call(gm, aten.sub.Tensor, (flat, mean), like=node)
        square = call(gm, aten.mul.Tensor, (centred, centred), like=node)
        shifted = call(gm, aten.linear.default, (square, add_constant(gm, node, "layer_norm_mean", averaging),
                                                 add_constant(gm, node, "layer_norm_eps", torch.tensor([float(eps)]))),
                       like=node)
        inverse = call(gm, aten.rsqrt.default, (shifted,), like=node)
        out = call(gm, aten.mul.Tensor, (centred, inverse), like=node)
        if len(normalized_shape) != 1:
            out = call(gm, aten.view.default, (out, shape), like=node)
        if weight is not None:
            out = call(gm, aten.mul.Tensor, (out, weight), like=node)
        if bias is not None:
            out = call(gm, aten.add.Tensor, (out, bias), like=node)
    return out


class DecomposeLayerNormPass(PassBase):
    """Requires: an aten graph, before scalar operands become constants. Ensures: no ``layer_norm`` remains,
    nor a ``native_layer_norm`` whose mean and inverse deviation outputs go unused."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function":
                continue
            if node.target == aten.layer_norm.default:
                x, shape, weight, bias, eps = _layer_norm_arguments(node)
                replace_results(gm, node, decompose(gm, node, x, shape, weight, bias, eps))
                modified = True
            elif node.target == aten.native_layer_norm.default and _only_output_used(node):
                x, shape, weight, bias, eps = node.args
                replace_results(gm, node, decompose(gm, node, x, shape, weight, bias, eps))
                modified = True
        return PassResult(finish(gm) if modified else gm, modified)


def _layer_norm_arguments(node: Node) -> tuple:
    """(input, normalized_shape, weight, bias, eps) of an ``aten.layer_norm`` call, defaults filled in."""
    arguments = arguments_by_name(node)
    return tuple(arguments[name] for name in ("input", "normalized_shape", "weight", "bias", "eps"))


def _only_output_used(node: Node) -> bool:
    """``native_layer_norm``'s saved mean and inverse deviation (outputs 1 and 2) have no reader."""
    return all(user.target is operator.getitem and (user.args[1] == 0 or not user.users) for user in node.users)
