"""The ranked per-layer SQNR: the layer that loses the most itself comes first, with the remedy its figures
point to, even where the lowest cumulative SQNR is a later layer's."""

from __future__ import annotations

import pytest
import torch
from sensor_front_end import Detector, signals
from torch import nn

import imxrt.runtime
from imxrt.accuracy import evaluate
from imxrt.pipeline import CompileOptions, compile
from imxrt.report.advice import FEW_LEVELS, WORTH_FIXING_DB, layer_advice

FEATURES = 16


class ThreeLayers(nn.Module):
    """a (no activation: its range is its calibration's), b with ReLU6 (its range bounded by the clamp), c."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(FEATURES, FEATURES), nn.Linear(FEATURES, FEATURES), nn.Linear(FEATURES, 4)
        self.relu6 = nn.ReLU6()

    def forward(self, x):
        return self.c(self.relu6(self.b(self.a(x))))


def _samples(count: int, seed: int) -> list[tuple[torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(1, FEATURES, generator=generator),) for _ in range(count)]


def _evaluated(model: nn.Module, calibration: list) -> dict:
    result = compile(model, calibration[0], "imxrt700", calibration, CompileOptions(show_progress=False))
    data = [(inputs, 0) for inputs in _samples(48, seed=2)]
    report = evaluate(model, imxrt.runtime.load(result.pte), data, calibration[0], quantized=result.quantized,
                      show_progress=False)
    return report.as_dict() | {"advice": report.advice, "lines": report.lines()}


def test_a_range_stretched_by_one_outlier_sample_ranks_first_with_a_clipped_range():
    """One calibration sample 100x the others stretches a's range 100x: its int8 step is far coarser than the
    evaluated values need. b's clamp bounds its own range, so only a loses much itself."""
    torch.manual_seed(0)
    calibration = _samples(32, seed=1) + [(100 * _samples(1, seed=3)[0][0],)]
    accuracy = _evaluated(ThreeLayers().eval(), calibration)
    worst = accuracy["layers"][0]
    assert worst["path"] == "a" and worst["op"] == "linear", accuracy["layers"]
    assert worst["own_sqnr_db"] < WORTH_FIXING_DB and worst["own_sqnr_db"] < accuracy["layers"][1]["own_sqnr_db"] - 10
    assert max(abs(v) for v in worst["range"]) > 4 * worst["p9999"] and worst["saturated"] == 0
    (item,) = [item for item in accuracy["advice"] if item["cause"] != "model_input_rounding"]  # a reads x too
    assert item["layer"] == "a" and item["cause"] == "outlier_range"
    assert "--activation-ranges mse" in item["change"] and f"{worst['p9999']:.4g}" in item["why"]
    assert any(line.lstrip().startswith("a ") for line in accuracy["lines"])  # the ranked table


def test_weights_one_channel_stretches_rank_first_with_bias_correction():
    """a's per-tensor weights with one output channel 50x the others: the others keep a few int8 levels. c
    reads b, and b ignores a's wide channel, so nothing downstream inherits its range."""
    torch.manual_seed(0)
    model = ThreeLayers().eval()
    with torch.no_grad():
        model.a.weight[0] *= 50
        model.b.weight[:, 0] = 0
    accuracy = _evaluated(model, _samples(32, seed=1))
    worst = accuracy["layers"][0]
    assert worst["path"] == "a", accuracy["layers"]
    assert worst["weight_sqnr_db"] < worst["output_sqnr_db"] - 3 and worst["weight_levels"] < 10
    (item,) = accuracy["advice"]
    assert item["cause"] == "weight_rounding" and "--bias-correction" in item["change"] and "a" in item["title"]


def test_a_layer_losing_little_gets_no_remedy():
    row = {"path": "fc", "op": "linear", "sqnr_db": 41.0, "own_sqnr_db": WORTH_FIXING_DB + 1, "output_sqnr_db": 45.0,
           "weight_sqnr_db": 40.0, "scale": 0.1, "range": [-12.8, 12.7], "p9999": 10.0, "saturated": 0.0,
           "weight_levels": 127}
    assert layer_advice({"layers": [row]}) == []
    assert layer_advice({"layers": [row | {"own_sqnr_db": 20.0, "weight_sqnr_db": 20.5, "output_sqnr_db": 21.0}
                                    ]})[0]["cause"] == "int8_rounding"  # neither rounding dominates: QAT
    saturating = row | {"own_sqnr_db": 20.0, "weight_sqnr_db": 40.0, "output_sqnr_db": 20.0, "saturated": 0.01}
    assert layer_advice({"layers": [saturating]})[0]["cause"] == "saturation"


class ActivatedOutside(nn.Module):
    """Convolutions whose ReLU is applied by the parent's forward, ``F.relu(conv(x))`` (ExecuTorch's Silero VAD
    example's encoder): the ReLU fuses into each conv's rounding, outside the conv's module."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv1d(4, 8, 3, padding=1), nn.Conv1d(8, 8, 3, padding=1)])
        self.head = nn.Conv1d(8, 2, 1)

    def forward(self, x):
        for conv in self.convs:
            x = nn.functional.relu(conv(x))
        return self.head(x)


def test_a_layer_activated_outside_its_module_is_ranked():
    """Its rounded value left no module (the ReLU is the parent's), so the ranking had skipped it. It is the
    conv's layer, compared with nothing cumulative: the conv module's float output is before the ReLU."""
    torch.manual_seed(0)
    calibration = [(torch.randn(1, 4, 32),) for _ in range(16)]
    model = ActivatedOutside().eval()
    result = compile(model, calibration[0], "imxrt700", calibration, CompileOptions(show_progress=False))
    data = [(inputs, 0) for inputs in calibration[:8]]
    report = evaluate(model, imxrt.runtime.load(result.pte), data, calibration[0], quantized=result.quantized,
                      metric=lambda output, label: 0.0, show_progress=False)
    rows = {row.path: row for row in report.layers}
    assert {"convs.0", "convs.1", "head"} <= rows.keys(), rows.keys()
    assert rows["convs.0"].op == "conv2d" and rows["convs.0"].range[0] == 0  # the ReLU's range
    assert rows["convs.0"].sqnr_db is None and rows["head"].sqnr_db is not None


def test_a_layer_an_int8_model_input_starves_is_advised_to_stay_float():
    """Detail of ±0.01 on an offset of up to ±0.9: the input's int8 rounding keeps most of its energy (the
    offset), but the front end rejects the offset, and its output is mostly that rounding."""
    samples = signals(16, 1)
    model = Detector().eval()
    result = compile(model, samples[0], "imxrt700", samples, CompileOptions(show_progress=False))
    report = evaluate(model, imxrt.runtime.load(result.pte), [(inputs, 0) for inputs in samples], samples[0],
                      quantized=result.quantized, metric=lambda output, label: 0.0, show_progress=False)
    front = next(row for row in report.layers if row.path == "front")
    assert front.reads_model_input and front.input_rounding_db > front.input_sqnr_db + 10
    (item,) = [item for item in report.advice if item["cause"] == "model_input_rounding"]
    assert item["layer"] == "front" and "--float-layer front" in item["change"]
    encoder = next(row for row in report.layers if row.path == "encoder")
    assert not encoder.reads_model_input


class Spread(nn.Module):
    """A conv whose output channels differ 100x in gain, through a ReLU into a conv that weighs them alike."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv1d(4, 16, 3, padding=1)
        self.b = nn.Conv1d(16, 4, 1)
        with torch.no_grad():
            self.a.weight[:4] *= 100
            self.a.bias[:4] *= 100

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


@pytest.mark.parametrize("equalization", [False, True])
def test_a_conv_with_far_apart_channels_is_advised_to_equalize_and_equalized_is_not(equalization):
    """A quarter of a's channels set its scale; the rest span a few int8 steps. The advice names --equalize;
    compiled with it, a's channels span comparable ranges and the advice is gone."""
    torch.manual_seed(0)
    samples = [(torch.randn(1, 4, 32),) for _ in range(16)]
    model = Spread().eval()
    result = compile(model, samples[0], "imxrt700", samples,
                     CompileOptions(show_progress=False, equalization=equalization))
    report = evaluate(model, imxrt.runtime.load(result.pte), [(inputs, 0) for inputs in samples], samples[0],
                      quantized=result.quantized, metric=lambda output, label: 0.0, show_progress=False)
    a = next(row for row in report.layers if row.path == "a")
    spread = [item for item in report.advice if item["cause"] == "channel_spread"]
    if equalization:
        assert a.channel_levels > FEW_LEVELS and not spread
    else:
        assert a.channel_levels < FEW_LEVELS and a.channel_spread > 10
        (item,) = spread
        assert item["layer"] == "a" and "--equalize" in item["change"]


def test_the_advice_leaves_a_conv_whose_channels_span_enough_steps():
    row = {"path": "conv", "op": "conv2d", "sqnr_db": 40.0, "own_sqnr_db": 40.0, "output_sqnr_db": 40.0,
           "weight_sqnr_db": 45.0, "scale": 0.1, "range": [0, 25.5], "p9999": 20.0, "saturated": 0.0,
           "weight_levels": 127, "channel_levels": FEW_LEVELS + 1, "channel_spread": 3.0}
    assert layer_advice({"layers": [row]}) == []
    assert layer_advice({"layers": [row | {"channel_levels": FEW_LEVELS - 1}]})[0]["cause"] == "channel_spread"
