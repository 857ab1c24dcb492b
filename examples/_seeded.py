"""Deterministic model and data for the example SOURCE files (imported by them; not a SOURCE itself).

Weights are random but seeded; BatchNorm statistics come from a few training-mode passes over seeded noise,
so BN folding has real work to do. Every example is the same model whatever the SIMD level and thread count,
so it compiles to the same bytes under each. Torch rounds its initializers and ``randn`` differently
per SIMD level (``uniform_(a, b)`` scales its draws in float32 on the scalar kernels,
ATEN_CPU_CAPABILITY=default, in double on AVX2 and AVX-512; ``randn`` is a vectorized Box-Muller), and float32
statistics move with the thread count. So the bundled MobileNetV2 draws its weights from numpy's generator
(``initialize``); the MLPerf Tiny examples and CifarNet keep torch's initializers, with the arithmetic of AVX2
and AVX-512 on every level (``seeded_model``: the weights their figures were measured on); the statistics
come from float64 passes over numpy's noise (``refresh_batch_norm``). Inputs are uniform in [-1, 1)
(``torch.rand``, which every SIMD level draws alike).
"""

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d)


def initialize(net: nn.Module, seed: int = 0) -> nn.Module:
    """PyTorch's default init for convolutions and linear layers (uniform within 1/sqrt(fan_in)), drawn
    from numpy's generator. Any other module with parameters is refused (batch norm's are its constant
    defaults): torch's own initializer would have drawn them, differently per SIMD level."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, module in net.named_modules():
            if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Linear)):
                bound = 1 / math.sqrt(module.weight[0].numel())
                for parameter in (module.weight, module.bias):
                    if parameter is not None:
                        parameter.copy_(torch.from_numpy(rng.uniform(-bound, bound, tuple(parameter.shape))))
            elif not isinstance(module, _BATCH_NORMS) and any(module.parameters(recurse=False)):
                raise TypeError(f"{name} ({type(module).__name__}): initialize draws only convolutions and "
                                "linear layers")
    return net


def refresh_batch_norm(net: nn.Module, input_shape: tuple[int, ...], passes: int, seed: int = 1) -> nn.Module:
    """BatchNorm statistics from training-mode passes over seeded noise, in float64; returned in eval mode.

    A running mean below 1e-9 of its channel's standard deviation is set to 0: such a mean is exactly 0 but
    for the rounding of its float64 sum (a bias-free layer reading a batch norm's normalized output), and that
    rounding, which the SIMD level and thread count order, is all the value held."""
    rng = np.random.default_rng(seed)
    net = net.train().double()
    with torch.random.fork_rng(devices=[]), torch.no_grad():  # dropout draws from torch's generator
        torch.manual_seed(seed)
        for _ in range(passes):
            net(torch.from_numpy(rng.standard_normal(input_shape)))
        for module in net.modules():
            if isinstance(module, _BATCH_NORMS) and module.running_mean is not None:
                noise = module.running_mean.abs() < 1e-9 * module.running_var.sqrt()
                module.running_mean.masked_fill_(noise, 0.0)
    return net.float().eval()


class _UniformInDouble(TorchDispatchMode):
    """``uniform_(a, b)`` of a float32 tensor as AVX2 and AVX-512 compute it, on every SIMD level: torch's
    draws (``torch.rand``: the same generator steps and bits everywhere) scaled to [a, b) in double, then
    rounded to float32. The scalar kernels scale in float32, which rounds about half the values the other way."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not torch.ops.aten.uniform_.default:
            return func(*args, **kwargs)
        tensor, *bounds = args
        if tensor.dtype != torch.float32 or not tensor.is_contiguous():
            return func(*args, **kwargs)
        low, high = (*bounds, *(0.0, 1.0)[len(bounds):])
        low, high = kwargs.get("from", low), kwargs.get("to", high)
        # the kernel's bounds are floats; its draws fill the tensor in memory order, as torch.rand's do
        low, high = (float(torch.tensor(bound, dtype=torch.float32)) for bound in (low, high))
        draws = torch.rand(tensor.shape, generator=kwargs.get("generator"))
        return tensor.copy_(draws.double() * (high - low) + low)


def seeded_model(build: Callable[[], nn.Module], input_shape: tuple[int, ...], passes: int = 8) -> nn.Module:
    """``build()`` with torch's own initializers from seed 0 (``_UniformInDouble``: the weights AVX2 and
    AVX-512 machines drew, which the MLPerf Tiny examples' figures were measured on), then BatchNorm
    statistics from ``passes`` float64 passes over batches of 8 (``refresh_batch_norm``)."""
    with torch.random.fork_rng(devices=[]):  # seed without touching the caller's random state
        torch.manual_seed(0)
        with _UniformInDouble():
            net = build()
    return refresh_batch_norm(net, (8, *input_shape[1:]), passes)


def uniform_inputs(input_shape: tuple[int, ...], seed: int) -> tuple[torch.Tensor, ...]:
    return (torch.rand(input_shape, generator=torch.Generator().manual_seed(seed)) * 2 - 1,)


def uniform_samples(input_shape: tuple[int, ...], seed: int, count: int = 16) -> list[tuple[torch.Tensor, ...]]:
    generator = torch.Generator().manual_seed(seed)
    return [(torch.rand(input_shape, generator=generator) * 2 - 1,) for _ in range(count)]
