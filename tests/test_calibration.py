"""Calibration in float64: the depthwise convolutions it runs by their taps, the large ones in tiles, the graph
it gives back, and the float32 fallback decided on the first sample."""

import pytest
import torch
import torch.nn as nn
from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

from imxrt.passes import run_aten_passes
from imxrt.passes.recurrent_loops import run_loops
from imxrt.quantization import calibration, rules
from imxrt.quantization.calibration import (
    calibrate,
    conv2d_in_tiles,
    depthwise_conv2d_by_taps,
    narrow,
    widen,
)
from imxrt.quantization.quantizer import ImxrtQuantizer
from imxrt.targets import get_target

# name -> (in channels, channel multiplier, kernel, stride, padding, dilation)
CONVS = {
    "3x3": (8, 1, (3, 3), (1, 1), (1, 1), (1, 1)),
    "3x3_stride_2": (8, 1, (3, 3), (2, 2), (1, 1), (1, 1)),
    "5x1_uneven": (4, 1, (5, 1), (2, 1), (2, 0), (1, 1)),
    "dilated": (4, 1, (3, 3), (1, 1), (2, 2), (2, 2)),
    "multiplier_2": (3, 2, (3, 3), (1, 2), (0, 1), (1, 1)),
}


@pytest.mark.parametrize("case", CONVS, ids=str)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_a_depthwise_convolution_by_taps_is_aten_conv2d_to_float64_rounding(case, bias):
    """Same shape and the same values to float64 rounding (a sum of taps instead of one per-channel matmul):
    rounded to float32, what the observers keep, the results are the same."""
    channels, multiplier, kernel, stride, padding, dilation = CONVS[case]
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, channels, 11, 9, dtype=torch.float64, generator=generator)
    weight = torch.randn(channels * multiplier, 1, *kernel, dtype=torch.float64, generator=generator)
    b = torch.randn(channels * multiplier, dtype=torch.float64, generator=generator) if bias else None
    reference = torch.ops.aten.conv2d.default(x, weight, b, list(stride), list(padding), list(dilation), channels)
    out = depthwise_conv2d_by_taps(x, weight, b, list(stride), list(padding), list(dilation), channels)
    assert out.shape == reference.shape
    torch.testing.assert_close(out, reference, rtol=1e-14, atol=1e-14)
    assert torch.equal(out.float(), reference.float())


def test_a_grouped_convolution_with_several_channels_per_group_runs_aten_conv2d():
    x = torch.randn(1, 4, 6, 6, dtype=torch.float64)
    weight = torch.randn(4, 2, 3, 3, dtype=torch.float64)
    assert torch.equal(depthwise_conv2d_by_taps(x, weight, None, [1, 1], [1, 1], [1, 1], 2),
                       torch.nn.functional.conv2d(x, weight, None, 1, 1, 1, 2))


# name -> (in channels, out channels, kernel, stride, padding, dilation, groups)
LARGE_CONVS = {
    "wide_kernel": (3, 5, (1, 65), (1, 1), (0, 0), (1, 1), 1),
    "tall_kernel": (3, 4, (33, 1), (1, 1), (0, 0), (1, 1), 1),
    "strided_padded": (4, 6, (5, 7), (2, 3), (2, 3), (1, 1), 1),
    "dilated": (4, 4, (3, 5), (1, 1), (1, 0), (3, 4), 1),
    "grouped": (6, 4, (4, 9), (1, 2), (1, 4), (1, 1), 2),
}


@pytest.mark.parametrize("column_bytes", [1 << 12, 1 << 16], ids=["column_tiles", "row_bands"])
@pytest.mark.parametrize("case", LARGE_CONVS, ids=str)
def test_a_convolution_in_tiles_is_aten_conv2d_to_float64_rounding(case, column_bytes, monkeypatch):
    """Tiles of one row's columns (a row alone passes the bound) or bands of rows, over a batch of two: the
    same shape and, rounded to float32, the same values as one call."""
    monkeypatch.setattr(calibration, "COLUMN_BYTES", column_bytes)
    in_channels, out_channels, kernel, stride, padding, dilation, groups = LARGE_CONVS[case]
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(2, in_channels, 45, 130, dtype=torch.float64, generator=generator)
    weight = torch.randn(out_channels, in_channels // groups, *kernel, dtype=torch.float64, generator=generator)
    b = torch.randn(out_channels, dtype=torch.float64, generator=generator)
    reference = torch.ops.aten.conv2d.default(x, weight, b, list(stride), list(padding), list(dilation), groups)
    out = conv2d_in_tiles(x, weight, b, list(stride), list(padding), list(dilation), groups)
    assert out.shape == reference.shape
    torch.testing.assert_close(out, reference, rtol=1e-13, atol=1e-13)
    assert torch.equal(out.float(), reference.float())


class LongKernel(nn.Module):
    """A 1 x 257 kernel over 2,000 samples: 4 x 257 taps by 1,744 positions in each of 3 rows, over a batch of
    two, a float64 column matrix of 86 MB in one aten.conv2d call (transposed: 5 x 257 taps by 6,000 input
    positions, 62 MB a sample)."""

    def __init__(self, transposed: bool = False):
        super().__init__()
        self.conv = (nn.ConvTranspose2d if transposed else nn.Conv2d)(4, 5, (1, 257))

    def forward(self, x):
        return torch.relu(self.conv(x))


@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "transposed_conv"])
def test_calibration_unfolds_no_large_convolution_whole(transposed, monkeypatch):
    """A large convolution's float64 column matrix was allocated whole: a 1 x 4097 kernel over 5,000 samples
    took 9 GB, and two such models at once were killed for memory. Calibrated with a bound of 4 MB, no op
    allocates twice that (86 MB, transposed 123 MB, before), and the ranges are a float32 calibration's, to
    float32 rounding (the convolution in tiles; the transposed one makes the model calibrate in float32)."""
    monkeypatch.setattr(calibration, "COLUMN_BYTES", 1 << 22)
    generator = torch.Generator().manual_seed(2)
    samples = [(torch.randn(2, 4, 3, 2000, generator=generator),) for _ in range(2)]
    model = LongKernel(transposed)
    observed, reference = _prepared(model, samples[0]), _prepared(model, samples[0])
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as profile:
        calibrate(observed, samples, show_progress=False)
    largest = max(event.cpu_memory_usage for event in profile.events())
    assert 0 < largest < 2 * calibration.COLUMN_BYTES
    with torch.no_grad():
        for sample in samples:
            run_loops(reference, *sample)
    expected = _ranges(reference)
    for name, (low, high) in _ranges(observed).items():
        torch.testing.assert_close((low, high), expected[name], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "transposed_conv"])
def test_the_float64_trial_run_unfolds_no_large_convolution_whole(transposed, monkeypatch):
    """The recipe's widen tries the model in float64 on zeros first: its copy runs the large convolution in
    tiles too (86 MB in one allocation before), and a large transposed one leaves the model in float32."""
    monkeypatch.setattr(calibration, "COLUMN_BYTES", 1 << 22)
    observed = _prepared(LongKernel(transposed), (torch.randn(2, 4, 3, 2000),))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as profile:
        widen(observed)
    assert (calibration._WIDENED in observed.meta) is not transposed
    largest = max(event.cpu_memory_usage for event in profile.events())
    assert 0 < largest < 2 * calibration.COLUMN_BYTES


class DepthwiseSeparable(nn.Module):
    def __init__(self):
        super().__init__()
        self.depthwise = nn.Conv2d(4, 4, 3, padding=1, groups=4)
        self.pointwise = nn.Conv2d(4, 6, 1)

    def forward(self, x):
        return self.pointwise(torch.relu(self.depthwise(x)))


def _prepared(model: nn.Module, inputs: tuple) -> torch.fx.GraphModule:
    target = get_target("imxrt700")
    exported = torch.export.export(model.eval(), inputs, strict=False)
    graph_module = run_aten_passes(exported.module(check_guards=False), npu=True,
                                   qparam_flow=rules.qparam_flow(rules.devices_of(target)), rolled=True)
    return prepare_pt2e(graph_module, ImxrtQuantizer(target))


def _ranges(observed: torch.fx.GraphModule) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    return {name: (module.min_val, module.max_val) for name, module in observed.named_modules()
            if isinstance(getattr(module, "min_val", None), torch.Tensor)}


def test_widened_depthwise_convolutions_run_by_taps_and_narrow_gives_the_graph_back():
    inputs = (torch.randn(1, 4, 8, 8),)
    observed = _prepared(DepthwiseSeparable(), inputs)
    code = observed.code
    widen(observed)
    assert [n.name for n in observed.graph.nodes if n.target is calibration.widened_conv2d] == ["conv2d", "conv2d_1"]
    assert all(p.dtype == torch.float64 for p in observed.parameters())
    with torch.no_grad():
        observed(*inputs)
    narrow(observed)
    assert observed.code == code
    assert all(p.dtype == torch.float32 for p in observed.parameters())
    assert all(low.dtype == torch.float32 and bool((low < high).all()) for low, high in _ranges(observed).values())


class MixesAFloat32Constant(nn.Module):
    """A sum, then a product with a tensor made in float32 whatever the model's dtype: widened, the matmul
    mixes float64 with float32 and raises, after the sum's observer has seen the first sample."""

    def forward(self, x):
        total = x.sum(dim=-1, keepdim=True)
        return torch.mm(total, torch.ones_like(x, dtype=torch.float32))


def test_a_model_that_cannot_run_in_float64_calibrates_in_float32_as_if_never_widened():
    """The first sample is the float64 trial: when it fails, the observers it reached are put back before the
    float32 run, so every range is the one a float32-only calibration gives (the sum over 256 values rounds
    differently in float64 for this sample: kept, it would move the range the sum shares)."""
    generator = torch.Generator().manual_seed(5)  # a first sample whose sum rounds differently in float64
    samples = [(torch.randn(1, 256, generator=generator),) for _ in range(3)]
    observed, reference = _prepared(MixesAFloat32Constant(), samples[0]), _prepared(MixesAFloat32Constant(),
                                                                                     samples[0])
    assert calibrate(observed, samples, show_progress=False) == 3
    with torch.no_grad():
        for sample in samples:
            run_loops(reference, *sample)
    expected = _ranges(reference)
    assert len(expected) >= 3
    for name, (low, high) in _ranges(observed).items():
        assert low.dtype == torch.float32
        assert (low.item(), high.item()) == (expected[name][0].item(), expected[name][1].item()), name
