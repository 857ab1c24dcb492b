"""A probe model mixing ops the NPU takes with ops it rejects: each rejected op with an int8 Cortex-M kernel
runs as that cortex_m kernel, the rest in float on the CPU, and the program runs on the host.

The numerics of each cortex_m kernel are checked against TFLM op by op in test_cpu_ops.py; this test checks
the placement a user reads in the report and that the mixed program runs in its planned memory.
"""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import imxrt.runtime
from imxrt.pipeline import CompileOptions, compile


class Probe(nn.Module):
    """conv (NPU) -> upsample x3 (NPU: scales 1, 2, 4, 8) ->
    conv over the MAC bound (9 * 9 * roundup(816, 8) = 66,096 > 65,535) -> elu (no Neutron kernel) ->
    LSTM with a projection (no int8 kernel anywhere: left whole, it decomposes after quantization) -> linear
    (NPU)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 816, 1)
        self.big = nn.Conv2d(816, 8, 9)
        self.rnn = nn.LSTM(8, 8, batch_first=True, proj_size=4)
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = F.relu(self.conv(x))                    # [1, 816, 3, 3]
        y = F.interpolate(y, scale_factor=3, mode="nearest")  # [1, 816, 9, 9]
        y = F.elu(self.big(y)).flatten(1)           # [1, 8]
        y, _ = self.rnn(y.unsqueeze(1))             # [1, 1, 4]
        return self.fc(y[:, -1])


@pytest.fixture(scope="module")
def probe():
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    data = [(torch.randn(1, 3, 3, 3, generator=generator),) for _ in range(4)]
    return data, compile(Probe().eval(), data[0], "imxrt700", data, CompileOptions(show_progress=False))


def _entry(report, op, nth=0):
    return [entry for entry in report["ops"] if entry["op"] == op][nth]


@pytest.mark.slow
def test_each_op_the_npu_rejects_runs_as_its_cortex_m_kernel_with_the_npu_reason(probe):
    report = probe[1].report
    upsample = _entry(report, "aten.upsample_nearest2d.vec")
    assert upsample["execution"] == "cpu int8" and "scale" in upsample["reason"]
    big = [e for e in report["ops"] if e["op"] == "aten.convolution.default" and e["placement"] == "cpu"]
    assert len(big) == 1 and big[0]["execution"] == "cpu int8"
    assert big[0]["kernel"] == "cortex_m.quantized_conv2d.default" and "65535" in big[0]["reason"].replace(",", "")
    elu = _entry(report, "aten.elu.default")
    assert elu["execution"] == "cpu int8" and elu["kernel"] == "cortex_m.quantized_activation.default"
    assert "no eIQ Neutron kernel" in elu["reason"]


class WideSoftmax(nn.Module):
    """A softmax over H = 2100 values: more than Neutron's 2040 per row."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 1)

    def forward(self, x):
        return torch.softmax(self.conv(x), dim=2)


@pytest.mark.slow
def test_a_softmax_the_npu_refuses_runs_on_the_cpu_between_transposes():
    generator = torch.Generator().manual_seed(1)
    data = [(torch.randn(1, 2, 2100, 1, generator=generator),) for _ in range(4)]
    report = compile(WideSoftmax().eval(), data[0], "imxrt700", data, CompileOptions(show_progress=False)).report
    softmax = [e for e in report["ops"] if e["op"] == "aten._softmax.default"]  # transpose, softmax, transpose
    assert [e["kernel"] for e in softmax] == ["cortex_m.transpose.default", "cortex_m.softmax.default",
                                             "cortex_m.transpose.default"]
    assert all(e["execution"] == "cpu int8" and "C <= 2040" in e["reason"] for e in softmax)


def test_an_op_without_any_int8_kernel_stays_float_and_says_why(probe):
    report = probe[1].report
    floats = [e for e in report["ops"] if e["execution"] == "cpu float"]
    assert floats, "the projected LSTM has no int8 kernel"
    assert all("LSTM 'rnn'" in e["cpu_reason"] for e in floats), floats


def test_the_npu_still_takes_what_it_supports(probe):
    report = probe[1].report
    first_conv = _entry(report, "aten.convolution.default")
    assert first_conv["placement"] == "npu"
    assert report["summary"]["partitions"] >= 1


def test_the_mixed_program_runs_on_the_host_in_its_planned_memory(probe):
    data, result = probe
    checked = imxrt.runtime.load(result.pte, check_plan=True).forward(data[1][0])[0]
    plain = imxrt.runtime.load(result.pte).forward(data[1][0])[0]
    assert checked.shape == (1, 4) and np.all(np.isfinite(checked))
    np.testing.assert_array_equal(checked, plain)


@pytest.mark.parametrize(("in_hw", "out_hw", "scales"), [((3, 3), (9, 9), [3.0, 3.0]), ((4, 6), (6, 9), None)])
def test_nearest_upsampling_on_the_host_indexes_like_the_portable_kernel(in_hw, out_hw, scales):
    """int8 channels_last (torch's CPU kernel refuses it) against float32 torch on the same values."""
    from imxrt.runtime import portable

    values = torch.arange(2 * 5 * in_hw[0] * in_hw[1]).reshape(1, 10, *in_hw) % 251 - 125
    x = values.to(torch.int8).contiguous(memory_format=torch.channels_last)
    out = torch.empty(1, 10, *out_hw, dtype=torch.int8).contiguous(memory_format=torch.channels_last)
    portable.upsample_nearest2d(x, list(out_hw), scales, out=out)
    expected = F.interpolate(values.float(), size=out_hw, mode="nearest")
    np.testing.assert_array_equal(out.numpy(), expected.to(torch.int8).numpy())
