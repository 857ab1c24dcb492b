"""ConvertConv1dToConv2dPass: express a 1-D convolution as a 2-D one with a height of 1.

    %y = conv1d(%x, %w, %b, [s], [p], [d], g)
  → %x4 = unsqueeze(%x, 2); %y4 = conv2d(%x4, %w4, %b, [1, s], [0, p], [1, d], g); %y = squeeze(%y4, [2])
with %w4 = %w[:, :, None, :]. The NPU and CMSIS-NN have 2-D kernels only.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import add_constant, constant_value, finish

aten = torch.ops.aten


def _one(value, default):
    if value is None:
        return default
    return int(value[0]) if isinstance(value, (list, tuple)) else int(value)


class ConvertConv1dToConv2dPass(PassBase):
    """Ensures: no ``aten.conv1d.default`` with a constant weight remains."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or node.target != aten.conv1d.default:
                continue
            weight = constant_value(gm, node.args[1])
            if weight is None:
                continue
            x, _, bias, stride, padding, dilation, groups = (list(node.args) + [None, 1, 0, 1, 1])[:7]
            weight_node = add_constant(gm, node, "conv2d_weight", weight.unsqueeze(2))
            with gm.graph.inserting_before(node):
                x4 = gm.graph.call_function(aten.unsqueeze.default, (x, 2))
                y4 = gm.graph.call_function(
                    aten.conv2d.default,
                    (x4, weight_node, bias, [1, _one(stride, 1)], [0, _one(padding, 0)],
                     [1, _one(dilation, 1)], groups),
                )
                y = gm.graph.call_function(aten.squeeze.dims, (y4, [2]))
            for new in (x4, y4, y):
                new.meta.update({k: v for k, v in node.meta.items() if k in ("stack_trace", "nn_module_stack")})
            x4.meta["val"] = x.meta["val"].unsqueeze(2)
            y4.meta["val"] = node.meta["val"].unsqueeze(2)
            y.meta["val"] = node.meta["val"]
            node.replace_all_uses_with(y)
            gm.graph.erase_node(node)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)
