"""model.bpte: ExecuTorch's BundledProgram with test inputs and the outputs the board must give."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from edited_programs import SMALL_CONV_NET_SOURCE
from executorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
from executorch.devtools.bundled_program.core import BundledProgram
from executorch.devtools.bundled_program.serialize import (
    deserialize_from_flatbuffer_to_bundled_program,
    serialize_from_bundled_program_to_flatbuffer,
)

from imxrt import bundle
from imxrt.cli import main
from imxrt.runtime import load

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
