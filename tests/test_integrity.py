"""The integrity seal: a compiled ``.pte`` carries a SHA-256 of itself that the host runtime checks before
it runs, so a damaged byte is a ``BadFile``, never a program with other outputs; ExecuTorch's own runtime
still loads the sealed file as it is."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from executorch.exir import to_edge
from executorch.exir._serialize._flatbuffer_program import _flatbuffer_to_program
from executorch.exir._serialize._program import (
    PTEFile,
    _get_extended_header,
    deserialize_pte_binary,
    serialize_pte_binary,
)
from executorch.exir.schema import DataLocation
from executorch.runtime import Runtime

import imxrt
import imxrt.runtime
from imxrt import integrity
from imxrt.cli import main
from imxrt.errors import BadFile

pytestmark = pytest.mark.slow  # every test here compiles models

INPUT = torch.randn(1, 3, 6, 6, generator=torch.Generator().manual_seed(1))


def _small_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 4 * 4, 2)).eval()


class Join(torch.nn.Module):
    def forward(self, x):
        return torch.cat([x, x], 1)


@pytest.fixture(scope="module")
def programs() -> dict[str, bytes]:
    """Compiled once: the conv net with its weights in a NeutronBackend payload (``delegated``) or in the
    constant segment (``cpu``)."""
    options = imxrt.CompileOptions(show_progress=False)
    return {target_kind: imxrt.compile(_small_model(), (INPUT,), target, [(INPUT,)], options).pte
            for target_kind, target in (("delegated", "imxrt700"), ("cpu", "imxrt700-cpu"))}


def _unsealed(pte: bytes) -> bytes:
    """The same program serialized again by ExecuTorch without its named data: a plain ExecuTorch .pte."""
    return bytes(serialize_pte_binary(PTEFile(program=deserialize_pte_binary(pte).program),
                                      extract_delegate_segments=True))


def _regions(pte: bytes) -> dict[str, range]:
    """Byte ranges of the file: extended header, flatbuffer, and each segment (constants, payloads, seal)."""
    header = _get_extended_header(pte)
    program = _flatbuffer_to_program(pte[:header.program_size])

    def segment(index: int) -> range:
        start = header.segment_base_offset + program.segments[index].offset
        return range(start, start + program.segments[index].size)

    program_start = 8 + header.length  # the flatbuffer's root table and data follow the header
    regions = {"extended header": range(8, program_start), "flatbuffer": range(program_start, header.program_size)}
    if len(program.constant_segment.offsets) > 1:
        regions["constants"] = segment(program.constant_segment.segment_index)
    for index, delegate in enumerate(program.execution_plan[0].delegates):
        if delegate.processed.location == DataLocation.SEGMENT:
            regions[f"payload {index}"] = segment(delegate.processed.index)
    (seal,) = [entry.segment_index for entry in program.named_data if entry.key == integrity.KEY]
    regions["seal"] = segment(seal)
    return regions


@pytest.mark.parametrize("kind", ["delegated", "cpu"])
def test_a_compiled_program_is_sealed_and_verifies(programs, kind):
    pte = programs[kind]
    assert integrity.verify(pte) == integrity.Sealed(covered=len(pte) - integrity.DIGEST_BYTES)
    assert pte[-integrity.RECORD_BYTES:-integrity.DIGEST_BYTES] == integrity.RECORD_MARKER
    assert integrity.KEY in deserialize_pte_binary(pte).named_data.pte_data
    assert imxrt.runtime.load(pte).file.seal == integrity.Sealed(covered=len(pte) - integrity.DIGEST_BYTES)


@pytest.mark.parametrize("kind, region", [("delegated", "payload 0"), ("cpu", "constants")])
def test_every_damaged_byte_is_refused(programs, kind, region):
    """One flipped bit at ~200 seeded places, plus both ends of every region: each is a BadFile, none runs.
    Bytes the earlier checks read (identifier, header sizes) may fail those checks first."""
    pte = programs[kind]
    regions = _regions(pte)
    rng = random.Random(3)
    positions = set(rng.sample(range(len(pte)), 200))
    positions |= {end for span in regions.values() for end in (span.start, span.stop - 1)}
    assert positions & set(regions[region]) and positions & set(regions["flatbuffer"])
    for position in sorted(positions):
        damaged = bytearray(pte)
        damaged[position] ^= 1 << rng.randrange(8)
        with pytest.raises(BadFile) as refused:
            imxrt.runtime.load(bytes(damaged))
        if position >= regions["extended header"].stop:  # past what the earlier checks read
            assert "is damaged: its checksum does not match" in str(refused.value), position
        else:
            assert any(reason in str(refused.value) for reason in
                       ("is damaged: its checksum", "is not an ExecuTorch .pte", "is truncated")), position


def test_a_sealed_file_with_bytes_added_is_refused(programs):
    """Bytes after the digest leave the header's sizes satisfied; the seal must still refuse the file."""
    with pytest.raises(BadFile, match="checksum does not match.*does not end with one"):
        imxrt.runtime.load(programs["delegated"] + bytes(16))


def test_a_program_without_a_checksum_runs_with_a_note(programs, tmp_path, capsys):
    pte = programs["cpu"]
    plain = _unsealed(pte)
    assert integrity.verify(plain) == integrity.Unsealed()
    program = imxrt.runtime.load(plain)
    assert program.file.seal == integrity.Unsealed()
    np.testing.assert_array_equal(program.forward(INPUT)[0], imxrt.runtime.load(pte).forward(INPUT)[0])

    np.save(tmp_path / "x.npy", INPUT.numpy())
    for name, data in (("plain.pte", plain), ("sealed.pte", pte)):
        (tmp_path / name).write_bytes(data)
        assert main(["run", str(tmp_path / name), "--input", str(tmp_path / "x.npy")]) == 0
        notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
        expected = [f"note: {tmp_path / name} has no imxrt checksum; damage cannot be detected"]
        assert notes == (expected if name == "plain.pte" else [])


@pytest.mark.parametrize("kind", ["delegated", "cpu"])
def test_sealing_is_deterministic(programs, kind):
    """The same bytes in give the same bytes out; the seal replaces an old one; and the sealed file is a
    function of the program alone, whatever flatbuffer layout it came in."""
    pte = programs[kind]
    plain = _unsealed(pte)
    assert integrity.seal(plain) == integrity.seal(plain) == pte
    assert integrity.seal(pte) == pte


def _executorch_linear() -> bytes:
    """A float program written by ExecuTorch alone (portable kernels, weights in the constant segment)."""
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()).eval()
    exported = torch.export.export(model, (torch.randn(1, 8),))
    return bytes(to_edge(exported).to_executorch().buffer)


def _int8_join() -> bytes:
    """An imxrt program the portable runtime can execute: int8 I/O and one ``aten::cat.out``."""
    return imxrt.compile(Join().eval(), (INPUT,), "imxrt700-cpu", [(INPUT,)],
                         imxrt.CompileOptions(show_progress=False, io="int8")).pte


@pytest.mark.parametrize("make, inputs", [
    (_executorch_linear, lambda: (torch.randn(1, 8, generator=torch.Generator().manual_seed(5)),)),
    (_int8_join, lambda: (torch.randint(-128, 128, (1, 3, 6, 6), dtype=torch.int8,
                                        generator=torch.Generator().manual_seed(6)),)),
], ids=["executorch_linear", "imxrt_int8_join"])
def test_executorchs_runtime_runs_a_sealed_program_as_the_unsealed_one(make, inputs):
    built = make()
    sealed, plain = integrity.seal(built), _unsealed(built)
    assert integrity.verify(sealed) == integrity.Sealed(len(sealed) - integrity.DIGEST_BYTES)
    runtime = Runtime.get()
    outputs = [runtime.load_program(data).load_method("forward").execute(inputs()) for data in (sealed, plain)]
    assert len(outputs[0]) == len(outputs[1]) == 1
    assert torch.equal(outputs[0][0], outputs[1][0])


@pytest.mark.parametrize("kind", ["delegated", "cpu"])
def test_executorchs_runtime_loads_a_sealed_compiled_program(programs, kind):
    """The sealed file loads and describes its method as the unsealed one does. Preparing the method fails
    for both alike, and only for what this host's runtime lacks: the NeutronBackend and the cortex_m kernels
    (registered on the board)."""
    pte = programs[kind]
    runtime = Runtime.get()
    loaded = [runtime.load_program(data) for data in (pte, _unsealed(pte))]
    assert loaded[0].method_names == loaded[1].method_names == {"forward"}
    assert str(loaded[0].metadata("forward")) == str(loaded[1].metadata("forward"))
    failures = []
    for program in loaded:
        with pytest.raises(RuntimeError) as failed:
            program.load_method("forward")
        failures.append(str(failed.value))
    missing = {"delegated": "error: 0x:20", "cpu": "error: 0x:14"}[kind]  # NotFound (backend), OperatorMissing
    assert failures[0] == failures[1] and failures[0].endswith(missing)
