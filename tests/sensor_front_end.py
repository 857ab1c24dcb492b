"""A learned front end over a sensor signal, as a voice detector's STFT over a waveform: the model of the
float-layer tests and of the layer-SQNR test for an int8 model input."""

from __future__ import annotations

import torch
import torch.nn as nn


class Detector(nn.Module):
    """A learned front end (zero-sum filters: they reject the signal's offset) and a conv."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.front = nn.Conv1d(1, 4, 8, stride=4, bias=False)
        self.encoder = nn.Conv1d(4, 4, 3, bias=False)
        with torch.no_grad():
            self.front.weight.sub_(self.front.weight.mean(-1, keepdim=True))

    def forward(self, x):
        return self.encoder(self.front(nn.functional.pad(x.unsqueeze(1), (0, 4), mode="reflect")))


def signals(count: int, seed: int) -> list[tuple[torch.Tensor]]:
    """Detail of ±0.01 on an offset of up to ±0.9: the waveform's int8 step (about 0.007) rounds the detail
    to a level or two, while the front end's output holds only the detail."""
    generator = torch.Generator().manual_seed(seed)
    return [(0.9 * (2 * torch.rand(1, 1, generator=generator) - 1) + 0.01 * torch.randn(1, 256, generator=generator),)
            for _ in range(count)]
