"""Regression tests of pools: ceil-mode and dilated windows, and kernels past Neutron's stride bound.

Each is a defect the conformance suite (benchmarks/conformance.py: ExecuTorch's own NXP and Cortex-M test
models) found, as the smallest model that showed it, on both targets where both apply.
"""

import numpy as np
import pytest
import torch
import torch.nn as nn
from program_checks import check_case
from regression_helpers import Elementwise
from regression_helpers import compile_seeded as _compile

import imxrt.runtime
from imxrt.pipeline import CompileOptions, compile

pytestmark = pytest.mark.slow  # every test here compiles models


def _round_half_away(values: torch.Tensor) -> torch.Tensor:
    return torch.sign(values) * torch.floor(values.abs() + 0.5)


POOLS = {  # ExecuTorch's Cortex-M ceil-mode cases, and windows that overhang the padding
    "avg 2x2 ceil": nn.AvgPool2d(2, ceil_mode=True),
    "avg 3x3 s2 pad1 ceil": nn.AvgPool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=False),
    "avg 3x3 s2 pad1 counting ceil": nn.AvgPool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=True),
    "avg 2x3 s2x3 ceil": nn.AvgPool2d((2, 3), (2, 3), ceil_mode=True),
    "max 3x3 s2 pad1 ceil": nn.MaxPool2d(3, 2, padding=1, ceil_mode=True),
    "max 2x2 ceil": nn.MaxPool2d(2, ceil_mode=True),
    "max 3x2 s2x3 ceil": nn.MaxPool2d((3, 2), (2, 3), ceil_mode=True),
    "max 3x3 dilation 2": nn.MaxPool2d(3, 1, dilation=2),
    "max 2x2 s2 dilation 2 pad1 ceil": nn.MaxPool2d(2, 2, padding=1, dilation=2, ceil_mode=True),
}


@pytest.mark.parametrize("name", POOLS)
def test_ceil_mode_and_dilated_pools_take_pytorchs_windows_in_int8(name):
    """Ceil-mode pools were float on the CPU (ExecuTorch's Cortex-M backend lowers them to int8): an average
    pool is the kernel's own ceil mode (it averages the taps inside its input: PyTorch's divisor), a max pool
    pads with -128 and pools in floor mode; a dilated max pool is ExecuTorch's portable kernel on the int8
    values (CMSIS-NN has no dilation). Input and output share qparams, so with int8 I/O each output
    is exactly PyTorch's pool of the int8 values (the mean of the stored bytes rounded half away from zero,
    as CMSIS-NN and TFLM average)."""
    pool = POOLS[name]
    generator = torch.Generator().manual_seed(0)
    cal = [(torch.randn(1, 3, 7, 11, generator=generator),) for _ in range(8)]
    result = compile(pool.eval(), cal[0], "imxrt700-cpu", cal, CompileOptions(show_progress=False, io="int8"))
    assert result.report["summary"]["ops_cpu_float"] == 0
    (given,) = result.report["io"]["inputs"]
    zero_point = given["zero_point"]
    program = imxrt.runtime.load(result.pte)
    rng = np.random.default_rng(1)
    for _ in range(3):
        q = rng.integers(-128, 128, size=(1, 3, 7, 11), dtype=np.int8)
        (got,) = program.forward(q)
        centered = torch.from_numpy(q).double() - zero_point
        expected = _round_half_away(pool(centered) + zero_point)  # padding counts as the zero point
        np.testing.assert_array_equal(got, expected.numpy().astype(np.int8))


@pytest.mark.parametrize("pool", [nn.MaxPool2d(3, 2, padding=1, ceil_mode=True), nn.MaxPool2d(2, ceil_mode=True),
                                  nn.MaxPool2d((3, 2), (2, 3), ceil_mode=True), nn.AvgPool2d(2, ceil_mode=True),
                                  nn.AvgPool2d((2, 3), (2, 3), ceil_mode=True)], ids=str)
def test_a_ceil_mode_pool_runs_on_the_npu(pool):
    """Ceil-mode pools stayed on the CPU on imxrt700 (SqueezeNet's pools): a max pool is a -128 PAD that ends
    where PyTorch's last window does and a VALID MAX_POOL_2D; an average pool whose overhang windows TFLite's
    SAME reproduces (it counts only real inputs, as PyTorch does past the padding) is a SAME AVERAGE_POOL_2D.
    Both bit-exact with TFLM."""
    result, cal = _compile(Elementwise(pool), [(1, 3, 7, 11)], "imxrt700")
    assert [op["placement"] for op in result.report["ops"] if "pool" in op["op"]] == ["npu"]
    for inputs in cal[:2]:
        check_case(result, inputs)


def test_a_max_pool_kernel_wider_than_4096_runs_on_the_npu():
    """Neutron bounds a max pool's stride (4096), not its kernel (ExecuTorch's NXP case test__large_kernel_size
    delegates a 1x5000 window); the kernel bound kept it on the CPU."""
    result, cal = _compile(Elementwise(nn.MaxPool2d((1, 5000), stride=1)), [(1, 4, 1, 5000)], "imxrt700")
    assert [op["placement"] for op in result.report["ops"] if "max_pool" in op["op"]] == ["npu"]
    for inputs in cal[:1]:
        check_case(result, inputs)
