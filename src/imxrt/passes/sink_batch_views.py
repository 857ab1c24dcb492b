"""SinkBatchViewsPass: keep batched matrix products rank 3 between two ``bmm``s.

``ConvertMatmulToBmmPass`` runs a rank-4 matmul (multi-head attention's ``q @ k.transpose(-2, -1)``) as a
``bmm`` between views, so the scores come back as ``[B, H, L, S]``: a rank-4 value that the NPU would store
NHWC (a TRANSPOSE each way) and whose softmax over the last dim is then not over the stored channels. The
view that splits the merged batch dim sinks past the ops that act per element or along the last dim, and
cancels against the view the next ``bmm`` makes:

    %s = view(%p [B·H, L, S], [B, H, L, S]); %y = softmax(mul(%s, c), -1); %z = view(%y, [B·H, L, S])
        →  %z = softmax(mul(%p, c), -1)

Exact: the view keeps the last two dims and the element order, and each op sunk past it computes the same
value per element (a scalar operand broadcasts alike) or per last-dim row.
"""

from __future__ import annotations

import math

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.op_kinds import is_elementwise_map
from imxrt.passes._graph import call, rewrite_to_fixpoint, shape_of

aten = torch.ops.aten
_VIEWS = (aten.view.default, aten.reshape.default)
_BINARY = (aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor)
_SOFTMAX = (aten.softmax.int, aten._softmax.default)


def _is_batch_view(node: Node) -> bool:
    """A view of a rank-3 ``[P, M, N]`` value as ``[b1, ..., bk, M, N]`` (k > 1, b1·...·bk = P)."""
    if node.op != "call_function" or node.target not in _VIEWS:
        return False
    before, after = shape_of(node.args[0]), shape_of(node)
    return before is not None and after is not None and len(before) == 3 and len(after) > 3 \
        and after[-2:] == before[-2:] and math.prod(after[:-2]) == before[0]


def _is_scalar(arg: object) -> bool:
    if isinstance(arg, (int, float)):
        return True
    shape = shape_of(arg)
    return shape is not None and math.prod(shape) == 1 and len(shape) <= 1


def _sinkable(user: Node, view: Node) -> bool:
    if user.kwargs and user.target not in _SOFTMAX:
        return False
    if is_elementwise_map(user):
        return True
    if user.target in _BINARY:
        return any(a is view for a in user.args[:2]) and all(a is view or _is_scalar(a) for a in user.args[:2])
    if user.target in _SOFTMAX:
        return user.args[0] is view and int(user.args[1]) % len(shape_of(view)) == len(shape_of(view)) - 1
    return False


class SinkBatchViewsPass(PassBase):
    """Requires: functional aten graph with ``val`` metadata. Ensures: no batch view feeds an elementwise op,
    a last-dim softmax or another view."""

    def call(self, gm: GraphModule) -> PassResult:
        return rewrite_to_fixpoint(gm, self._rewrite_one)

    @staticmethod
    def _rewrite_one(gm: GraphModule) -> bool:
        for view in gm.graph.nodes:
            if not _is_batch_view(view):
                continue
            source = view.args[0]
            for user in list(view.users):
                if user.op == "call_function" and user.target in _VIEWS and user.args[0] is view:
                    # view of a view: one view from the rank-3 value, or none when it restores its shape
                    if shape_of(user) == shape_of(source):
                        replacement = source
                    else:
                        with gm.graph.inserting_before(user):
                            replacement = call(gm, user.target, (source, *user.args[1:]), like=user)
                elif _sinkable(user, view):
                    args = tuple(source if a is view else a for a in user.args)
                    if user.target in _SOFTMAX:
                        args = (source, -1, *args[2:])
                    with gm.graph.inserting_before(user):
                        inner = call(gm, user.target, args, like=user, kwargs=dict(user.kwargs))
                        replacement = call(gm, view.target, (inner, shape_of(user)), like=view)
                else:
                    continue
                user.replace_all_uses_with(replacement)
                gm.graph.erase_node(user)
                if not view.users:
                    gm.graph.erase_node(view)
                return True
        return False
