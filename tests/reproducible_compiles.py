"""The models of the reproducibility test, compiled in one process as `imxrt compile` compiles a SOURCE
(tests/test_reproducible.py runs it under each SIMD level and thread count, each run in a folder of its own).

    python tests/reproducible_compiles.py

writes into the working folder ``out/<model>/<target>/`` (every file of each compile, through a relative
path) and ``models.json``: each model's digest of its weights, inputs and calibration samples, which tells a
model that differs (its construction rounded differently) from a compile that differs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

from imxrt.pipeline import CompileOptions, compile
from imxrt.source import load_source

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# name -> (SOURCE, targets). Under ATEN_CPU_CAPABILITY=default the autoencoder's and CifarNet's output scales
# moved by a float step, and DS-CNN's program: their examples' weights came from torch's initializers, which
# round per SIMD level; on one thread the autoencoder's moved too (float32 BatchNorm passes). The bundled
# MobileNetV2 once moved with the thread count (float32 calibration).
MODELS = {
    "autoencoder": (str(EXAMPLES / "autoencoder.py"), ("imxrt700", "imxrt700-cpu")),
    "cifarnet": (str(EXAMPLES / "cifarnet.py"), ("imxrt700",)),
    "ds_cnn": (str(EXAMPLES / "ds_cnn.py"), ("imxrt700-cpu",)),
    "mobilenet_v2": (str(EXAMPLES / "mobilenet_v2.py"), ("imxrt700",)),
    "sequence": ("reproducible_compiles:sequence_model", ("imxrt700",)),
}


class SequenceModel(nn.Module):
    """Token projection, LayerNorm, self-attention, a GRU and a softmax head: the sequence ops (decomposed
    norms, attention's bmm and softmax, sigmoid and tanh tables, an unrolled recurrence)."""

    def __init__(self, features: int = 8, dim: int = 16, classes: int = 4) -> None:
        super().__init__()
        self.project = nn.Linear(features, dim)
        self.norm = nn.LayerNorm(dim)
        self.attention = nn.MultiheadAttention(dim, 2, batch_first=True)
        self.gru = nn.GRU(dim, dim, batch_first=True)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.project(x))
        x = x + self.attention(x, x, x, need_weights=False)[0]
        x, _ = self.gru(x)
        return torch.softmax(self.head(x[:, -1]), dim=-1)


def sequence_model():
    """``SequenceModel`` with every parameter drawn from numpy's generator (torch's initializers round per
    SIMD level), on inputs uniform in [-1, 1)."""
    model = SequenceModel()
    rng = np.random.default_rng(0)
    with torch.no_grad():
        for parameter in model.parameters():
            bound = 1 / math.sqrt(parameter.shape[-1])
            parameter.copy_(torch.from_numpy(rng.uniform(-bound, bound, tuple(parameter.shape))))
    generator = torch.Generator().manual_seed(1)
    samples = [(torch.rand(1, 6, 8, generator=generator) * 2 - 1,) for _ in range(8)]
    return model.eval(), samples[0], samples


def _digest(source) -> str:
    digest = hashlib.sha256()
    tensors = [value for _, value in sorted(source.model.state_dict().items())]
    tensors += [*source.example_inputs, *(x for sample in source.calibration or () for x in sample)]
    for tensor in tensors:
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def main() -> None:
    logging.disable(logging.WARNING)  # the console is not what is compared
    digests = {}
    for name, (source_name, targets) in MODELS.items():
        source = load_source(source_name)
        if source.calibration is not None:
            source.calibration = list(source.calibration)
        digests[name] = _digest(source)
        for target in targets:
            result = compile(source.model, source.example_inputs, target, source.calibration,
                             CompileOptions(show_progress=False))
            result.save(Path("out") / name / target)
    Path("models.json").write_text(json.dumps(digests, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
