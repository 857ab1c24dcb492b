"""RemoveIdentityCopiesPass: drop edge copies that change neither a value nor its layout.

    %m = mean(%x, [-1, -2], True)                 # [1, C, 1, 1], from a channels_last %x
    %y = as_strided_copy(%m, [1, C, 1, 1], [C, 1, C, C])  →  (%y replaced by %m)
    %p = permute_copy(%v, [0, 2, 1, 3, 4])        # a dense, contiguous result
    %c = _clone_dim_order(%p, dim_order=[0, 1, 2, 3, 4])  →  (%c replaced by %p)
Decompositions emit these to restore a memory format (``reshape`` of a transposed tensor, ShuffleNet's
``transpose(1, 2).contiguous()``): an ``as_strided_copy`` where every dimension of size > 1 keeps its
contiguous stride, a clone into the dim order its input already has. Each only splits an int8 cluster.
"""

from __future__ import annotations

import torch
from executorch.exir.dialects._ops import ops as exir_ops
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import finish

_AS_STRIDED = exir_ops.edge.aten.as_strided_copy.default
_CLONES = (exir_ops.edge.dim_order_ops._clone_dim_order.default, exir_ops.edge.aten.clone.default)


def _contiguous_strides(shape) -> list[int]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= int(size)
    return strides[::-1]


def _identity_as_strided(node: Node) -> bool:
    shape = list(node.args[0].meta["val"].shape)
    size, stride = list(node.args[1]), list(node.args[2])
    offset = node.args[3] if len(node.args) > 3 else node.kwargs.get("storage_offset")
    expected = _contiguous_strides(shape)
    return size == shape and not offset and all(
        n == 1 or s == e for n, s, e in zip(size, stride, expected, strict=True))


def _identity_clone(node: Node) -> bool:
    if node.args[0].op == "placeholder" and any(user.op == "output" for user in node.users):
        return False  # a program output is its own buffer, never the caller's input
    before, after = node.args[0].meta.get("val"), node.meta.get("val")
    if not isinstance(before, torch.Tensor) or not isinstance(after, torch.Tensor):
        return False
    return (before.shape == after.shape and before.dtype == after.dtype
            and before.dim_order() == after.dim_order())


class RemoveIdentityCopiesPass(PassBase):
    """Ensures: no ``as_strided_copy`` or clone that is an identity of value and layout remains."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function":
                continue
            if (node.target == _AS_STRIDED and _identity_as_strided(node)) or (
                    node.target in _CLONES and _identity_clone(node)):
                node.replace_all_uses_with(node.args[0])
                gm.graph.erase_node(node)
                modified = True
        return PassResult(finish(gm) if modified else gm, modified)
