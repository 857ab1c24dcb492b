"""Memory stage, packing: offsets for buffers with known lifetimes, smallest arena wins.

Cost: the arena's size, i.e. the highest end offset of any buffer; candidates are compared by it alone
(ties: the earlier candidate in ``CANDIDATE_ORDERS``, then the search).

Each candidate is a value (``Placement``: label, offsets, size). The heuristics place buffers one by one,
in a named order, at the lowest offset (first fit) or in the tightest gap (best fit) free of every
already-placed buffer that lives at the same time. When no heuristic reaches the lower bound, a local
search permutes the best order with a seeded ``random.Random`` and keeps improvements; graphs with few
buffers get an exhaustive branch-and-bound over placement orders. ``verify`` checks the winner with no
code shared with the placement: every pair of buffers live together must have disjoint bytes.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from imxrt.memory.lifetimes import Buffer, peak

EXHAUSTIVE_MAX_BUFFERS = 8  # 8! = 40,320 orders at most, pruned by the bound
SEARCH_ITERATIONS = 300
SEED = 0


@dataclass(frozen=True)
class Placement:
    """A candidate plan for one memory id."""

    label: str
    offsets: dict[int, int]  # buffer index -> byte offset
    size: int  # arena bytes: max(offset + nbytes)


class InvalidPacking(AssertionError):
    """A packing that leaves a buffer without an offset, or puts two buffers live at the same step on shared
    bytes: a planner bug, never a user error."""


def _duration(b: Buffer) -> int:
    return b.last - b.first + 1


# Placement orders: a key per buffer, sorted ascending; the buffer index breaks every tie.
CANDIDATE_ORDERS: dict[str, Callable[[Buffer, dict[int, int]], tuple]] = {
    "size": lambda b, _: (-b.nbytes, -_duration(b), b.index),
    "area": lambda b, _: (-b.nbytes * _duration(b), b.index),
    "duration": lambda b, _: (-_duration(b), -b.nbytes, b.index),
    "start": lambda b, _: (b.first, -b.nbytes, b.index),
    "conflict": lambda b, pressure: (-pressure[b.index], -b.nbytes, b.index),
}


def _pressure(buffers: Sequence[Buffer]) -> dict[int, int]:
    """Per buffer, the bytes of every buffer live with it (itself included): the most constrained first."""
    ordered = sorted(buffers, key=lambda b: (b.first, b.index))
    result = {b.index: 0 for b in buffers}
    for i, b in enumerate(ordered):
        for other in ordered[i:]:
            if other.first > b.last:
                break
            if b.lives_with(other):
                result[b.index] += other.nbytes
                if other is not b:
                    result[other.index] += b.nbytes
    return result


def place(order: Sequence[Buffer], best_fit: bool = False, start: int = 0,
          limit: int | None = None) -> dict[int, int] | None:
    """Offsets for ``order`` (root buffers), each in the lowest gap (or, with ``best_fit``, the smallest
    gap) free of already-placed buffers live with it; ``None`` as soon as the arena would exceed ``limit``."""
    placed: list[tuple[Buffer, int]] = []
    offsets: dict[int, int] = {}
    for b in order:
        busy = sorted((offset, offset + other.nbytes) for other, offset in placed
                      if other.nbytes > 0 and other.lives_with(b))
        gaps: list[tuple[int, int]] = []  # (gap size, offset); the last gap is unbounded
        cursor = start
        for low, high in busy:
            if low - cursor >= b.nbytes:
                gaps.append((low - cursor, cursor))
            cursor = max(cursor, high)
        if best_fit and gaps:
            offset = min(gaps)[1]
        else:
            offset = gaps[0][1] if gaps else cursor
        if limit is not None and offset + b.nbytes > limit:
            return None
        offsets[b.index] = offset
        placed.append((b, offset))
    return offsets


def _with_views(buffers: Sequence[Buffer], offsets: dict[int, int]) -> dict[int, int]:
    """Buffers living in another buffer's storage sit at their base's offset plus their own."""
    result = dict(offsets)
    pending = [b for b in buffers if b.base is not None]
    while pending:
        ready = [b for b in pending if b.base in result]
        assert ready, "storage_base chain without a planned root"
        for b in ready:
            result[b.index] = result[b.base] + b.base_offset
        pending = [b for b in pending if b.index not in result]
    return result


def _size(buffers: Sequence[Buffer], offsets: dict[int, int], start: int) -> int:
    return max([start] + [offsets[b.index] + b.nbytes for b in buffers])


def candidates(buffers: Sequence[Buffer], start: int = 0) -> list[Placement]:
    """One placement per named order, first fit and best fit."""
    roots = [b for b in buffers if b.base is None]
    pressure = _pressure(roots)
    result = []
    for name, key in CANDIDATE_ORDERS.items():
        order = sorted(roots, key=lambda b, key=key: key(b, pressure))
        for best_fit in (False, True):
            offsets = _with_views(buffers, place(order, best_fit, start))
            label = f"{'best' if best_fit else 'first'}-fit by {name}"
            result.append(Placement(label, offsets, _size(buffers, offsets, start)))
    return result


def search(buffers: Sequence[Buffer], incumbent: Placement, bound: int, start: int = 0) -> Placement | None:
    """A placement smaller than ``incumbent``, or ``None``: exhaustive for few buffers, else a seeded
    local search over first-fit orders (swap two buffers, keep the order if the arena does not grow)."""
    roots = sorted((b for b in buffers if b.base is None and b.nbytes > 0), key=lambda b: (-b.nbytes, b.index))
    if incumbent.size <= bound or len(roots) < 2:
        return None
    if len(roots) <= EXHAUSTIVE_MAX_BUFFERS:
        found = _exhaustive(roots, incumbent.size, bound, start)
        label = "exhaustive"
    else:
        found = _local_search(roots, incumbent.size, bound, start)
        label = f"local search (seed {SEED})"
    if found is None:
        return None
    offsets = _with_views(buffers, {b.index: found.get(b.index, start) for b in buffers if b.base is None})
    return Placement(label, offsets, _size(buffers, offsets, start))


def _exhaustive(roots: list[Buffer], best_size: int, bound: int, start: int) -> dict[int, int] | None:
    """Depth-first over placement orders (first fit), pruning any prefix that already reaches the best."""
    best: list = [best_size, None]

    def extend(prefix: list[Buffer], remaining: list[Buffer]) -> None:
        if best[0] <= bound:
            return
        offsets = place(prefix, start=start, limit=best[0] - 1)
        if offsets is None:
            return
        if not remaining:
            best[0], best[1] = _size(roots, offsets, start), offsets
            return
        for i, b in enumerate(remaining):
            extend(prefix + [b], remaining[:i] + remaining[i + 1:])

    extend([], roots)
    return best[1]


def _local_search(roots: list[Buffer], best_size: int, bound: int, start: int) -> dict[int, int] | None:
    rng = random.Random(SEED)
    order = list(roots)
    current = place(order, start=start)
    current_size = _size(roots, current, start)
    found = current if current_size < best_size else None
    best_size = min(best_size, current_size)
    for _ in range(SEARCH_ITERATIONS):
        if min(current_size, best_size) <= bound:
            break
        i, j = sorted(rng.sample(range(len(order)), 2))
        trial = order[:i] + [order[j]] + order[i + 1:j] + [order[i]] + order[j + 1:]
        offsets = place(trial, start=start, limit=current_size)
        if offsets is None:
            continue
        order, current, current_size = trial, offsets, _size(roots, offsets, start)
        if current_size < best_size:
            best_size, found = current_size, current
    return found


def plan(buffers: Sequence[Buffer], start: int = 0,
         extra: Sequence[Placement] = ()) -> tuple[Placement, list[Placement]]:
    """The smallest of the heuristic candidates, ``extra`` ones (e.g. ExecuTorch's own plan) and the
    search; verified. Returns the winner and every candidate tried, in order."""
    tried = list(extra) + candidates(buffers, start)
    best = min(tried, key=lambda p: p.size)  # min keeps the first of equal sizes
    bound = start + peak(buffers).nbytes
    found = search(buffers, best, bound, start)
    if found is not None:
        tried.append(found)
        if found.size < best.size:
            best = found
    verify(buffers, best.offsets)
    return best, tried


def verify(buffers: Sequence[Buffer], offsets: dict[int, int]) -> None:
    """Raise ``InvalidPacking`` if two buffers live at the same step share a byte (a buffer may share its
    base's bytes), or a buffer lacks an offset."""
    missing = [b.name for b in buffers if b.index not in offsets]
    if missing:
        raise InvalidPacking(f"no offset for {missing[:3]}")
    by_index = {b.index: b for b in buffers}

    def related(a: Buffer, b: Buffer) -> bool:
        chain_a, chain_b = _chain(a, by_index), _chain(b, by_index)
        return a.index in chain_b or b.index in chain_a

    live = sorted((b for b in buffers if b.nbytes > 0), key=lambda b: (b.first, b.index))
    starts = [b.first for b in live]
    for i, a in enumerate(live):
        for b in live[i + 1:bisect.bisect_right(starts, a.last)]:
            overlap = offsets[a.index] < offsets[b.index] + b.nbytes and offsets[b.index] < offsets[a.index] + a.nbytes
            if overlap and not related(a, b):
                raise InvalidPacking(
                    f"{a.name} (steps {a.first}..{a.last}, bytes {offsets[a.index]}+{a.nbytes}) and {b.name} "
                    f"(steps {b.first}..{b.last}, bytes {offsets[b.index]}+{b.nbytes}) are live together and overlap")


def _chain(b: Buffer, by_index: dict[int, Buffer]) -> set[int]:
    chain = {b.index}
    while b.base is not None:
        b = by_index[b.base]
        chain.add(b.index)
    return chain
