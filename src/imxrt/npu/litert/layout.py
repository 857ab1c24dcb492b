"""The one layout rule of the lowering: every rank-4 activation is stored NHWC, other ranks as they are.

Edge tensors are PyTorch-logical (NCHW for rank 4). This module maps edge shapes, dims and permutations
to the stored (LiteRT) ones, and plans the data movement a reshape needs: a TRANSPOSE only where the
element order really changes, a RESHAPE where a transpose would only move size-1 dims.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

NHWC_FROM_NCHW = (0, 2, 3, 1)  # stored dim i holds edge dim NHWC_FROM_NCHW[i]
NCHW_FROM_NHWC = (0, 3, 1, 2)


def is_nhwc(rank: int) -> bool:
    return rank == 4


def stored_order(rank: int) -> tuple[int, ...]:
    """Stored dim i holds edge dim ``stored_order(rank)[i]``."""
    return NHWC_FROM_NCHW if is_nhwc(rank) else tuple(range(rank))


def stored_shape(edge_shape: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(edge_shape[d]) for d in stored_order(len(edge_shape)))


def stored_axis(edge_dim: int, rank: int) -> int:
    """Where an edge dim (negative allowed) lives in the stored tensor."""
    return stored_order(rank).index(edge_dim % rank) if rank else 0


def stored_array(edge_array: np.ndarray) -> np.ndarray:
    """Constant data of an edge tensor, laid out as the stored tensor."""
    return np.ascontiguousarray(edge_array.transpose(stored_order(edge_array.ndim)))


def stored_permutation(edge_perm: Sequence[int]) -> tuple[int, ...]:
    """The TRANSPOSE that implements edge ``permute(edge_perm)`` on stored tensors.

    Output stored dim k holds output edge dim L[k] = input edge dim p[L[k]], which is stored at
    L^-1[p[L[k]]] in the input.
    """
    order = stored_order(len(edge_perm))
    return tuple(order.index(edge_perm[order[k]] % len(edge_perm)) for k in range(len(edge_perm)))


def moves_only_unit_dims(shape: Sequence[int], perm: Sequence[int]) -> bool:
    """True when transposing ``shape`` by ``perm`` keeps the element order (dims > 1 stay in order)."""
    moved = [p for p in perm if shape[p] != 1]
    return moved == sorted(moved)


@dataclass(frozen=True)
class Transpose:
    perm: tuple[int, ...]


@dataclass(frozen=True)
class Reshape:
    shape: tuple[int, ...]


Step = Transpose | Reshape


def view_steps(in_edge_shape: Sequence[int], out_edge_shape: Sequence[int]) -> list[Step]:
    """Stored-tensor steps for an edge ``view`` (row-major reinterpretation of the edge order):
    NHWC -> NCHW if the input is rank 4, reshape, NCHW -> NHWC if the output is rank 4, simplified."""
    steps: list[Step] = []
    if is_nhwc(len(in_edge_shape)):
        steps.append(Transpose(NCHW_FROM_NHWC))
    steps.append(Reshape(tuple(int(d) for d in out_edge_shape)))
    if is_nhwc(len(out_edge_shape)):
        steps.append(Transpose(NHWC_FROM_NCHW))
    return simplify(stored_shape(in_edge_shape), steps)


def permute_steps(stored_in_shape: Sequence[int], perm: Sequence[int]) -> list[Step]:
    return simplify(stored_in_shape, [Transpose(tuple(perm))])


MAX_TRANSPOSE_RANK = 5  # what TFLM's TRANSPOSE takes


def simplify(shape: Sequence[int], steps: Sequence[Step]) -> list[Step]:
    """The fewest steps that move data as ``steps`` do: locally (neighbouring transposes composed,
    order-keeping transposes made reshapes, neighbouring reshapes merged, identities dropped), or, when it
    has fewer TRANSPOSEs, the whole chain as one reshape, one transpose and one reshape
    (``_one_transpose``): a channel shuffle NHWC -> NCHW -> view -> transpose -> view -> NHWC is one
    TRANSPOSE of [N·H·W, g, C/g], not three."""
    local = _simplify_locally(shape, steps)
    transposes = sum(isinstance(step, Transpose) for step in local)
    if transposes < 2:
        return local
    composite = _one_transpose(shape, steps)
    if composite is None:
        return local
    composite = _simplify_locally(shape, composite)
    ranks = [len(step.perm) for step in composite if isinstance(step, Transpose)]
    return composite if len(ranks) < transposes and all(r <= MAX_TRANSPOSE_RANK for r in ranks) else local


def _one_transpose(shape: Sequence[int], steps: Sequence[Step]) -> list[Step] | None:
    """``steps`` as reshape -> transpose -> reshape, or None when a reshape mixes dims that no common
    factorization separates (e.g. [6, 4] -> [4, 6] after a transpose).

    Every dim is tracked as a run of atoms (factors whose elements stay together); a reshape that cuts
    an atom splits it in two (major, minor) everywhere; at the end, atoms adjacent in both the input and
    the output order merge, and the permutation of what remains is the one TRANSPOSE."""
    sizes: list[int] = []

    def atom(size: int) -> int:
        sizes.append(size)
        return len(sizes) - 1

    input_order: list[int] = []
    groups: list[list[int]] = []
    for d in shape:
        groups.append([] if d == 1 else [atom(int(d))])
        input_order += groups[-1]
    final_shape = tuple(int(d) for d in shape)
    for step in steps:
        if isinstance(step, Transpose):
            groups = [groups[p] for p in step.perm]
            final_shape = tuple(final_shape[p] for p in step.perm)
            continue
        flat = [a for group in groups for a in group]
        groups, i = [], 0
        for d in step.shape:
            group, remaining = [], int(d)
            while remaining > 1:
                if i >= len(flat):
                    return None
                a = flat[i]
                if sizes[a] <= remaining:
                    if remaining % sizes[a]:
                        return None
                    remaining //= sizes[a]
                    group.append(a)
                    i += 1
                    continue
                if sizes[a] % remaining:
                    return None
                major, minor = atom(remaining), atom(sizes[a] // remaining)
                flat[i:i + 1] = [major, minor]
                at = input_order.index(a)
                input_order[at:at + 1] = [major, minor]
                group.append(major)
                i += 1
                remaining = 1
            groups.append(group)
        if i != len(flat):
            return None
        final_shape = tuple(int(d) for d in step.shape)
    output_order = [a for group in groups for a in group]
    runs: list[list[int]] = []  # atoms adjacent in both orders, in output order
    for a in output_order:
        if runs and input_order.index(a) == input_order.index(runs[-1][-1]) + 1:
            runs[-1].append(a)
        else:
            runs.append([a])
    by_input = sorted(range(len(runs)), key=lambda r: input_order.index(runs[r][0]))
    merged_shape = tuple(int(np.prod([sizes[a] for a in runs[r]])) for r in by_input)
    perm = tuple(by_input.index(r) for r in range(len(runs)))
    return [Reshape(merged_shape), Transpose(perm), Reshape(final_shape)]


def as_reshape_then_transpose(shape: Sequence[int], steps: Sequence[Step]) -> tuple[tuple, tuple] | None:
    """``steps`` as one RESHAPE to a shape then one TRANSPOSE by a permutation that writes the chain's own
    output shape: (that shape, that permutation); None when the chain is no single transpose (a flatten
    across transposed dims, say)."""
    composite = _one_transpose(shape, steps)
    if composite is None:
        return None
    merged, transpose, final = composite
    transposed = [merged.shape[p] for p in transpose.perm]
    if [d for d in final.shape if d != 1] != transposed:
        return None
    units = sum(d == 1 for d in final.shape)
    shape_in = (1,) * units + tuple(merged.shape)
    perm, unit, run = [], 0, 0
    for d in final.shape:
        if d == 1:
            perm.append(unit)
            unit += 1
        else:
            perm.append(units + transpose.perm[run])
            run += 1
    return shape_in, tuple(perm)


def _simplify_locally(shape: Sequence[int], steps: Sequence[Step]) -> list[Step]:
    """Compose neighbouring transposes, turn order-keeping transposes into reshapes, merge neighbouring
    reshapes, drop identities."""
    planned: list[tuple[tuple[int, ...], Step]] = []  # (shape before the step, step)
    current = tuple(int(d) for d in shape)
    for step in steps:
        current = _push(planned, current, step)
    return [step for _, step in planned]


def _push(planned: list[tuple[tuple[int, ...], Step]], current: tuple[int, ...], step: Step) -> tuple:
    """Append ``step`` to the plan, simplifying against the last step; return the shape after it."""
    if isinstance(step, Transpose):
        if planned and isinstance(planned[-1][1], Transpose):
            before, previous = planned.pop()
            return _push(planned, before, Transpose(tuple(previous.perm[p] for p in step.perm)))
        new_shape = tuple(current[p] for p in step.perm)
        if not moves_only_unit_dims(current, step.perm):
            planned.append((current, step))
            return new_shape
        step = Reshape(new_shape)
    before = current
    if planned and isinstance(planned[-1][1], Reshape):
        before, _ = planned.pop()
    if step.shape != before:
        planned.append((before, step))
    return step.shape
