"""Deterministic model and data for the example SOURCE files (imported by them; not a SOURCE itself).

Weights are random but seeded; BatchNorm statistics come from a few training-mode passes over seeded noise,
so BN folding has real work to do. ``initialize`` and ``refresh_batch_norm`` (the bundled MobileNetV2) make a
model that is the same on every machine: torch's initializers and ``randn`` round differently with the SIMD
level (ATEN_CPU_CAPABILITY), and float32 statistics move with the thread count, so those weights come from
numpy's generator and the statistics from float64 passes. Inputs are uniform in [-1, 1).
"""

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn


def initialize(net: nn.Module, seed: int = 0) -> nn.Module:
    """PyTorch's default init for convolutions and linear layers (uniform within 1/sqrt(fan_in)), drawn
    from numpy's generator."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for module in net.modules():
            if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Linear)):
                bound = 1 / math.sqrt(module.weight[0].numel())
                for parameter in (module.weight, module.bias):
                    if parameter is not None:
                        parameter.copy_(torch.from_numpy(rng.uniform(-bound, bound, tuple(parameter.shape))))
    return net


def refresh_batch_norm(net: nn.Module, input_shape: tuple[int, ...], passes: int, seed: int = 1) -> nn.Module:
    """BatchNorm statistics from training-mode passes over seeded noise, in float64; returned in eval mode."""
    rng = np.random.default_rng(seed)
    net = net.train().double()
    with torch.random.fork_rng(devices=[]), torch.no_grad():  # dropout draws from torch's generator
        torch.manual_seed(seed)
        for _ in range(passes):
            net(torch.from_numpy(rng.standard_normal(input_shape)))
    return net.float().eval()


def seeded_model(build: Callable[[], nn.Module], input_shape: tuple[int, ...], passes: int = 8) -> nn.Module:
    """torch's own initializers and BatchNorm passes on ``randn`` noise, seeded: the MLPerf Tiny examples'
    weights, which their recorded figures were measured on (the same model for one thread count and SIMD
    level)."""
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
