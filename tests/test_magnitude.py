"""A spectrum's magnitude, sqrt(re² + im²), compiles to int8 ops that keep quiet frames (DecomposeMagnitudePass).

Through an int8 power re² + im², a frame 20 dB below the loudest calibration frame lost most of its bins to 0
(ExecuTorch's Silero VAD example with its official weights flipped 9% of its decisions on quiet speech from
that one tensor) and its square root ran as a CPU table between two NPU partitions.
"""

import numpy as np
import pytest
import torch
import torch.nn as nn
from program_checks import check_case

import imxrt.runtime
from imxrt.pipeline import CompileOptions, compile

BINS = 16


class LearnedSpectrum(nn.Module):
    """A learned STFT (a strided 1-D convolution giving re and im of each bin), its magnitude, a 1x1 layer."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stft = nn.Conv1d(1, 2 * BINS, 32, stride=16, bias=False)
        self.out = nn.Conv1d(BINS, 4, 1)

    def spectrum(self, x):
        z = self.stft(x.unsqueeze(1))
        re, im = z[:, :BINS], z[:, BINS:]
        return (re ** 2 + im ** 2).sqrt()

    def forward(self, x):
        return self.out(self.spectrum(x))


def _frames(count: int, loudness: float, seed: int) -> list[tuple[torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    time = torch.arange(256) / 256
    frames = []
    for _ in range(count):
        tone = torch.sin(2 * torch.pi * (3 + 20 * torch.rand(1, generator=generator)) * time)
        frames.append((loudness * (tone + 0.3 * torch.randn(256, generator=generator))).reshape(1, 256))
    return [(f,) for f in frames]


@pytest.mark.parametrize("target", ["imxrt700", "imxrt700-cpu"])
def test_a_spectrum_magnitude_is_int8_and_exact_to_tflm(target):
    model = LearnedSpectrum().eval()
    calibration = _frames(8, 1.0, 0)
    result = compile(model, calibration[0], target, calibration, CompileOptions(show_progress=False))
    assert result.report["summary"]["ops_cpu_float"] == 0
    if target == "imxrt700":
        assert result.report["summary"]["partitions"] == 1  # the square root no longer splits it
    check_case(result, calibration[1])


def test_a_quiet_frame_keeps_its_spectrum():
    """Calibrated on loud frames, a frame at -20 dB keeps its magnitudes: SQNR of the program's spectrum
    against the float one above 20 dB (through an int8 power: about 6 dB, most bins 0)."""

    class Spectrum(LearnedSpectrum):
        forward = LearnedSpectrum.spectrum

    model = Spectrum().eval()
    calibration = _frames(8, 1.0, 0)
    result = compile(model, calibration[0], "imxrt700", calibration, CompileOptions(show_progress=False))
    program = imxrt.runtime.load(result.pte)
    signal = noise = 0.0
    for (frame,) in _frames(8, 0.1, 1):
        reference = model(frame).detach().numpy()
        got = program.forward(frame)[0].reshape(reference.shape)
        signal += float(np.sum(reference.astype(np.float64) ** 2))
        noise += float(np.sum((got - reference).astype(np.float64) ** 2))
    assert 10 * np.log10(signal / noise) > 20
