"""ConvertAddmmToLinearPass: ``addmm`` with a constant weight is a linear layer.

    %y = addmm(%b, %x, %W)            →  %y = linear(%x, %Wt, %b)     (%Wt = W.t(), a new constant; %b 1-D)
    %y = addmm(%b, %x, %w, beta=β, alpha=α), otherwise   →  %y = add(mul(mm(%x, %w), α), mul(%b, β))
The NPU's FULLY_CONNECTED and CMSIS-NN's fully connected kernel are reached through ``linear`` (int32 bias
at the input and weight scales); ``addmm`` had no int8 rule and ran in float on the CPU.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import add_constant, call, calls_to, constant_value, finish

aten = torch.ops.aten


class ConvertAddmmToLinearPass(PassBase):
    """Ensures: no ``aten.addmm.default`` remains."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in calls_to(gm, aten.addmm.default):
            bias, x, weight = node.args[:3]
            beta, alpha = node.kwargs.get("beta", 1), node.kwargs.get("alpha", 1)
            value = constant_value(gm, weight)
            with gm.graph.inserting_before(node):
                bias_value = bias.meta.get("val") if isinstance(bias, torch.fx.Node) else None
                row_bias = isinstance(bias_value, torch.Tensor) and bias_value.dim() == 1
                if value is not None and beta == 1 and alpha == 1 and value.dim() == 2 and row_bias:
                    transposed = add_constant(gm, node, "addmm_weight", value.t().contiguous())
                    replacement = gm.graph.call_function(aten.linear.default, (x, transposed, bias))
                else:
                    product = call(gm, aten.mm.default, (x, weight), like=node)
                    if alpha != 1:
                        product = call(gm, aten.mul.Tensor, (product, alpha), like=node)
                    if beta != 1:
                        bias = call(gm, aten.mul.Tensor, (bias, beta), like=node)
                    replacement = call(gm, aten.add.Tensor, (product, bias), like=node)
            replacement.meta.update({k: v for k, v in node.meta.items() if k != "val"})
            replacement.meta["val"] = node.meta.get("val")
            node.replace_all_uses_with(replacement)
            gm.graph.erase_node(node)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)
