"""Memory placement on hand-built lifetimes: the lower bound, the verifier, candidates, search, determinism.

The buffers are small enough to check by hand; each test's docstring derives its expected numbers.
"""

from __future__ import annotations

import pytest

from imxrt.cli import parse_bytes
from imxrt.errors import BadOption
from imxrt.memory.lifetimes import Buffer, peak
from imxrt.memory.packing import EXHAUSTIVE_MAX_BUFFERS, InvalidPacking, Placement, plan, search, verify


def chain(*spans: tuple[int, int, int]) -> list[Buffer]:
    """Buffers from (nbytes, first, last) triples, named b0, b1, ..."""
    return [Buffer(index=i, name=f"b{i}", nbytes=n, first=start, last=end) for i, (n, start, end) in enumerate(spans)]


def test_peak_is_the_most_bytes_live_at_one_step():
    """b0 (100 B, steps 0-2) and b1 (50 B, 1-3) overlap at steps 1-2: 150 B; b2 (120 B, 3-4) with b1 at
    step 3: 170 B, the peak; b3 (10 B, 5) alone. The peak names b2 then b1 (largest first)."""
    result = peak(chain((100, 0, 2), (50, 1, 3), (120, 3, 4), (10, 5, 5)))
    assert (result.nbytes, result.step, result.live) == (170, 3, (2, 1))


def test_a_buffer_inside_its_base_counts_once_in_the_peak():
    """b1 lives in b0's bytes (a view): the peak is b0's 64 B, not 96."""
    buffers = [Buffer(0, "base", 64, 0, 3), Buffer(1, "view", 32, 1, 2, base=0, base_offset=16)]
    assert peak(buffers).nbytes == 64


def test_verify_rejects_live_buffers_sharing_bytes():
    """b0 at [0, 100) and b1 at [96, 146) are both live at step 1: four bytes in common."""
    buffers = chain((100, 0, 1), (50, 1, 2))
    with pytest.raises(InvalidPacking, match="b0 .* b1 .* overlap"):
        verify(buffers, {0: 0, 1: 96})


def test_verify_accepts_bytes_shared_across_time_and_a_view_inside_its_base():
    """b1 reuses b0's bytes after b0 died (step 2 > 1); b3 is a view inside b2 while b2 lives."""
    buffers = chain((100, 0, 1), (100, 2, 3)) + [Buffer(2, "base", 64, 0, 3),
                                                 Buffer(3, "view", 32, 1, 2, base=2, base_offset=16)]
    verify(buffers, {0: 0, 1: 0, 2: 100, 3: 116})


def test_plan_reaches_the_bound_that_greedy_shared_objects_miss():
    """ExecuTorch's greedy gives each of the two 64 B tensors its own object and then cannot fit the
    32 B + 32 B pair alive together with one of them beside it (a 160 B plan: extra candidate here). The
    lifetimes peak at 96 B (64 + 32 at steps 1 and 3), and a 96 B placement exists: the two 64 B tensors at
    0 (they never meet), the 32 B ones at 64."""
    buffers = chain((64, 0, 1), (32, 1, 3), (64, 3, 4), (32, 4, 5))
    theirs = Placement("executorch greedy", {0: 0, 1: 64, 2: 96, 3: 64}, 160)
    chosen, tried = plan(buffers, extra=[theirs])
    assert peak(buffers).nbytes == 96
    assert chosen.size == 96
    assert tried[0].label == "executorch greedy" and chosen.label != "executorch greedy"


def test_a_tie_keeps_the_extra_candidate():
    """When ExecuTorch's plan is as small as ours, its placement stays (the program is the one ExecuTorch
    would have written)."""
    buffers = chain((64, 0, 1), (64, 1, 2))
    theirs = Placement("executorch greedy", {0: 64, 1: 0}, 128)
    chosen, _ = plan(buffers, extra=[theirs])
    assert chosen is theirs


def _hard_case(count: int) -> list[Buffer]:
    # Staggered lifetimes of mixed sizes where placing by size or by start leaves holes.
    sizes = [48, 16, 80, 32, 64, 16, 96, 32, 48, 80, 16, 64]
    return chain(*[(sizes[i % len(sizes)], i, i + 2 + (i % 3)) for i in range(count)])


@pytest.mark.parametrize("count", [EXHAUSTIVE_MAX_BUFFERS, EXHAUSTIVE_MAX_BUFFERS + 4],
                         ids=["exhaustive", "local-search"])
def test_search_improves_on_a_poor_incumbent(count):
    """Given an incumbent twice the bound, the search (exhaustive up to EXHAUSTIVE_MAX_BUFFERS buffers,
    seeded local search above) returns a verified placement smaller than the incumbent."""
    buffers = _hard_case(count)
    bound = peak(buffers).nbytes
    found = search(buffers, Placement("poor", {}, 2 * bound), bound)
    assert found is not None and bound <= found.size < 2 * bound
    verify(buffers, found.offsets)


def test_search_stops_at_the_bound():
    buffers = chain((64, 0, 1), (64, 1, 2))
    assert search(buffers, Placement("at bound", {0: 0, 1: 64}, 128), 128) is None


def test_plans_are_deterministic():
    buffers = _hard_case(20)
    first, second = plan(buffers), plan(list(buffers))
    assert first[0] == second[0] and [p.size for p in first[1]] == [p.size for p in second[1]]


@pytest.mark.parametrize(("text", "expected"), [("1", 1), ("512K", 512 * 1024), ("2m", 2 * 1024 * 1024)])
def test_sram_budget_accepts_bytes_with_k_or_m(text, expected):
    assert parse_bytes("--sram-budget", text) == expected


@pytest.mark.parametrize("text", ["0", "1.5M", "12G", "K", ""])
def test_sram_budget_rejects_anything_else(text):
    with pytest.raises(BadOption, match="--sram-budget.*positive byte count"):
        parse_bytes("--sram-budget", text)
