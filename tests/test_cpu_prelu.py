"""PReLU on the Cortex-M: one slope (``nn.PReLU()``) is one int8 table whose entries are TFLM's PRELU
arithmetic; a slope per channel is TFLM's PRELU composed from four int8 kernels."""

from __future__ import annotations

import numpy as np
import oracles
import program_checks
import pytest
import torch
from torch import nn

from imxrt.pipeline import CompileOptions, compile
from imxrt.runtime import load

pytestmark = pytest.mark.slow  # compiles

SHAPE = (1, 4, 8, 8)  # 256 values: every int8 input once


def _calibration() -> list[tuple[torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [(torch.randn(SHAPE, generator=generator) * 3,) for _ in range(4)]


def _prelu(slopes: int) -> nn.Module:
    model = nn.PReLU(slopes).eval()
    with torch.no_grad():
        model.weight.copy_(torch.linspace(-0.6, 0.3, slopes))
    return model


def _ops(result) -> list[tuple[str, str, str]]:
    return [(op["op"], op["placement"], op.get("kernel", "")) for op in result.report["ops"]]


def test_one_slope_prelu_is_one_int8_table_on_the_cpu_equal_to_tflm_prelu():
    calibration, options = _calibration(), CompileOptions(show_progress=False, io="int8")
    cpu = compile(_prelu(1), calibration[0], "imxrt700-cpu", calibration, options)
    npu = compile(_prelu(1), calibration[0], "imxrt700", calibration, options)
    assert _ops(cpu) == [("aten.prelu.default", "cpu", "cortex_m.quantized_activation.default")]
    assert len(npu.partitions) == 1 and "PRELU" in oracles.tflite_ops(npu.partitions[0])
    qparams = [[(t["scale"], t["zero_point"]) for t in r.io["inputs"] + r.io["outputs"]] for r in (cpu, npu)]
    assert qparams[0] == qparams[1]  # one quantization table: the same qparams on both targets

    every_int8 = np.arange(-128, 128, dtype=np.int8).reshape(SHAPE)
    (ours,) = load(cpu.pte).forward(every_int8)
    (tflm,) = oracles.run_tflm(npu.partitions[0], [every_int8])
    np.testing.assert_array_equal(ours, tflm.reshape(ours.shape))


@pytest.mark.parametrize("channels_last_input", [False, True])
def test_prelu_with_a_slope_per_channel_is_int8_on_the_cpu_equal_to_tflm_prelu(channels_last_input):
    """A slope per channel: four int8 kernels on the CPU (two tables, quantized_mul, quantized_add) whose
    result is TFLM's PRELU on every int8 input of every channel; the NPU keeps its PRELU."""
    shape = (1, 4, 16, 16)  # every int8 value in every channel
    generator = torch.Generator().manual_seed(0)
    calibration = [(torch.randn(shape, generator=generator) * 3,) for _ in range(4)]
    if channels_last_input:
        calibration = [(x.contiguous(memory_format=torch.channels_last),) for (x,) in calibration]
    options = CompileOptions(show_progress=False, io="int8")
    cpu = compile(_prelu(4), calibration[0], "imxrt700-cpu", calibration, options)
    npu = compile(_prelu(4), calibration[0], "imxrt700", calibration, options)
    assert _ops(cpu) == [("aten.prelu.default", "cpu", f"cortex_m.{kernel}.default") for kernel in
                         ("quantized_activation", "quantized_mul", "quantized_activation", "quantized_add")]
    assert len(npu.partitions) == 1 and "PRELU" in oracles.tflite_ops(npu.partitions[0])

    every_int8 = np.tile(np.arange(-128, 128, dtype=np.int8), shape[1]).reshape(shape)
    (ours,) = load(cpu.pte).forward(every_int8)
    (declared, *_), _ = oracles.tflite_io(npu.partitions[0])
    nhwc = tuple(declared[0]) == (1, 16, 16, 4)  # a channels_last input is read as NHWC bytes
    (tflm,) = oracles.run_tflm(npu.partitions[0], [every_int8.transpose(0, 2, 3, 1) if nhwc else every_int8])
    np.testing.assert_array_equal(ours, tflm.transpose(0, 3, 1, 2) if nhwc else tflm.reshape(ours.shape))


def test_prelu_with_a_slope_per_channel_between_convolutions_runs_in_int8():
    calibration = _calibration()
    model = nn.Sequential(nn.Conv2d(4, 4, 1), _prelu(4), nn.Conv2d(4, 2, 1)).eval()
    result = compile(model, calibration[0], "imxrt700-cpu", calibration, CompileOptions(show_progress=False))
    assert not [op["op"] for op in result.report["ops"] if op["execution"] == "cpu float"]
    assert [op["kernel"] for op in result.report["ops"] if op["op"] == "aten.convolution.default"] \
        == ["cortex_m.quantized_conv2d.default"] * 2
    program_checks.check_case(result, calibration[1], model)
