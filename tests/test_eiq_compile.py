"""``--neutron-compiler eiq`` end to end with a test double of NXP's eIQ Neutron SDK (tests/eiq_neutron_sdk_standin):
delegates hold the stock runtime's payload, mapped onto the program's own tensors; converter failures, ops
the converter leaves out and a target the registry does not describe are clear errors; without the SDK,
``auto`` is the reference compiler."""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import sys
from pathlib import Path

import pytest
import torch
from ai_edge_litert import schema_py_generated as tfl
from executorch.exir._serialize._program import deserialize_pte_binary

from imxrt.cli import EXIT_USER_ERROR, main
from imxrt.errors import BadFile, BadOption
from imxrt.npu import microcode_payload
from imxrt.npu.compilers import eiq
from imxrt.pipeline import CompileOptions, compile
from imxrt.report.placement import summary_lines

STANDIN = Path(__file__).resolve().parent / "eiq_neutron_sdk_standin"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
_DOUBLE_VARIABLES = ("EIQ_TEST_DOUBLE_MODE", "EIQ_TEST_DOUBLE_PAYLOAD_VERSION", "EIQ_TEST_DOUBLE_REVERSE_IO",
                     "EIQ_TEST_DOUBLE_NUM_PIPES", "EIQ_TEST_DOUBLE_FLAT_CONTEXT")
REAL_SDK = importlib.util.find_spec("eiq_neutron_sdk") is not None


@pytest.fixture
def sdk(monkeypatch):
    """The SDK test double, importable in this process and (through PYTHONPATH) in the converter's child
    process, for one test only: afterwards ``eiq_neutron_sdk`` does not import again."""
    if REAL_SDK:
        pytest.skip("the real eIQ Neutron SDK is installed; these tests use its test double")
    monkeypatch.syspath_prepend(str(STANDIN))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(STANDIN), os.environ.get("PYTHONPATH")])))
    for name in _DOUBLE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    yield monkeypatch
    for name in [m for m in sys.modules if m.split(".")[0] in ("eiq_neutron_sdk", "neutron_graph_double")]:
        del sys.modules[name]


class TwoInTwoOut(torch.nn.Module):
    """One NPU partition with two inputs and two outputs of different shapes."""

    def __init__(self):
        super().__init__()
        self.conv_x = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.conv_y = torch.nn.Conv2d(5, 4, 1)

    def forward(self, x, y):
        a, b = torch.relu(self.conv_x(x)), self.conv_y(y)
        return a + b, torch.nn.functional.max_pool2d(a - b, 2)


def _inputs(memory_format=torch.contiguous_format):
    generator = torch.Generator().manual_seed(0)
    return tuple(torch.randn(shape, generator=generator).contiguous(memory_format=memory_format)
                 for shape in ((1, 3, 8, 8), (1, 5, 8, 8)))


def _seeded(factory):
    torch.manual_seed(0)
    return factory()


def _compile(model, inputs, **options):
    return compile(model.eval(), inputs, "imxrt700", [inputs],
                   CompileOptions(show_progress=False, neutron_compiler="eiq", **options))


def _delegate_calls(pte: bytes):
    """(payload, the call's argument tensors) per NeutronBackend delegate call."""
    program = deserialize_pte_binary(pte).program
    plan = program.execution_plan[0]
    calls = []
    for chain in plan.chains:
        for instruction in chain.instructions:
            call = instruction.instr_args
            if type(call).__name__ == "DelegateCall":
                delegate = plan.delegates[call.delegate_index]
                assert delegate.id == "NeutronBackend"
                blob = bytes(program.backend_delegate_data[delegate.processed.index].data)
                calls.append((microcode_payload.parse(blob), [plan.values[v].val for v in call.args]))
    return calls


def _tflite_io(tflite: bytes):
    graph = tfl.ModelT.InitFromPackedBuf(tflite, 0).subgraphs[0]
    return ([tuple(graph.tensors[t].shape) for t in graph.inputs],
            [tuple(graph.tensors[t].shape) for t in graph.outputs])


def _check_against_the_runtime_contract(payload, args, tflite: bytes, reversed_io: bool):
    """The stock runtime, given this payload, reads and writes the right tensors in the right layout: input
    i <- args[in_map[i]], output j -> args[n_args + out_map[j]]; with format flag 1 (and more than one
    channel) it hands the NPU NHWC bytes, transposing a contiguous tensor and passing a channels_last one; any
    other tensor must be contiguous and goes as it is."""
    in_shapes, out_shapes = _tflite_io(tflite)
    order_in = list(reversed(range(len(in_shapes)))) if reversed_io else list(range(len(in_shapes)))
    order_out = list(reversed(range(len(out_shapes)))) if reversed_io else list(range(len(out_shapes)))
    assert payload.input_map == tuple(order_in) and payload.output_map == tuple(order_out)
    assert payload.n_args == len(in_shapes)
    io = [(args[m], flag, in_shapes[k]) for m, flag, k in zip(payload.input_map, payload.input_flags, order_in,
                                                            strict=True)]
    io += [(args[payload.n_args + m], flag, out_shapes[k])
           for m, flag, k in zip(payload.output_map, payload.output_flags, order_out, strict=True)]
    for tensor, flag, tflite_shape in io:
        sizes, dim_order = list(tensor.sizes), list(tensor.dim_order)
        contiguous = dim_order == list(range(len(sizes)))
        if flag == 1 and len(sizes) == 4 and sizes[1] != 1:
            assert contiguous or dim_order == [0, 2, 3, 1]
            assert list(tflite_shape) == [sizes[0], sizes[2], sizes[3], sizes[1]]
        else:
            assert contiguous, f"the runtime refuses a {dim_order} tensor here (format flag {flag})"
            nhwc = [sizes[0], sizes[2], sizes[3], sizes[1]] if flag == 1 else sizes
            assert list(tflite_shape) == nhwc


@pytest.mark.slow
def test_delegates_hold_the_runtime_payload_mapped_onto_the_program_tensors(sdk):
    sdk.setenv("EIQ_TEST_DOUBLE_REVERSE_IO", "1")
    result = _compile(_seeded(TwoInTwoOut), _inputs())
    ((payload, args),) = _delegate_calls(result.pte)
    (tflite,) = result.partitions
    _check_against_the_runtime_contract(payload, args, tflite, reversed_io=True)
    assert payload.version == 0 and payload.input_flags == (0, 0)
    assert struct.unpack_from("<I", payload.microcode, 32)[0] == 0  # word 8: no converter option was on
    assert result.report["neutron_compiler"] == "eiq"
    (partition,) = result.report["partitions"]
    assert (partition["payload"], partition["payload_version"]) == ("microcode", 0)
    assert summary_lines(result.report)[0] == "target imxrt700 (Neutron compiler: eiq; delegates hold device microcode)"
    # the memory report counts the scratch the microcode header asks the runtime for (4096 in the test double)
    assert result.report["memory"]["npu_scratch_bytes"] == [payload.header.scratch_bytes] == [4096]
    # and the call's temp allocation as the stock runtime makes it: 2 + (2 + 3) pointers, then the scratch
    assert result.report["memory"]["delegate_temp_bytes"] == [32 + 4096]
    assert _compile(_seeded(TwoInTwoOut), _inputs()).pte == result.pte, "two compiles in one process differ"


@pytest.mark.slow
def test_channels_last_inputs_get_format_flag_1_and_payload_version_1(sdk):
    sdk.setenv("EIQ_TEST_DOUBLE_PAYLOAD_VERSION", "1")
    result = _compile(_seeded(TwoInTwoOut).to(memory_format=torch.channels_last), _inputs(torch.channels_last))
    ((payload, args),) = _delegate_calls(result.pte)
    _check_against_the_runtime_contract(payload, args, result.partitions[0], reversed_io=False)
    assert payload.version == 1 and payload.input_flags == (1, 1)


@pytest.mark.slow
def test_a_microcode_program_is_refused_by_the_host_runtime(sdk):
    from imxrt.runtime import load

    x = _inputs()[0]
    result = _compile(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()), (x,))
    with pytest.raises(BadFile) as error:
        load(result.pte).forward(x)
    assert "Neutron microcode" in str(error.value) and "board or in NXP's Neutron simulator" in str(error.value)


TINY = """
import torch
def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.ZeroPad2d(1), torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 6 * 6, 2)).eval()
def example_inputs():
    return (torch.randn(1, 3, 6, 6, generator=torch.Generator().manual_seed(1)),)
"""


@pytest.mark.slow
def test_converter_options_reach_an_older_sdk_and_its_dumps_land_next_to_the_pte(sdk, tmp_path, capsys):
    sdk.setenv("EIQ_TEST_DOUBLE_FLAT_CONTEXT", "1")  # options as fields of CompilationContext itself
    (tmp_path / "tiny.py").write_text(TINY)
    out = tmp_path / "out"
    status = main(["compile", str(tmp_path / "tiny.py"), "-o", str(out), "--quiet", "--neutron-compiler", "eiq",
                   "--fetch-constants-to-sram", "--dump-kernel-selection", "--neutron-profiling"])
    assert status == 0, capsys.readouterr().err
    ((payload, _),) = _delegate_calls((out / "model.pte").read_bytes())
    assert struct.unpack_from("<I", payload.microcode, 32)[0] == 0b111  # the test double records what it got
    assert payload.header.sram_scratch_bytes == len(payload.weights) > 0
    assert "#define NEUTRON_KERNEL_CONV2DSTANDARDV2" in (out / "partition_0_kernel_selection.c").read_text()
    kernels = json.loads((out / "npu" / "partition_0.kernels.json").read_text())
    notes = [row["note"] for row in kernels["kernels"]]
    assert any(note.startswith("merged: LiteRT ops") and "PAD" in note for note in notes), notes
    assert any("split: its operator runs as 2 kernels (FullyConnectedPrepare, FullyConnected)" in n for n in notes)
    assert all(row["debug_handles"] for row in kernels["kernels"][:-1])
    report = json.loads((out / "report.json").read_text())
    assert report["neutron_compiler"] == "eiq" and report["partitions"][0]["payload_version"] == 1


@pytest.mark.slow
def test_a_crashing_converter_is_one_line_naming_the_partition_and_its_tflite_is_kept(sdk, tmp_path, capsys):
    sdk.setenv("EIQ_TEST_DOUBLE_MODE", "crash")
    (tmp_path / "tiny.py").write_text(TINY)
    out = tmp_path / "out"
    status = main(["compile", str(tmp_path / "tiny.py"), "-o", str(out), "--quiet", "--neutron-compiler", "eiq"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert status == EXIT_USER_ERROR
    assert err.startswith("imxrt: error: NPU partition neutron_0 [aten_constant_pad_nd_default,")
    assert "the eIQ Neutron converter crashed (SIGSEGV); its last output: NeutronConverter: internal error" in err
    kept = out / "npu" / "failed_neutron_0.tflite"
    assert f"its .tflite is kept at {kept}" in err
    assert _tflite_io(kept.read_bytes()) == ([(1, 3, 6, 6)], [(1, 2)])
    assert not (out / "model.pte").exists()


@pytest.mark.slow
def test_an_op_the_converter_leaves_out_is_named(sdk):
    sdk.setenv("EIQ_TEST_DOUBLE_MODE", "leave_op")
    x = _inputs()[0]
    with pytest.raises(eiq.NeutronConverterFailed) as error:
        _compile(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Softmax(dim=1)), (x,))
    assert str(error.value).startswith("NPU partition neutron_0 [")
    assert "it did not convert: TRANSPOSE -> left_out_transpose" in str(error.value)


def test_a_target_the_registry_describes_differently_is_refused_before_any_work(sdk):
    sdk.setenv("EIQ_TEST_DOUBLE_NUM_PIPES", "4")
    with pytest.raises(eiq.NeutronSdkError) as error:
        compile(torch.nn.Identity(), (torch.ones(1),), "imxrt700", None,
                CompileOptions(show_progress=False, neutron_compiler="auto"))
    assert "target imxrt700: the eIQ Neutron SDK describes its NPU differently" in str(error.value)
    assert "pipes 4 (registry: 8); MACs per cycle 32 (registry: 64)" in str(error.value)


def test_auto_means_eiq_when_the_sdk_imports(sdk):
    assert eiq.resolve("auto") == "eiq"


@pytest.mark.skipif(REAL_SDK, reason="the real eIQ Neutron SDK is installed")
def test_without_the_sdk_auto_is_the_reference_compiler_and_eiq_says_how_to_get_it():
    assert eiq.resolve("auto") == "reference"
    with pytest.raises(eiq.NeutronSdkError, match="install it from NXP's package index"):
        eiq.resolve("eiq")
    assert eiq.resolve("eiq", has_npu=False) == "eiq"  # a CPU-only target runs no Neutron compiler


@pytest.mark.skipif(REAL_SDK, reason="the real eIQ Neutron SDK is installed")
def test_converter_options_without_the_sdk_are_refused_naming_the_flag():
    with pytest.raises(BadOption, match="--neutron-profiling: True is not valid; use it only with the eIQ"):
        compile(torch.nn.Identity(), (torch.ones(1),), "imxrt700", None,
                CompileOptions(show_progress=False, neutron_profiling=True))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ds_cnn", "mobilenet_v1", "resnet8", "autoencoder"])
def test_an_mlperf_tiny_model_compiles_to_microcode_from_the_command_line(name, sdk, tmp_path, capsys):
    out = tmp_path / name
    status = main(["compile", str(EXAMPLES / f"{name}.py"), "-o", str(out), "--quiet", "--neutron-compiler", "eiq",
                   "--calibration-samples", "2"])
    assert status == 0, capsys.readouterr().err
    calls = _delegate_calls((out / "model.pte").read_bytes())
    report = json.loads((out / "report.json").read_text())
    assert calls and report["neutron_compiler"] == "eiq"
    assert [p["payload"] for p in report["partitions"]] == ["microcode"] * len(calls)
    for (payload, args), index in zip(calls, range(len(calls)), strict=True):
        _check_against_the_runtime_contract(payload, args, (out / "npu" / f"partition_{index}.tflite").read_bytes(),
                                            reversed_io=False)
