"""Plan checking: tensors a memory plan puts on the same bytes while both are live, and when each planned
tensor's bytes die, so the interpreter can poison them then.

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
- a backward jump keeps everything used inside the loop alive until the jump, and what the loop reads before
  writing it in an iteration (what it takes in, the state it carries, the earlier rows of a stacked output)
  until the loop has ended, one step past the jump;
- program outputs are never poisoned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from imxrt.errors import BadFile

FOREVER = 1 << 62


@dataclass(frozen=True)
class Access:
    """The planned tensors one instruction reads and writes (value indices, lists expanded). A kernel's out
    tensors are not among its reads, unless it writes only a part of them (``updates``); a delegate's are."""

    reads: frozenset[int]
    writes: frozenset[int]
    updates: frozenset[int] = frozenset()  # written, but the instruction keeps their other bytes (et_copy_index)
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


@dataclass(frozen=True)
class Lifetimes:
    """Each planned tensor's first write and last use (steps, inclusive), after the special cases above.
    ``first`` holds only written tensors: the others are views of an earlier writer."""

    first: dict[int, int]
    last: dict[int, int]


def lifetimes(regions: dict[int, Region], accesses: Sequence[Access], inputs: Sequence[int],
              outputs: Sequence[int]) -> Lifetimes:
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
    return Lifetimes(first, last)


def poison_schedule(regions: dict[int, Region], accesses: Sequence[Access], inputs: Sequence[int],
                    outputs: Sequence[int]) -> list[list[int]]:
    """For each instruction, the planned tensors whose bytes die right after it (sorted value indices)."""
    lives = lifetimes(regions, accesses, inputs, outputs)
    schedule: list[list[int]] = [[] for _ in accesses]
    for v in sorted(lives.first):
        if 0 <= lives.last[v] < len(accesses):
            schedule[lives.last[v]].append(v)
    return schedule


@dataclass(frozen=True)
class Conflict:
    """Two written tensors on shared bytes while both are live."""

    values: tuple[int, int]
    regions: tuple[Region, Region]
    lives: tuple[tuple[int, int], tuple[int, int]]

    def describe(self) -> str:
        def one(value: int, region: Region, life: tuple[int, int]) -> str:
            end = "the end" if life[1] >= FOREVER else f"instruction {life[1]}"
            start = "the input" if life[0] < 0 else f"instruction {life[0]}"
            end_byte = region.offset + region.nbytes - 1
            return (f"value {value} (buffer {region.memory_id} bytes {region.offset}..{end_byte}, "
                    f"live from {start} to {end})")
        return " and ".join(one(*item) for item in zip(self.values, self.regions, self.lives, strict=True))


class PlanConflict(BadFile):
    """A ``.pte`` whose memory plan puts two live tensors on the same bytes (``imxrt run --check-plan``)."""

    def __init__(self, path: str, found: list[Conflict]):
        more = f" (and {len(found) - 1} more pairs)" if len(found) > 1 else ""
        super().__init__(path, f"its memory plan puts live tensors on the same bytes: {found[0].describe()}{more}")
        self.conflicts = found


def conflicts(regions: dict[int, Region], accesses: Sequence[Access], inputs: Sequence[int],
              outputs: Sequence[int]) -> list[Conflict]:
    """Pairs of written tensors whose bytes overlap while both are live (lifetimes inclusive, as the
    planners count them): what a correct plan never holds. A chain with jumps is left to poisoning: the
    two branches of a condition may share bytes, and step order is not execution order there."""
    if any(access.jump_to is not None for access in accesses):
        return []
    lives = lifetimes(regions, accesses, inputs, outputs)
    written = sorted(lives.first, key=lambda v: (regions[v].memory_id, regions[v].offset, v))
    found = []
    for position, a in enumerate(written):
        ra = regions[a]
        for b in written[position + 1:]:  # sorted by offset: stop at the first that starts past a's end
            rb = regions[b]
            if rb.memory_id != ra.memory_id or rb.offset >= ra.offset + ra.nbytes:
                break
            if not rb.nbytes or not ra.nbytes:
                continue
            life_a, life_b = (lives.first[a], lives.last[a]), (lives.first[b], lives.last[b])
            if life_a[0] <= life_b[1] and life_b[0] <= life_a[1]:
                found.append(Conflict((a, b), (ra, rb), (life_a, life_b)))
    return found


def _base_of(view: int, regions: dict[int, Region], first: dict[int, int], used_at: int) -> int | None:
    """The written tensor a view aliases: the latest writer, before the view is used, of bytes it overlaps."""
    candidates = [(first[v], v) for v in first if first[v] <= used_at and regions[v].overlaps(regions[view])]
    return max(candidates)[1] if candidates else None


def _extend_over_loops(accesses: Sequence[Access], last: dict[int, int]) -> None:
    """A backward jump at ``step`` repeats steps jump_to..step. Its next iteration reads again what the loop reads
    before writing it: that lives until one step past the jump (poisoned after the loop has ended, never between
    its iterations); whatever else the loop uses is written before it is read, and lives until the jump."""
    for step, access in enumerate(accesses):
        if access.jump_to is not None and access.jump_to <= step:
            body = accesses[access.jump_to:step + 1]
            carried = _read_before_written(body)
            for inner in body:
                for v in inner.reads | inner.writes:
                    if v in last:
                        last[v] = max(last[v], step + 1 if v in carried else step)


def _read_before_written(body: Sequence[Access]) -> set[int]:
    """Values a straight run of instructions reads, or writes only in part, before writing them whole."""
    carried: set[int] = set()
    whole: set[int] = set()
    for access in body:
        carried.update(v for v in access.reads | access.updates if v not in whole)
        whole.update(access.writes - access.updates)
    return carried
