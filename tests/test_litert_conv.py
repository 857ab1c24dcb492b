"""Convolution lowering: CONV_2D / DEPTHWISE_CONV_2D / grouped / TRANSPOSE_CONV, padding folded into
SAME / VALID or an explicit PAD, fused activations, checked against TFLM and LiteRT."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ai_edge_litert import schema_py_generated as schema
from litert_harness import check_lowering, op_names
from torch import nn


class Conv(nn.Module):
    def __init__(self, conv: nn.Module, activation: nn.Module | None = None):
        super().__init__()
        self.conv, self.activation = conv, activation or nn.Identity()

    def forward(self, x):
        return self.activation(self.conv(x))


def _x(channels=4, height=8, width=8):
    return (torch.randn(1, channels, height, width).to(memory_format=torch.channels_last),)


# name: (module, input, expected ops). channels_last inputs and outputs: only the conv's own ops show.
CASES = {
    "same_3x3": (lambda: nn.Conv2d(4, 6, 3, padding=1), _x(), ["CONV_2D"]),
    "valid_3x3": (lambda: nn.Conv2d(4, 6, 3), _x(), ["CONV_2D"]),
    "no_bias": (lambda: nn.Conv2d(4, 6, 1, bias=False), _x(), ["CONV_2D"]),
    # stride 2 on an even size: SAME pads 0 before, PyTorch pads 1, so an explicit PAD
    "stride2_pad1": (lambda: nn.Conv2d(4, 6, 3, stride=2, padding=1), _x(), ["PAD", "CONV_2D"]),
    "stride2_pad1_odd": (lambda: nn.Conv2d(4, 6, 3, stride=2, padding=1), _x(4, 9, 9), ["CONV_2D"]),
    "ds_cnn_stem": (
        lambda: nn.Conv2d(1, 8, (10, 4), stride=2, padding=(5, 1)),
        _x(1, 49, 10),
        ["PAD", "CONV_2D"],
    ),
    "dilated": (lambda: nn.Conv2d(4, 6, 3, padding=2, dilation=2), _x(), ["CONV_2D"]),
    "depthwise": (lambda: nn.Conv2d(4, 4, 3, padding=1, groups=4), _x(), ["DEPTHWISE_CONV_2D"]),
    "depthwise_multiplier2": (lambda: nn.Conv2d(4, 8, 3, padding=1, groups=4), _x(), ["DEPTHWISE_CONV_2D"]),
    "depthwise_stride2": (
        lambda: nn.Conv2d(4, 4, 3, stride=2, padding=1, groups=4),
        _x(),
        ["PAD", "DEPTHWISE_CONV_2D"],
    ),
    "grouped": (lambda: nn.Conv2d(4, 6, 3, padding=1, groups=2), _x(),
                ["SPLIT_V", "CONV_2D", "CONV_2D", "CONCATENATION"]),
    "grouped_strided_relu": (lambda: nn.Sequential(nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2), nn.ReLU()),
                             _x(), ["PAD", "SPLIT_V", "CONV_2D", "CONV_2D", "CONCATENATION"]),
    "grouped_depth_multiplier": (lambda: nn.Conv2d(4, 8, 1, groups=2), _x(),
                                 ["SPLIT_V", "CONV_2D", "CONV_2D", "CONCATENATION"]),
    "transposed_same": (lambda: nn.ConvTranspose2d(4, 6, 4, stride=2, padding=1), _x(), ["TRANSPOSE_CONV"]),
    "transposed_valid": (lambda: nn.ConvTranspose2d(4, 6, 2, stride=2), _x(), ["TRANSPOSE_CONV"]),
    "transposed_output_padding": (
        lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1),
        _x(),
        ["TRANSPOSE_CONV", "SLICE"],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_convolution(name):
    torch.manual_seed(0)
    make, inputs, expected = CASES[name]
    result = check_lowering(Conv(make()), inputs)
    assert op_names(result.subgraph) == expected


def _fused_activations(tflite: bytes) -> list[int]:
    model = schema.ModelT.InitFromPackedBuf(bytearray(tflite), 0)
    return [
        getattr(op.builtinOptions, "fusedActivationFunction", None) for op in model.subgraphs[0].operators
    ]


@pytest.mark.parametrize(
    "conv, activation, fused",
    [
        (lambda: nn.Conv2d(4, 6, 3, padding=1), nn.ReLU(), schema.ActivationFunctionType.RELU),
        (lambda: nn.Conv2d(4, 6, 3, padding=1), nn.ReLU6(), schema.ActivationFunctionType.RELU6),
        (lambda: nn.Conv2d(4, 4, 3, padding=1, groups=4), nn.ReLU6(), schema.ActivationFunctionType.RELU6),
        (lambda: nn.ConvTranspose2d(4, 6, 4, 2, 1), nn.ReLU(), schema.ActivationFunctionType.RELU),
    ],
    ids=["conv_relu", "conv_relu6", "depthwise_relu6", "transposed_relu"],
)
def test_activation_is_fused_into_the_conv(conv, activation, fused):
    torch.manual_seed(0)
    result = check_lowering(Conv(conv(), activation), _x())
    assert len(op_names(result.subgraph)) == 1  # no separate activation op
    assert _fused_activations(result.subgraph.tflite)[0] == fused


def test_conv_weights_are_ohwi_per_channel():
    """A 1x1 conv with distinct weights per (out, in) pair: the written filter is OHWI with one scale
    per output channel, quantized dimension 0."""
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 2, (1, 2), bias=False)
    result = check_lowering(Conv(conv), _x(3, 4, 4))
    model = schema.ModelT.InitFromPackedBuf(bytearray(result.subgraph.tflite), 0)
    graph = model.subgraphs[0]
    filters = graph.tensors[graph.operators[0].inputs[1]]
    assert list(filters.shape) == [2, 1, 2, 3]
    assert filters.quantization.quantizedDimension == 0 and len(filters.quantization.scale) == 2
    data = np.frombuffer(bytes(model.buffers[filters.buffer].data), np.int8).reshape(2, 1, 2, 3)
    scales = np.array(filters.quantization.scale)[:, None, None, None]
    expected = conv.weight.detach().numpy().transpose(0, 2, 3, 1)
    assert np.abs(data * scales - expected).max() <= scales.max() / 2 + 1e-6
