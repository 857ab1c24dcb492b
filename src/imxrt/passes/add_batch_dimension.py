"""AddBatchDimensionPass: a convolution or pool given an unbatched input gets a batch of one.

    %y = conv2d(%x [C, H, W], %w, %b, ...)  →  %y = squeeze(conv2d(unsqueeze(%x, 0), %w, %b, ...), [0])
PyTorch's convolutions and pools take an input without its batch dimension; to_edge would decompose the
op into that unsqueeze / squeeze after quantization, between the op and its Q/DQ, and the op ran in float.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import call, finish

aten = torch.ops.aten

# op -> the rank of an unbatched input
_UNBATCHED_RANK = {
    aten.conv1d.default: 2, aten.conv1d.padding: 2, aten.conv2d.default: 3, aten.conv2d.padding: 3,
    aten.conv_transpose1d.default: 2, aten.conv_transpose2d.input: 3,
    aten.max_pool1d.default: 2, aten.max_pool2d.default: 3, aten.avg_pool1d.default: 2, aten.avg_pool2d.default: 3,
    aten.adaptive_avg_pool1d.default: 2, aten.adaptive_avg_pool2d.default: 3,
}


class AddBatchDimensionPass(PassBase):
    """Ensures: no convolution or pool in ``_UNBATCHED_RANK`` reads an unbatched input."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or node.target not in _UNBATCHED_RANK:
                continue
            x = node.args[0]
            value = x.meta.get("val")
            if not isinstance(value, torch.Tensor) or value.dim() != _UNBATCHED_RANK[node.target]:
                continue
            with gm.graph.inserting_before(node):
                batched = call(gm, aten.unsqueeze.default, (x, 0), like=node)
                y = call(gm, node.target, (batched, *node.args[1:]), like=node, kwargs=dict(node.kwargs))
                out = call(gm, aten.squeeze.dims, (y, [0]), like=node)
            node.replace_all_uses_with(out)
            gm.graph.erase_node(node)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)
