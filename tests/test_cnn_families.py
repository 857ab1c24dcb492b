"""The building blocks of the mobile CNN families people deploy (MobileNetV3, EfficientNet, GhostNet, LCNet,
ShuffleNetV2, SqueezeNet, RegNet, 1-D audio nets), each small: one NPU partition, every op int8, no
TRANSPOSE but those an NCHW model input or output needs, TFLM's numbers on the partition; and on the CPU-only
target, int8 throughout. `benchmarks/zoo.py` compiles the whole architectures."""

from collections import Counter

import pytest
import torch
import torch.nn as nn
from program_checks import check_case

from imxrt.npu.compilers.reference import litert_ops
from imxrt.pipeline import CompileOptions, compile

TARGETS = ("imxrt700", "imxrt700-cpu")


def _compile(model, shape, target, samples=8):
    generator = torch.Generator().manual_seed(0)
    cal = [(torch.randn(shape, generator=generator),) for _ in range(samples)]
    result = compile(model.eval(), cal[0], target, cal, CompileOptions(show_progress=False))
    return result, cal


def _litert_ops(result) -> Counter:
    return Counter(op for tflite in result.partitions for op in litert_ops(tflite))


class SqueezeExcite(nn.Module):
    """A conv, then a squeeze-excite gate: global average pool, 1x1 conv, activation, 1x1 conv, gate, and
    the broadcast multiply of the [N, C, 1, 1] gate with the [N, C, H, W] features."""

    def __init__(self, act: type[nn.Module], gate: type[nn.Module], channels=16):
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3, padding=1)
        self.act = act()
        self.reduce = nn.Conv2d(channels, 4, 1)
        self.expand = nn.Conv2d(4, channels, 1)
        self.gate = gate()

    def forward(self, x):
        x = self.act(self.conv(x))
        s = self.gate(self.expand(self.act(self.reduce(x.mean((2, 3), keepdim=True)))))
        return x * s


SQUEEZE_EXCITE = {
    "mobilenet_v3": (nn.Hardswish, nn.Hardsigmoid),
    "efficientnet": (nn.SiLU, nn.Sigmoid),
    "ghostnet": (nn.ReLU, nn.Hardsigmoid),
}


def _image_io(result) -> int:
    """The model inputs and outputs that are NCHW images: each needs one TRANSPOSE to or from NHWC."""
    return sum(len(io["shape"]) == 4 for io in (*result.io["inputs"], *result.io["outputs"]))


def _one_int8_partition(result, cal, target):
    summary = result.report["summary"]
    assert summary["ops_cpu_float"] == 0, [op for op in result.report["ops"] if op["execution"] == "cpu float"]
    if target == "imxrt700":
        cpu = [op["op"] for op in result.report["ops"] if op["placement"] != "npu"]
        assert summary["partitions"] == 1 and all("quantize" in op for op in cpu), cpu
        assert _litert_ops(result)["TRANSPOSE"] <= _image_io(result)
    for inputs in cal[:3]:
        check_case(result, inputs)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("family", sorted(SQUEEZE_EXCITE))
def test_squeeze_excite_is_one_int8_partition(family, target):
    """hardsigmoid had no Neutron kernel and SiLU none either: each ran on the CPU between two partitions
    (MobileNetV3-Small: 10 partitions, 29 TRANSPOSEs; EfficientNet-B0: 51 partitions). A hardsigmoid folds
    into the conv before it, a SiLU is LOGISTIC and MUL on the NPU."""
    torch.manual_seed(0)
    result, cal = _compile(SqueezeExcite(*SQUEEZE_EXCITE[family]), (1, 3, 8, 8), target)
    _one_int8_partition(result, cal, target)
    kinds = {op["op"] for op in result.report["ops"]}
    assert "aten.hardsigmoid.default" not in kinds
    if target == "imxrt700-cpu" and family == "efficientnet":
        assert "aten.silu.default" in kinds  # one table lookup on the CPU, not a sigmoid and a product


@pytest.mark.parametrize("target", TARGETS)
def test_a_hardsigmoid_after_a_linear_layer_folds_into_it(target):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Hardsigmoid())
    result, cal = _compile(model, (2, 8), target)
    assert "aten.hardsigmoid.default" not in {op["op"] for op in result.report["ops"]}
    _one_int8_partition(result, cal, target)


class WideJoin(nn.Module):
    """A grouped conv of 12 groups (RegNet's group width) and a concatenation of 12 tensors."""

    def __init__(self):
        super().__init__()
        self.grouped = nn.Conv2d(24, 24, 3, padding=1, groups=12)
        self.heads = nn.ModuleList(nn.Conv2d(24, 2, 1) for _ in range(12))

    def forward(self, x):
        x = torch.relu(self.grouped(x))
        return torch.cat([head(x) for head in self.heads], dim=1)


@pytest.mark.parametrize("target", TARGETS)
def test_more_than_ten_joined_tensors_pass_tflms_prepare(target):
    """TFLM's CONCATENATION takes at most 10 inputs: a RegNet grouped conv of 19 groups gave a partition
    TFLM refused to prepare. Wider joins are a tree of concatenations."""
    torch.manual_seed(0)
    result, cal = _compile(WideJoin(), (1, 24, 6, 6), target)
    _one_int8_partition(result, cal, target)
