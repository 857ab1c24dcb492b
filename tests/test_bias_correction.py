"""Bias correction (``CompileOptions(bias_correction=True)``, ``--bias-correction``): each conv / linear bias takes
back the mean shift its int8 weight rounding causes on the calibration data."""

import numpy as np
import pytest
import torch
import torch.nn as nn
from program_checks import check_case

import imxrt.runtime
from imxrt.pipeline import CompileOptions, compile


def _coarse_linear() -> nn.Module:
    """A linear layer whose one large row sets the per-tensor weight step: the other rows' weights are a
    fraction of a step, so rounding moves their outputs' mean by ΔW · E[x] (inputs with a mean of 2)."""
    torch.manual_seed(0)
    layer = nn.Linear(256, 8)
    with torch.no_grad():
        layer.weight.uniform_(-0.004, 0.012)
        layer.weight[0] = 0
        layer.weight[0, 0] = 1  # the step: 1 / 127; its output (about 2) keeps the output's step fine
        layer.bias.zero_()
    return nn.Sequential(layer).eval()


def _samples(count: int, seed: int) -> list[tuple[torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [(2 + 0.5 * torch.randn(1, 256, generator=generator),) for _ in range(count)]


def _mean_error(model, result, samples) -> np.ndarray:
    program = imxrt.runtime.load(result.pte)
    errors = [program.forward(*x)[0].reshape(-1) - model(*x).detach().numpy().reshape(-1) for x in samples]
    return np.abs(np.mean(errors, axis=0)[1:])  # the rows the large one's step rounds coarsely


@pytest.mark.parametrize("target", ["imxrt700", "imxrt700-cpu"])
def test_the_mean_shift_of_rounded_weights_is_taken_back(target):
    model = _coarse_linear()
    calibration, evaluation = _samples(32, 1), _samples(64, 2)
    plain = compile(model, calibration[0], target, calibration, CompileOptions(show_progress=False))
    corrected = compile(model, calibration[0], target, calibration,
                        CompileOptions(show_progress=False, bias_correction=True))
    before, after = _mean_error(model, plain, evaluation), _mean_error(model, corrected, evaluation)
    assert after.mean() < 0.25 * before.mean()
    assert torch.equal(model[0].bias, torch.zeros(8))  # the user's model is left as it was
    check_case(corrected, evaluation[0])


def test_a_convolution_without_bias_is_left_as_it_is():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), nn.ReLU()).eval()
    samples = [(torch.randn(1, 3, 6, 6),) for _ in range(4)]
    plain = compile(model, samples[0], "imxrt700", samples, CompileOptions(show_progress=False))
    corrected = compile(model, samples[0], "imxrt700", samples,
                        CompileOptions(show_progress=False, bias_correction=True))
    assert plain.pte == corrected.pte
