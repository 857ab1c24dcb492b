"""ConvertClampTensorPass: ``clamp`` with tensor bounds becomes the ops that have int8 kernels.

    %y = clamp.Tensor(%x, full_like(%x, -1.0), full_like(%x, 1.0))  →  %y = clamp(%x, -1.0, 1.0)
    %y = clamp.Tensor(%x, %lo, %hi)                                   →  %y = minimum(maximum(%x, %lo), %hi)
A bound whose every element is one value (``full``, ``full_like``, ``zeros_like``, ``ones_like``,
``scalar_tensor`` or a uniform constant) is a scalar bound: the clamp is then one activation (a lookup table on
the CPU, a fused or standalone clamp on the NPU). Other bounds are element-wise ``maximum`` / ``minimum``
(PyTorch's clamp: the upper bound wins where the bounds cross). ``clamp.Tensor`` itself had no int8 rule.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import call, calls_to, constant_value, finish

aten = torch.ops.aten

# ops that make a tensor of one value: that value from the node
_UNIFORM = {
    aten.full_like.default: lambda node: node.args[1],
    aten.full.default: lambda node: node.args[1],
    aten.scalar_tensor.default: lambda node: node.args[0],
    aten.zeros_like.default: lambda node: 0.0,
    aten.ones_like.default: lambda node: 1.0,
}


def _uniform_value(gm: GraphModule, bound: object) -> float | None:
    """The one value every element of ``bound`` holds, when the graph says so."""
    if isinstance(bound, Node) and bound.op == "call_function" and bound.target in _UNIFORM:
        value = _UNIFORM[bound.target](bound)
        return float(value) if isinstance(value, (int, float)) else None
    tensor = constant_value(gm, bound)
    if tensor is not None and tensor.numel() > 0 and bool((tensor == tensor.reshape(-1)[0]).all()):
        return float(tensor.reshape(-1)[0])
    return None


def _broadcasts_into(bound: object, shape: torch.Size) -> bool:
    value = bound.meta.get("val") if isinstance(bound, Node) else None
    return isinstance(value, torch.Tensor) and torch.broadcast_shapes(value.shape, shape) == shape


class ConvertClampTensorPass(PassBase):
    """Ensures: no ``aten.clamp.Tensor`` whose bounds fit into its input's shape remains."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in calls_to(gm, aten.clamp.Tensor):
            x = node.args[0]
            low = node.args[1] if len(node.args) > 1 else node.kwargs.get("min")
            high = node.args[2] if len(node.args) > 2 else node.kwargs.get("max")
            shape = x.meta["val"].shape
            bounds = [b for b in (low, high) if b is not None]
            if not bounds or not all(_broadcasts_into(b, shape) for b in bounds):
                continue
            uniform = [None if b is None else _uniform_value(gm, b) for b in (low, high)]
            with gm.graph.inserting_before(node):
                if all(u is not None for u, b in zip(uniform, (low, high), strict=True) if b is not None):
                    replacement = call(gm, aten.clamp.default, (x, *uniform), like=node)
                else:
                    replacement = x
                    if low is not None:
                        replacement = call(gm, aten.maximum.default, (replacement, low), like=node)
                    if high is not None:
                        replacement = call(gm, aten.minimum.default, (replacement, high), like=node)
            node.replace_all_uses_with(replacement)
            gm.graph.erase_node(node)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)
