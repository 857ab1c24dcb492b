"""Small helpers for editing an exported aten ``GraphModule`` (parameters are ``get_attr`` nodes)."""

from __future__ import annotations

import contextlib

import torch
from torch._guards import detect_fake_mode
from torch.fx import GraphModule, Node
from torch.utils._pytree import tree_leaves, tree_map


def constant_value(gm: GraphModule, node: object) -> torch.Tensor | None:
    """The tensor a ``get_attr`` node refers to, or None when ``node`` is not a module constant."""
    if not isinstance(node, Node) or node.op != "get_attr":
        return None
    value = gm
    for part in node.target.split("."):
        value = getattr(value, part)
    return value if isinstance(value, torch.Tensor) else None


def add_constant(gm: GraphModule, before: Node, stem: str, value: torch.Tensor) -> Node:
    """Register ``value`` as a new parameter of ``gm`` and return a ``get_attr`` node for it."""
    index = 0
    while hasattr(gm, f"{stem}_{index}"):
        index += 1
    name = f"{stem}_{index}"
    gm.register_parameter(name, torch.nn.Parameter(value.detach().clone(), requires_grad=False))
    with gm.graph.inserting_before(before):
        node = gm.graph.get_attr(name)
    node.meta["val"] = value.detach().clone()
    return node


def finish(gm: GraphModule) -> GraphModule:
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()
    return gm


def call(gm: GraphModule, target, args: tuple, like: Node | None = None, kwargs: dict | None = None) -> Node:
    """A new ``call_function`` node (at the graph's insertion point) with its ``val`` computed from its
    arguments' (under their fake mode), and ``like``'s provenance metadata (stack trace, module path)."""
    node = gm.graph.call_function(target, args, kwargs or {})
    values, kwarg_values = tree_map(lambda a: a.meta.get("val") if isinstance(a, Node) else a, (args, kwargs or {}))
    with detect_fake_mode(tree_leaves((values, kwarg_values))) or contextlib.nullcontext():
        node.meta["val"] = target(*values, **kwarg_values)
    if like is not None:
        node.meta.update({k: v for k, v in like.meta.items() if k not in ("val", "tensor_meta")})
    return node
