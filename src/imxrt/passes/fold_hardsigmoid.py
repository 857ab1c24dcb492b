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

from imxrt.passes._graph import add_constant, call, constant_value, finish

aten = torch.ops.aten

# producer op -> axis of its weight that indexes output channels (a grouped transposed conv splits them)
_FOLDABLE = {aten.conv1d.default: 0, aten.conv2d.default: 0, aten.linear.default: 0, aten.conv_transpose2d.input: 1}
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
            if producer.op != "call_function" or producer.target not in _FOLDABLE or len(producer.users) != 1:
                continue
            weight = constant_value(gm, producer.args[1])
            bias_node = producer.args[2] if len(producer.args) > 2 else None
            bias = constant_value(gm, bias_node) if bias_node is not None else None
            if weight is None or (bias_node is not None and bias is None):
                continue
            if _FOLDABLE[producer.target] == 1 and len(producer.args) > 6 and producer.args[6] != 1:
                continue  # grouped transposed conv: the bias length is not weight.shape[1]
            channels = weight.shape[_FOLDABLE[producer.target]]
            bias = bias if bias is not None else torch.zeros(channels, dtype=weight.dtype)
            args = list(producer.args)
            args[1] = add_constant(gm, producer, "hardsigmoid_weight", weight / 6)
            bias_const = add_constant(gm, producer, "hardsigmoid_bias", bias / 6 + 0.5)
            if len(args) > 2:
                args[2] = bias_const
            else:
                args.append(bias_const)
            producer.args = tuple(args)
            with gm.graph.inserting_before(node):
                clamp = call(gm, aten.hardtanh.default, (producer, 0.0, 1.0), like=node)
            node.replace_all_uses_with(clamp)
            gm.graph.erase_node(node)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)
