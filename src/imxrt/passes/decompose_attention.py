"""DecomposeAttentionPass: ``scaled_dot_product_attention`` -> rank-3 ``bmm`` / ``softmax`` / ``bmm``.

``nn.MultiheadAttention`` (and any model calling ``F.scaled_dot_product_attention``) exports as one SDPA
node. Left whole, to_edge decomposes it after quantization into float ops around its mask plumbing
(``logical_not``, ``expand``, ``where``). Decomposed here, before quantization, every op has an int8 rule:

    %o = sdpa(%q [B, H, L, E], %k [B, H, S, E], %v [B, H, S, Ev], scale=s)
        →  %scores = mul(bmm(reshape(%q, [B·H, L, E]), permute(reshape(%k, [B·H, S, E]), [0, 2, 1])), s)
           %o = reshape(bmm(softmax(%scores, -1), reshape(%v, [B·H, S, Ev])), [B, H, L, Ev])

The score tensors stay rank 3 (the batch and head dims merged), so softmax runs over the last stored dim:
they are not images and never become NHWC on the NPU. A float ``attn_mask`` is added to the scores (a
constant one folded to the scores' rank 3 at compile time); a boolean mask, ``is_causal`` or dropout keep
the node whole (to_edge decomposes it).

Keys and values shared by several query heads (multi-query attention, ``%k [B, 1, S, E]`` as MobileNetV4's
mobile MQA passes them; grouped-query attention with ``enable_gqa``, G key heads for H query heads) are not
copied per head: the query heads that read one key head join that head's rows, one bmm per key head::

    %q [B, H, L, E] → reshape(%q, [B·G, (H / G)·L, E]);  %k [B, G, S, E] → reshape(%k, [B·G, S, E])
"""

from __future__ import annotations

import math

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import add_constant, arguments_by_name, call, calls_to, constant_value, finish, shape_of

aten = torch.ops.aten
_SDPA = aten.scaled_dot_product_attention.default


def _key_groups(arguments: dict) -> tuple[int, int] | None:
    """(P, R): the keys' P merged batches, each read by R query heads (R = 1: one key head per query head);
    None when the node stays whole."""
    q, k, v, mask = (arguments[name] for name in ("query", "key", "value", "attn_mask"))
    if arguments["dropout_p"] or arguments["is_causal"]:
        return None
    if isinstance(mask, Node) and mask.meta["val"].dtype == torch.bool:
        return None
    shapes = [shape_of(n) for n in (q, k, v)]
    if len({len(s) for s in shapes}) != 1 or len(shapes[0]) < 3 or shapes[1][:-2] != shapes[2][:-2]:
        return None
    batch, key_batch = shapes[0][:-2], shapes[1][:-2]
    for split in range(len(batch), -1, -1):  # multi-query: the keys' trailing batch dims are 1
        if key_batch[:split] == batch[:split] and all(n == 1 for n in key_batch[split:]):
            return math.prod(batch[:split]), math.prod(batch[split:])
    heads, key_heads = batch[-1], key_batch[-1]
    if arguments["enable_gqa"] and key_batch[:-1] == batch[:-1] and heads % key_heads == 0:
        return math.prod(key_batch), heads // key_heads  # query head h reads key head h // R
    return None


def _merged_mask(gm: GraphModule, node: Node, mask: Node, batch: list[int], rows: tuple[int, int],
                 length: int, source: int) -> Node:
    """The additive mask as a rank-3 operand of the merged scores [P, R·L, S] (``rows`` = (P, R)): a module
    constant becomes a new constant (``[1, R·L, S]`` when it is the same for every batch and head, so the
    add broadcasts), a computed mask is broadcast over ``[..., L, S]`` and merged like the scores."""
    groups, readers = rows
    value = constant_value(gm, mask)
    if value is not None:
        full = value.expand(*batch, length, source)
        if all(n == 1 for n in value.shape[:-2]) or value.dim() <= 2:
            merged = full.reshape(-1, length, source)[:1].repeat(1, readers, 1)
        else:
            merged = full.reshape(groups, readers * length, source)
        return add_constant(gm, node, "attention_mask", merged.contiguous())
    full = call(gm, aten.expand.default, (mask, [*batch, length, source]), like=node)
    return call(gm, aten.reshape.default, (full, [groups, readers * length, source]), like=node)


class DecomposeAttentionPass(PassBase):
    """Requires: an aten graph with ``val`` metadata. Ensures: no SDPA without a boolean mask, causal
    masking or dropout remains, unless its keys' batch dims are neither the queries' nor shared by them."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in calls_to(gm, _SDPA):
            arguments = arguments_by_name(node)
            rows = _key_groups(arguments)
            if rows is None:
                continue
            with gm.graph.inserting_before(node):
                result = self._decompose(gm, node, arguments, rows)
            node.replace_all_uses_with(result)
            gm.graph.erase_node(node)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)

    @staticmethod
    def _decompose(gm: GraphModule, node: Node, arguments: dict, rows: tuple[int, int]) -> Node:
        q, k, v, mask = (arguments[name] for name in ("query", "key", "value", "attn_mask"))
        (*batch, length, embed), source, value_embed = shape_of(q), shape_of(k)[-2], shape_of(v)[-1]
        groups, readers = rows
        scale = arguments["scale"] if arguments["scale"] is not None else 1.0 / math.sqrt(embed)
        q3 = call(gm, aten.reshape.default, (q, [groups, readers * length, embed]), like=node)
        k3 = call(gm, aten.reshape.default, (k, [groups, source, embed]), like=node)
        v3 = call(gm, aten.reshape.default, (v, [groups, source, value_embed]), like=node)
        keys = call(gm, aten.permute.default, (k3, [0, 2, 1]), like=node)
        scores = call(gm, aten.mul.Tensor, (call(gm, aten.bmm.default, (q3, keys), like=node), float(scale)),
                      like=node)
        if isinstance(mask, Node):
            merged = _merged_mask(gm, node, mask, batch, rows, length, source)
            scores = call(gm, aten.add.Tensor, (scores, merged), like=node)
        weights = call(gm, aten.softmax.int, (scores, -1), like=node)
        out = call(gm, aten.bmm.default, (weights, v3), like=node)
        return call(gm, aten.reshape.default, (out, [*batch, length, value_embed]), like=node)
