"""--io int8: the program takes and returns the int8 tensors, no float tensor is planned, outputs equal TFLM's.

The oracle for the MLPerf Tiny models is the float-I/O compile's NPU partition (a .tflite of the whole int8
graph, int8 in and out): TFLM and the int8-I/O program run on the same int8 input, directly.
"""

from __future__ import annotations

import functools
import json
import logging

import numpy as np
import pytest
import torch
from compiled_examples import compiled_example
from oracles import run_tflm, tflite_io

import imxrt.runtime
from imxrt.cli import EXIT_USER_ERROR, main
from imxrt.errors import BadInput, BadOption
from imxrt.memory.planning_pass import ImxrtMemoryPlanner
from imxrt.pipeline import CompileOptions, compile, lower, to_executorch
from imxrt.placement import PlacementLog
from imxrt.runtime.inputs import quantize_input
from imxrt.targets import get_target

MLPERF_TINY = ("ds_cnn", "mobilenet_v1", "resnet8", "autoencoder")
INT8 = CompileOptions(show_progress=False, io="int8")


@functools.cache
def int8_program(name: str, target: str):
    """(float-I/O compile result, int8-I/O .pte, its memory plans, its report io) of a bundled example."""
    _, _, result = compiled_example(name)
    edge = lower(result.quantized, get_target(target), INT8, PlacementLog())
    from imxrt.passes.int8_io import io_metadata

    io = io_metadata(edge.exported_program())
    planner = ImxrtMemoryPlanner()
    pte = bytes(to_executorch(edge, planner).buffer)
    return result, pte, planner.plans, io


@pytest.mark.slow
@pytest.mark.parametrize("target", ["imxrt700-cpu", "imxrt700"])
@pytest.mark.parametrize("name", MLPERF_TINY)
def test_int8_io_program_equals_tflm_and_plans_no_float_tensor(name, target):
    result, pte, plans, io = int8_program(name, target)
    assert [b.name for plan in plans for b in plan.buffers if b.dtype.startswith("float")] == []
    if target == "imxrt700":  # the same graph with float I/O: its arena holds the float input and output too
        float_bytes = sum(a["arena_bytes"] for a in result.report["memory"]["arenas"])
        assert sum(plan.arena_bytes for plan in plans) < float_bytes
    tflite = result.partitions[0]
    (in_shape, _, in_scale, in_zp), = tflite_io(tflite)[0]
    (_, _, out_scale, out_zp), = tflite_io(tflite)[1]
    (given,), (returned,) = io["inputs"], io["outputs"]
    assert (given["dtype"], given["scale"], given["zero_point"]) == ("int8", pytest.approx(in_scale), in_zp)
    assert (returned["dtype"], returned["scale"], returned["zero_point"]) == ("int8", pytest.approx(out_scale), out_zp)
    program = imxrt.runtime.load(pte)
    generator = np.random.default_rng(7)
    for _ in range(2):
        q = generator.integers(-128, 128, size=given["shape"], dtype=np.int8)
        expected = run_tflm(tflite, [q if q.shape == in_shape else q.transpose(0, 2, 3, 1)])[0]
        (got,) = program.forward(q)
        assert got.dtype == np.int8
        np.testing.assert_array_equal(got, expected.reshape(got.shape))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.fc = torch.nn.Linear(4 * 4 * 4, 2)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


@functools.cache
def tiny(io: str, channels_last: bool = False):
    torch.manual_seed(0)
    x = torch.randn(1, 3, 6, 6, generator=torch.Generator().manual_seed(1))
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    data = [(x,), (x * 2,)]
    return compile(Net().eval(), (x,), "imxrt700-cpu", data, CompileOptions(show_progress=False, io=io))


@pytest.mark.slow
def test_report_describes_io_for_float_and_int8_programs():
    float_io, int8_io = tiny("float").io, tiny("int8").io
    assert float_io["inputs"][0] | {"dtype": "int8"} == int8_io["inputs"][0]
    assert [e["dtype"] for e in float_io["inputs"] + float_io["outputs"]] == ["float32", "float32"]
    assert int8_io["outputs"][0]["shape"] == [1, 2] and int8_io["outputs"][0]["dim_order"] == [0, 1]
    assert float_io["outputs"][0]["scale"] == int8_io["outputs"][0]["scale"] is not None


@pytest.mark.slow
def test_channels_last_input_stays_channels_last_with_int8_io():
    (given,) = tiny("int8", channels_last=True).io["inputs"]
    assert given["dim_order"] == [0, 2, 3, 1]
    program = imxrt.runtime.load(tiny("int8", channels_last=True).pte)
    q = np.arange(-54, 54, dtype=np.int8).reshape(1, 3, 6, 6)
    np.testing.assert_array_equal(program.forward(q)[0], imxrt.runtime.load(tiny("int8").pte).forward(q)[0])


def test_quantized_float_input_gives_the_float_program_int8_result():
    """quantize_input is the program's own quantize: int8-I/O output == float-I/O output, quantized."""
    (given,), (returned,) = tiny("int8").io["inputs"], tiny("int8").io["outputs"]
    x = np.random.default_rng(3).standard_normal((1, 3, 6, 6)).astype(np.float32)
    got = imxrt.runtime.load(tiny("int8").pte).forward(quantize_input(x, given["scale"], given["zero_point"], "x"))[0]
    y = imxrt.runtime.load(tiny("float").pte).forward(x)[0]
    np.testing.assert_array_equal((got.astype(np.float32) - returned["zero_point"]) * np.float32(returned["scale"]), y)


def test_out_of_range_inputs_saturate_with_a_warning_naming_the_input(caplog):
    with caplog.at_level(logging.WARNING, logger="imxrt"):
        q = quantize_input(np.array([-1000.0, 0.0, 0.5, 1000.0], np.float32), 0.01, 3, "0 (x)")
    assert q.tolist() == [-128, 3, 53, 127]
    assert "input 0 (x): 2 of 4 value(s) are outside the int8 range" in caplog.text
    with pytest.raises(BadInput, match="NaN"):
        quantize_input(np.array([np.nan], np.float32), 0.01, 0, "x")


def test_float_data_for_an_int8_program_is_an_error_that_names_the_flag():
    with pytest.raises(BadInput, match="--quantize-inputs"):
        imxrt.runtime.load(tiny("int8").pte).forward(np.zeros((1, 3, 6, 6), np.float32))
    with pytest.raises(BadOption, match="--io"):
        compile(Net().eval(), (torch.zeros(1, 3, 6, 6),), "imxrt700-cpu", None, CompileOptions(io="uint8"))


def test_cli_run_quantizes_float_inputs_only_when_asked(tmp_path, capsys, caplog):
    tiny("int8").save(tmp_path / "out")
    x = tmp_path / "x.npy"
    np.save(x, np.full((1, 3, 6, 6), 1e6, np.float32))
    assert main(["run", str(tmp_path / "out" / "model.pte"), "--input", str(x)]) == EXIT_USER_ERROR
    assert "--quantize-inputs" in capsys.readouterr().err
    with caplog.at_level(logging.WARNING, logger="imxrt"):
        assert main(["run", str(tmp_path / "out" / "model.pte"), "--input", str(x), "--quantize-inputs",
                     "--output-dir", str(tmp_path / "y")]) == 0
    assert "input 0 (x): 108 of 108 value(s) are outside the int8 range" in caplog.text
    expected = imxrt.runtime.load(tiny("int8").pte).forward(np.full((1, 3, 6, 6), 127, np.int8))[0]
    np.testing.assert_array_equal(np.load(tmp_path / "y" / "output_0.npy"), expected)


def test_quantize_inputs_with_a_report_io_entry_without_dtype_is_one_line_naming_it(tmp_path, capsys):
    tiny("int8").save(tmp_path / "out")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    del report["io"]["inputs"][0]["dtype"]
    (tmp_path / "edited.json").write_text(json.dumps(report))
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 6, 6), np.float32))
    status = main(["run", str(tmp_path / "out" / "model.pte"), "--input", str(tmp_path / "x.npy"),
                   "--quantize-inputs", "--report", str(tmp_path / "edited.json"), "--output-dir", str(tmp_path / "y")])
    err = capsys.readouterr().err
    assert status == EXIT_USER_ERROR and err.count("\n") == 1, err
    assert f"{tmp_path / 'edited.json'}: io.inputs[0] has no dtype; recompile" in err
    assert not (tmp_path / "y").exists()


def test_quantize_inputs_for_a_float_input_program_warns_naming_the_input(tmp_path, caplog):
    """The program quantizes its float input itself, with the same scale and zero point: the run is right,
    and the flag did nothing, which the user is told."""
    tiny("float").save(tmp_path / "out")
    x = np.random.default_rng(3).standard_normal((1, 3, 6, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    with caplog.at_level(logging.WARNING, logger="imxrt"):
        assert main(["run", str(tmp_path / "out" / "model.pte"), "--input", str(tmp_path / "x.npy"),
                     "--quantize-inputs", "--output-dir", str(tmp_path / "y")]) == 0
    assert "input 0 (x): the program takes float32, not int8: --quantize-inputs leaves it as given" in caplog.text
    np.testing.assert_array_equal(np.load(tmp_path / "y" / "output_0.npy"),
                                  imxrt.runtime.load(tiny("float").pte).forward(x)[0])
