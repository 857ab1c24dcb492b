"""RemoveIdentityAsStridedPass: drop an ``as_strided_copy`` that reads its input's values in order.

    %m = mean(%x, [-1, -2], True)                 # [1, C, 1, 1], from a channels_last %x
    %y = as_strided_copy(%m, [1, C, 1, 1], [C, 1, C, C])  →  (%y replaced by %m)
Decompositions emit these to restore a memory format; when every dimension of size > 1 keeps its
contiguous stride, the copy changes no logical value and only splits an int8 cluster.
"""

from __future__ import annotations

from executorch.exir.dialects._ops import ops as exir_ops
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import finish

_AS_STRIDED = exir_ops.edge.aten.as_strided_copy.default


def _contiguous_strides(shape) -> list[int]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= int(size)
    return strides[::-1]


class RemoveIdentityAsStridedPass(PassBase):
    """Ensures: no ``as_strided_copy`` that is a logical identity remains."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or node.target != _AS_STRIDED:
                continue
            source = node.args[0]
            shape = list(source.meta["val"].shape)
            size, stride = list(node.args[1]), list(node.args[2])
            offset = node.args[3] if len(node.args) > 3 else node.kwargs.get("storage_offset")
            expected = _contiguous_strides(shape)
            identity = size == shape and not offset and all(
                n == 1 or s == e for n, s, e in zip(size, stride, expected, strict=True))
            if identity:
                node.replace_all_uses_with(source)
                gm.graph.erase_node(node)
                modified = True
        return PassResult(finish(gm) if modified else gm, modified)
