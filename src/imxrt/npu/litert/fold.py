"""Fold chains of data-movement operators (TRANSPOSE, RESHAPE) into the fewest that do the same.

Converters place layout changes locally (an NCHW input's TRANSPOSE, a view's TRANSPOSE back to edge
order, a permute); where they meet, e.g. input TRANSPOSE -> permute -> view, the chain collapses to
what it does as a whole, often one RESHAPE or nothing:

    x -> TRANSPOSE(0,2,3,1) -> t1 -> TRANSPOSE(0,3,1,2) -> t2 -> RESHAPE -> y    becomes    x -> RESHAPE -> y
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from imxrt.npu.litert import layout
from imxrt.npu.litert.context import LoweringContext
from imxrt.npu.litert.ir import Operator, Tensor

_MOVES = {"TRANSPOSE", "RESHAPE"}


def fold_data_movement(ctx: LoweringContext) -> None:
    """Rebuild ``ctx.graph.operators`` with every movement chain simplified (``layout.simplify``)."""
    graph = ctx.graph
    readers: dict[int, int] = {}
    for op in graph.operators:
        for tensor in op.inputs:
            if tensor is not None:
                readers[id(tensor)] = readers.get(id(tensor), 0) + 1
    boundary = {id(t) for t in (*graph.inputs, *graph.outputs)}

    chains: list[list[Operator]] = []
    chain_ending_in: dict[int, list[Operator]] = {}  # id(output tensor) -> the chain that writes it
    for op in graph.operators:
        if op.builtin not in _MOVES:
            continue
        source = op.inputs[0]
        chain = chain_ending_in.pop(id(source), None)
        if chain is not None and readers.get(id(source)) == 1 and id(source) not in boundary:
            chain.append(op)
        else:
            chain = [op]
            chains.append(chain)
        chain_ending_in[id(op.outputs[0])] = chain

    replaced: dict[int, list[Operator]] = {}  # id(last op of a chain) -> its replacement plan
    skipped: set[int] = set()
    renamed: dict[int, Tensor] = {}  # a chain output that became its input
    vanished: dict[int, set[int]] = {}  # id(tensor a vanished chain read) -> the chain's debug handles
    for chain in chains:
        if len(chain) < 2:
            continue
        first_input, last_output = chain[0].inputs[0], chain[-1].outputs[0]
        steps = layout.simplify(first_input.shape, [_step(op) for op in chain])
        if len(steps) >= len(chain):
            continue
        skipped.update(id(op) for op in chain)
        if not steps and (id(last_output) in boundary and id(first_input) in boundary):
            steps = [layout.Reshape(last_output.shape)]  # an output still needs an operator writing it
        if not steps:
            renamed[id(last_output)] = first_input
            # the chain vanishes: the op that reads (or, at a graph output, writes) the tensor now stands for
            # the chain's edge nodes, so every delegated node keeps a LiteRT op in the profiling map
            vanished[id(first_input)] = vanished.get(id(first_input), set()) | {
                h for op in chain for h in op.debug_handles}
        replaced[id(chain[-1])] = [first_input, last_output, steps, chain]

    if not replaced:
        return
    old = graph.operators
    graph.operators = []
    for op in old:
        if id(op) in replaced:
            first_input, last_output, steps, chain = replaced[id(op)]
            handles = sorted({h for o in chain for h in o.debug_handles})
            ctx.apply_steps(first_input, steps, debug_handles=handles, into=last_output)
        elif id(op) not in skipped:
            inputs = tuple(None if t is None else renamed.get(id(t), t) for t in op.inputs)
            graph.operators.append(replace(op, inputs=inputs) if inputs != op.inputs else op)
    graph.outputs = [renamed.get(id(t), t) for t in graph.outputs]
    _carry_handles(graph, vanished)


def _carry_handles(graph, vanished: dict[int, set[int]]) -> None:
    """Give each vanished chain's debug handles to the ops reading its input, else to the op writing it."""
    for tensor_id, handles in vanished.items():
        readers = [i for i, op in enumerate(graph.operators) if any(t is not None and id(t) == tensor_id
                                                                     for t in op.inputs)]
        writers = [i for i, op in enumerate(graph.operators) if any(id(t) == tensor_id for t in op.outputs)]
        for i in readers or writers:
            op = graph.operators[i]
            graph.operators[i] = replace(op, debug_handles=tuple(sorted(set(op.debug_handles) | handles)))


def _step(op: Operator) -> layout.Step:
    if op.builtin == "TRANSPOSE":
        return layout.Transpose(tuple(int(p) for p in np.frombuffer(op.inputs[1].data, np.int32)))
    return layout.Reshape(op.outputs[0].shape)
