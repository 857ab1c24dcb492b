"""Plan checking: when each planned tensor's bytes die, so the interpreter can poison them then.

A memory plan that puts two live tensors on the same bytes can still give right outputs by luck (an
elementwise op whose output overlaps its own input, a tensor overwritten only after its last reader ran
in this order). Poisoning every tensor's bytes right after its last use turns such a plan into wrong
outputs, while a correct plan's outputs cannot change.

Lifetimes come from the instruction chain. Conventions: steps are instruction indices, ``first`` is the
first write (-1 for program inputs), ``last`` the last instruction that reads or writes it (inclusive).
Special cases:

- a planned tensor no instruction writes is a view the planner aliased onto an earlier tensor (a static
  reshape compiles to no instruction, only to a second tensor on the same bytes): it keeps that tensor
  (the latest writer of overlapping bytes before the view's first use) alive, and is never poisoned itself;
- a ``MoveCall`` makes its destination an alias of its source;
- a backward jump keeps everything used inside the loop alive until the jump;
- program outputs are never poisoned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

FOREVER = 1 << 62


@dataclass(frozen=True)
class Access:
    """The planned tensors one instruction reads and writes (value indices, lists expanded)."""

    reads: frozenset[int]
    writes: frozenset[int]
    move: tuple[int, int] | None = None  # (from, to) for a MoveCall
    jump_to: int | None = None  # destination of a JumpFalseCall


@dataclass(frozen=True)
class Region:
    """Where a planned tensor's bytes are."""

    memory_id: int
    offset: int
    nbytes: int

    def overlaps(self, other: Region) -> bool:
        return (self.memory_id == other.memory_id and self.offset < other.offset + other.nbytes
                and other.offset < self.offset + self.nbytes)


def poison_schedule(regions: dict[int, Region], accesses: Sequence[Access], inputs: Sequence[int],
                    outputs: Sequence[int]) -> list[list[int]]:
    """For each instruction, the planned tensors whose bytes die right after it (sorted value indices)."""
    first: dict[int, int] = {v: -1 for v in inputs if v in regions}
    last: dict[int, int] = {v: -1 for v in inputs if v in regions}
    first_use: dict[int, int] = {}
    for step, access in enumerate(accesses):
        for v in sorted(access.reads | access.writes):
            if v in regions:
                first_use.setdefault(v, step)
                last[v] = step
        for v in access.writes:
            if v in regions:
                first.setdefault(v, step)
    for v in outputs:
        if v in regions:
            last[v] = FOREVER
    _extend_over_loops(accesses, last)
    for access in accesses:
        if access.move is not None:
            source, destination = access.move
            if source in last and destination in last:
                last[source] = max(last[source], last[destination])
    views = sorted((v for v in last if v not in first), key=lambda v: (first_use.get(v, -1), v))
    for view in views:
        base = _base_of(view, regions, first, first_use.get(view, -1))
        if base is not None:
            last[base] = max(last[base], last[view])
    schedule: list[list[int]] = [[] for _ in accesses]
    for v in sorted(first):
        if 0 <= last[v] < len(accesses):
            schedule[last[v]].append(v)
    return schedule


def _base_of(view: int, regions: dict[int, Region], first: dict[int, int], used_at: int) -> int | None:
    """The written tensor a view aliases: the latest writer, before the view is used, of bytes it overlaps."""
    candidates = [(first[v], v) for v in first if first[v] <= used_at and regions[v].overlaps(regions[view])]
    return max(candidates)[1] if candidates else None


def _extend_over_loops(accesses: Sequence[Access], last: dict[int, int]) -> None:
    for step, access in enumerate(accesses):
        if access.jump_to is not None and access.jump_to <= step:
            for inner in accesses[access.jump_to:step + 1]:
                for v in inner.reads | inner.writes:
                    if v in last and last[v] < step:
                        last[v] = step
