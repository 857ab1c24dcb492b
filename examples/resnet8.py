"""MLPerf Tiny image classification ResNet-8: 32×32 RGB → 10 classes.

The network is ExecuTorch's port in `executorch.examples.models.mlperf_tiny`, with seeded weights and
non-trivial BatchNorm statistics (see `_seeded.py`).
"""

from _seeded import seeded_model, uniform_inputs, uniform_samples
from executorch.examples.models.mlperf_tiny import ResNet8

INPUT_SHAPE = (1, 3, 32, 32)


def model():
    return seeded_model(lambda: ResNet8(), INPUT_SHAPE)


def example_inputs():
    return uniform_inputs(INPUT_SHAPE, seed=1)


def calibration_inputs():
    return uniform_samples(INPUT_SHAPE, seed=2)
