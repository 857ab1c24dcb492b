"""What the host runtime refuses, and how: bad files, programs it cannot run, inputs that do not fit.

Every refusal is one `ImxrtError` whose message names the file or input and what to do, raised while
loading (or binding inputs), never a crash deep inside a kernel.
"""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest
import torch
from edited_programs import compile_small_conv_net, edited
from executorch.exir._serialize._program import deserialize_pte_binary

import imxrt
import imxrt.runtime
from imxrt.errors import BadFile, BadInput, ImxrtError
from imxrt.runtime.neutron import MICROCODE_MAGIC, is_microcode


@pytest.fixture(scope="module")
def compiled() -> bytes:
    """A small delegated program: quantize -> NeutronBackend (conv, relu, linear) -> dequantize."""
    return compile_small_conv_net("imxrt700")


def microcode_payload(n_in: int = 1, n_out: int = 1) -> bytes:
    """A payload laid out like the stock runtime's: counts, format flags, maps, version, padding, then
    microcode starting with the Neutron microcode magic (reference/neutron.md)."""
    header = bytes([n_in, n_out, n_in]) + bytes(n_in + n_out) + bytes(range(n_in)) + bytes(range(n_out)) + b"\0"
    header += bytes(-len(header) % 16)
    words = [MICROCODE_MAGIC, 0, 0, 0, 0, 0, 64, 0, 0, 0, 0, n_in, n_out, 0, 0, 0]
    return header + struct.pack("<16I", *words)


# -- the file


def test_empty_file(tmp_path):
    path = tmp_path / "model.pte"
    path.write_bytes(b"")
    with pytest.raises(BadFile, match=r"model\.pte: is empty"):
        imxrt.runtime.load(path)


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(BadFile, match="no such file"):
        imxrt.runtime.load(tmp_path / "nope.pte")
    with pytest.raises(BadFile, match="is a folder"):
        imxrt.runtime.load(tmp_path)


def test_tflite_file_is_named_as_such(tmp_path):
    path = tmp_path / "partition_0.tflite"
    path.write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(64))
    with pytest.raises(BadFile, match=r"partition_0\.tflite: is not an ExecuTorch \.pte program \(it is a TFLite"):
        imxrt.runtime.load(path)


def test_random_bytes():
    data = random.Random(0).randbytes(4096)
    with pytest.raises(BadFile, match="is not an ExecuTorch .pte program"):
        imxrt.runtime.load(data)


@pytest.mark.parametrize("keep", [9, 64, 0.5, -1], ids=["9_bytes", "64_bytes", "half", "all_but_last_byte"])
def test_truncated(compiled, keep):
    cut = int(len(compiled) * keep) if isinstance(keep, float) else keep % len(compiled)
    with pytest.raises(BadFile, match="truncated"):
        imxrt.runtime.load(compiled[:cut])


def test_random_bytes_behind_a_pte_identifier():
    """Garbage with the right identifier gets past the first check and must still fail cleanly."""
    rng = random.Random(1)
    for _ in range(20):
        data = rng.randbytes(4) + b"ET12" + rng.randbytes(rng.randrange(8, 2000))
        with pytest.raises(BadFile):
            imxrt.runtime.load(data)


def test_corrupted_bytes_load_cleanly_or_fail_with_bad_file(compiled):
    """Flipping bytes anywhere either leaves a loadable program or gives a BadFile, nothing else."""
    rng = random.Random(2)
    for _ in range(400):  # enough flips to hit dropped vectors and out-of-range enums, not just bad offsets
        data = bytearray(compiled)
        for _ in range(4):
            data[rng.randrange(8, len(data))] ^= 1 << rng.randrange(8)
        try:
            imxrt.runtime.load(bytes(data))
        except BadFile:
            pass


def test_plan_outside_its_buffer(compiled):
    def overrun(program):
        program.execution_plan[0].non_const_buffer_sizes[1] = 16

    with pytest.raises(BadFile, match=r"overruns memory buffer 1 \(16 bytes\)"):
        imxrt.runtime.load(edited(compiled, overrun))


# -- what the program holds


def test_microcode_payload_needs_the_board_or_nxps_simulator(compiled):
    assert is_microcode(microcode_payload()) and not is_microcode(deserialize_pte_binary(compiled)
                                                                 .program.backend_delegate_data[0].data)

    def to_microcode(program):
        program.backend_delegate_data[0].data = microcode_payload()

    with pytest.raises(BadFile) as error:
        imxrt.runtime.load(edited(compiled, to_microcode))
    assert "Neutron microcode" in str(error.value)
    assert "board" in str(error.value) and "NXP's Neutron simulator" in str(error.value)


def test_unknown_payload(compiled):
    def to_garbage(program):
        program.backend_delegate_data[0].data = bytes(range(64))

    with pytest.raises(BadFile, match="neither an imxrt reference payload nor Neutron microcode"):
        imxrt.runtime.load(edited(compiled, to_garbage))


def test_unknown_delegate_id(compiled):
    def rename(program):
        program.execution_plan[0].delegates[0].id = "XnnpackBackend"

    with pytest.raises(BadFile, match="delegate 0 is 'XnnpackBackend'; the host runtime runs NeutronBackend"):
        imxrt.runtime.load(edited(compiled, rename))


def test_unknown_operator(compiled):
    def rename(program):
        program.execution_plan[0].operators[0].name = "acme::frobnicate"

    with pytest.raises(BadFile, match="calls operator acme::frobnicate.out, which the host runtime does not have"):
        imxrt.runtime.load(edited(compiled, rename))


# -- inputs


@pytest.mark.parametrize("inputs, words", [
    ((), "the program takes 1 input(s) shape (1, 3, 6, 6) float32, got 0"),
    ((np.zeros((1, 3, 6, 6), np.float32),) * 2, "takes 1 input(s)"),
    ((np.zeros((1, 3, 5, 5), np.float32),), "input 0: the program expects shape (1, 3, 6, 6) float32, "
                                            "got shape (1, 3, 5, 5) float32"),
    ((np.zeros((1, 3, 6, 6), np.float64),), "input 0: the program expects shape (1, 3, 6, 6) float32, "
                                            "got shape (1, 3, 6, 6) float64"),
    ((torch.zeros(1, 3, 6, 6, dtype=torch.int8),), "got shape (1, 3, 6, 6) int8"),
], ids=["none", "two", "shape", "dtype_numpy", "dtype_torch"])
def test_inputs_that_do_not_fit(compiled, inputs, words):
    program = imxrt.runtime.load(compiled)
    with pytest.raises(BadInput) as error:
        program.forward(*inputs)
    assert isinstance(error.value, ImxrtError) and words in str(error.value)
