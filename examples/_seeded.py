"""Deterministic model and data for the example SOURCE files (imported by them; not a SOURCE itself).

Weights are random but seeded; BatchNorm statistics come from a few training-mode passes over seeded
noise, so BN folding has real work to do. Inputs are uniform in [-1, 1).
"""

from collections.abc import Callable

import torch
from torch import nn


def seeded_model(build: Callable[[], nn.Module], input_shape: tuple[int, ...], passes: int = 8) -> nn.Module:
    with torch.random.fork_rng(devices=[]):  # seed without touching the caller's random state
        torch.manual_seed(0)
        net = build().train()
        with torch.no_grad():
            for _ in range(passes):
                net(torch.randn(8, *input_shape[1:]))
    return net.eval()


def uniform_inputs(input_shape: tuple[int, ...], seed: int) -> tuple[torch.Tensor, ...]:
    return (torch.rand(input_shape, generator=torch.Generator().manual_seed(seed)) * 2 - 1,)


def uniform_samples(input_shape: tuple[int, ...], seed: int, count: int = 16) -> list[tuple[torch.Tensor, ...]]:
    generator = torch.Generator().manual_seed(seed)
    return [(torch.rand(input_shape, generator=generator) * 2 - 1,) for _ in range(count)]
