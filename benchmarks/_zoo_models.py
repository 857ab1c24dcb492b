"""The model zoo of `benchmarks/zoo.py`: the mobile CNN families people deploy, with random weights.

torchvision and timm architectures are built from the packages themselves (the `zoo` extra); the 1-D audio
nets, the UNet and the FPN head, which neither package ships in a small form, are written here. Every model
gets its batch-norm statistics refreshed on random data (so activations do not vanish through a deep stack of
untrained layers) and is returned in eval mode with its example input shape.

torchvision's wheel on the package index is a CUDA build whose C extension does not load beside the CPU
torch; its pure-Python models import once the two operator schemas it registers fake kernels for exist.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

IMAGE = (1, 3, 96, 96)


def _torchvision():
    """torchvision's models, importable beside a CPU-only torch."""
    if not hasattr(torch.ops.torchvision, "nms"):
        library = torch.library.Library("torchvision", "DEF")  # noqa: TOR901  (kept alive below)
        library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        library.define("qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")
        _torchvision.library = library
    import torchvision.models

    return torchvision.models


def _timm(name: str, **kwargs) -> nn.Module:
    _torchvision()  # timm imports torchvision
    import timm

    return timm.create_model(name, pretrained=False, num_classes=10, **kwargs)


class AudioCNN(nn.Module):
    """A 1-D CNN on one second of raw 16 kHz audio (M5-style: a long strided first kernel, then 3-tap convs,
    batch norm and max pools, global average pool, linear)."""

    def __init__(self, classes: int = 12):
        super().__init__()
        layers: list[nn.Module] = [nn.Conv1d(1, 32, 80, stride=16), nn.BatchNorm1d(32), nn.ReLU(), nn.MaxPool1d(4)]
        channels = 32
        for out in (32, 64, 64):
            layers += [nn.Conv1d(channels, out, 3, padding=1), nn.BatchNorm1d(out), nn.ReLU(), nn.MaxPool1d(4)]
            channels = out
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(channels, classes)

    def forward(self, x):
        x = self.features(x)
        return self.classifier(x.mean(-1))


class TemporalCNN(nn.Module):
    """A temporal CNN on MFCCs [1, 40, 101]: `padding="same"`, dilated and strided Conv1d, batch norm, an
    average pool over time."""

    def __init__(self, classes: int = 12):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(40, 64, 3, padding="same"), nn.BatchNorm1d(64), nn.ReLU(),
            nn.Conv1d(64, 64, 3, dilation=2, padding="same"), nn.BatchNorm1d(64), nn.ReLU(),
            nn.Conv1d(64, 96, 3, stride=2), nn.BatchNorm1d(96), nn.ReLU(),
            nn.Conv1d(96, 96, 5, dilation=4, padding=8), nn.BatchNorm1d(96), nn.ReLU(),
            nn.AvgPool1d(2),
            nn.AdaptiveAvgPool1d(1),
        )
        self.classifier = nn.Linear(96, classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.net(x), 1))


def _double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class UNet(nn.Module):
    """A small UNet: max-pool encoder, nearest-upsample decoder, skip concatenations, a 1x1 head."""

    def __init__(self, width: int = 8, classes: int = 2):
        super().__init__()
        w = width
        self.enc = nn.ModuleList([_double_conv(3, w), _double_conv(w, 2 * w), _double_conv(2 * w, 4 * w)])
        self.bottom = _double_conv(4 * w, 8 * w)
        self.dec = nn.ModuleList([_double_conv(12 * w, 4 * w), _double_conv(6 * w, 2 * w), _double_conv(3 * w, w)])
        self.head = nn.Conv2d(w, classes, 1)

    def forward(self, x):
        skips = []
        for block in self.enc:
            x = block(x)
            skips.append(x)
            x = nn.functional.max_pool2d(x, 2)
        x = self.bottom(x)
        for block, skip in zip(self.dec, reversed(skips), strict=True):
            x = nn.functional.interpolate(x, scale_factor=2, mode="nearest")
            x = block(torch.cat([x, skip], dim=1))
        return self.head(x)


class FPNDetector(nn.Module):
    """A two-level feature-pyramid detection head: a strided backbone, lateral 1x1 convs, a top-down nearest
    upsample and add, and per-level class and box heads (two outputs)."""

    def __init__(self, classes: int = 4, anchors: int = 3, width: int = 32):
        super().__init__()

        def stage(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(cout),
                                 nn.ReLU6())

        self.stem = nn.Sequential(stage(3, 16), stage(16, 24), stage(24, 32))
        self.c4 = stage(32, 64)
        self.c5 = stage(64, 96)
        self.lateral4 = nn.Conv2d(64, width, 1)
        self.lateral5 = nn.Conv2d(96, width, 1)
        self.smooth = nn.Conv2d(width, width, 3, padding=1)
        self.cls = nn.Conv2d(width, anchors * classes, 3, padding=1)
        self.box = nn.Conv2d(width, anchors * 4, 3, padding=1)

    def forward(self, x):
        c4 = self.c4(self.stem(x))
        c5 = self.c5(c4)
        p5 = self.lateral5(c5)
        p4 = self.smooth(self.lateral4(c4) + nn.functional.interpolate(p5, scale_factor=2, mode="nearest"))
        classes = torch.cat([self.cls(p4).flatten(2), self.cls(p5).flatten(2)], dim=2)
        boxes = torch.cat([self.box(p4).flatten(2), self.box(p5).flatten(2)], dim=2)
        return classes, boxes


def _vision(name: str, **kwargs) -> Callable[[], nn.Module]:
    return lambda: getattr(_torchvision(), name)(num_classes=10, **kwargs)


# name -> (builder, input shape, source)
FAMILIES: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], str]] = {
    "mobilenet_v3_small": (_vision("mobilenet_v3_small"), IMAGE, "torchvision"),
    "mobilenet_v3_large": (_vision("mobilenet_v3_large"), IMAGE, "torchvision"),
    "efficientnet_b0": (_vision("efficientnet_b0"), IMAGE, "torchvision"),
    "shufflenet_v2": (_vision("shufflenet_v2_x0_5"), IMAGE, "torchvision"),
    "squeezenet1_1": (_vision("squeezenet1_1"), IMAGE, "torchvision"),
    "ghostnet": (lambda: _timm("ghostnet_050"), IMAGE, "timm"),
    "lcnet": (lambda: _timm("lcnet_050"), IMAGE, "timm"),
    "regnet": (lambda: _timm("regnetx_002"), IMAGE, "timm"),
    # attention in a CNN (MobileViT: unfolded patches, transformer blocks, LayerNorm, SiLU) and a plain ViT
    "mobilevit": (lambda: _timm("mobilevit_xxs"), IMAGE, "timm"),
    "vit_tiny": (lambda: _timm("vit_tiny_patch16_224", img_size=IMAGE[-1]), IMAGE, "timm"),
    # hybrids: mobile multi-query attention (MobileNetV4), transposed attention over a position encoding the
    # model computes in forward (EdgeNeXt), a BatchNorm1d before the classifier (RepViT)
    "mobilenetv4_hybrid": (lambda: _timm("mobilenetv4_hybrid_medium"), IMAGE, "timm"),
    "edgenext": (lambda: _timm("edgenext_xx_small"), IMAGE, "timm"),
    "repvit": (lambda: _timm("repvit_m0_9"), IMAGE, "timm"),
    "audio_cnn_1d": (AudioCNN, (1, 1, 16000), "here"),
    "temporal_cnn_mfcc": (TemporalCNN, (1, 40, 101), "here"),
    "unet": (UNet, IMAGE, "here"),
    "fpn_head": (FPNDetector, IMAGE, "here"),
}


def refresh_batch_norm(model: nn.Module, shape: tuple[int, ...], batches: int = 4, seed: int = 0) -> None:
    """Replace every batch norm's running statistics with those of random inputs, so a randomly initialised
    deep net keeps its activations at a useful scale (the default statistics, mean 0 and variance 1, are far
    from what untrained convolutions produce)."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average over the batches below
    generator = torch.Generator().manual_seed(seed)
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn((8, *shape[1:]), generator=generator))
    model.eval()


def build(name: str, seed: int = 0) -> tuple[nn.Module, tuple[int, ...]]:
    builder, shape, _ = FAMILIES[name]
    torch.manual_seed(seed)
    model = builder()
    refresh_batch_norm(model, shape, seed=seed)
    return model, shape
