"""Regression tests of reductions: mean, sum, amax and amin, their layouts and their placement.

Each is a defect the conformance suite (benchmarks/conformance.py: ExecuTorch's own NXP and Cortex-M test
models) found, as the smallest model that showed it, on both targets where both apply.
"""

import pytest
import torch
import torch.nn as nn
from program_checks import check_case
from regression_helpers import TARGETS, Elementwise
from regression_helpers import compile_seeded as _compile

pytestmark = pytest.mark.slow  # every test here compiles models


class MeanWithDtype(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 1)

    def forward(self, x):
        return self.conv(x).mean([2, 3], dtype=torch.float32)


class PlusBufferStatistic(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 1)
        self.register_buffer("stats", torch.randn(4, 8, generator=torch.Generator().manual_seed(1)))

    def forward(self, x):
        return torch.relu(self.conv(x)).mean([2, 3]) + self.stats.mean([0])


def test_a_node_the_litert_lowering_refuses_stays_on_the_cpu_with_the_reason(monkeypatch):
    """Both failed the whole compile ("LiteRT lowering: ..."): the capability table accepted a node the
    lowering then refused (the buffer statistic is now folded as the constant it is; a dtype equal to the
    reduction's own is no conversion: all on the NPU). Any node the lowering still refuses is left on the
    CPU with its reason: here MEAN is made to refuse."""
    from imxrt.npu.litert import converters
    from imxrt.npu.litert.errors import UnsupportedForLiteRT

    torch.manual_seed(0)
    result, cal = _compile(MeanWithDtype(), [(1, 3, 6, 6)], "imxrt700")
    assert result.report["summary"]["partitions"] == 1 and result.report["summary"]["ops_cpu_float"] == 0
    assert all(op["placement"] == "npu" for op in result.report["ops"] if "quantize" not in op["op"])
    check_case(result, cal[0])
    result, cal = _compile(PlusBufferStatistic(), [(1, 3, 6, 6)], "imxrt700")
    for inputs in cal[:2]:
        check_case(result, inputs)

    def refuse(ctx, node):
        raise UnsupportedForLiteRT(node, "refused for this test")

    (mean_op,) = [op for op in converters.CONVERTERS if getattr(op, "__name__", "") == "aten.mean.dim"]
    monkeypatch.setitem(converters.CONVERTERS, mean_op, refuse)
    result, cal = _compile(PlusBufferStatistic(), [(1, 3, 6, 6)], "imxrt700")
    means = [op for op in result.report["ops"] if op["op"] == "aten.mean.dim"]
    assert means and all(op["placement"] == "cpu" and "the LiteRT lowering refused it: refused for this test"
                         in op["reason"] for op in means)
    assert result.report["summary"]["partitions"] >= 1
    for inputs in cal[:2]:
        check_case(result, inputs)


REDUCTIONS_TO_RANK_4 = {
    "amax_5d_dim0": (lambda x: torch.amax(x, 0), (2, 3, 4, 5, 6)),
    "amin_6d": (lambda x: torch.amin(x, (1, -1)), (1, 2, 3, 4, 5, 6)),
    "mean_5d_dim0": (lambda x: torch.mean(x, 0), (2, 3, 4, 5, 6)),
    "sum_6d": (lambda x: torch.sum(x, (1, -1)), (1, 2, 3, 4, 5, 6)),
}


@pytest.mark.parametrize("case", sorted(REDUCTIONS_TO_RANK_4))
def test_a_reduction_to_a_rank_4_result_lands_in_nhwc(case):
    """ExecuTorch's TestKeepDimFalseFormatHandling cases: a 5-D or 6-D reduction without keepdim left its
    result in the input's dim order, where the rank-4 result is stored NHWC; TFLM agreed with the
    partition (it was self-consistent) and the .pte was 30-167 LSB off the quantized program."""
    function, shape = REDUCTIONS_TO_RANK_4[case]
    result, cal = _compile(Elementwise(lambda x: F_max_pool_identity(function(x))), [shape], "imxrt700")
    assert result.report["summary"]["partitions"] == 1
    for inputs in cal[:2]:
        check_case(result, inputs)


def F_max_pool_identity(x):
    """A 1x1 max pool: keeps the result rank-4 and on the NPU, as the upstream models do."""
    return torch.nn.functional.max_pool2d(x, 1)


@pytest.mark.parametrize("target", TARGETS)
def test_amax_and_amin_pick_int8_values_on_the_cpu(target):
    """amax / amin were float on imxrt700-cpu (32 of ExecuTorch's NXP cases that its Cortex-M backend
    lowers to int8): they pick values, so input and output share qparams and ExecuTorch's portable
    kernels run them on the int8 bytes."""
    model = Elementwise(lambda x: (torch.amax(x, -1), torch.amin(x, (1, 2), keepdim=True)))
    result, cal = _compile(model, [(2, 3, 4, 5)], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:2]:
        check_case(result, inputs)


def test_a_sum_over_every_dim_is_int8_on_the_npu():
    """x.sum() (aten.sum.default, ExecuTorch's default-parameter SUM cases) had no rule and ran in float; it
    quantizes like the sum over dims it becomes."""
    result, cal = _compile(Elementwise(lambda x: x.sum()), [(2, 3, 4)], "imxrt700")
    assert result.report["summary"]["ops_cpu_float"] == 0
    assert [op["placement"] for op in result.report["ops"] if "sum" in op["op"]] == ["npu"]
    for inputs in cal[:2]:
        check_case(result, inputs)
