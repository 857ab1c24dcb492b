"""DecomposeAttentionPass: ``scaled_dot_product_attention`` -> rank-3 ``bmm`` / ``softmax`` / ``bmm``.

``nn.MultiheadAttention`` (and any model calling ``F.scaled_dot_product_attention``) exports as one SDPA
node. Left whole, to_edge decomposes it after quantization into float ops around its mask plumbing
(``logical_not``, ``expand``, ``where``). Decomposed here, before quantization, every op has an int8 rule:

    %o = sdpa(%q [B, H, L, E], %k [B, H, S, E], %v [B, H, S, Ev], scale=s)
        →  %scores = mul(bmm(reshape(%q, [B·H, L, E]), permute(reshape(%k, [B·H, S, E]), [0, 2, 1])), s)
           %o = reshape(bmm(softmax(%scores, -1), reshape(%v, [B·H, S, Ev])), [B, H, L, Ev])

The score tensors stay rank 3 (the batch and head dims merged), so softmax runs over the last stored dim:
they are not images and never become NHWC on the NPU. A float ``attn_mask`` is added to the scores (a
constant one folded to the scores' rank 3 at compile time); a boolean mask, ``is_causal``, dropout or
grouped-query heads keep the node whole (to_edge decomposes it).
"""

from __future__ import annotations

import math

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import add_constant, arguments_by_name, call, constant_value, finish, shape_of

aten = torch.ops.aten
_SDPA = aten.scaled_dot_product_attention.default


def _decomposable(arguments: dict) -> bool:
    q, k, v, mask = (arguments[name] for name in ("query", "key", "value", "attn_mask"))
    if arguments["dropout_p"] or arguments["is_causal"] or arguments["enable_gqa"]:
        return False
    if isinstance(mask, Node) and mask.meta["val"].dtype == torch.bool:
        return False
    shapes = [shape_of(n) for n in (q, k, v)]
    return len({len(s) for s in shapes}) == 1 and len(shapes[0]) >= 3 and shapes[0][:-2] == shapes[1][:-2] \
        == shapes[2][:-2]


def _merged_mask(gm: GraphModule, node: Node, mask: Node, batch: list[int], length: int, source: int) -> Node:
    """The additive mask as a rank-3 operand of the merged scores: a module constant becomes a new constant
    (``[1, L, S]`` when it is the same for every batch and head, so the add broadcasts), a computed mask is
    broadcast over ``[..., L, S]`` and merged like the scores."""
    value = constant_value(gm, mask)
    if value is not None:
        full = value.expand(*batch, length, source)
        shared = all(n == 1 for n in value.shape[:-2]) or value.dim() <= 2
        merged = full.reshape(-1, length, source)[:1] if shared else full.reshape(-1, length, source)
        return add_constant(gm, node, "attention_mask", merged.contiguous())
    full = call(gm, aten.expand.default, (mask, [*batch, length, source]), like=node)
    return call(gm, aten.reshape.default, (full, [math.prod(batch), length, source]), like=node)


class DecomposeAttentionPass(PassBase):
    """Requires: an aten graph with ``val`` metadata. Ensures: no SDPA without a boolean mask, causal
    masking, dropout or grouped heads remains."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or node.target != _SDPA:
                continue
            arguments = arguments_by_name(node)
            if not _decomposable(arguments):
                continue
            with gm.graph.inserting_before(node):
                result = self._decompose(gm, node, arguments)
            node.replace_all_uses_with(result)
            gm.graph.erase_node(node)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)

    @staticmethod
    def _decompose(gm: GraphModule, node: Node, arguments: dict) -> Node:
        q, k, v, mask = (arguments[name] for name in ("query", "key", "value", "attn_mask"))
        (*batch, length, embed), source, value_embed = shape_of(q), shape_of(k)[-2], shape_of(v)[-1]
        batches = math.prod(batch)
        scale = arguments["scale"] if arguments["scale"] is not None else 1.0 / math.sqrt(embed)
        q3 = call(gm, aten.reshape.default, (q, [batches, length, embed]), like=node)
        k3 = call(gm, aten.reshape.default, (k, [batches, source, embed]), like=node)
        v3 = call(gm, aten.reshape.default, (v, [batches, source, value_embed]), like=node)
        keys = call(gm, aten.permute.default, (k3, [0, 2, 1]), like=node)
        scores = call(gm, aten.mul.Tensor, (call(gm, aten.bmm.default, (q3, keys), like=node), float(scale)),
                      like=node)
        if isinstance(mask, Node):
            scores = call(gm, aten.add.Tensor, (scores, _merged_mask(gm, node, mask, batch, length, source)),
                          like=node)
        weights = call(gm, aten.softmax.int, (scores, -1), like=node)
        out = call(gm, aten.bmm.default, (weights, v3), like=node)
        return call(gm, aten.reshape.default, (out, [*batch, length, value_embed]), like=node)
