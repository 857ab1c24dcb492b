"""Regression tests of activations and other pointwise functions of one tensor: clamps, leaky ReLU,
hardswish, sigmoid / tanh, softmax, and the CPU's int8 tables (log, sqrt, rsqrt, silu ...).

Each is a defect the conformance suite (benchmarks/conformance.py: ExecuTorch's own NXP and Cortex-M test
models) found, as the smallest model that showed it, on both targets where both apply.
"""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from program_checks import check_case
from regression_helpers import TARGETS, Elementwise
from regression_helpers import compile_seeded as _compile
from regression_helpers import int8_on_the_cpu as _int8_on_the_cpu

import imxrt.runtime
from imxrt.kernels import activations
from imxrt.pipeline import CompileOptions, compile

UNBOUNDED_CLAMPS = {
    "hardtanh_0_inf": lambda: nn.Hardtanh(0.0, float("inf")),
    "hardtanh_-inf_1": lambda: nn.Hardtanh(float("-inf"), 1.0),
}


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("clamp", sorted(UNBOUNDED_CLAMPS))
def test_an_infinite_clamp_bound_is_no_bound(clamp, target):
    """Quantizing the infinite bound raised OverflowError on imxrt700-cpu; the int8 range bounds it."""
    torch.manual_seed(0)
    result, cal = _compile(nn.Sequential(nn.Linear(4, 4), UNBOUNDED_CLAMPS[clamp]()), [(1, 4)], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:3]:
        check_case(result, inputs)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("slope", [float("inf"), float("-inf")])
def test_a_leaky_relu_slope_too_steep_for_a_multiplier_saturates_every_negative_code(slope, target):
    """alpha = inf (one of upstream's NXP test cases): its multiplier s_in * alpha / s_out has no Q31 form,
    so the CPU lowering raised an internal error and the host runtime refused the NPU partition (TFLM's own
    QuantizeMultiplier is undefined on it). Every clearly negative input saturates, as in float."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(4, 4, 1), nn.LeakyReLU(slope))
    result, cal = _compile(model, [(1, 4, 6, 6)], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    output = result.io["outputs"][0]
    extreme = output["scale"] * ((-128 if slope > 0 else 127) - output["zero_point"])
    program = imxrt.runtime.load(result.pte)
    for inputs in cal[:3]:
        check_case(result, inputs)
        negative = model[0](*inputs).detach().numpy() < -0.1
        assert negative.any()
        assert np.all(program.forward(*inputs)[0][negative] == np.float32(extreme))


@pytest.mark.parametrize("slope", [1.0, -1.0])
def test_a_finite_leaky_relu_multiplier_past_q31_saturates_like_an_infinite_one(slope):
    """The sibling: a finite slope whose multiplier needs a shift past 31 (a tiny negative input range)."""
    s_in, s_out = 1e-6, 1.0
    steep = activations.leaky_relu_lut(s_in, 0, s_out, 0, slope * 2.0**45 / s_in)
    infinite = activations.leaky_relu_lut(s_in, 0, s_out, 0, slope * float("inf"))
    assert np.array_equal(steep.table, infinite.table)
    assert set(steep.table[:128]) == {-128 if slope > 0 else 127}  # every q < zero point = 0
    assert activations.saturating_leaky_alpha(s_in, s_out, 0.3) == 0.3
    with pytest.raises(ValueError, match="NaN"):
        activations.saturating_leaky_alpha(s_in, s_out, float("nan"))


class DeadRelu(nn.Module):
    def forward(self, x):
        return torch.relu(x - 100.0), torch.relu(x - x)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_an_activation_calibration_saw_only_as_zero_takes_its_inputs_range(target):
    """relu(x - 100) on N(0, 1) data is 0 on every sample: the observer's scale was float32's epsilon, which
    gave the fused SUB an output multiplier of about 10**7 and TFLM aborted the process preparing it (its
    ADD/SUB take only multipliers below 1)."""
    result, cal = _compile(DeadRelu(), [(1, 4, 6, 6)], target)
    input_scale = result.io["inputs"][0]["scale"]
    assert [output["scale"] for output in result.io["outputs"]] == [input_scale, input_scale]
    for inputs in cal[:2]:
        check_case(result, inputs)


class WideSoftmax(nn.Module):
    """A 600-way softmax, as a classifier head over many classes (ImageNet's 1000) has."""

    def forward(self, x):
        return torch.softmax(torch.relu(x), -1)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_a_softmax_row_tflm_cannot_sum_runs_on_the_cpu(target):
    """TFLM's int8 SOFTMAX aborts the process when a row's exponentials sum to 512 or more: a 600-value row
    of equal values (here relu of an input at or below 0) was delegated and TFLM aborted on it. The
    softmax now runs on the CPU, its reason naming TFLM's limit, and the program runs such an input."""
    result, cal = _compile(WideSoftmax(), [(1, 600)], target)
    _int8_on_the_cpu(result, "aten._softmax.default", target, "at most 511 values per row as well")
    for inputs in [(-cal[0][0].abs(),), cal[1]]:
        check_case(result, inputs)
    output = imxrt.runtime.load(result.pte).forward(-cal[0][0].abs())[0]
    assert np.allclose(output, 1 / 600, atol=1 / 256)


class TinyHardswish(nn.Module):
    def forward(self, x):
        return nn.functional.hardswish(x * 1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_hardswish_of_a_tiny_range_is_tflm_exact(target):
    """An input scale near 1e-8 gives HARD_SWISH a 'reluish' multiplier exponent of -16 or below, where TFLM's
    int16 RoundingDivideByPOT truncates its mask to int16 (-1): every value rounds to 1 or -1. The host
    runtime divided exactly and was 1 LSB off TFLM on about a quarter of the values."""
    result, cal = _compile(TinyHardswish(), [(1, 4, 3, 3)], target)
    for inputs in cal[:3]:
        check_case(result, inputs)


class Hardswish(nn.Module):
    def forward(self, x):
        return nn.functional.hardswish(x)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_a_hardswish_whose_output_range_tflm_cannot_prepare_compiles(target):
    """Inputs over [-10, -2.99] give hardswish outputs within 0.005 of 0: an output scale below the input scale
    / 128, a multiplier TFLM refuses (its output exponent must be at most 0). The NPU lowering emitted the
    HARD_SWISH (the host runtime then refused the file as corrupted) and the CPU lowering's table asserted
    (an internal error). The op now runs on the CPU with the function's own rounded table."""
    calibration = [(torch.linspace(-10.0, -2.99, 36).reshape(1, 4, 3, 3) + 0.001 * k,) for k in range(4)]
    result = compile(Hardswish().eval(), calibration[0], target, calibration, CompileOptions(show_progress=False))
    _int8_on_the_cpu(result, "aten.hardswish.default", target, "output scale must exceed the input scale / 128")
    for inputs in calibration[:2]:
        check_case(result, inputs)


class WideGate(nn.Module):
    """sigmoid or tanh of inputs thousands wide: an int8 input scale past 8."""

    def __init__(self, function):
        super().__init__()
        self.function = function

    def forward(self, x):
        return self.function(x * 1000.0)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("function", [torch.sigmoid, torch.tanh], ids=["sigmoid", "tanh"])
def test_a_sigmoid_or_tanh_of_an_input_scale_past_8_keeps_zero_at_its_value(function, target):
    """From an input scale of 8 on, TFLM's int8 LOGISTIC / TANH saturate every value, the zero point to the low
    end (tanh(0) = -1, sigmoid(0) = 0), and never rescale one. The NPU lowering emitted the op; the host
    runtime then rescaled every value, shifted past int32 and called the file corrupted, and the CPU
    lowering's table raised (an internal error). The op now runs on the CPU with the function's own table.
    Found by random models (a tanh after a scale by 387)."""
    result, cal = _compile(WideGate(function), [(1, 4, 3, 3)], target)
    name = "aten.sigmoid.default" if function is torch.sigmoid else "aten.tanh.default"
    _int8_on_the_cpu(result, name, target, "an input scale below 8")
    for inputs in cal[:2]:
        check_case(result, inputs)
    (zero,) = imxrt.runtime.load(result.pte).forward(torch.zeros(1, 4, 3, 3))
    assert np.array_equal(zero, function(torch.zeros(1, 4, 3, 3)).numpy())


class DeadRelu6OfWideValues(nn.Module):
    """relu6 of values at most 0 and as low as -10^4: its output is 0 (scale float32's epsilon), its input's
    scale about 40."""

    def forward(self, x):
        y = -(x * 30) ** 2
        return F.relu6(torch.cat([y, y], 1))


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_a_requantize_tflm_would_shift_past_int32_runs_on_the_cpu(target):
    """The relu6's input is requantized to its output scale with a multiplier near 3e8: TFLM shifts the
    centred value left by 29 in int32 and wraps (values due at -128 came out at 127, 255 steps off the host
    runtime). Such a QUANTIZE (and a MUL past 2^15) is refused: the relu6 runs on the CPU."""
    result, cal = _compile(DeadRelu6OfWideValues(), [(1, 2, 4, 4)], target)
    _int8_on_the_cpu(result, "aten.hardtanh.default", target, "would shift past int32")
    for inputs in cal[:2]:
        check_case(result, inputs)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", ["log", "rsqrt", "sqrt", "log2"])
def test_calibration_ignores_nan_and_infinite_values(op, target):
    """log/rsqrt of ExecuTorch's randn test inputs gave NaN activations: the min/max observer's range went
    NaN and quantization failed ("min nan should be less than max nan"). An int8 tensor holds neither."""
    model = Elementwise(getattr(torch, op))
    result, cal = _compile(model, [(1, 16)], target)
    for inputs in cal[:3]:  # in the op's domain: TFLite's int8 RSQRT fails on a negative input
        check_case(result, [x.abs() + 0.01 for x in inputs], model)


POINTWISE = {
    "silu": nn.SiLU, "hardsigmoid": nn.Hardsigmoid, "mish": nn.Mish, "elu": nn.ELU,
    "sqrt": lambda: Elementwise(lambda x: torch.sqrt(x.abs() + 0.01)),
    "log2": lambda: Elementwise(lambda x: torch.log2(x.abs() + 0.01)),
    "log10": lambda: Elementwise(lambda x: torch.log10(x.abs() + 0.01)),
    "log1p": lambda: Elementwise(lambda x: torch.log1p(x.abs())),
    "square": lambda: Elementwise(lambda x: x ** 2),
}


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", sorted(POINTWISE))
def test_every_pointwise_op_of_one_tensor_is_one_int8_table(op, target):
    """silu, hardsigmoid, sqrt, log2/log10/log1p stayed float on both targets (ExecuTorch's Cortex-M backend
    lowers them to quantized_activation): any deterministic pointwise op of one tensor is a 256-entry table
    on the Cortex-M, kept whole through to_edge so its decomposition does not run in float."""
    torch.manual_seed(0)
    result, cal = _compile(nn.Sequential(nn.Linear(8, 8), POINTWISE[op]()), [(2, 8)], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:3]:
        check_case(result, inputs)


@pytest.mark.slow
def test_rsqrt_goes_to_the_npu_only_when_no_input_is_negative():
    """TFLM's and LiteRT's int8 RSQRT fail on an input below its zero point; on random-signed inputs the
    NPU partition could not even be checked (8 of ExecuTorch's cases). RSQRT is delegated only when the
    input's zero point is -128, and otherwise is the CPU's table, defined for every int8 input."""
    model = Elementwise(torch.rsqrt)
    signed, cal = _compile(model, [(2, 8)], "imxrt700")
    assert signed.report["summary"]["partitions"] == 0
    assert signed.report["summary"]["ops_cpu_float"] == 0
    (rsqrt,) = [op for op in signed.report["ops"] if op["op"] == "aten.rsqrt.default"]
    assert "input zero point" in rsqrt["reason"]
    for inputs in cal[:2]:
        check_case(signed, inputs, model)  # NaN where PyTorch's rsqrt is NaN: not compared
    positive, cal = _compile(Elementwise(lambda x: torch.rsqrt(x.abs() + 0.25)), [(2, 8)], "imxrt700")
    assert [op["placement"] for op in positive.report["ops"] if op["op"] == "aten.rsqrt.default"] == ["npu"]
    for inputs in cal[:2]:
        check_case(positive, inputs)
