"""ConvertStackToCatPass: a stack is a concatenation and a view.

    %s = stack([%a, %b], d)  →  %s = view(cat([%a, %b], d), shape)      d below the inputs' rank
                             →  %s = cat([unsqueeze(%a, d), unsqueeze(%b, d)], d)   d at their rank

Stacking along an existing dim lays the inputs' bytes out as concatenating them along it does (each input's
block of that dim and the ones after it, per index of the dims before), so only the shape differs; a new
last dim interleaves the inputs, which a concatenation of their unsqueezed views does. ``stack`` has no
quantization rule (it decomposes only in ``to_edge``, after quantization): a hand-written cell loop's
``torch.stack(outputs, 1)`` or a streaming model's ``torch.stack([h, c])`` state stayed float on the CPU,
between NPU partitions. A concatenation is one int8 op on every device (CONCATENATION on the NPU).
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import call, calls_to, finish

aten = torch.ops.aten


class ConvertStackToCatPass(PassBase):
    """Ensures: no ``stack`` of tensors remains."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in calls_to(gm, aten.stack.default):
            tensors = node.args[0]
            if not tensors or not all(isinstance(t, Node) and isinstance(t.meta.get("val"), torch.Tensor)
                                      for t in tensors):
                continue
            rank = tensors[0].meta["val"].dim()
            dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
            dim %= rank + 1
            with gm.graph.inserting_before(node):
                if dim < rank:
                    joined = call(gm, aten.cat.default, (list(tensors), dim), like=node)
                    stacked = call(gm, aten.view.default, (joined, list(node.meta["val"].shape)), like=node)
                else:
                    views = [call(gm, aten.unsqueeze.default, (t, dim), like=node) for t in tensors]
                    stacked = call(gm, aten.cat.default, (views, dim), like=node)
            node.replace_all_uses_with(stacked)
            gm.graph.erase_node(node)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)
