"""The bundled examples, each compiled once per test run: several test modules read the same programs."""

from __future__ import annotations

import functools
from pathlib import Path

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
