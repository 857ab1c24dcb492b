"""Memory stage, lifetimes: the tensors a memory plan must place, when each one lives, and the lower bound.

A ``Buffer`` is one planned tensor of the program being serialized. Steps are node indices of the graph
ExecuTorch plans (the out-variant graph, where every output has an ``alloc`` node right before its op):
``first`` is the step of its first appearance (0 for a program input), ``last`` the step of its last use
(inclusive). Two buffers whose step ranges intersect are live together and must not share bytes.

The lower bound of any whole-tensor plan for this operator order is the largest sum of bytes live at one
step (``peak``): no placement of these lifetimes fits in fewer bytes.

``graph_lifetimes`` computes lifetimes from the graph itself, independently of ExecuTorch's
``update_all_tensors_lifetime`` (which the planner reads), so the plan verifier does not trust the numbers
the planner used.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch.utils._pytree import tree_flatten


@dataclass(frozen=True)
class Buffer:
    """One planned tensor."""

    index: int  # position in planning order: the final tie-break of every sort
    name: str  # the node that makes it (an op's output names the op; a scratch buffer names op.argument)
    nbytes: int  # bytes the plan reserves: the tensor's bytes rounded up to the alignment
    first: int  # first step it is live
    last: int  # last step it is live, inclusive
    memory_id: int = 1
    base: int | None = None  # the buffer whose bytes it lives in (ExecuTorch's storage_base), if any
    base_offset: int = 0  # its offset inside ``base``
    role: str = "activation"  # input / output (of the program), scratch (a kernel's work buffer), activation
    dtype: str = ""  # e.g. "int8", "float32"

    def lives_with(self, other: Buffer) -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclass(frozen=True)
class Peak:
    """The lower bound: the most bytes live at one step, and which buffers they are."""

    nbytes: int
    step: int
    live: tuple[int, ...]  # buffer indices live at ``step``, largest first


def peak(buffers: Sequence[Buffer]) -> Peak:
    """The largest sum of live bytes over the steps (buffers inside another buffer's bytes count once)."""
    roots = [b for b in buffers if b.base is None and b.nbytes > 0]
    if not roots:
        return Peak(0, 0, ())
    # Event sweep: a buffer adds its bytes at ``first`` and removes them after ``last``.
    events = sorted([(b.first, 0, b.nbytes) for b in roots] + [(b.last + 1, -1, -b.nbytes) for b in roots])
    best, best_step, live = 0, roots[0].first, 0
    for step, group in itertools.groupby(events, key=lambda e: e[0]):
        live += sum(e[2] for e in group)
        if live > best:
            best, best_step = live, step
    at_peak = sorted((b for b in roots if b.first <= best_step <= b.last), key=lambda b: (-b.nbytes, b.index))
    return Peak(best, best_step, tuple(b.index for b in at_peak))


def _specs_of(value) -> list:
    # A node's TensorSpecs: its own ``spec`` meta (a memory.view node's is its base's).
    from executorch.exir.memory_planning import get_node_tensor_specs

    return list(get_node_tensor_specs(value)) if isinstance(value, torch.fx.Node) else []


def graph_lifetimes(graph_module: torch.fx.GraphModule) -> dict[int, tuple[int, int]]:
    """``id(spec) -> (first, last)`` for every TensorSpec the graph's nodes refer to, from node order alone.

    A spec is live from the first node that makes or reads it to the last (placeholders from step 0);
    a spec living in another's storage keeps that storage live as long as itself."""
    spans: dict[int, list[int]] = {}
    specs: dict[int, object] = {}
    for step, node in enumerate(graph_module.graph.nodes):
        operands = tree_flatten([node, list(node.args), list(node.kwargs.values())])[0]
        for operand in operands:
            for spec in _specs_of(operand):
                start = 0 if operand.op == "placeholder" else step
                span = spans.setdefault(id(spec), [start, step])
                span[0], span[1] = min(span[0], start), max(span[1], step)
                specs[id(spec)] = spec
    for key in sorted(spans):
        spec, (start, end) = specs[key], spans[key]
        base = getattr(spec, "storage_base", None)
        while base is not None and id(base) in spans:
            spans[id(base)][0] = min(spans[id(base)][0], start)
            spans[id(base)][1] = max(spans[id(base)][1], end)
            base = getattr(base, "storage_base", None)
    return {key: (span[0], span[1]) for key, span in spans.items()}


SCRATCH_ARGUMENTS = frozenset({"scratch", "output_scratch"})  # CMSIS-NN buffers of the cortex_m kernels


def spec_labels(graph_module: torch.fx.GraphModule) -> dict[int, tuple[str, str]]:
    """``id(spec) -> (name, role)``. Names: an op's output is named after the op (``conv.out``), a buffer
    passed as another argument after the op and the argument (``conv.scratch``), a program input after its
    placeholder. Roles: ``input``, ``output`` (of the program), ``scratch`` (a kernel's work buffer) or
    ``activation``."""
    labels: dict[int, tuple[str, str]] = {}
    outputs: set[int] = set()
    for node in graph_module.graph.nodes:
        if node.op == "output":
            outputs |= {id(spec) for spec in tree_flatten(list(node.args))[0] for spec in _specs_of(spec)}
        if node.op == "placeholder":
            for spec in _specs_of(node):
                labels.setdefault(id(spec), (node.name, "input"))
        if node.op != "call_function":
            continue
        for argument, value in _named_operands(node):
            if isinstance(value, torch.fx.Node) and getattr(value.target, "__name__", "") == "alloc":
                role = "scratch" if argument in SCRATCH_ARGUMENTS else "activation"
                for spec in _specs_of(value):
                    labels.setdefault(id(spec), (f"{node.name}.{argument}", role))
    for node in graph_module.graph.nodes:  # delegate outputs (getitem) and anything left
        for spec in _specs_of(node):
            labels.setdefault(id(spec), (node.name, "activation"))
    return {key: (name, "output" if key in outputs and role != "input" else role)
            for key, (name, role) in labels.items()}


def _named_operands(node: torch.fx.Node) -> Iterable[tuple[str, object]]:
    schema = getattr(node.target, "_schema", None)
    arguments = [a.name for a in schema.arguments] if schema is not None else []
    for position, value in enumerate(node.args):
        yield (arguments[position] if position < len(arguments) else f"arg{position}"), value
    yield from sorted(node.kwargs.items())
