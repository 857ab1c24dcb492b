"""Regression tests of resizes: align_corners bilinear scales.

Each is a defect the conformance suite (benchmarks/conformance.py: ExecuTorch's own NXP and Cortex-M test
models) found, as the smallest model that showed it, on both targets where both apply.
"""

import pytest
import torch
from program_checks import check_case
from regression_helpers import Elementwise
from regression_helpers import compile_seeded as _compile

pytestmark = pytest.mark.slow  # every test here compiles models


@pytest.mark.parametrize("size, out", [((4, 5), (25, 9)), ((3, 3), (5, 9))])
def test_an_align_corners_bilinear_resize_scales_by_its_corner_spacing(size, out):
    """align_corners maps corner pixels onto each other, so its scale is (out - 1) / (in - 1): 4 -> 25 is 8,
    a Neutron scale (ExecuTorch's NXP backend delegates it); out / in rejected it and it ran in float."""
    model = Elementwise(lambda x: F_interpolate(x, size=out, mode="bilinear", align_corners=True))
    result, cal = _compile(model, [(1, 3, *size)], "imxrt700")
    assert [op["placement"] for op in result.report["ops"] if "upsample" in op["op"]] == ["npu"]
    for inputs in cal[:2]:
        check_case(result, inputs)


def F_interpolate(x, **kwargs):
    return torch.nn.functional.interpolate(x, **kwargs)
