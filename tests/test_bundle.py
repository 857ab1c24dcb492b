"""model.bpte: ExecuTorch's BundledProgram with test inputs and the outputs the board must give."""

from __future__ import annotations

import tracemalloc

import flatbuffers
import numpy as np
import pytest
import torch
from edited_programs import SMALL_CONV_NET_SOURCE, shared_constant
from executorch.devtools.bundled_program import serialize
from executorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
from executorch.devtools.bundled_program.core import BundledProgram
from executorch.devtools.bundled_program.serialize import (
    deserialize_from_flatbuffer_to_bundled_program,
    serialize_from_bundled_program_to_flatbuffer,
)
from executorch.devtools.bundled_program.serialize.generated.bundled_program_flatbuffer import (
    BundledMethodTestCase,
    BundledMethodTestSuite,
    Tensor,
    Value,
    ValueUnion,
)
from executorch.devtools.bundled_program.serialize.generated.bundled_program_flatbuffer import (
    BundledProgram as BundledProgramTable,
)
from executorch.exir import to_edge

from imxrt import bundle
from imxrt.cli import EXIT_USER_ERROR, main
from imxrt.errors import BadFile
from imxrt.pte.reader import HOST_MEMORY_CAP
from imxrt.runtime import load

pytestmark = pytest.mark.slow  # every test here compiles models

CHANNELS_LAST_SOURCE = SMALL_CONV_NET_SOURCE.replace(
    "return (torch.randn(1, 3, 6, 6, generator=torch.Generator().manual_seed(1)),)",
    "return (torch.randn(1, 3, 6, 6, generator=torch.Generator().manual_seed(1))"
    ".contiguous(memory_format=torch.channels_last),)")


def _compile(tmp_path, target: str, source: str = SMALL_CONV_NET_SOURCE, *flags: str):
    path = tmp_path / "net.py"
    path.write_text(source)
    out = tmp_path / "out"
    assert main(["compile", str(path), "--target", target, "-o", str(out), "--quiet", "--bundle", "3", *flags]) == 0
    return out


@pytest.mark.parametrize("target", ["imxrt700", "imxrt700-cpu"])
def test_a_bundle_round_trips_through_executorchs_reader_and_runs_with_no_difference(tmp_path, capsys, target):
    out = _compile(tmp_path, target)
    data = (out / "model.bpte").read_bytes()
    read = deserialize_from_flatbuffer_to_bundled_program(data)  # ExecuTorch's own reader
    assert bytes(read.program) == (out / "model.pte").read_bytes()
    (suite,) = read.method_test_suites
    assert suite.method_name == "forward" and len(suite.test_cases) == 3
    assert [v.val.sizes for v in suite.test_cases[0].inputs] == [[1, 3, 6, 6]]
    # the first case is the source's example (its calibration): the expected output is the host runtime's
    _, cases = bundle.read(data, "model.bpte")
    example = torch.randn(1, 3, 6, 6, generator=torch.Generator().manual_seed(1)).numpy()
    np.testing.assert_array_equal(cases[0].inputs[0], example)
    np.testing.assert_array_equal(cases[0].expected[0], load(out / "model.pte").forward(example)[0])
    capsys.readouterr()
    assert main(["run", str(out / "model.bpte")]) == 0
    printed = capsys.readouterr().out
    assert "output 0: largest difference 0 over 3 test case(s)" in printed


def test_a_channels_last_input_is_bundled_as_nhwc_bytes(tmp_path, capsys):
    out = _compile(tmp_path, "imxrt700", CHANNELS_LAST_SOURCE, "--io", "int8")
    read = deserialize_from_flatbuffer_to_bundled_program((out / "model.bpte").read_bytes())
    tensor = read.method_test_suites[0].test_cases[0].inputs[0].val
    assert list(tensor.dim_order) == [0, 2, 3, 1] and len(tensor.data) == 3 * 6 * 6  # int8 input
    capsys.readouterr()
    assert main(["run", str(out / "model.bpte")]) == 0


def test_a_wrong_expected_output_is_a_mismatch_naming_the_output(tmp_path, capsys):
    out = _compile(tmp_path, "imxrt700")
    _, cases = bundle.read((out / "model.bpte").read_bytes(), "model.bpte")
    wrong = [MethodTestCase([torch.from_numpy(c.inputs[0])], [torch.from_numpy(c.expected[0]) + (i == 1)])
             for i, c in enumerate(cases)]
    damaged = serialize_from_bundled_program_to_flatbuffer(
        BundledProgram(None, [MethodTestSuite("forward", wrong)], pte_file_path=str(out / "model.pte")))
    (tmp_path / "damaged.bpte").write_bytes(damaged)
    capsys.readouterr()
    assert main(["run", str(tmp_path / "damaged.bpte")]) == 1
    error = capsys.readouterr().err
    assert "output 0 differs from the bundle's expected output by 1 (test case 1)" in error


def test_imxrt_bundle_writes_one_for_a_compiled_folder_and_refuses_a_damaged_one(tmp_path, capsys):
    path = tmp_path / "net.py"
    path.write_text(SMALL_CONV_NET_SOURCE)
    out = tmp_path / "out"
    assert main(["compile", str(path), "--target", "imxrt700-cpu", "-o", str(out), "--quiet"]) == 0
    assert not (out / "model.bpte").exists()
    assert main(["bundle", str(out), "--samples", "2"]) == 0
    assert main(["run", str(out / "model.bpte")]) == 0
    data = bytearray((out / "model.bpte").read_bytes())
    data[len(data) // 2:] = b"\xff" * (len(data) - len(data) // 2)  # the second half overwritten
    (tmp_path / "cut.bpte").write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["run", str(tmp_path / "cut.bpte")]) == 1
    assert "cut.bpte" in capsys.readouterr().err


def test_the_bundles_first_inputs_are_the_calibration_samples_even_from_a_generator(tmp_path):
    source = SMALL_CONV_NET_SOURCE + '''
def calibration_inputs():
    generator = torch.Generator().manual_seed(7)
    for _ in range(5):
        yield (torch.randn(1, 3, 6, 6, generator=generator),)
'''
    out = _compile(tmp_path, "imxrt700-cpu", source)
    _, cases = bundle.read((out / "model.bpte").read_bytes(), "model.bpte")
    generator = torch.Generator().manual_seed(7)
    for case in cases:  # the first 3 of the 5 samples, in order
        np.testing.assert_array_equal(case.inputs[0], torch.randn(1, 3, 6, 6, generator=generator).numpy())


# -- a .bpte is untrusted input: priced and checked before ExecuTorch's reader expands it

class Double(torch.nn.Module):
    def forward(self, x):
        return x * 2


@pytest.fixture(scope="module")
def plain_pte() -> bytes:
    """A plain ExecuTorch program (x * 2 over [2, 3]), the program of the crafted bundles below."""
    x = torch.zeros(2, 3)
    return to_edge(torch.export.export(Double(), (x,))).to_executorch().buffer


def shared_tensor_bundle(pte: bytes, references: int, tensor_bytes: int) -> bytes:
    """A bundle of ``pte`` whose ``references`` test cases are one case, by offset, whose input and expected
    output are one float tensor of ``tensor_bytes`` zeros: ExecuTorch's reader writes and parses that tensor
    2 * ``references`` times."""
    builder = flatbuffers.Builder(tensor_bytes + len(pte) + 1024)
    data = builder.CreateByteVector(bytes(tensor_bytes))
    Tensor.StartSizesVector(builder, 1)
    builder.PrependInt32(tensor_bytes // 4)
    sizes = builder.EndVector()
    dim_order = builder.CreateByteVector(bytes(1))
    Tensor.Start(builder)
    Tensor.AddScalarType(builder, 6)  # FLOAT
    Tensor.AddSizes(builder, sizes)
    Tensor.AddData(builder, data)
    Tensor.AddDimOrder(builder, dim_order)
    tensor = Tensor.End(builder)
    Value.Start(builder)
    Value.AddValType(builder, ValueUnion.ValueUnion.Tensor)
    Value.AddVal(builder, tensor)
    value = Value.End(builder)
    BundledMethodTestCase.StartInputsVector(builder, 1)
    builder.PrependUOffsetTRelative(value)
    values = builder.EndVector()
    BundledMethodTestCase.Start(builder)
    BundledMethodTestCase.AddInputs(builder, values)
    BundledMethodTestCase.AddExpectedOutputs(builder, values)
    case = BundledMethodTestCase.End(builder)
    BundledMethodTestSuite.StartTestCasesVector(builder, references)
    for _ in range(references):
        builder.PrependUOffsetTRelative(case)
    cases = builder.EndVector()
    method = builder.CreateString("forward")
    BundledMethodTestSuite.Start(builder)
    BundledMethodTestSuite.AddMethodName(builder, method)
    BundledMethodTestSuite.AddTestCases(builder, cases)
    suite = BundledMethodTestSuite.End(builder)
    BundledProgramTable.StartMethodTestSuitesVector(builder, 1)
    builder.PrependUOffsetTRelative(suite)
    suites = builder.EndVector()
    program = builder.CreateByteVector(pte)
    BundledProgramTable.Start(builder)
    BundledProgramTable.AddMethodTestSuites(builder, suites)
    BundledProgramTable.AddProgram(builder, program)
    builder.Finish(BundledProgramTable.End(builder), file_identifier=bundle.IDENTIFIER)
    return bytes(builder.Output())


@pytest.fixture
def reader_never_runs(monkeypatch):
    """ExecuTorch's bundle reader, replaced by a failure: a refusal must come before it expands the file."""
    def expand(data):
        pytest.fail("ExecuTorch's reader was handed a bundle that should have been refused")
    monkeypatch.setattr(serialize, "deserialize_from_flatbuffer_to_bundled_program", expand)


def test_a_bundle_whose_cases_share_one_tensor_is_refused_before_it_is_expanded(plain_pte, reader_never_runs):
    """269 KB: 400 test cases that are one case holding one 256 KB tensor as input and expected output.
    ExecuTorch's reader took 4.1 GB and 105 s on it and ended in std::bad_alloc; refusing it takes a walk of
    the file's offsets."""
    data = shared_tensor_bundle(plain_pte, 400, 256 * 1024)
    assert len(data) < 270_000
    tracemalloc.start()
    try:
        with pytest.raises(BadFile) as refused:
            bundle.read(data, "shared.bpte")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(refused.value).startswith("shared.bpte: would need 11,")
    assert f"bytes to read, more than the host runtime's cap of {HOST_MEMORY_CAP:,}" in str(refused.value)
    assert peak < 1 << 20, f"refusing took {peak:,} bytes"


def test_imxrt_run_refuses_such_a_bundle_in_one_line(plain_pte, reader_never_runs, tmp_path, capsys):
    path = tmp_path / "shared.bpte"
    path.write_bytes(shared_tensor_bundle(plain_pte, 400, 256 * 1024))
    assert main(["run", str(path)]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"imxrt: error: {path}: would need ") and "cap" in err


@pytest.mark.parametrize("references, tensor_bytes", [(1, 64), (8, 16 * 1024), (200, 64)])
def test_the_price_bounds_what_executorchs_reader_builds(plain_pte, references, tensor_bytes):
    """The walk's price is at least the reader's peak (tracemalloc, Python's side; flatc's own peak is half of
    it), and within 3x of it: shared data, many small tables, a program-sized file."""
    data = shared_tensor_bundle(plain_pte, references, tensor_bytes)
    price, program = bundle.read_cost(data, "x.bpte")
    assert program == plain_pte
    tracemalloc.start()
    try:
        deserialize_from_flatbuffer_to_bundled_program(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= price < 3 * peak


def test_the_program_inside_a_bundle_is_priced_as_a_pte_before_the_bundle_is_expanded(plain_pte, reader_never_runs):
    """A small bundle whose program shares one 200 KB constant 20,000 times: the .pte reader's walk refuses
    the program, naming it inside the bundle."""
    data = shared_tensor_bundle(shared_constant(plain_pte), 1, 64)
    with pytest.raises(BadFile, match=r"^x\.bpte \(its program\): would need [0-9,]+ bytes to read, more than"):
        bundle.read(data, "x.bpte")


def test_a_bundle_and_its_program_are_priced_together(plain_pte, reader_never_runs, monkeypatch):
    """Each under the cap, the two together over it: the program stays loaded while the bundle expands."""
    data = shared_tensor_bundle(plain_pte, 2, 1024)
    price, _ = bundle.read_cost(data, "x.bpte")
    monkeypatch.setattr("imxrt.pte.reader.HOST_MEMORY_CAP", price)
    with pytest.raises(BadFile, match="bytes to read with its program, more than the host runtime's cap"):
        bundle.read(data, "x.bpte")


def test_an_offset_outside_the_bundle_is_one_bad_file(plain_pte, reader_never_runs):
    data = bytearray(shared_tensor_bundle(plain_pte, 1, 64))
    data[0:4] = (len(data) + 8).to_bytes(4, "little")  # the root table past the end
    with pytest.raises(BadFile, match="is a damaged BundledProgram \\(an offset points outside the file"):
        bundle.read(bytes(data), "x.bpte")
