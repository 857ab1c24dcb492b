"""RemoveNoOpsPass: drop ops that do nothing at inference.

    %y = dropout(%x, 0.2, False)  →  (%y replaced by %x)
Also their in-place forms (``nn.Dropout(inplace=True)``), identity clones, contiguous, alias and detach:
memory format is the compiler's choice, not the model's. A reduction's ``dtype`` equal to its input's
(``x.mean([2, 3], dtype=torch.float32)``) is dropped too: it converts nothing. A ``view`` downstream of a
dropped copy may then see strides it cannot view (ShuffleNet's ``transpose(1, 2).contiguous().view(...)``): it becomes
``reshape``, which is the same view where the strides allow and a copy where they do not.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import finish

aten = torch.ops.aten

# (x, p, train): a no-op unless train is set
_DROPOUTS = frozenset(
    {
        aten.dropout.default,
        aten.feature_dropout.default,
        aten.alpha_dropout.default,
        aten.feature_alpha_dropout.default,
        aten.dropout_.default,
        aten.feature_dropout_.default,
        aten.alpha_dropout_.default,
        aten.feature_alpha_dropout_.default,
    }
)

_NO_OPS = _DROPOUTS | frozenset(
    {
        aten.clone.default,
        aten.contiguous.default,
        aten.alias.default,
        aten.detach.default,
        aten.identity.default if hasattr(aten, "identity") else aten.alias.default,
    }
)


# Reductions whose dtype argument (a keyword after export) may name the dtype they already compute in.
_REDUCTIONS_WITH_DTYPE = frozenset({aten.mean.dim, aten.mean.default, aten.sum.dim_IntList, aten.sum.default})


def _drop_no_op_dtype(node) -> bool:
    source = node.args[0] if node.args else None
    value = source.meta.get("val") if hasattr(source, "meta") else None
    if node.kwargs.get("dtype") is None or not isinstance(value, torch.Tensor) or node.kwargs["dtype"] != value.dtype:
        return False
    node.kwargs = {k: v for k, v in node.kwargs.items() if k != "dtype"}
    return True


class RemoveNoOpsPass(PassBase):
    """Ensures: none of the ops above remains where it passes its first input through unchanged."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        restrided = []
        for node in list(gm.graph.nodes):
            if node.op == "call_function" and node.target in _REDUCTIONS_WITH_DTYPE:
                modified |= _drop_no_op_dtype(node)
            if node.op != "call_function" or node.target not in _NO_OPS:
                continue
            source = node.args[0]
            before, after = source.meta.get("val"), node.meta.get("val")
            if before is None or after is None or before.shape != after.shape or before.dtype != after.dtype:
                continue
            if node.target in _DROPOUTS and node.args[2]:
                continue  # training-mode dropout is not a no-op
            if before.stride() != after.stride():
                restrided.extend(node.users)
            node.replace_all_uses_with(source)
            gm.graph.erase_node(node)
            modified = True
        _views_to_reshapes(restrided)
        return PassResult(finish(gm) if modified else gm, modified)


def _views_to_reshapes(starts: list) -> None:
    """Every ``view`` at or downstream of ``starts`` becomes ``reshape``."""
    seen, pending = set(), list(starts)
    while pending:
        node = pending.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.op == "call_function" and node.target == aten.view.default:
            node.target = aten.reshape.default
        pending.extend(node.users)
