"""A program run holds BLAS and torch at one thread, whatever its kernels call, and gives the caller's counts back.

On a machine whose cores are busy, a BLAS or OpenMP pool of several threads spins against the other processes:
a cortex_m convolution's matmul on OpenBLAS's two threads took 44 ms instead of 0.2 ms. Nothing here is timed:
the run's first and last kernels record the counts they run under, and the caller's counts (three, more than the
one the run takes) must be back after the run, also after one that fails.
"""

from __future__ import annotations

import sys
import types

import pytest
import threadpoolctl
import torch
from compiled_examples import tiny

import imxrt
import imxrt.runtime
from imxrt.cortex_m import reference
from imxrt.errors import BadFile

CALLER = 3  # the caller's count of each: not 1, and not what the machine gives by default


def blas_counts() -> list[int]:
    return [library["num_threads"] for library in threadpoolctl.ThreadpoolController().select(user_api="blas").info()]


def cpu_program() -> bytes:
    """The tiny conv net for the Cortex-M alone: its convolution is a cortex_m kernel."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 4 * 4, 2)).eval()
    x = torch.randn(1, 3, 6, 6, generator=torch.Generator().manual_seed(1))
    return imxrt.compile(model, (x,), "imxrt700-cpu", [(x,)], imxrt.CompileOptions(show_progress=False)).pte


def probed_run(pte: bytes, monkeypatch, fail: bool = False) -> list[tuple[list[int], int]]:
    """Run ``pte`` once with the caller at ``CALLER`` threads of each; the (BLAS counts, torch count) its first
    and last kernels (the input's quantize, the output's dequantize) ran under. ``fail``: the quantize raises
    after recording."""
    seen = []

    def probe(real):
        def kernel(*args):
            seen.append((blas_counts(), torch.get_num_threads()))
            if fail:
                raise RuntimeError("probe")
            return real(*args)
        return kernel

    for name in ("_quantize", "_dequantize"):  # looked up at each call: the prepared calls reach the probes
        monkeypatch.setattr(reference, name, probe(getattr(reference, name)))
    program = imxrt.runtime.load(pte)
    threads_before = torch.get_num_threads()
    try:
        with threadpoolctl.threadpool_limits(limits=CALLER, user_api="blas"):
            torch.set_num_threads(CALLER)
            try:
                program.forward(torch.randn(1, 3, 6, 6))
            except BadFile:
                assert fail
            assert blas_counts() == [CALLER] * len(blas_counts()), "BLAS's counts are not the caller's after the run"
            assert torch.get_num_threads() == CALLER, "torch's count is not the caller's after the run"
    finally:
        torch.set_num_threads(threads_before)
    return seen


@pytest.mark.slow
def test_a_cortex_m_program_runs_on_one_thread_and_restores_the_callers_counts(monkeypatch):
    seen = probed_run(cpu_program(), monkeypatch)
    assert len(seen) == 2 and all(blas == [1] * len(blas) and torch_count == 1 for blas, torch_count in seen), seen


@pytest.mark.slow
def test_an_npu_program_runs_on_one_thread_and_restores_the_callers_counts(monkeypatch):
    """Before, only the LiteRT subgraph held BLAS at one thread (not the CPU kernels around it), and nothing
    held torch."""
    seen = probed_run(tiny(0).pte, monkeypatch)
    assert len(seen) == 2 and all(blas == [1] * len(blas) and torch_count == 1 for blas, torch_count in seen), seen


@pytest.mark.slow
def test_a_run_that_fails_restores_the_callers_counts(monkeypatch):
    seen = probed_run(cpu_program(), monkeypatch, fail=True)
    assert len(seen) == 1 and seen[0][1] == 1


def test_the_hold_is_reentrant_and_shared_by_its_holders():
    """BLAS's count is process-wide: it returns to the caller's when the last holder leaves, not the first."""
    from imxrt.runtime.threads import one_thread

    hold = one_thread()
    with threadpoolctl.threadpool_limits(limits=CALLER, user_api="blas"):
        outer = hold.enter()
        inner = hold.enter()
        hold.leave(inner)
        assert blas_counts() == [1] * len(blas_counts())
        hold.leave(outer)
        assert blas_counts() == [CALLER] * len(blas_counts())


def test_a_blas_library_loaded_after_the_first_run_is_held_too():
    """A library imported later (sklearn brings scipy's own OpenBLAS) is found at the next run's enter."""
    from imxrt.runtime.threads import OneThread, ThreadCount

    counts = {"first": CALLER, "later": CALLER}
    loaded = ["first"]

    def library(name: str) -> ThreadCount:
        return ThreadCount(name, lambda: counts[name], lambda threads: counts.__setitem__(name, threads))

    hold = OneThread(lambda: tuple(library(name) for name in loaded))
    hold.leave(hold.enter())
    loaded.append("later")
    sys.modules["imxrt_test_module_bringing_a_blas"] = types.ModuleType("imxrt_test_module_bringing_a_blas")
    try:
        threads = hold.enter()
        assert counts == {"first": 1, "later": 1}
        hold.leave(threads)
        assert counts == {"first": CALLER, "later": CALLER}
    finally:
        del sys.modules["imxrt_test_module_bringing_a_blas"]


@pytest.mark.slow
def test_an_evaluation_worker_holds_one_thread_for_its_life():
    """imxrt.evaluate's worker processes (the pool's initializer) run on one BLAS and one torch thread whatever
    the machine's default, for the fake-quantized program too, not only inside each program run."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from imxrt import accuracy

    settings = accuracy._LogSettings.here()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=accuracy._start_worker,
                             initargs=(tiny(0).pte, "tiny.pte", False, settings, None)) as pool:
        libraries = pool.submit(threadpoolctl.threadpool_info).result(timeout=300)
        torch_threads = pool.submit(torch.get_num_threads).result(timeout=300)
    blas = [library["num_threads"] for library in libraries if library["user_api"] == "blas"]
    assert blas and all(count == 1 for count in blas), libraries
    assert torch_threads == 1
