"""Small helpers for editing an exported aten ``GraphModule`` (parameters are ``get_attr`` nodes)."""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable

import torch
from torch._guards import detect_fake_mode
from torch.fx import GraphModule, Node
from torch.fx.operator_schemas import normalize_function
from torch.fx.passes.infra.pass_base import PassResult
from torch.utils._pytree import tree_leaves, tree_map


def constant_value(gm: GraphModule, node: object) -> torch.Tensor | None:
    """The tensor a ``get_attr`` node refers to, or None when ``node`` is not a module constant."""
    if not isinstance(node, Node) or node.op != "get_attr":
        return None
    value = gm
    for part in node.target.split("."):
        value = getattr(value, part)
    return value if isinstance(value, torch.Tensor) else None


def calls_to(gm: GraphModule, target) -> list[Node]:
    """The graph's calls of ``target``, listed first: a pass may rewrite or erase each as it goes."""
    return [node for node in gm.graph.nodes if node.op == "call_function" and node.target == target]


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


def delete_attribute(gm: GraphModule, target: str) -> None:
    """Delete the module attribute a ``get_attr`` target names (a re-export would lift one left unread)."""
    owner_path, _, name = target.rpartition(".")
    owner = gm.get_submodule(owner_path) if owner_path else gm
    delattr(owner, name)


# Layers a per-output-channel affine map after them folds into: op -> axis of its weight that indexes
# output channels.
OUTPUT_CHANNEL_AXIS = {
    torch.ops.aten.conv1d.default: 0,
    torch.ops.aten.conv2d.default: 0,
    torch.ops.aten.linear.default: 0,
    torch.ops.aten.conv_transpose2d.input: 1,
}


def foldable_layer(node: object) -> bool:
    """A conv / linear node (``OUTPUT_CHANNEL_AXIS``) whose only user is the op that would fold into it."""
    return isinstance(node, Node) and node.op == "call_function" and node.target in OUTPUT_CHANNEL_AXIS \
        and len(node.users) == 1


def layer_parameters(gm: GraphModule, layer: Node) -> tuple[torch.Tensor, torch.Tensor | None, int] | None:
    """A ``foldable_layer``'s constant weight, its bias (None when it has none) and the weight's output-channel
    axis; None when either is not a module constant, or when groups split the output channels of a
    transposed conv (its weight's axis 1 then holds one group's channels)."""
    weight = constant_value(gm, layer.args[1])
    bias_node = layer.args[2] if len(layer.args) > 2 else None
    bias = constant_value(gm, bias_node) if bias_node is not None else None
    axis = OUTPUT_CHANNEL_AXIS[layer.target]
    grouped = axis == 1 and len(layer.args) > 6 and layer.args[6] != 1
    if weight is None or (bias_node is not None and bias is None) or grouped:
        return None
    return weight, bias, axis


def set_layer_parameters(gm: GraphModule, layer: Node, stem: str, weight: torch.Tensor, bias: torch.Tensor) -> None:
    """Give ``layer`` new constant weight and bias (``<stem>_weight_<i>``, ``<stem>_bias_<i>``)."""
    args = list(layer.args)
    args[1] = add_constant(gm, layer, f"{stem}_weight", weight)
    bias_node = add_constant(gm, layer, f"{stem}_bias", bias)
    if len(args) > 2:
        args[2] = bias_node
    else:
        args.append(bias_node)
    layer.args = tuple(args)


def arguments_by_name(node: Node) -> dict:
    """A call's arguments by their schema names, defaults filled in (positional or keyword alike)."""
    return normalize_function(node.target, tuple(node.args), dict(node.kwargs),
                              normalize_to_only_use_kwargs=True).kwargs


def shape_of(node: object) -> list[int] | None:
    """The shape of a node's tensor value, or None when ``node`` is not a node holding one."""
    value = node.meta.get("val") if isinstance(node, Node) else None
    return list(value.shape) if isinstance(value, torch.Tensor) else None


def result_read(node: Node, index: int) -> bool:
    """Whether output ``index`` of a node returning a tuple (read by ``getitem``) has a reader."""
    return any(user.target is operator.getitem and user.args[1] == index and user.users for user in node.users)


def replace_results(gm: GraphModule, node: Node, *results: Node | None) -> None:
    """Point the readers of ``node`` at ``results`` and erase it: a tensor's readers at the first, each read
    ``getitem`` of a tuple at the result of its index (an unread one, the indices mostly, is only erased)."""
    if isinstance(node.meta.get("val"), (tuple, list)):
        for user in list(node.users):
            if user.users:
                user.replace_all_uses_with(results[user.args[1]])
            gm.graph.erase_node(user)
    else:
        node.replace_all_uses_with(results[0])
    gm.graph.erase_node(node)


def rewrite_to_fixpoint(gm: GraphModule, rewrite_one: Callable[[GraphModule], bool]) -> PassResult:
    """Apply ``rewrite_one`` (one rewrite, True when it made one) until it makes none; each rewrite may
    expose the next (a sunk node meets its next reader)."""
    modified = False
    while rewrite_one(gm):
        modified = True
    return PassResult(finish(gm) if modified else gm, modified)


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
