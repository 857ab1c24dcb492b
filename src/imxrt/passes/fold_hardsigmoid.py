"""FoldHardsigmoidPass: fold a hardsigmoid into the conv or linear layer that feeds it.

    %y = conv2d(%x, %w, %b)             %y = conv2d(%x, %w / 6, %b / 6 + 0.5)
    %z = hardsigmoid(%y)           →    %z = hardtanh(%y, 0, 1)

since hardsigmoid(y) = clamp(y / 6 + 1/2, 0, 1). The squeeze-excite gate of MobileNetV3, GhostNet and
LCNet is exactly this pattern; folded, the gate is one int8 conv with a fused clamp, on the NPU (which has
no hardsigmoid kernel) as on the Cortex-M (where it saves the table lookup and one requantization).
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import call, finish, foldable_layer, layer_parameters, set_layer_parameters

aten = torch.ops.aten

_HARDSIGMOID = (aten.hardsigmoid.default, aten.hardsigmoid_.default)


class FoldHardsigmoidPass(PassBase):
    """Requires: functional graph with constant weights. Ensures: no hardsigmoid remains directly after a
    conv / linear whose only user it is."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or node.target not in _HARDSIGMOID:
                continue
            producer = node.args[0]
            parameters = layer_parameters(gm, producer) if foldable_layer(producer) else None
            if parameters is None:
                continue
            weight, bias, axis = parameters
            bias = bias if bias is not None else torch.zeros(weight.shape[axis], dtype=weight.dtype)
            set_layer_parameters(gm, producer, "hardsigmoid", weight / 6, bias / 6 + 0.5)
            with gm.graph.inserting_before(node):
                clamp = call(gm, aten.hardtanh.default, (producer, 0.0, 1.0), like=node)
            node.replace_all_uses_with(clamp)
            gm.graph.erase_node(node)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)
