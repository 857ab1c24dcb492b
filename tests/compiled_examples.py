"""The bundled examples and a small conv net, each compiled once per test run: several test modules read the same
programs."""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from imxrt.pipeline import CompileOptions, CompileResult, compile
from imxrt.source import ModelSource, load_source

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NAMES = ("ds_cnn", "mobilenet_v1", "resnet8", "autoencoder", "mobilenet_v2", "channels_last")


@functools.cache
def compiled_example(name: str) -> tuple[ModelSource, list | None, CompileResult]:
    """(source, calibration samples, compile result) of ``examples/<name>.py``, as `imxrt compile` makes it."""
    source = load_source(str(EXAMPLES / f"{name}.py"))
    calibration = list(source.calibration) if source.calibration is not None else None
    result = compile(source.model, source.example_inputs, "imxrt700", calibration, CompileOptions(show_progress=False))
    return source, calibration, result


@functools.cache
def tiny(seed: int = 0, io: str = "float") -> CompileResult:
    """A small conv net (conv, relu, flatten, linear over [1, 3, 6, 6]) compiled with weights from ``seed``:
    different seeds, different programs."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 4 * 4, 2)).eval()
    x = torch.randn(1, 3, 6, 6, generator=torch.Generator().manual_seed(1))
    return compile(model, (x,), "imxrt700", [(x,)], CompileOptions(show_progress=False, io=io))
