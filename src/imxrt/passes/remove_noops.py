"""RemoveNoOpsPass: drop ops that do nothing at inference.

    %y = dropout(%x, 0.2, False)  →  (%y replaced by %x)
Also identity clones, contiguous, alias and detach: memory format is the compiler's choice, not the model's.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import finish

aten = torch.ops.aten

_NO_OPS = frozenset(
    {
        aten.dropout.default,
        aten.feature_dropout.default,
        aten.alpha_dropout.default,
        aten.feature_alpha_dropout.default,
        aten.clone.default,
        aten.contiguous.default,
        aten.alias.default,
        aten.detach.default,
        aten.identity.default if hasattr(aten, "identity") else aten.alias.default,
    }
)


class RemoveNoOpsPass(PassBase):
    """Ensures: none of the ops above remains where it passes its first input through unchanged."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or node.target not in _NO_OPS:
                continue
            source = node.args[0]
            before, after = source.meta.get("val"), node.meta.get("val")
            if before is None or after is None or before.shape != after.shape or before.dtype != after.dtype:
                continue
            if node.target in (aten.dropout.default, aten.feature_dropout.default) and node.args[2]:
                continue  # training-mode dropout is not a no-op
            node.replace_all_uses_with(source)
            gm.graph.erase_node(node)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)
