"""One thread for BLAS and torch while the host runtime runs a program; the caller's settings restored after.

The runtime's work is a chain of small kernel calls. A thread pool woken for each of them spends more on waking
and spinning than on the work, and on a machine whose cores are busy with other processes (CI, a training run)
its threads wait for those cores: a 2.4 M-MAC convolution's matmul took 44 ms on OpenBLAS's two threads beside
two busy processes, 0.2 ms on one. So a run (``Interpreter.run``) holds every BLAS library in the process and
torch's intra-op pool to one thread, and gives the caller's counts back when it ends, however it ends.

Cost: about a microsecond per run. The libraries are found by threadpoolctl, again only when Python has imported
modules since the last look (a library such as scipy, which sklearn imports, brings its own OpenBLAS: a hold
that kept the first list would leave it on all cores); OpenBLAS on its own threads
is then called through its C API directly (``openblas_get_num_threads`` / ``openblas_set_num_threads``), where
threadpoolctl's controller methods take 0.4-0.9 us each in Python-level locks and lookups; a count already at
one is left alone.

BLAS's count is process-wide (OpenBLAS's pool is shared by every thread), so runs in several Python threads
share one hold: the first to enter limits, the last to leave restores. torch's count is the calling thread's
(OpenMP's ``nthreads-var``), held per run.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

import threadpoolctl
import torch

ONE = 1


@dataclass(frozen=True)
class ThreadCount:
    """How to read and set one library's thread count."""

    name: str
    get: Callable[[], int | None]
    set: Callable[[int], object]


def _openblas_api(controller) -> ThreadCount | None:
    """OpenBLAS built on its own threads: its get / set calls as ctypes functions of their own (new function
    objects, so threadpoolctl's stay as it configured them). None for another library or threading layer (an
    OpenMP-built OpenBLAS counts per thread through ``omp_set_num_threads``: its controller knows how)."""
    if controller.internal_api != "openblas" or getattr(controller, "threading_layer", None) != "pthreads":
        return None
    for prefix, suffix in itertools.product(("", "scipy_"), ("", "64_", "_64")):
        try:
            get = controller.dynlib[f"{prefix}openblas_get_num_threads{suffix}"]
            set_ = controller.dynlib[f"{prefix}openblas_set_num_threads{suffix}"]
        except AttributeError:
            continue
        get.argtypes, get.restype = (), ctypes.c_int
        set_.argtypes, set_.restype = (ctypes.c_int,), None
        return ThreadCount(controller.filepath, get, set_)
    return None


def _blas_counts() -> tuple[ThreadCount, ...]:
    counts = []
    for controller in threadpoolctl.ThreadpoolController().select(user_api="blas").lib_controllers:
        direct = _openblas_api(controller)
        counts.append(direct or ThreadCount(controller.filepath, controller.get_num_threads,
                                            controller.set_num_threads))
    return tuple(counts)


class OneThread:
    """BLAS and torch on one thread between ``enter`` and ``leave``, the caller's counts outside. Reentrant, and
    safe to enter from several threads at once::

        threads = hold.enter()
        try:
            ...
        finally:
            hold.leave(threads)
    """

    def __init__(self, find_blas: Callable[[], tuple[ThreadCount, ...]]) -> None:
        self._find_blas = find_blas
        self._modules_seen = -1  # len(sys.modules) when the libraries were last found
        self.blas: tuple[ThreadCount, ...] = ()
        self._lock = threading.Lock()
        self._holders = 0  # enters not yet left, in every thread
        self._saved: list[int | None] = []  # each library's count when the first holder entered

    def enter(self) -> int:
        """Hold the counts at one; returns the calling thread's torch count, which ``leave`` takes back."""
        with self._lock:
            if not self._holders:
                if len(sys.modules) != self._modules_seen:  # an import may have loaded another BLAS
                    self._modules_seen = len(sys.modules)
                    self.blas = self._find_blas()
                    self._saved = [None] * len(self.blas)
                saved = self._saved
                for position, library in enumerate(self.blas):
                    saved[position] = threads = library.get()
                    if threads != ONE:
                        library.set(ONE)
            self._holders += 1
        threads = torch.get_num_threads()
        if threads != ONE:
            torch.set_num_threads(ONE)
        return threads

    def leave(self, threads: int) -> None:
        """Give this thread its torch count back and, when no one holds BLAS any more, every library its count."""
        if threads != ONE:
            torch.set_num_threads(threads)
        with self._lock:
            self._holders -= 1
            if not self._holders:
                for library, saved in zip(self.blas, self._saved, strict=True):
                    if saved is not None and saved != ONE:
                        library.set(saved)


@functools.cache
def one_thread() -> OneThread:
    """The process's hold: every BLAS library loaded when a run enters it, and torch's pool."""
    return OneThread(_blas_counts)
