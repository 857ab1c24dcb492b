"""Whole small models through the LiteRT lowering: the MLPerf Tiny networks and a MobileNetV2-style net
lower to one LiteRT subgraph that TFLM runs within one quantization step of the quantized PyTorch
program, with the layout changes only at the NCHW model boundary."""

from __future__ import annotations

import functools

import pytest
import torch
from executorch.examples.models.mlperf_tiny import DSCNNKWS, DeepAutoEncoder, MobileNetV1025, ResNet8
from litert_harness import check_lowering, op_names
from torch import nn

pytestmark = pytest.mark.slow  # every test here quantizes and lowers a whole network

_MOVES = {"TRANSPOSE", "RESHAPE"}


class InvertedResidual(nn.Module):
    def __init__(self, channels: int, expand: int, stride: int):
        super().__init__()
        hidden = channels * expand
        self.stride = stride
        self.block = nn.Sequential(
            nn.Conv2d(channels, hidden, 1, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, channels, 1, bias=False),
            nn.BatchNorm2d(channels),
        )

    def forward(self, x):
        y = self.block(x)
        return y + x if self.stride == 1 else y


class MobileNetV2Style(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU6())
        self.blocks = nn.Sequential(
            InvertedResidual(8, 4, 1), InvertedResidual(8, 4, 2), InvertedResidual(8, 6, 1)
        )
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.head(nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))


MODELS = {
    "ds_cnn": lambda: (DSCNNKWS(), (torch.rand(1, 1, 49, 10) * 2 - 1,)),
    "mobilenet_v1_025": lambda: (MobileNetV1025(), (torch.rand(1, 3, 64, 64) * 2 - 1,)),
    "resnet8": lambda: (ResNet8(), (torch.rand(1, 3, 32, 32) * 2 - 1,)),
    "deep_autoencoder": lambda: (DeepAutoEncoder(), (torch.rand(1, 640) * 2 - 1,)),
    "mobilenet_v2_style": lambda: (MobileNetV2Style(), (torch.rand(1, 3, 32, 32) * 2 - 1,)),
}


def _randomize_batch_norms(model: nn.Module) -> nn.Module:
    """Non-trivial folded scales and shifts, so the test does not pass on identity batch norms."""
    generator = torch.Generator().manual_seed(1)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d | nn.BatchNorm1d):
            n = module.num_features
            module.running_mean.copy_(torch.randn(n, generator=generator) * 0.1)
            module.running_var.copy_(torch.rand(n, generator=generator) + 0.5)
            module.weight.data.copy_(torch.rand(n, generator=generator) + 0.5)
            module.bias.data.copy_(torch.randn(n, generator=generator) * 0.1)
    return model.eval()


@functools.cache
def _lowered(name: str):
    torch.manual_seed(0)
    model, inputs = MODELS[name]()
    return check_lowering(_randomize_batch_norms(model), inputs), inputs


@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_the_quantized_program(name):
    result, inputs = _lowered(name)
    names = op_names(result.subgraph)
    # Only the NCHW model input needs a layout change; nothing moves data between two NHWC ops.
    if inputs[0].dim() == 4:
        assert names[0] in _MOVES
        moves_after_input = [n for n in names[1:] if n == "TRANSPOSE"]
        assert moves_after_input == [], names


def test_ds_cnn_input_needs_only_a_reshape():
    """DS-CNN's 1x1x49x10 input moves only its size-1 channel dim: a RESHAPE, not a TRANSPOSE."""
    names = op_names(_lowered("ds_cnn")[0].subgraph)
    assert names[0] == "RESHAPE" and "TRANSPOSE" not in names


def test_channels_last_input_has_no_layout_change():
    torch.manual_seed(0)
    model, (x,) = MODELS["resnet8"]()
    result = check_lowering(_randomize_batch_norms(model), (x.to(memory_format=torch.channels_last),))
    (io,) = result.subgraph.inputs
    assert io.channels_last and io.tflite_shape == (1, 32, 32, 3) and io.shape == (1, 3, 32, 32)
    assert op_names(result.subgraph)[0] == "CONV_2D"
    assert "TRANSPOSE" not in op_names(result.subgraph)


def test_nchw_input_gets_exactly_one_transpose():
    result = _lowered("resnet8")[0]
    (io,) = result.subgraph.inputs
    assert not io.channels_last and io.tflite_shape == io.shape == (1, 3, 32, 32)
    assert op_names(result.subgraph).count("TRANSPOSE") == 1
