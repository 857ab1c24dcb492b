"""MLPerf Tiny visual wake words MobileNetV1 (width 0.25): 96×96 RGB → 2 classes.

The network is ExecuTorch's port in `executorch.examples.models.mlperf_tiny`, with seeded weights and
non-trivial BatchNorm statistics (see `_seeded.py`).
"""

from _seeded import seeded_model, uniform_inputs, uniform_samples
from executorch.examples.models.mlperf_tiny import MobileNetV1025

INPUT_SHAPE = (1, 3, 96, 96)


def model():
    return seeded_model(lambda: MobileNetV1025(), INPUT_SHAPE)


def example_inputs():
    return uniform_inputs(INPUT_SHAPE, seed=1)


def calibration_inputs():
    return uniform_samples(INPUT_SHAPE, seed=2)
