"""The host LiteRT executor on every bundled example's NPU partition: bit-exact against TFLM on seeded
random int8 inputs (the MLPerf Tiny models, the MobileNetV2 examples)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from litert_harness import lower_single, quantize_and_capture
from test_kernels_ops import assert_bit_exact

from imxrt.source import load_source

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MODELS = ["ds_cnn", "mobilenet_v1", "resnet8", "autoencoder", "mobilenet_v2", "channels_last"]
RANDOM_INPUTS = 5


@functools.cache
def partition(name: str) -> bytes:
    """The example's one NPU partition as the pipeline lowers it (calibrated on its example inputs only:
    the kernels are under test here, not the quantization)."""
    source = load_source(str(EXAMPLES / f"{name}.py"))
    quantized = quantize_and_capture(source.model, source.example_inputs, [source.example_inputs])
    return lower_single(quantized).tflite


@pytest.mark.parametrize("name", MODELS)
def test_example_partition_is_bit_exact(name):
    assert_bit_exact(partition(name), range(RANDOM_INPUTS))
