"""Activation ranges by least int8 error over the calibration histogram (``activation_ranges="mse"``)."""

import pytest
import torch
import torch.nn as nn
from program_checks import check_case

from imxrt.errors import BadOption
from imxrt.pipeline import CompileOptions, compile
from imxrt.quantization.ranges import ClippedRangeObserver


def _observer() -> ClippedRangeObserver:
    return ClippedRangeObserver(dtype=torch.int8, quant_min=-128, quant_max=127, qscheme=torch.per_tensor_affine)


def _int8_error(x: torch.Tensor, low: float, high: float) -> float:
    """Mean squared error of x rounded to int8 over [low, high] (affine, as the program computes it)."""
    scale = (high - low) / 255
    zero_point = round(-128 - low / scale)
    q = (x / scale).round().add(zero_point).clamp(-128, 127)
    return float(((q - zero_point) * scale - x).double().pow(2).mean())


@pytest.mark.parametrize("kind", ["normal", "laplace", "relu", "lognormal"])
def test_the_range_found_is_as_good_as_the_best_clip_on_a_fine_grid(kind):
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(200_000, generator=generator)
    x = {"normal": x, "laplace": torch.sign(x) * torch.empty_like(x).exponential_(generator=generator),
         "relu": torch.relu(x), "lognormal": x.exp()}[kind]
    observer = _observer()
    for part in x.split(25_000):  # as calibration feeds it: the range widens and the counts move
        observer(part)
    low, high = observer.clipped_range()
    assert min(float(x.min()), 0.0) <= low <= 0 <= high <= float(x.max())
    grid = [(min(float(x.min()) * f, 0.0), float(x.max()) * f) for f in torch.linspace(0.05, 1, 200).tolist()]
    best = min(_int8_error(x, *ends) for ends in grid)
    assert _int8_error(x, low, high) <= 1.03 * best
    assert _int8_error(x, low, high) <= _int8_error(x, min(float(x.min()), 0.0), float(x.max()))


def test_a_long_tail_is_clipped_and_a_uniform_range_is_not():
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(200_000, generator=generator)
    x = torch.sign(x) * torch.empty_like(x).exponential_(generator=generator)  # Laplace: a long thin tail
    observer = _observer()
    observer(x)
    low, high = observer.clipped_range()
    assert high < 0.95 * float(x.max()) and low > 0.95 * float(x.min())
    assert _int8_error(x, low, high) < 0.9 * _int8_error(x, float(x.min()), float(x.max()))
    uniform = _observer()
    uniform(torch.rand(100_000, generator=generator))
    assert uniform.clipped_range()[1] > 0.99
    scale, _ = observer.calculate_qparams()
    assert float(scale) == pytest.approx((high - low) / 255, rel=1e-5)


def test_a_range_set_after_calibration_is_kept():
    """settle_zero_ranges gives a tensor seen only as 0 its input's range: the histogram no longer applies."""
    observer = _observer()
    observer(torch.zeros(16))
    observer.min_val, observer.max_val = torch.tensor(-2.0), torch.tensor(3.0)
    assert observer.clipped_range() == (-2.0, 3.0)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["imxrt700", "imxrt700-cpu"])
def test_a_program_calibrated_by_histogram_is_exact_to_tflm(target):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3)).eval()
    generator = torch.Generator().manual_seed(3)
    calibration = [(torch.randn(1, 3, 8, 8, generator=generator) * (1 + 4 * (i == 0)),) for i in range(6)]
    options = CompileOptions(show_progress=False, activation_ranges="mse")
    result = compile(model, calibration[1], target, calibration, options)
    minmax = compile(model, calibration[1], target, calibration, CompileOptions(show_progress=False))
    assert result.pte != minmax.pte  # the loud first sample no longer sets the input's range
    check_case(result, calibration[2])


def test_an_unknown_range_method_is_refused():
    with pytest.raises(BadOption, match="--activation-ranges"):
        compile(nn.Linear(2, 2), (torch.randn(1, 2),), "imxrt700", None,
                CompileOptions(show_progress=False, activation_ranges="percentile"))
