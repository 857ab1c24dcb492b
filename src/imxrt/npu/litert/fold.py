"""Fold chains of data-movement operators (TRANSPOSE, RESHAPE) into the fewest that do the same, and join
transposed tensors before their common transpose.

Converters place layout changes locally (an NCHW input's TRANSPOSE, a view's TRANSPOSE back to edge
order, a permute); where they meet, e.g. input TRANSPOSE -> permute -> view, the chain collapses to
what it does as a whole, often one RESHAPE or nothing:

    x -> TRANSPOSE(0,2,3,1) -> t1 -> TRANSPOSE(0,3,1,2) -> t2 -> RESHAPE -> y    becomes    x -> RESHAPE -> y

A CONCATENATION whose inputs each end a chain with the same transpose (an FPN head's maps flattened to
[N, C, H·W] and joined along positions) becomes one CONCATENATION of the untransposed tensors and one
TRANSPOSE after it (``sink_transposes_into_concatenations``).
"""

from __future__ import annotations

from collections import Counter
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
        # a chain may start where an earlier one vanished (two channel shuffles that each permute nothing)
        first_input, last_output = renamed.get(id(chain[0].inputs[0]), chain[0].inputs[0]), chain[-1].outputs[0]
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


def sink_transposes_into_concatenations(ctx: LoweringContext) -> None:
    """Rewrite every CONCATENATION whose inputs all reach it through movement chains ending in the same
    transpose: concatenate the chains' sources (each reshaped as the chain's one transpose needs) along the
    axis the transpose maps the join to, then transpose once. n TRANSPOSEs become one."""
    while _sink_one(ctx):
        pass


def _sink_one(ctx: LoweringContext) -> bool:
    graph = ctx.graph
    writer = {id(t): op for op in graph.operators for t in op.outputs}
    readers = Counter(id(t) for op in graph.operators for t in op.inputs if t is not None)
    boundary = {id(t) for t in (*graph.inputs, *graph.outputs)}
    for concat in graph.operators:
        if concat.builtin != "CONCATENATION" or len(concat.inputs) < 2:
            continue
        plans = []
        for tensor in concat.inputs:
            chain, source = [], tensor
            while id(source) not in boundary and readers[id(source)] == 1 and id(source) in writer \
                    and writer[id(source)].builtin in _MOVES:
                chain.insert(0, writer[id(source)])
                source = chain[0].inputs[0]
            form = layout.as_reshape_then_transpose(source.shape, [_step(op) for op in chain]) if chain else None
            if form is None or form[1] == tuple(range(len(form[1]))) or len(form[1]) > layout.MAX_TRANSPOSE_RANK:
                break
            plans.append((source, chain, *form))
        else:
            if len({perm for *_, perm in plans}) == 1:
                _rewrite(ctx, concat, plans)
                return True
    return False


def _rewrite(ctx: LoweringContext, concat: Operator, plans: list) -> None:
    graph = ctx.graph
    perm = plans[0][3]
    out = concat.outputs[0]
    chain_handles = sorted({h for _, chain, *_ in plans for op in chain for h in op.debug_handles})
    kept, graph.operators = graph.operators, []
    parts = [ctx.apply_steps(source, [layout.Reshape(shape)] if source.shape != shape else [],
                             debug_handles=[h for op in chain for h in op.debug_handles])
             for source, chain, shape, _ in plans]
    axis = perm[concat.options.axis % len(perm)]
    joined_shape = list(parts[0].shape)
    joined_shape[axis] = sum(part.shape[axis] for part in parts)
    joined = ctx.activation_tensor(out.name + "_joined", tuple(joined_shape), out.quantization)
    options = _options_with(concat.options, axis=axis)
    ctx.emit("CONCATENATION", parts, [joined], options, debug_handles=concat.debug_handles)
    ctx.apply_steps(joined, [layout.Transpose(perm)], debug_handles=chain_handles, into=out)
    new_ops, graph.operators = graph.operators, kept
    removed = {id(op) for _, chain, *_ in plans for op in chain} | {id(concat)}
    at = graph.operators.index(concat)
    graph.operators = [op for op in graph.operators[:at] if id(op) not in removed] + new_ops + [
        op for op in graph.operators[at + 1:] if id(op) not in removed]


def _options_with(options: object, **fields: object) -> object:
    """A copy of a schema ``*OptionsT`` object with ``fields`` changed."""
    copied = type(options)()
    copied.__dict__.update(options.__dict__)
    copied.__dict__.update(fields)
    return copied


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
