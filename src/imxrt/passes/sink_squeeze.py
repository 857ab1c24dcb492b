"""SinkSqueezePass: move the squeeze of a unit dim past the elementwise ops and means that read it, and
drop the squeeze / unsqueeze pairs that then meet.

A 1-D op runs as its 2-D form between an unsqueeze and a squeeze (``ConvertConv1dToConv2dPass``,
``Convert1dOpsTo2dPass``), so a 1-D CNN is ``conv2d -> squeeze -> relu -> unsqueeze -> max_pool2d``: the
relu cannot fuse into the conv, and every rank-3 value between two rank-4 ops is a layout change on the
NPU (two TRANSPOSEs each). Sunk, the same net is ``conv2d -> relu -> max_pool2d`` on rank-4 values:

    %s = squeeze(%x, [d]); %y = relu(%s)            →  %y4 = relu(%x); %y = squeeze(%y4, [d])
    %s = squeeze(%x, [d]); %y = add(%s, squeeze(%z, [d]))  →  squeeze(add(%x, %z), [d])
    %s = squeeze(%x, [d]); %m = mean(%s, dims)     →  mean(%x, dims moved past d, plus d)
    %u = unsqueeze(squeeze(%x, [d]), d)             →  %x

All exact: the squeezed dim has size 1, so no element moves and no value changes.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.op_kinds import is_elementwise_map
from imxrt.passes._graph import call, rewrite_to_fixpoint

aten = torch.ops.aten
_BINARY = (aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.maximum.default, aten.minimum.default)


def _squeezed_dim(node: object) -> int | None:
    """The one dim a ``squeeze`` node removes (a unit dim of its input), else None."""
    if not isinstance(node, Node) or node.op != "call_function":
        return None
    if node.target == aten.squeeze.dims and len(node.args[1]) == 1:
        dim = node.args[1][0]
    elif node.target == aten.squeeze.dim:
        dim = node.args[1]
    else:
        return None
    shape = node.args[0].meta["val"].shape
    dim %= len(shape)
    return dim if shape[dim] == 1 else None


def _sinkable_user(user: Node, squeeze: Node, dim: int) -> bool:
    if is_elementwise_map(user) and not user.kwargs:
        return True
    if user.target in _BINARY and not user.kwargs:
        operands = [a for a in user.args if isinstance(a, Node)]
        shape = squeeze.args[0].meta["val"].shape
        return all(_squeezed_dim(a) == dim and a.args[0].meta["val"].shape == shape for a in operands)
    return user.target == aten.mean.dim and user.args[0] is squeeze and user.args[1] is not None \
        and set(user.kwargs) <= {"dtype"}


def _sink(gm: GraphModule, squeeze: Node, user: Node, dim: int) -> None:
    """Rewrite ``user`` (which reads ``squeeze``) to read the unsqueezed value, then squeeze its result."""
    if user.target == aten.mean.dim:
        rank = len(squeeze.meta["val"].shape)
        dims = [(d % rank) + (1 if d % rank >= dim else 0) for d in user.args[1]]
        keepdim = len(user.args) > 2 and user.args[2]
        with gm.graph.inserting_before(user):
            if keepdim:
                mean = call(gm, aten.mean.dim, (squeeze.args[0], dims, True), like=user, kwargs=dict(user.kwargs))
                result = call(gm, aten.squeeze.dims, (mean, [dim]), like=user)
            else:
                result = call(gm, aten.mean.dim, (squeeze.args[0], sorted([*dims, dim]), False), like=user,
                              kwargs=dict(user.kwargs))
    else:
        args = tuple(a.args[0] if isinstance(a, Node) and _squeezed_dim(a) == dim else a for a in user.args)
        with gm.graph.inserting_before(user):
            result = call(gm, aten.squeeze.dims, (call(gm, user.target, args, like=user), [dim]), like=user)
    user.replace_all_uses_with(result)
    gm.graph.erase_node(user)


class SinkSqueezePass(PassBase):
    """Requires: functional aten graph with ``val`` metadata. Ensures: no squeeze of a unit dim feeds an
    elementwise op or a mean, and no unsqueeze undoes a squeeze."""

    def call(self, gm: GraphModule) -> PassResult:
        return rewrite_to_fixpoint(gm, self._rewrite_one)

    @staticmethod
    def _rewrite_one(gm: GraphModule) -> bool:
        for node in gm.graph.nodes:
            dim = _squeezed_dim(node)
            if dim is None:
                continue
            for user in node.users:
                if user.target == aten.unsqueeze.default and user.args[1] % len(user.meta["val"].shape) == dim:
                    user.replace_all_uses_with(node.args[0])
                    gm.graph.erase_node(user)
                elif _sinkable_user(user, node, dim):
                    _sink(gm, node, user, dim)
                else:
                    continue
                if not node.users:
                    gm.graph.erase_node(node)
                return True
        return False
