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


def simplify(shape: Sequence[int], steps: Sequence[Step]) -> list[Step]:
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
