"""ConvertMatmulToBmmPass: a product of two activations is one ``bmm`` over rank-3 views.

    %y = matmul(%a [2, 3, M, K], %b [2, 3, K, N])
        →  %y = view(bmm(view(%a, [6, M, K]), view(%b, [6, K, N])), [2, 3, M, N])
    %y = mm(%a [M, K], %b [K, N])  →  %y = view(bmm(view(%a, [1, M, K]), view(%b, [1, K, N])), [M, N])
Left as ``matmul``, to_edge decomposes it after quantization into expand / view / bmm with no qparams inside,
and ``mm`` of two activations has no fully connected kernel: both ran in float. ``bmm`` is CMSIS-NN's batch
matmul (and the NPU's BATCH_MATMUL); operands whose batch dims broadcast are expanded first. A rank-2
right operand made of constants is a weight and stays (a FULLY_CONNECTED); a rank-1 operand stays too.
"""

from __future__ import annotations

import math

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import call, finish, shape_of

aten = torch.ops.aten


def _from_constants(node: Node) -> bool:
    """``node`` is computed from module constants alone (``W.t()`` of a weight): constant folding makes it
    a weight."""
    seen, stack = set(), [node]
    while stack:
        current = stack.pop()
        if current.op == "placeholder":
            return False
        for parent in current.all_input_nodes:
            if parent not in seen:
                seen.add(parent)
                stack.append(parent)
    return True


class ConvertMatmulToBmmPass(PassBase):
    """Ensures: no ``matmul`` / ``mm`` of two rank >= 2 activations remains."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or node.target not in (aten.matmul.default, aten.mm.default):
                continue
            a, b = node.args[:2]
            a_shape, b_shape = shape_of(a), shape_of(b)
            if a_shape is None or b_shape is None or len(a_shape) < 2 or len(b_shape) < 2:
                continue
            if len(b_shape) == 2 and _from_constants(b):
                continue  # x @ W: a fully connected layer
            batch = list(torch.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2])))
            with gm.graph.inserting_before(node):
                a3 = self._batched(gm, node, a, a_shape, batch)
                b3 = self._batched(gm, node, b, b_shape, batch)
                product = call(gm, aten.bmm.default, (a3, b3), like=node)
                replacement = call(gm, aten.reshape.default, (product, [*batch, a_shape[-2], b_shape[-1]]),
                                   like=node)
            node.replace_all_uses_with(replacement)
            gm.graph.erase_node(node)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)

    @staticmethod
    def _batched(gm: GraphModule, node: Node, x: Node, shape: list[int], batch: list[int]) -> Node:
        """``x`` as [prod(batch), rows, cols]: expanded over broadcast batch dims, then viewed."""
        if shape[:-2] != batch:
            x = call(gm, aten.expand.default, (x, [*batch, *shape[-2:]]), like=node)
        return call(gm, aten.reshape.default, (x, [math.prod(batch), *shape[-2:]]), like=node)
