"""Regression tests of linear layers and matrix products: shared layers, biases, FULLY_CONNECTED's bias
scale rule, addmm, and products of two activations.

Each is a defect the conformance suite (benchmarks/conformance.py: ExecuTorch's own NXP and Cortex-M test
models) found, as the smallest model that showed it, on both targets where both apply.
"""

import numpy as np
import pytest
import torch
import torch.nn as nn
from program_checks import assert_pte_matches_quantized, check_case
from regression_helpers import TARGETS, Binary, Elementwise
from regression_helpers import compile_seeded as _compile
from regression_helpers import int8_on_the_cpu as _int8_on_the_cpu

import imxrt.runtime
from imxrt.npu.compilers.reference import litert_ops

pytestmark = pytest.mark.slow  # every test here compiles models


class LinearTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, y):
        return self.fc(x), self.fc(10 * y)


@pytest.mark.parametrize("target", TARGETS)
def test_a_layer_applied_twice_reads_each_bias_at_its_own_scale(target):
    """The second use's input scale is ~10x the first's: a bias shared at the first use's s_in * s_w was
    off by about a quarter of the second output's range."""
    torch.manual_seed(0)
    model = LinearTwice()
    result, cal = _compile(model, [(1, 8), (1, 8)], target)
    for inputs in cal:
        assert_pte_matches_quantized(result, inputs)
        second = model(*inputs)[1].detach().numpy()
        scale = result.io["outputs"][1]["scale"]
        ours = imxrt.runtime.load(result.pte).forward(*inputs)[1]
        assert np.abs(ours - second).max() <= 3 * scale


class BiasBeyondInt32(nn.Module):
    """A linear layer on inputs about 1e-6 wide (an input scale at float32's epsilon, s_in * s_w about 1e-9):
    its bias of +-3 is past 2^31 steps."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        with torch.no_grad():
            self.fc.weight.copy_(torch.tensor([[1.0, -0.5, 0.25, -1.0], [0.5, 1.0, -1.0, 0.75]]))
            self.fc.bias.copy_(torch.tensor([3.0, -3.0]))

    def forward(self, x):
        return self.fc(x * 1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_a_bias_past_int32_keeps_its_sign_and_leaves_the_accumulator_room(target):
    """pt2e clamps and rounds the int32 bias in float32, where INT32_MAX reads as 2^31: the +3 bias became
    -2^31 when cast, so the output came out near -2 instead of +2 (the clamped +3), the .pte and the quantized
    program agreeing on the wrong sign; and a bias at -2^31 overflowed TFLM's int32 accumulator.
    The bias now stops at ``specs.bias_limit``: positive stays positive, and the products fit beside it."""
    result, cal = _compile(BiasBeyondInt32(), [(1, 4)], target)
    for inputs in cal[:3]:
        check_case(result, inputs)
        output = imxrt.runtime.load(result.pte).forward(*inputs)[0]
        assert output[0, 0] > 1.5 and output[0, 1] < -1.5  # the float model gives +-3: clamped, not flipped


class CancellingLinear(nn.Module):
    """A linear layer over [1024 x, 4096 x, x] with weights [w, -w / 4, 1e-6]: the first two parts cancel
    exactly in float, so the output is 1e-6 * sum(x), and its scale (float32's epsilon) is 1.2e7 times finer
    than s_in * s_w."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(24, 4)
        w = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            self.fc.weight.copy_(torch.cat([w, -w / 4, torch.full((4, 8), 1e-6)], 1))
            self.fc.bias.zero_()

    def forward(self, x):
        return self.fc(torch.cat([x * 1024, x * 4096, x], 1))


@pytest.mark.parametrize("target", TARGETS)
def test_a_fully_connected_tflm_cannot_prepare_for_its_bias_scale_runs_on_the_cpu(target):
    """TFLM prepares a per-tensor FULLY_CONNECTED only if its bias scale is s_in * s_w to within 2% of an output
    step; the float32 bias scale is off by up to 6e-8 of it (here 1e-8), too much at an output scale 1.2e7
    times finer (0.11 of a step). Such an FC was delegated, and TFLM refused the partition. It now runs on the
    CPU with TFLM's rule as its reason, and the program matches TFLM and the quantized program."""
    result, cal = _compile(CancellingLinear(), [(1, 8)], target)
    _int8_on_the_cpu(result, "aten.linear.default", target, "prepares only a bias scale within 0.02")
    for inputs in cal[:2]:
        check_case(result, inputs)


class AddmmRowBias(nn.Module):
    def __init__(self, bias_shape):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.randn(6, 7)), nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return torch.addmm(self.bias, x, self.weight)


@pytest.mark.parametrize("target", TARGETS)
def test_addmm_with_a_2d_bias_and_a_mean_over_every_dim(target):
    """addmm with a (1, 7) or (3, 7) bias became a linear layer with a 2-D bias, which the host runtime
    could not bind; mean(x, keepdim=True) over every dim (dim None) raised a TypeError in the CPU lowering."""
    for bias_shape in ((1, 7), (3, 7)):
        result, cal = _compile(AddmmRowBias(bias_shape), [(3, 6)], target)
        for inputs in cal[:2]:
            check_case(result, inputs)
    result, cal = _compile(Elementwise(lambda x: torch.mean(x, None, keepdim=True)), [(2, 4, 6, 8)], target)
    for inputs in cal[:2]:
        check_case(result, inputs)


MATMULS = {  # ExecuTorch's Cortex-M matmul cases (rank 3, rank 4, broadcast batch) and an mm of activations
    "rank 3": ((2, 4, 8), (2, 8, 3)),
    "rank 4": ((2, 2, 4, 8), (2, 2, 8, 3)),
    "broadcast batch": ((1, 4, 8), (3, 8, 5)),
    "rank 2": ((4, 8), (8, 3)),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", MATMULS)
def test_a_product_of_two_activations_is_an_int8_batch_matmul(name, target):
    """matmul / mm of two activations was float on both targets (to_edge decomposes matmul after
    quantization, and mm has only a fully connected kernel): it is one bmm over rank-3 views now."""
    result, cal = _compile(Binary(torch.matmul), MATMULS[name], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    if target == "imxrt700":  # operands quantized at zero point 0: Neutron's BATCH_MATMUL
        assert "BATCH_MATMUL" in {op for tflite in result.partitions for op in litert_ops(tflite)}
    else:
        assert "cortex_m.quantized_batch_matmul.default" in {op["kernel"] for op in result.report["ops"]}
    for inputs in cal[:2]:
        check_case(result, inputs)
