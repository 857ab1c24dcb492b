"""Coarse decisions: an argmax or softmax reading values whose int8 step is coarser than the gaps that decide
them is a warning in report.json, an advice item and a line of the compile summary."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from imxrt.pipeline import CompileOptions, compile
from imxrt.report.advice import advice_lines
from imxrt.report.logit_steps import warning_lines

CLASSES = 6
CLOSE, FAR = 10, 89  # calibration samples whose top two logits are 0.1 apart, and 5 apart


class Logits(nn.Module):
    """Logits equal to the input (a Linear with identity weights, exact in int8), optionally through a softmax."""

    def __init__(self, softmax: bool):
        super().__init__()
        self.fc = nn.Linear(CLASSES, CLASSES)
        self.softmax = softmax
        with torch.no_grad():
            self.fc.weight.copy_(torch.eye(CLASSES))
            self.fc.bias.zero_()

    def forward(self, x):
        logits = self.fc(x)
        return torch.softmax(logits, -1) if self.softmax else logits


def _row(top: float, second: float) -> tuple[torch.Tensor]:
    return (torch.tensor([[top, second, 0.0, 0.0, 0.0, 0.0]]),)


def _calibration(outlier: bool) -> list:
    """CLOSE rows with a gap of 0.1, FAR rows with a gap of 5, and one sample whose logit of 100 stretches
    the range to [0, 100]: an int8 step of 100 / 255 = 0.39, above 0.1 and below 5."""
    samples = [_row(5.1, 5.0)] * CLOSE + [_row(10.0, 5.0)] * FAR
    return samples + [_row(100.0, 0.0) if outlier else _row(10.0, 5.0)]


@pytest.mark.parametrize("softmax", [False, True], ids=["logits", "softmax"])
def test_logits_with_an_outlier_stretched_step_warn_with_the_share_of_close_decisions(softmax):
    calibration = _calibration(outlier=True)
    result = compile(Logits(softmax).eval(), calibration[0], "imxrt700-cpu", calibration,
                     CompileOptions(show_progress=False))
    warnings = result.report["warnings"]
    (warning,) = [w for w in warnings if ("softmax" in w["tensor"]) == softmax]
    assert warning["step"] == pytest.approx(100 / 255, rel=0.01)
    assert warning["rows"] == CLOSE + FAR + 1 and warning["close_rows"] == CLOSE
    assert warning["close_share"] == pytest.approx(CLOSE / (CLOSE + FAR + 1))
    item = result.report["advice"][0]  # a wrong answer first, before any time saved
    assert item["kind"] == "coarse_decision_step" and "--activation-ranges mse" in item["change"]
    assert warning["tensor"] in item["title"]
    (line,) = warning_lines(result.report)
    assert f"{CLOSE} of {CLOSE + FAR + 1}" in line and "0.3922" in line
    assert any(warning["tensor"] in text for text in advice_lines(result.report["advice"]))


def test_logits_whose_step_is_finer_than_their_gaps_do_not_warn():
    calibration = _calibration(outlier=False)  # range [0, 10]: a step of 0.04, below every gap
    result = compile(Logits(False).eval(), calibration[0], "imxrt700-cpu", calibration,
                     CompileOptions(show_progress=False))
    assert result.report["warnings"] == []
    assert warning_lines(result.report) == []
    assert not any(item["kind"] == "coarse_decision_step" for item in result.report["advice"])
