"""End to end: the bundled models compile to one NPU partition that TFLM and LiteRT run, and whose int8
outputs match the quantized PyTorch program within one quantization step on every element."""

from __future__ import annotations

from pathlib import Path

import oracles
import pytest
import torch
from compiled_examples import compiled_example
from reference_outputs import max_step_difference, tflm_and_reference

from imxrt.npu import reference_payload
from imxrt.pipeline import CompileOptions, compile
from imxrt.source import load_source

pytestmark = pytest.mark.slow  # every test here compiles models

EXAMPLES = Path(__file__).parent.parent / "examples"

# model file -> TRANSPOSE ops expected: only an NCHW image input with C > 1 needs one, as the first op
MODELS = {
    "ds_cnn.py": 0,  # 1x1x49x10: C = 1, so NCHW -> NHWC is a RESHAPE
    "mobilenet_v1.py": 1,
    "resnet8.py": 1,
    "autoencoder.py": 0,
    "mobilenet_v2.py": 1,
    "channels_last.py": 0,  # channels_last I/O passes through
}

def compiled(name: str):
    return compiled_example(name.removesuffix(".py"))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_whole_model_is_one_npu_partition(name):
    _, _, result = compiled(name)
    summary = result.report["summary"]
    assert summary["npu_mac_fraction"] == 1.0
    assert summary["partitions"] == 1
    cpu = [op for op in result.report["ops"] if op["placement"] == "cpu"]
    # only the model-boundary conversions stay on the CPU, as the Cortex-M's int8 kernels
    assert {op["op"] for op in cpu} == {"cortex_m.quantize_per_tensor.default",
                                        "cortex_m.dequantize_per_tensor.default"}, cpu
    ops = oracles.tflite_ops(result.partitions[0])
    assert ops.count("TRANSPOSE") == MODELS[name] == summary["transposes"]
    if MODELS[name]:
        assert ops[0] == "TRANSPOSE", "a TRANSPOSE may only convert the NCHW model input"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_partition_runs_in_litert_and_matches_the_quantized_program_in_tflm(name):
    source, calibration, result = compiled(name)
    samples = (calibration or [source.example_inputs])[:3]
    for inputs in samples:
        got, expected, feeds = tflm_and_reference(result, tuple(inputs))
        assert max_step_difference(got, expected) <= 1
        litert = oracles.run_litert(result.partitions[0], feeds)
        assert [a.shape for a in litert] == [a.shape for a in got]


def _delegate_payloads(pte: bytes) -> list[bytes]:
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary(pte).program
    return [bytes(blob.data) for blob in program.backend_delegate_data]


@pytest.mark.parametrize("name, flag", [("channels_last.py", 1), ("mobilenet_v2.py", 0)])
def test_image_input_format_flag_in_the_pte_payload(name, flag):
    """channels_last input: the NPU takes NHWC bytes as they are (flag 1); NCHW: TRANSPOSE inside (flag 0)."""
    _, _, result = compiled(name)
    (blob,) = _delegate_payloads(result.pte)
    assert reference_payload.is_reference(blob)
    reference = reference_payload.unpack(blob)
    (entry,) = reference.metadata["inputs"]
    assert entry["format_flag"] == flag
    assert reference.tflite == result.partitions[0]
    (shape, *_), = oracles.tflite_io(reference.tflite)[0]
    assert tuple(shape) == ((1, 96, 96, 3) if flag else (1, 3, 96, 96))


def test_a_channels_last_input_reaches_the_npu_without_a_transpose_anywhere():
    """The CPU lowering copied the channels_last input quantize to contiguous before the delegate call, which
    the stock runtime (format flag 1) then transposed back: 175 µs of CPU copy in the estimate, more than the
    NCHW model's NPU TRANSPOSE it was meant to save."""
    _, _, nhwc = compiled("channels_last.py")
    _, _, nchw = compiled("mobilenet_v2.py")
    assert nhwc.report["summary"]["layout_copies"] == 0
    assert nhwc.io["inputs"][0]["dim_order"] == [0, 2, 3, 1]
    # the one difference between the two programs' estimates is the NPU TRANSPOSE of the NCHW input
    transpose = nchw.report["latency"]["partitions"][0]["kernels"][0]
    assert transpose["litert"] == "TRANSPOSE"
    assert nhwc.report["latency"]["total"]["cycles"] == nchw.report["latency"]["total"]["cycles"] - transpose["cycles"]


def test_compiling_twice_gives_identical_bytes():
    source = load_source(str(EXAMPLES / "resnet8.py"))
    calibration = list(source.calibration)[:4]
    first = compile(source.model, source.example_inputs, "imxrt700", calibration, CompileOptions(show_progress=False))
    source = load_source(str(EXAMPLES / "resnet8.py"))
    second = compile(source.model, source.example_inputs, "imxrt700", calibration, CompileOptions(show_progress=False))
    assert first.pte == second.pte
    assert first.partitions == second.partitions
    assert first.report == second.report


def test_report_lists_every_compute_op_with_placement_reason_and_macs():
    _, _, result = compiled("resnet8.py")
    report = result.report
    assert report["target"] == "imxrt700" and report["neutron_compiler"] == "reference"
    for op in report["ops"]:
        assert set(op) >= {"name", "op", "placement", "partition", "reason", "macs"}
        assert op["reason"]
    (partition,) = report["partitions"]
    assert partition["tflite"] == "npu/partition_0.tflite"
    assert partition["macs"] == report["summary"]["macs_total"] == sum(op["macs"] for op in report["ops"])
    # ResNet-8's MACs as MLPerf Tiny publishes them (reference/anchors.md)
    assert report["summary"]["macs_total"] == 12_501_632


def test_unsupported_ops_stay_on_the_cpu_with_a_reason_and_the_program_still_compiles():
    class Mixed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x):
            y = torch.nn.functional.elu(self.conv(x))
            y = torch.nn.functional.max_pool2d(y, 3, 1, 1, dilation=2)  # dilated: not on the NPU
            return self.fc(y.mean((2, 3)))

    generator = torch.Generator().manual_seed(0)
    data = [(torch.randn(1, 3, 8, 8, generator=generator),) for _ in range(4)]
    torch.manual_seed(0)  # the weights: the same program every run
    result = compile(Mixed().eval(), data[0], "imxrt700", data, CompileOptions(show_progress=False))
    by_op = {op["op"]: op for op in result.report["ops"]}
    assert by_op["aten.elu.default"]["placement"] == "cpu"
    assert "no eIQ Neutron kernel" in by_op["aten.elu.default"]["reason"]
    pool = by_op["aten.max_pool2d_with_indices.default"]
    assert pool["placement"] == "cpu" and "dilation 1" in pool["reason"]
    assert by_op["aten.convolution.default"]["placement"] == "npu"
    assert result.pte[4:8] == b"ET12"


def test_linear_is_kept_as_one_op():
    """No silent decomposition of linear into permute + addmm: one edge op, one FULLY_CONNECTED."""
    _, _, result = compiled("autoencoder.py")
    edge_ops = [op["op"] for op in result.report["ops"] if op["placement"] == "npu"]
    assert "aten.linear.default" in edge_ops
    assert "aten.addmm.default" not in edge_ops and "aten.permute_copy.default" not in edge_ops
    litert = result.report["partitions"][0]["ops"]
    assert litert.count("FULLY_CONNECTED") == edge_ops.count("aten.linear.default") == 10


def test_matmul_by_a_constant_is_a_fully_connected_with_symmetric_weights():
    class MatMul(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(16, 8, generator=torch.Generator().manual_seed(3)))

        def forward(self, x):
            return torch.relu(x @ self.weight)

    generator = torch.Generator().manual_seed(0)
    data = [(torch.randn(2, 16, generator=generator),) for _ in range(4)]
    result = compile(MatMul().eval(), data[0], "imxrt700", data, CompileOptions(show_progress=False))
    assert result.report["summary"]["npu_mac_fraction"] == 1.0
    assert oracles.tflite_ops(result.partitions[0]) == ["FULLY_CONNECTED"]
    got, expected, _ = tflm_and_reference(result, data[1])
    assert max_step_difference(got, expected) <= 1


def test_a_projected_lstm_runs_in_float_on_the_cpu_and_the_report_names_it():
    """An LSTM with proj_size is left whole before quantization (tests/test_sequence_rnn.py: other GRU / LSTM
    layers unroll into int8 steps)."""
    class Recurrent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(10, 16)
            self.lstm = torch.nn.LSTM(16, 8, batch_first=True, proj_size=4)

        def forward(self, x):
            y, _ = self.lstm(torch.relu(self.fc(x)))
            return y[:, -1]

    x = (torch.randn(1, 5, 10, generator=torch.Generator().manual_seed(0)),)
    torch.manual_seed(0)  # the weights: the same program every run
    result = compile(Recurrent().eval(), x, "imxrt700", [x], CompileOptions(show_progress=False))
    ops = result.report["ops"]
    assert [op["op"] for op in ops if op["placement"] == "npu"] == ["aten.linear.default", "aten.relu.default"]
    recurrent = [op for op in ops if op["placement"] == "cpu" and "LSTM 'lstm'" in op["reason"]]
    assert len(recurrent) > 10 and all(op["reason"].count("runs in float on the CPU") == 1 for op in recurrent)
    assert not any("no tensor" in op["reason"] for op in recurrent)  # an op whose result is read in float


def test_reflect_pad_and_an_integer_scalar_multiply_run_on_the_npu():
    class PadScale(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.pad(torch.relu(x), (1, 1, 2, 2), mode="reflect") * 2

    generator = torch.Generator().manual_seed(0)
    data = [(torch.randn(1, 4, 6, 6, generator=generator),) for _ in range(4)]
    result = compile(PadScale().eval(), data[0], "imxrt700", data, CompileOptions(show_progress=False))
    npu = [op["op"] for op in result.report["ops"] if op["placement"] == "npu"]
    assert npu == ["aten.relu.default", "aten.reflection_pad2d.default", "aten.mul.Tensor"]
    assert oracles.tflite_ops(result.partitions[0]) == ["TRANSPOSE", "RELU", "MIRROR_PAD", "MUL", "TRANSPOSE"]
    got, expected, _ = tflm_and_reference(result, data[1])
    assert max_step_difference(got, expected) <= 1
