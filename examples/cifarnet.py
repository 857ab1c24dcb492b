"""CifarNet: 32×32 RGB → 10 classes, the CIFAR-10 classifier of NXP's eIQ RT700 NPU example.

The architecture is the classic CifarNet that NXP's MCUXpresso SDK eIQ examples (TFLM + NeutronGraph) ship
for CIFAR-10, whose RT700 NPU latency is published (reference/neutron.md): three 5×5 "same" convolutions with
32, 32 and 64 output channels, each followed by a ReLU and a 2×2 max pool, then one fully connected layer
to 10 classes. 12,298,240 MACs: 2,457,600 + 6,553,600 + 3,276,800 for the convolutions, 10,240 for the
classifier; 89,578 parameters. Weights are random but seeded (see `_seeded.py`).

    imxrt compile examples/cifarnet.py --target imxrt700 -o out/
"""

from _seeded import seeded_model, uniform_inputs, uniform_samples
from torch import nn

INPUT_SHAPE = (1, 3, 32, 32)


def _conv_block(in_ch: int, out_ch: int) -> list[nn.Module]:
    return [nn.Conv2d(in_ch, out_ch, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2)]


def build_cifarnet(num_classes: int = 10) -> nn.Module:
    return nn.Sequential(
        *_conv_block(3, 32),  # 32×32 → 16×16
        *_conv_block(32, 32),  # 16×16 → 8×8
        *_conv_block(32, 64),  # 8×8 → 4×4
        nn.Flatten(),
        nn.Linear(4 * 4 * 64, num_classes),
    )


def model():
    return seeded_model(build_cifarnet, INPUT_SHAPE)


def example_inputs():
    return uniform_inputs(INPUT_SHAPE, seed=1)


def calibration_inputs():
    return uniform_samples(INPUT_SHAPE, seed=2)
