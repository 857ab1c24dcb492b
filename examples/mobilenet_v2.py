"""MobileNetV2-style image classifier (width 0.35, 96×96 RGB, 10 classes): the small bundled example.

Eight inverted residual blocks: 1×1 expand conv + BN + ReLU6, 3×3 depthwise conv + BN + ReLU6 (stride 1
or 2), 1×1 project conv + BN, and a residual add where the stride is 1 and the channels match.
Weights are random but deterministic (the same on every machine); BatchNorm statistics come from a few
training-mode passes over seeded random data, so BN folding has real work to do.

    imxrt compile examples/mobilenet_v2.py --target imxrt700 -o out/
"""

import torch
from _seeded import initialize, refresh_batch_norm
from torch import nn

# (expand ratio, output channels at width 1.0, repeats, stride of the first repeat)
# (expansion, channels, repeats, first stride) per stage: the bundled example's 8 blocks, and the paper's 17
_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 2, 2), (6, 64, 2, 2), (6, 96, 1, 1))
PAPER_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1))


def _divisible(channels: float, divisor: int = 8) -> int:
    """Round to a multiple of `divisor`, never losing more than 10% (as in the MobileNetV2 paper's code)."""
    rounded = max(divisor, int(channels + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * channels else rounded


def _conv_bn(in_ch: int, out_ch: int, kernel: int, stride: int = 1, groups: int = 1, relu6: bool = True):
    layers = [
        nn.Conv2d(in_ch, out_ch, kernel, stride, padding=kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(out_ch),
    ]
    return nn.Sequential(*layers, nn.ReLU6()) if relu6 else nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = in_ch * expand
        layers = [_conv_bn(in_ch, hidden, 1)] if expand != 1 else []
        layers.append(_conv_bn(hidden, hidden, 3, stride, groups=hidden))
        layers.append(_conv_bn(hidden, out_ch, 1, relu6=False))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and in_ch == out_ch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.residual else self.block(x)


class MobileNetV2(nn.Module):
    def __init__(self, width: float, num_classes: int, stages=_STAGES) -> None:
        super().__init__()
        channels = _divisible(32 * width)
        layers = [_conv_bn(3, channels, 3, stride=2)]
        for expand, base_out, repeats, stride in stages:
            out_ch = _divisible(base_out * width)
            for i in range(repeats):
                layers.append(InvertedResidual(channels, out_ch, stride if i == 0 else 1, expand))
                channels = out_ch
        head = _divisible(1280 * width)
        layers.append(_conv_bn(channels, head, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(head, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, 1)
        return self.classifier(torch.flatten(x, 1))


def build_mobilenet_v2(width: float = 0.35, input_size: int = 96, num_classes: int = 10,
                       stages=_STAGES) -> nn.Module:
    """Seeded weights, BN statistics from training-mode passes on seeded noise (``_seeded``: the same
    model on every machine); returned in eval mode."""
    with torch.random.fork_rng(devices=[]):  # torch's own init in the constructor: the caller's state stays
        net = MobileNetV2(width, num_classes, stages)
    return refresh_batch_norm(initialize(net), (4, 3, input_size, input_size), passes=4)


def model() -> nn.Module:
    return build_mobilenet_v2()


def example_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    return (torch.rand(1, 3, 96, 96, generator=generator) * 2 - 1,)


def calibration_inputs():
    generator = torch.Generator().manual_seed(2)
    return [(torch.rand(1, 3, 96, 96, generator=generator) * 2 - 1,) for _ in range(16)]
