"""Regression tests of pads: constant pads after a global pool, reflection and replication pads.

Each is a defect the conformance suite (benchmarks/conformance.py: ExecuTorch's own NXP and Cortex-M test
models) found, as the smallest model that showed it, on both targets where both apply.
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from program_checks import check_case
from regression_helpers import TARGETS, Elementwise
from regression_helpers import compile_seeded as _compile

pytestmark = pytest.mark.slow  # every test here compiles models


class PadAfterGlobalPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 4, 3)

    def forward(self, x):
        pooled = F.pad(x.mean((2, 3), keepdim=True), [2, 2, 2, 2])
        return pooled, self.conv(pooled)


@pytest.mark.parametrize("target", TARGETS)
def test_a_pad_after_a_global_pool_pads_height_and_width(target):
    """A channels_last [1, 8, 1, 1] tensor is contiguous to torch as well: the cortex_m pad's shape function
    and the host runtime read it as NCHW and padded channels and height ([1, 12, 5, 1], or an internal error
    when a conv read it), while the board's kernel takes the dim order [0, 2, 3, 1] the program records."""
    result, cal = _compile(PadAfterGlobalPool(), [(1, 8, 4, 4)], target)
    for inputs in cal[:2]:
        check_case(result, inputs)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("pads, shape", [((1, 2), (2, 3, 6)), ((1, 1, 2, 0), (1, 3, 5, 6)),
                                         ((1, 1, 1, 1, 1, 1), (1, 2, 3, 4, 5))])
@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_reflection_and_replication_pads_are_int8_data_movement(mode, pads, shape, target):
    """A reflect pad was float on imxrt700-cpu (6 of ExecuTorch's NXP cases its Cortex-M backend lowers to
    int8), and a 3-D one was decomposed into index arithmetic: every reflect / replicate pad is its core op
    on ExecuTorch's portable kernel, on the int8 values."""
    model = Elementwise(lambda x: torch.nn.functional.pad(x, pads, mode))
    result, cal = _compile(model, [shape], target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:2]:
        check_case(result, inputs)
