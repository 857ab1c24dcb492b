"""The host LiteRT executor on every bundled example's NPU partition: bit-exact against TFLM on seeded
random int8 inputs (the MLPerf Tiny models, the MobileNetV2 examples)."""

from __future__ import annotations

import pytest
from compiled_examples import NAMES, compiled_example
from test_kernels_ops import assert_bit_exact

pytestmark = pytest.mark.slow  # every test here compiles the bundled examples

MODELS = list(NAMES)
RANDOM_INPUTS = 5


def partition(name: str) -> bytes:
    """The example's one NPU partition, as `imxrt compile` makes it (compiled once per test run)."""
    (tflite,) = compiled_example(name)[2].partitions
    return tflite


@pytest.mark.parametrize("name", MODELS)
def test_example_partition_is_bit_exact(name):
    assert_bit_exact(partition(name), range(RANDOM_INPUTS))
