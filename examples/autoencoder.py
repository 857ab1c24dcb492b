"""MLPerf Tiny anomaly detection fully connected autoencoder: 640 → 640.

The network is ExecuTorch's port in `executorch.examples.models.mlperf_tiny`. Weights are random but
seeded; BatchNorm statistics come from a few training-mode passes over seeded noise, so BN folding has
real work to do.
"""

import torch
from executorch.examples.models.mlperf_tiny import DeepAutoEncoder
from torch import nn

INPUT_SHAPE = (1, 640)


def model() -> nn.Module:
    with torch.random.fork_rng(devices=[]):  # seed without touching the caller's random state
        torch.manual_seed(0)
        net = DeepAutoEncoder().train()
        with torch.no_grad():
            for _ in range(8):
                net(torch.randn(8, *INPUT_SHAPE[1:]))
    return net.eval()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    return (torch.rand(INPUT_SHAPE, generator=generator) * 2 - 1,)


def calibration_inputs():
    generator = torch.Generator().manual_seed(2)
    return [(torch.rand(INPUT_SHAPE, generator=generator) * 2 - 1,) for _ in range(16)]
