"""Regression tests of element-wise ops of two tensors: add, sub, mul, div, maximum and clamps with tensor
bounds, their broadcasts and the TFLM limits on their scales.

Each is a defect the conformance suite (benchmarks/conformance.py: ExecuTorch's own NXP and Cortex-M test
models) found, as the smallest model that showed it, on both targets where both apply.
"""

import numpy as np
import pytest
import torch
import torch.nn as nn
from program_checks import check_case
from regression_helpers import TARGETS, Binary
from regression_helpers import compile_seeded as _compile
from regression_helpers import int8_on_the_cpu as _int8_on_the_cpu

from imxrt.pipeline import CompileOptions, compile


class TinyDifference(nn.Module):
    """y - (y + 1e-6): an output range about 1e-6 wide from inputs about 100 wide."""

    def forward(self, x):
        y = torch.relu(x * 100.0)
        return y - (y + 1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_a_sub_whose_output_scale_tflm_cannot_prepare_runs_on_the_cpu(target):
    """An output scale below the larger input scale / 2^19 gives TFLM's ADD / SUB an output multiplier of 1
    or more, which it refuses to prepare by aborting the process: such a SUB was delegated and TFLM aborted
    on the partition. The SUB now runs on the CPU, its reason naming TFLM's rule; the rest stays on the NPU."""
    result, cal = _compile(TinyDifference(), [(1, 4, 6, 6)], target)
    _int8_on_the_cpu(result, "aten.sub.Tensor", target, "output scale must exceed the larger input scale / 2^19",
                     "output multiplier 25.7")
    if target == "imxrt700":
        assert result.report["summary"]["ops_npu"] == 3  # relu, mul, add
    for inputs in cal[:2]:
        check_case(result, inputs)


def test_the_lowering_refuses_to_emit_an_add_tflm_cannot_prepare():
    """The capability table sees the cluster's qparams; what the lowering itself emits (a quantized constant
    operand, SUB(0, x) for neg) is checked where every operator is made, against TFLM's own arithmetic."""
    from imxrt.npu.litert import tflm_limits
    from imxrt.npu.litert.ir import PerChannel, PerTensor, Tensor

    def int8(scale):
        return Tensor("t", (1, 4), np.dtype(np.int8), PerTensor(scale, 0))

    limit = 0.5 / 2**19  # an input scale of 0.5 needs an output scale above 9.5e-7
    assert tflm_limits.problem("ADD", [int8(0.5), int8(0.01)], [int8(limit * 1.001)]) is None
    assert "needs an output scale above 9.54e-07" in tflm_limits.problem("SUB", [int8(0.01), int8(0.5)],
                                                                          [int8(limit)])
    assert tflm_limits.problem("MUL", [int8(0.5), int8(0.5)], [int8(0.25 / 2**15 * 1.001)]) is None
    assert "would shift past int32" in tflm_limits.problem("MUL", [int8(0.5), int8(0.5)], [int8(0.25 / 2**15)])
    row = Tensor("t", (4, 512), np.dtype(np.int8), PerTensor(1 / 256, -128))
    assert "row of 512 values" in tflm_limits.problem("SOFTMAX", [int8(0.1)], [row])
    # FULLY_CONNECTED: the bias scale within 0.02 output steps of s_in * s_w, and a per-channel filter unchecked
    def bias(scale):
        return Tensor("b", (4,), np.dtype(np.int32), PerTensor(scale, 0))

    product = 0.5 * 0.25
    above = float(np.nextafter(np.float32(product), np.float32(1)))  # the float32 after s_in * s_w
    diff = above - product
    assert tflm_limits.problem("FULLY_CONNECTED", [int8(0.5), int8(0.25), bias(above)], [int8(diff / 0.019)]) is None
    assert "within 0.02 of an output step" in tflm_limits.problem(
        "FULLY_CONNECTED", [int8(0.5), int8(0.25), bias(above)], [int8(diff / 0.021)])
    per_channel = Tensor("w", (4, 8), np.dtype(np.int8), PerChannel((0.25,) * 4, 0))
    assert tflm_limits.problem("FULLY_CONNECTED", [int8(0.5), per_channel, bias(above)], [int8(diff / 0.021)]) is None


class MaximumWithScalar(nn.Module):
    def forward(self, x, y):
        return torch.maximum(x, y)


@pytest.mark.slow
def test_the_checks_take_a_rank_0_partition_input_and_a_clamp_onto_a_finer_scale():
    """ExecuTorch's maximum broadcast_scalar case: a rank-0 input reached TFLM as a 1-d array (refused).
    conv2d_hardtanh_narrow: Hardtanh(-0.5, 0.5) requantizes the conv's ~4x coarser int8 output onto its
    own scale, so one rounding step of the conv is ~4 of the output's (README's bound)."""
    torch.manual_seed(0)
    result, cal = _compile(MaximumWithScalar(), [(), (4, 1, 1, 3)], "imxrt700")
    for inputs in cal[:3]:
        check_case(result, inputs)
    result, cal = _compile(nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.Hardtanh(-0.5, 0.5)), [(1, 4, 8, 8)],
                           "imxrt700")
    for inputs in cal:
        check_case(result, inputs)


class SubForms(nn.Module):
    def forward(self, x, y):
        return torch.relu(x - y), torch.sub(x, y, alpha=2), 1.0 - x, x - 0.5


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_sub_runs_in_int8_on_the_cpu(target):
    """sub had no CPU rule: one subtraction kept a whole model float on imxrt700-cpu (ExecuTorch's
    Cortex-M backend lowers it to quantized_add with the second multiplier negated, as here)."""
    torch.manual_seed(0)
    result, cal = _compile(SubForms(), [(1, 4, 5, 5), (1, 4, 5, 5)], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:3]:
        check_case(result, inputs)


def test_add_with_the_second_multiplier_negated_is_tflms_sub_on_every_int8_pair():
    """The stock kernel library has no SUB: quantized_add with -M2 computes it. Equal to TFLM's SUB
    arithmetic (elementwise.add(subtract=True), itself checked against TFLM in test_kernels_ops) on all
    65,536 input pairs for 100 seeded scale and zero-point draws."""
    import dataclasses

    from imxrt.kernels import elementwise

    rng = np.random.default_rng(0)
    x1, x2 = (a.ravel() for a in np.meshgrid(np.arange(-128, 128), np.arange(-128, 128)))
    for _ in range(100):
        s1, s2, s_out = np.exp(rng.uniform(-6, 0, 3))
        z1, z2, z_out = (int(z) for z in rng.integers(-128, 128, 3))
        sub = elementwise.prepare_add(s1, z1, s2, z2, s_out, z_out, -128, 127, subtract=True)
        negated = dataclasses.replace(sub, input2_multiplier=-sub.input2_multiplier, subtract=False)
        assert np.array_equal(elementwise.add(x1, x2, sub), elementwise.add(x1, x2, negated))


class Broadcasts(nn.Module):
    """Squeeze-excite's channel scale, a row bias, and a subtraction of a per-channel mean."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)

    def forward(self, x, row):
        y = torch.relu(self.conv(x))
        scale = torch.sigmoid(y.mean((2, 3), keepdim=True))
        return y * scale, y + row, y - y.mean((2, 3), keepdim=True)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_broadcasting_add_sub_mul_run_in_int8_on_the_cpu(target):
    """[1, 8, 1, 1] * [1, 8, 5, 5] (the squeeze-excite pattern) and other broadcasts were float on the CPU
    (the CMSIS-NN kernels take equal shapes): the broadcast operand is expanded in int8 first."""
    torch.manual_seed(0)
    result, cal = _compile(Broadcasts(), [(1, 4, 5, 5), (1, 1, 1, 5)], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:3]:
        check_case(result, inputs)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_division_by_a_tensor_is_int8_on_the_cpu(target):
    """x / y was float (ExecuTorch's Cortex-M backend lowers it to its quantized_div kernel): it is that
    kernel now, with a broadcast operand expanded first (the kernel takes equal shapes)."""
    model = Binary(lambda x, y: (x / y, x / y[:, :1]))
    generator = torch.Generator().manual_seed(0)
    cal = [(torch.randn(2, 3, 4, 5, generator=generator), torch.rand(2, 3, 4, 5, generator=generator) + 0.5)
           for _ in range(8)]
    result = compile(model.eval(), cal[0], target, cal, CompileOptions(show_progress=False))
    assert result.report["summary"]["ops_cpu_float"] == 0
    assert "cortex_m.quantized_div.default" in {op["kernel"] for op in result.report["ops"]}
    for inputs in cal[:2]:
        check_case(result, inputs)


CLAMPS = {
    "full_like bounds": lambda x, y: torch.clamp(x, torch.full_like(x, -0.5), torch.full_like(x, 1.0)),
    "zeros_like lower bound": lambda x, y: torch.clamp(x, min=torch.zeros_like(x)),
    "tensor bounds": lambda x, y: torch.clamp(x, min=y, max=y + 1.0),
    "broadcast upper bound": lambda x, y: torch.clamp(x, max=y[:, :1]),
}


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", CLAMPS)
def test_a_clamp_with_tensor_bounds_is_int8(name, target):
    """clamp.Tensor had no int8 rule (ExecuTorch's Cortex-M case standalone_clamp_tensor): uniform bounds
    make it a scalar clamp, other bounds an element-wise maximum / minimum."""
    result, cal = _compile(Binary(CLAMPS[name]), [(2, 3, 4, 5), (2, 3, 4, 5)], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:2]:
        check_case(result, inputs)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_a_float_alpha_folds_into_the_second_operands_scale(target):
    """add(x, y, alpha=0.5) stayed float on both targets (ExecuTorch's Cortex-M backend declines it too):
    any finite alpha scales the second operand's scale, as an integer one did."""
    model = Binary(lambda x, y: (torch.add(x, y, alpha=0.5), torch.sub(x, y, alpha=-1.75)))
    result, cal = _compile(model, [(4, 5), (4, 5)], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:2]:
        check_case(result, inputs)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_a_division_by_an_int8_zero_is_zero_in_both_programs(target):
    """ExecuTorch's TwoPartitionPReLUModel divides by a random-signed tensor: where the int8 divisor is its
    zero point the stock quantized_div gives 0 and PyTorch's float ±inf saturated, 150 to 9,506 LSB apart.
    The checks take the deployed kernel's rule (README), and every other element stays within rounding."""
    model = Binary(lambda x, y: torch.relu(x / y))
    generator = torch.Generator().manual_seed(3)
    cal = [(torch.randn(4, 64, generator=generator), torch.randn(4, 64, generator=generator)) for _ in range(8)]
    result = compile(model.eval(), cal[0], target, cal, CompileOptions(show_progress=False))
    zero_divisors = 0
    for inputs in cal[:3]:
        check_case(result, inputs)
        scale, zero_point = (lambda q: (q["scale"], q["zero_point"]))(result.io["inputs"][1])
        zero_divisors += int((torch.round(inputs[1] / scale) + zero_point == zero_point).sum())
    assert zero_divisors > 0  # the case the rule is for did occur
