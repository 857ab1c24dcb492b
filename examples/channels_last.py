"""The MobileNetV2-style example in channels_last memory format (model weights and inputs).

Same network and data as mobilenet_v2.py, loaded from the sibling file by path (the CLI loads examples
by path, so a plain `import mobilenet_v2` would not find it).
"""

import importlib.util
from pathlib import Path

import torch
from torch import nn


def _load_sibling(name: str):
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_imxrt_example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_base = _load_sibling("mobilenet_v2")


def _channels_last(inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return tuple(x.contiguous(memory_format=torch.channels_last) for x in inputs)


def model() -> nn.Module:
    return _base.build_mobilenet_v2().to(memory_format=torch.channels_last)


def example_inputs() -> tuple[torch.Tensor, ...]:
    return _channels_last(_base.example_inputs())


def calibration_inputs():
    return [_channels_last(sample) for sample in _base.calibration_inputs()]
