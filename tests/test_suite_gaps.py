"""Cases of ExecuTorch's backend test suite (``backends/test/suite/operators``) that once had no kernel to run on:
adaptive max pools and 3-D pools (2-D pools over views, ``passes.convert_pools_to_2d``), ops returning several
tensors (``torch.return_types``), and ``median``. Each compiles on both targets to int8 kernels that match TFLM
and the quantized program, or is refused by name with what would make it compile."""

from __future__ import annotations

import re

import pytest
import torch
from program_checks import check_case
from torch import nn

import imxrt.errors
from imxrt.pipeline import CompileOptions, compile

pytestmark = pytest.mark.slow  # compiles

TARGETS = ("imxrt700", "imxrt700-cpu")
# CMSIS-NN's pools, the -128 / zero-point pad in front of a ceil-mode or counted padding, and the portable max
# pool a dilated window stays on (on the int8 values)
_POOL_KERNELS = {"cortex_m.quantized_max_pool2d.default", "cortex_m.quantized_avg_pool2d.default",
                 "cortex_m.pad.default", "aten.max_pool2d_with_indices.default (portable kernel on int8 values)"}


def _calibration(shape: tuple[int, ...]) -> list[tuple[torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [(torch.randn(shape, generator=generator),) for _ in range(3)]


def _compile(model: nn.Module, shape: tuple[int, ...], target: str):
    cal = _calibration(shape)
    return compile(model.eval(), cal[0], target, cal, CompileOptions(show_progress=False)), cal


def _assert_int8_pools(result, target: str) -> None:
    """Nothing runs in float; every pool on the CPU is a CMSIS-NN pool (or the portable max pool of a dilated
    window), on imxrt700 those the NPU's rules refuse (a pool of window 1 is only its views)."""
    ops = result.report["ops"]
    assert not [op["op"] for op in ops if op["execution"] == "cpu float"]
    pools = [op for op in ops if "pool" in op["op"]]
    cpu_kernels = {op["kernel"] for op in pools if op["execution"] == "cpu int8"}
    assert cpu_kernels <= _POOL_KERNELS
    if target == "imxrt700" and pools and not cpu_kernels:
        assert all(op["execution"] == "npu" for op in pools)


# (model, input shape) of the suite's adaptive max pool and 3-D pool cases (float32; every output size divides)
ADAPTIVE_MAX_POOLS = [
    *((nn.AdaptiveMaxPool1d(size), (1, 8, 100)) for size in (5, 1, 10, 50)),
    *((nn.AdaptiveMaxPool1d(5), shape) for shape in ((2, 8, 100), (1, 4, 100), (1, 8, 50), (1, 8, 200))),
    *((nn.AdaptiveMaxPool2d(size), (1, 8, 20, 20)) for size in ((5, 5), 1, (10, 10), (5, 10))),
    *((nn.AdaptiveMaxPool2d((5, 5)), shape) for shape in ((2, 8, 20, 20), (1, 8, 10, 10), (1, 8, 30, 30),
                                                          (1, 8, 15, 25))),
    (nn.AdaptiveMaxPool2d(5), (8, 20, 20)), (nn.AdaptiveMaxPool1d(5), (8, 100)),  # unbatched
]

POOLS_3D = [
    *((nn.MaxPool3d(**kw), (1, 4, 8, 8, 8)) for kw in (
        {"kernel_size": 3}, {"kernel_size": 1}, {"kernel_size": (1, 2, 2)}, {"kernel_size": 3, "stride": 2},
        {"kernel_size": 3, "stride": (1, 2, 2)}, {"kernel_size": 3, "padding": 1},
        {"kernel_size": 3, "padding": (0, 1, 1)}, {"kernel_size": 3, "dilation": 2},
        {"kernel_size": 3, "dilation": (1, 2, 2)}, {"kernel_size": 3, "ceil_mode": True},
        {"kernel_size": 3, "stride": 2, "padding": 1}, {"kernel_size": 2, "stride": 2, "padding": 1})),
    (nn.MaxPool3d(3), (2, 4, 8, 8, 8)),
    (nn.MaxPool3d(3, stride=2, padding=1, ceil_mode=True), (1, 4, 10, 10, 10)),
    (nn.MaxPool3d((2, 2, 2), stride=(1, 2, 2), padding=(0, 1, 1), dilation=2), (1, 4, 8, 10, 10)),
    *((nn.AvgPool3d(**kw), (1, 4, 8, 8, 8)) for kw in (
        {"kernel_size": 3}, {"kernel_size": 1}, {"kernel_size": (1, 2, 2)}, {"kernel_size": 3, "stride": 2},
        {"kernel_size": 3, "stride": (1, 2, 2)}, {"kernel_size": 3, "padding": 1},
        {"kernel_size": 3, "padding": (0, 1, 1)}, {"kernel_size": 3, "ceil_mode": True},
        {"kernel_size": 3, "padding": 1, "count_include_pad": False},
        {"kernel_size": 2, "stride": 2, "padding": 1})),
    (nn.AvgPool3d(3), (2, 4, 8, 8, 8)),
    (nn.AvgPool3d(3, stride=2, padding=1, ceil_mode=True), (1, 4, 10, 10, 10)),
    (nn.AvgPool3d((2, 2, 2), stride=(1, 2, 2), padding=(0, 1, 1), count_include_pad=False), (1, 4, 8, 10, 10)),
    *((nn.AdaptiveAvgPool3d(size), (1, 4, 8, 8, 8)) for size in ((4, 4, 4), 1, (1, 1, 1))),
    *((nn.AdaptiveAvgPool3d((4, 4, 4)), shape) for shape in ((2, 4, 8, 8, 8), (1, 4, 4, 4, 4))),
    *((nn.AdaptiveMaxPool3d(size), (1, 4, 8, 8, 8)) for size in ((4, 4, 4), 1, (2, 4, 8))),
    (nn.AdaptiveMaxPool3d((4, 4, 4)), (2, 4, 8, 8, 8)),
    (nn.MaxPool3d(2), (4, 8, 8, 8)), (nn.AvgPool3d(2), (4, 8, 8, 8)),  # unbatched
]


def _case_id(case) -> str:
    model, shape = case
    return f"{model}-{'x'.join(map(str, shape))}".replace(" ", "")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", ADAPTIVE_MAX_POOLS + POOLS_3D, ids=_case_id)
def test_adaptive_max_and_3d_pools_run_as_int8_2d_pools(case, target):
    model, shape = case
    result, cal = _compile(model, shape, target)
    _assert_int8_pools(result, target)
    check_case(result, cal[1], model)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("size", "shape"), [((6, 6, 6), (1, 4, 8, 8, 8)), ((2, 4, 6), (1, 4, 8, 8, 8)),
                                             ((4, 4, 4), (1, 4, 6, 6, 6)), ((4, 4, 4), (1, 4, 7, 9, 11))])
def test_an_adaptive_3d_average_pool_of_uneven_windows_runs_the_portable_2d_pool(size, shape, target):
    """The suite's adaptive 3-D average pools whose output size does not divide the input: each stage whose
    windows do not divide runs ExecuTorch's portable adaptive 2-D average pool (in float), the rest in int8."""
    model = nn.AdaptiveAvgPool3d(size)
    result, cal = _compile(model, shape, target)
    pools = [op for op in result.report["ops"] if "pool" in op["op"]]
    assert [op["op"] for op in pools] == ["aten._adaptive_avg_pool2d.default"] * 2
    check_case(result, cal[1], model)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("model", "shape"), [(nn.AdaptiveMaxPool2d((5, 5), return_indices=True), (1, 8, 20, 20)),
                                              (nn.AdaptiveMaxPool1d(5, return_indices=True), (1, 8, 100))],
                         ids=["2d", "1d"])
def test_an_adaptive_max_pool_returning_indices_gives_the_max_pools_indices(model, shape, target):
    """The suite's ``return_indices=True`` cases: the values and the int64 indices are the program's outputs,
    equal to the quantized program's (the first maximum of each window, as PyTorch's adaptive pool picks)."""
    result, cal = _compile(model, shape, target)
    assert [o["dtype"] for o in result.io["outputs"]] == ["float32", "int64"]
    check_case(result, cal[1], model)


@pytest.mark.parametrize(("model", "shape", "message"), [
    (nn.AdaptiveMaxPool2d((6, 6)), (1, 8, 20, 20),
     "adaptive_max_pool2d from 20x20 to 6x6: no kernel of the stock runtime (NPU, CMSIS-NN or portable) pools "
     "adaptive windows; an output size that divides the input (5x5 or 10x10) is a max pool with fixed windows "
     "and compiles"),
    (nn.AdaptiveMaxPool1d(7), (1, 8, 100),
     "adaptive_max_pool1d from 100 to 7: no kernel of the stock runtime (NPU, CMSIS-NN or portable) pools "
     "adaptive windows; an output size that divides the input (5 or 10) is a max pool with fixed windows and "
     "compiles"),
    (nn.AdaptiveMaxPool3d((6, 6, 6)), (1, 4, 8, 8, 8),
     "adaptive_max_pool3d from 8x8x8 to 6x6x6: no kernel of the stock runtime (NPU, CMSIS-NN or portable) pools "
     "adaptive windows; an output size that divides the input (4x4x4 or 8x8x8) is a max pool with fixed windows "
     "and compiles"),
    (nn.MaxPool3d(3, stride=2, padding=1, return_indices=True), (1, 4, 8, 8, 8),
     "max_pool3d with return_indices=True: no kernel of the stock runtime has a 3-D max pool, and its indices "
     "do not follow from the 2-D pools it splits into; return the values only (return_indices=False) and it "
     "compiles"),
    (nn.AvgPool3d(2, divisor_override=3), (1, 4, 8, 8, 8),
     "avg_pool3d with divisor_override=3: no kernel of the stock runtime has a 3-D pool, and with a divisor of "
     "its own it does not split into 2-D average pools; leave divisor_override unset (or scale the result) and "
     "it compiles"),
])
def test_pools_without_a_kernel_are_refused_by_name(model, shape, message):
    with pytest.raises(imxrt.errors.BadModel, match=r"node \w+: " + re.escape(message)):
        _compile(model, shape, "imxrt700-cpu")


class _Reduction(nn.Module):
    """``torch.<name>(x, ...)`` returning its ``torch.return_types`` pair (values, indices) or a tensor."""

    def __init__(self, name: str, *args, **kwargs):
        super().__init__()
        self.name, self.args, self.kwargs = name, args, kwargs

    def forward(self, x):
        return getattr(torch, self.name)(x, *self.args, **self.kwargs)


class _ValuesOnly(_Reduction):
    def forward(self, x):
        return super().forward(x)[0]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("model", "shape"), [
    (_Reduction("max", dim=1), (2, 3, 4, 5)), (_Reduction("min", dim=-1, keepdim=True), (3, 4, 5)),
    (_Reduction("topk", 3, dim=1), (2, 8)),
], ids=["max", "min", "topk"])
def test_values_and_indices_pairs_are_the_programs_outputs(model, shape, target):
    """A ``torch.return_types`` result is the program's outputs in order: the values, then the int64 indices."""
    result, cal = _compile(model, shape, target)
    assert [o["dtype"] for o in result.io["outputs"]] == ["float32", "int64"]
    check_case(result, cal[1], model)


# the suite's median cases (values only: ``test_median.py``'s MedianValueOnlyModel)
MEDIANS = [
    (_Reduction("median"), (10, 10)), (_Reduction("median"), (20,)), (_Reduction("median"), (2, 2, 3, 4, 5)),
    (_Reduction("median"), (1,)),
    *((_ValuesOnly("median", dim=d), shape) for d, shape in (
        (0, (5, 10)), (1, (5, 10)), (0, (3, 4, 5)), (2, (3, 4, 5)), (1, (2, 3, 4, 5)), (-1, (3, 4, 5)),
        (-2, (3, 4, 5)), (0, (1,)))),
    *((_ValuesOnly("median", dim=d, keepdim=True), shape) for d, shape in ((1, (3, 4, 5)), (2, (2, 3, 4, 5)))),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("model", "shape"), MEDIANS, ids=[f"median{i}" for i in range(len(MEDIANS))])
def test_a_median_is_the_last_of_the_k_smallest_values(model, shape, target):
    result, cal = _compile(model, shape, target)
    assert "aten.topk.default" in {op["op"] for op in result.report["ops"]}
    check_case(result, cal[1], model)


def test_a_median_whose_indices_are_read_is_refused_by_name():
    with pytest.raises(imxrt.errors.BadModel, match=re.escape(
            "node median: median with its indices: no kernel of the stock runtime (NPU, CMSIS-NN or portable) "
            "computes a median, and the topk that gives its values picks another index among equal values; use "
            "the values only (torch.median(x, dim).values) and it compiles")):
        _compile(_Reduction("median", dim=1), (3, 4, 5), "imxrt700-cpu")


def test_sort_is_refused_by_name_with_the_topk_to_write_instead():
    with pytest.raises(imxrt.errors.BadModel, match=re.escape(
            "node sort: sort has no kernel in the stock runtime (neither the NPU, CMSIS-NN nor ExecuTorch's "
            "portable kernels); torch.topk has a portable kernel and gives the same values: write "
            "torch.topk(x, 8, dim=1, largest=True)")):
        _compile(_Reduction("sort", dim=1, descending=True), (2, 8), "imxrt700-cpu")
