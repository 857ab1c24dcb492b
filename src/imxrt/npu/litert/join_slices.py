"""Join the SLICEs that cut one tensor along one axis into one SPLIT_V.

Every LiteRT op is one NPU kernel with its fixed start-up cost, however few bytes it moves. An unrolled GRU
slices its precomputed input projection into two pieces per time step and its gate vector into r and z:
98 + 49 SLICE kernels over 49 steps. One SPLIT_V writes all the pieces of one tensor at once::

    x -> SLICE(begin 0, size 128) -> a        x -> SPLIT_V(sizes [128, 64, 128, 64], axis 1) -> a, b, c, d
    x -> SLICE(begin 128, size 64) -> b  →
    x -> SLICE(begin 192, size 128) -> c
    x -> SLICE(begin 320, size 64) -> d

Pieces nobody slices (the gaps between slices) become outputs that no op reads. SPLIT_V moves bytes: its
outputs keep the input's qparams, as each SLICE's did.
"""

from __future__ import annotations

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from imxrt.npu.litert.context import LoweringContext
from imxrt.npu.litert.converters.common import options
from imxrt.npu.litert.ir import Operator, Tensor


def _cut(op: Operator) -> tuple[int, int, int] | None:
    """(axis, begin, end) of a SLICE that cuts only one axis of its input, else None."""
    source = op.inputs[0]
    begin = np.frombuffer(op.inputs[1].data, np.int32) if op.inputs[1].is_constant else None
    size = np.frombuffer(op.inputs[2].data, np.int32) if op.inputs[2].is_constant else None
    if begin is None or size is None:
        return None
    size = [dim - b if s == -1 else s for s, b, dim in zip(size, begin, source.shape, strict=True)]
    cut = [axis for axis, dim in enumerate(source.shape) if (begin[axis], size[axis]) != (0, dim)]
    if len(cut) != 1 or size[cut[0]] <= 0 or op.outputs[0].quantization != source.quantization:
        return None
    axis = cut[0]
    return axis, int(begin[axis]), int(begin[axis] + size[axis])


def join_slices_into_splits(ctx: LoweringContext) -> None:
    """Replace each group of two or more non-overlapping SLICEs of one tensor along one axis by one SPLIT_V,
    placed where the group's first SLICE was."""
    graph = ctx.graph
    groups: dict[tuple[int, int], list[tuple[Operator, int, int]]] = {}
    for op in graph.operators:
        if op.builtin != "SLICE":
            continue
        cut = _cut(op)
        if cut is not None:
            axis, begin, end = cut
            groups.setdefault((id(op.inputs[0]), axis), []).append((op, begin, end))
    replaced: dict[int, Operator | None] = {}  # id(SLICE) -> the SPLIT_V at its place, or None: dropped
    for (_, axis), members in groups.items():
        members = sorted(members, key=lambda m: (m[1], m[2]))
        if len(members) < 2 or any(a[2] > b[1] for a, b in zip(members, members[1:], strict=False)):
            continue
        split = _split(ctx, members, axis)
        first = min((op for op, *_ in members), key=graph.operators.index)
        for op, *_ in members:
            replaced[id(op)] = split if op is first else None
    if not replaced:
        return
    graph.operators = [replaced.get(id(op), op) for op in graph.operators if replaced.get(id(op), op) is not None]


def _split(ctx: LoweringContext, members: list[tuple[Operator, int, int]], axis: int) -> Operator:
    """The SPLIT_V writing every member's output (and an unread output for each gap between them)."""
    source = members[0][0].inputs[0]
    outputs: list[Tensor] = []
    sizes: list[int] = []
    position = 0
    for op, begin, end in [*members, (None, source.shape[axis], source.shape[axis])]:
        if begin > position:  # a gap no SLICE read
            shape = list(source.shape)
            shape[axis] = begin - position
            outputs.append(ctx.activation_tensor(f"{source.name}_unread", shape, source.quantization))
            sizes.append(begin - position)
        if op is not None:
            outputs.append(op.outputs[0])
            sizes.append(end - begin)
        position = end
    handles = sorted({h for op, *_ in members for h in op.debug_handles})
    inputs = [source, ctx.int32_constant("split_sizes", sizes), ctx.int32_constant("split_axis", [axis])]
    split_options = options(schema.SplitVOptionsT, numSplits=len(outputs))
    split = ctx.emit("SPLIT_V", inputs, outputs, split_options, debug_handles=handles)
    ctx.graph.operators.pop()  # placed by the caller, where the first SLICE was
    return split
