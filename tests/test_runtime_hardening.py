"""What the fuzzer (`benchmarks/fuzz.py`, `tests/test_fuzz.py`) found past the load-time checks, one
regression each: a failure inside a kernel or delegate is one `BadFile`, and nothing a file asks for is
allocated before it is sized against what the program planned or the host's cap."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from ai_edge_litert import schema_py_generated as tflite
from edited_programs import edited

import imxrt
import imxrt.runtime
from imxrt.cortex_m import ops as cortex_m_ops
from imxrt.errors import BadFile, ImxrtError
from imxrt.kernels.requantize import rounding_constants
from imxrt.runtime import litert
from imxrt.runtime.interpreter import Interpreter


@pytest.fixture(scope="module")
def sealed() -> bytes:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval()
    inputs = (torch.randn(1, 4, generator=torch.Generator().manual_seed(1)),)
    return imxrt.compile(model, inputs, "imxrt700-cpu", [inputs], imxrt.CompileOptions(show_progress=False)).pte


@pytest.mark.parametrize("seal, words", [
    (True, r"its checksum matches, so it is not damaged by accident, but a checksum does not prove who made the "
           r"file; if imxrt compile wrote it, this is an imxrt bug"),
    (False, "the file has no imxrt checksum, so it may be damaged")])
def test_a_failure_while_running_is_one_bad_file(sealed, monkeypatch, seal, words):
    """Fuzzed files made kernels raise RuntimeError, AttributeError, OverflowError, RecursionError, ...: each
    used to leave the runtime as that exception (an internal error, exit 3)."""
    program = imxrt.runtime.load(sealed if seal else edited(sealed))

    def fail(self, inputs):
        raise AttributeError("'int' object has no attribute 'shape'")

    monkeypatch.setattr(Interpreter, "run", fail)
    with pytest.raises(BadFile, match=f"fails while running \\(AttributeError: 'int' object has no attribute "
                                      f"'shape'\\); {words}"):
        program.forward(np.zeros((1, 4), np.float32))


def test_a_failure_while_preparing_is_one_bad_file(sealed, monkeypatch):
    def fail(self, *args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(Interpreter, "__init__", fail)
    with pytest.raises(BadFile, match=r"cannot be prepared \(RecursionError: maximum recursion depth exceeded\)"):
        imxrt.runtime.load(edited(sealed))


def test_a_cortex_m_result_is_sized_before_the_kernel_allocates_it():
    """A pad of 2**32 asked the shape function, then the kernel, for a 100 GB tensor."""
    pad = next(op for op in cortex_m_ops.OPS if op.name == "pad")
    pad = dataclasses.replace(pad, reference=lambda *args: pytest.fail("the kernel ran before the result was sized"))
    x, out = torch.zeros(1, 2, 3, 3, dtype=torch.int8), torch.zeros(1, 2, 5, 5, dtype=torch.int8)
    with pytest.raises(ImxrtError, match="out"):
        cortex_m_ops.out_kernel(pad)(x, [0, 0, 1 << 32, 1], [0, 0, 1, 1], 0, out=out)


def test_a_requantization_outside_q31_is_refused():
    """A damaged shift of 2**20 made the rounding constants Python integers of a million bits."""
    with pytest.raises(ValueError, match="shift of 1048576 is outside -31..31"):
        rounding_constants(np.array([1 << 30]), np.array([1 << 20]))
    with pytest.raises(ValueError, match="multiplier is outside the 32-bit range"):
        rounding_constants(np.array([1 << 40]), np.array([0]))
    rounding_constants(np.array([(1 << 31) - 1]), np.array([31]))  # the extremes a program may hold


def test_a_litert_subgraph_is_sized_against_the_cap_before_it_runs():
    """A bit flip made one tensor [1, 6, 1073741830, 4]: 24 GiB allocated when the subgraph ran."""
    graph = SimpleNamespace(tensors=[SimpleNamespace(shape=[1, 6, 1073741830, 4], type=tflite.TensorType.INT8)])
    with pytest.raises(litert.BadTflite, match="would take 25,769,803,920 bytes, more than the host runtime's cap"):
        litert._check_tensor_bytes(graph)
    small = SimpleNamespace(tensors=[SimpleNamespace(shape=[1, 6, 8, 4], type=tflite.TensorType.INT8)])
    litert._check_tensor_bytes(small)


def test_a_constant_buffer_the_reader_gives_as_none_is_a_bad_file(sealed, monkeypatch):
    """Zeroed bytes made ExecuTorch's reader give a constant buffer without storage: a TypeError before
    the plan checks."""
    from imxrt.pte import reader

    real = reader.deserialize_pte_binary

    def without_storage(data):
        pte = real(data)
        pte.program.constant_buffer[-1].storage = None
        return pte

    monkeypatch.setattr(reader, "deserialize_pte_binary", without_storage)
    with pytest.raises(BadFile, match=r"is corrupted \(TypeError: cannot convert 'NoneType' object to bytes\)"):
        imxrt.runtime.load(edited(sealed))
