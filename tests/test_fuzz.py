"""The host runtime against damaged and crafted programs: the fuzzing harness of `benchmarks/fuzz.py`
(`benchmarks/_fuzz_harness.py`, `benchmarks/_argument_sweep.py`) on a few thousand seeded trials, in CI: damaged
and crafted files, the same sealed again after their damage, and the argument sweep.

Every file must fail with one `ImxrtError` or run; none may crash its worker, hang, reach the address-space
cap or raise another exception, and no sealed file may run with other outputs than the undamaged program.
The harness is first shown to see each of those defects, so a zero below is a measurement, not a blind spot.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import _argument_sweep as sweep  # noqa: E402
import _fuzz_harness as harness  # noqa: E402

pytestmark = pytest.mark.slow  # compiles base programs and runs thousands of mutated ones in worker processes

# 50 trials of each mutation: under a minute on two cores, most of it compiling and starting the workers.
TRIALS = 50 * len(harness.MUTATIONS)
RESEALED_TRIALS = 25 * len(harness.MUTATIONS)
SWEEP_TRIALS = 4 * len(sweep.operators())  # each operator four times: about half a minute
JOBS = 2


@pytest.fixture(scope="module")
def bases() -> dict[str, harness.Base]:
    return harness.compile_bases()


@pytest.fixture(scope="module")
def pool():
    with harness.WorkerPool(JOBS) as workers:
        yield workers


def test_the_harness_sees_a_crash_a_hang_and_the_cap(pool):
    replies = {}
    jobs = [harness.Job({"probe": kind}, timeout=5.0) for kind in ("crash", "hang", "allocate")]
    pool.run(jobs, lambda position, reply: replies.__setitem__(position, reply))
    crash, hang, allocate = (harness.classify(_PROBE_TRIAL, replies[i], reference="") for i in range(3))
    assert crash[0] == harness.CRASH and "SIGSEGV" in crash[1]
    assert hang[0] == harness.HANG
    assert allocate[0] == harness.OVER_CAP


_PROBE_TRIAL = harness.Trial(-1, "probe", "probe", "", sealed=True, data=b"")


def test_a_sealed_file_running_with_other_outputs_is_a_defect_and_an_unsealed_one_is_not():
    ran = harness.Reply("ran", digest="other")
    unsealed = harness.Trial(-1, "probe", "probe", "", sealed=False, data=b"")
    assert harness.classify(_PROBE_TRIAL, ran, reference="undamaged")[0] == harness.SILENT
    assert harness.classify(unsealed, ran, reference="undamaged")[0] == harness.FLAGGED
    assert harness.classify(_PROBE_TRIAL, ran, reference="other")[0] == harness.SAME


def test_the_same_seed_makes_the_same_files(bases):
    context = harness.make_context(bases)
    indices = range(2 * len(harness.MUTATIONS))  # every mutation twice
    first = [harness.make_trial(3, index, bases, context) for index in indices]
    assert first == [harness.make_trial(3, index, bases, context) for index in indices]
    assert first != [harness.make_trial(4, index, bases, context) for index in indices]


def test_damaged_and_crafted_programs_fail_with_one_line_or_run(pool, bases):
    report = harness.fuzz(pool, bases, seed=0, indices=range(TRIALS))
    rows = report.counts()
    assert all(sum(rows[mutation.name].values()) == TRIALS // len(harness.MUTATIONS)
               for mutation in harness.MUTATIONS)
    totals = report.totals()
    assert totals[harness.CLEAN] and totals[harness.SAME], "the files should both fail and run"
    if report.defects():
        pytest.fail("\n" + report.format(examples=10), pytrace=False)


def test_resealed_programs_fail_with_one_line_or_run(pool, bases):
    """The same mutations with the seal computed again after each, as anyone can: only the checks behind the
    seal can refuse them. Running with other outputs is then undetectable, and not a defect."""
    report = harness.fuzz(pool, bases, seed=0, indices=range(RESEALED_TRIALS), reseal=True)
    assert all(result.trial.forged for result in report.results)
    totals = report.totals()
    assert totals[harness.CLEAN] and totals[harness.SAME], "the files should both fail and run"
    if report.defects():
        pytest.fail("\n" + report.format(examples=10), pytrace=False)


def test_every_admitted_operator_survives_hostile_argument_values(pool):
    """The argument sweep: each operator the allowlist admits, called by a sealed one-instruction program with
    arguments of the right kinds and hostile values, fails with one line or runs."""
    report = sweep.sweep(pool, seed=0, indices=range(SWEEP_TRIALS))
    assert {result.trial.operator for result in report.results} == set(sweep.operators())
    totals = report.totals()
    assert totals[harness.CLEAN] and totals[harness.SAME], "the calls should both fail and run"
    if report.defects():
        pytest.fail("\n" + report.format(examples=10), pytrace=False)
