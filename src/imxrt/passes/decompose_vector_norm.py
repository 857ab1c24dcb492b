"""DecomposeVectorNormPass: a 2-norm is the square root of a sum of squares, and ``F.normalize`` a product by
the reciprocal square root of that sum.

``torch.norm`` / ``x.norm()`` / ``F.normalize`` export as ``linalg_vector_norm``, which has no int8 kernel
and decomposed only inside to_edge, after quantization: XCiT's and EdgeNeXt's normalized queries and keys,
ConvNeXt-V2's global response norm and embedding heads ran in float on the CPU. Decomposed here, every op
has an int8 rule (MUL, SUM and RSQRT on the NPU; a fully connected sum and tables on the Cortex-M)::

    %n = linalg_vector_norm(%x, 2, dims, keepdim)  →  %n = sqrt(sum(mul(%x, %x), dims, keepdim))
    %y = div(%x, expand_as(clamp_min(%n, eps), %x))                      # F.normalize(%x, dim=d)
        →  %y = mul(%x, rsqrt(clamp(sum(mul(%x, %x), [d], True), min=eps²)))

The normalized form needs no square root and no division (neither is a Neutron kernel), and its product
broadcasts over the summed dims, so no expand is left. Other orders of norm stay whole.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import arguments_by_name, call, calls_to, finish, shape_of

aten = torch.ops.aten
_NORM = aten.linalg_vector_norm.default
_EXPANDS = (aten.expand_as.default, aten.expand.default)


def _sole_user(node: Node, targets) -> Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 and users[0].op == "call_function" and users[0].target in targets else None


def _sum_of_squares(gm: GraphModule, x: Node, dims: list[int], keepdim: bool, like: Node) -> Node:
    return call(gm, aten.sum.dim_IntList, (call(gm, aten.mul.Tensor, (x, x), like=like), dims, keepdim), like=like)


def _normalize_division(norm: Node, x: Node) -> tuple[Node, float] | None:
    """(the division, eps) of ``F.normalize``: ``div(x, expand_as(clamp_min(norm, eps), x))``."""
    clamp = _sole_user(norm, (aten.clamp_min.default,))
    if clamp is None:
        return None
    after = _sole_user(clamp, _EXPANDS) or clamp
    division = _sole_user(after, (aten.div.Tensor,))
    if division is None or division.args[0] is not x or division.args[1] is not after or division.kwargs:
        return None
    return division, float(clamp.args[1])


class DecomposeVectorNormPass(PassBase):
    """Requires: an aten graph with ``val`` metadata. Ensures: no 2-norm without a dtype remains."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in calls_to(gm, _NORM):
            arguments = arguments_by_name(node)
            x = arguments["input"]
            if arguments["ord"] != 2 or arguments["dtype"] is not None:
                continue
            rank = len(shape_of(x))
            dims = list(arguments["dim"]) if arguments["dim"] is not None else list(range(rank))
            normalize = _normalize_division(node, x) if arguments["keepdim"] else None
            if normalize is not None:
                division, eps = normalize
                with gm.graph.inserting_before(division):
                    squares = _sum_of_squares(gm, x, dims, True, like=node)
                    floor = call(gm, aten.clamp.default, (squares, eps * eps), like=node)
                    result = call(gm, aten.mul.Tensor, (x, call(gm, aten.rsqrt.default, (floor,), like=node)),
                                  like=division)
                division.replace_all_uses_with(result)
                gm.graph.erase_node(division)
            else:
                with gm.graph.inserting_before(node):
                    squares = _sum_of_squares(gm, x, dims, arguments["keepdim"], like=node)
                    result = call(gm, aten.sqrt.default, (squares,), like=node)
                node.replace_all_uses_with(result)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)
