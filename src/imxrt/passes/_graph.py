"""Small helpers for editing an exported aten ``GraphModule`` (parameters are ``get_attr`` nodes)."""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node


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
