"""The building blocks of the mobile CNN families people deploy (MobileNetV3, EfficientNet, GhostNet, LCNet,
ShuffleNetV2, SqueezeNet, RegNet, 1-D audio nets), each small: one NPU partition, every op int8, no
TRANSPOSE but those an NCHW model input or output needs, TFLM's numbers on the partition; and on the CPU-only
target, int8 throughout. `benchmarks/zoo.py` compiles the whole architectures."""

from collections import Counter

import pytest
import torch
import torch.nn as nn
from ai_edge_litert import schema_py_generated as schema
from program_checks import check_case

from imxrt.npu.compilers.reference import litert_ops
from imxrt.pipeline import CompileOptions, compile

pytestmark = pytest.mark.slow  # every test here compiles models

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


def _one_int8_partition(result, cal, target, transposes: int | None = None):
    """Every op int8; on imxrt700 one partition with only the I/O conversions on the CPU, and ``transposes``
    TRANSPOSEs (default: at most one per NCHW image input or output)."""
    summary = result.report["summary"]
    assert summary["ops_cpu_float"] == 0, [op for op in result.report["ops"] if op["execution"] == "cpu float"]
    if target == "imxrt700":
        cpu = [op["op"] for op in result.report["ops"] if op["placement"] != "npu"]
        assert summary["partitions"] == 1 and all("quantize" in op for op in cpu), cpu
        if transposes is None:
            assert _litert_ops(result)["TRANSPOSE"] <= _image_io(result)
        else:
            assert _litert_ops(result)["TRANSPOSE"] == transposes
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


class AudioNet(nn.Module):
    """A raw-audio 1-D CNN: a long strided first kernel, batch norm, ReLU, max pools, a residual block with
    `padding="same"` and dilation, a global mean over time, a linear classifier."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv1d(1, 8, 16, stride=4), nn.BatchNorm1d(8), nn.ReLU(), nn.MaxPool1d(4))
        self.body = nn.Sequential(nn.Conv1d(8, 8, 3, padding="same", dilation=2), nn.BatchNorm1d(8), nn.ReLU(),
                                  nn.Conv1d(8, 8, 3, padding=1))
        self.pool = nn.AvgPool1d(2)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        x = self.stem(x)
        x = self.pool(torch.relu(x + self.body(x)))
        return self.fc(x.mean(-1))


@pytest.mark.parametrize("target", TARGETS)
def test_a_1d_audio_cnn_is_one_partition_without_layout_changes(target):
    """Each Conv1d / pool ran as its 2-D form between an unsqueeze and a squeeze, so every ReLU between
    them ran on a rank-3 value: two TRANSPOSEs each and an unfused activation (9 TRANSPOSEs in a 4-layer
    audio net). The squeezes sink past the activations, adds and the final mean; the net never leaves NHWC."""
    torch.manual_seed(0)
    result, cal = _compile(AudioNet(), (1, 1, 400), target)
    _one_int8_partition(result, cal, target, transposes=0)  # a one-channel input is NHWC as it is


class ShuffleUnit(nn.Module):
    """ShuffleNetV2's stride-1 unit: chunk, a branch on one half, cat, channel shuffle (torchvision's code)."""

    def __init__(self, channels=16):
        super().__init__()
        half = channels // 2
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.branch = nn.Sequential(nn.Conv2d(half, half, 1), nn.ReLU(),
                                    nn.Conv2d(half, half, 3, padding=1, groups=half), nn.Conv2d(half, half, 1),
                                    nn.ReLU())

    @staticmethod
    def shuffle(x, groups=2):
        b, c, h, w = x.shape
        return x.view(b, groups, c // groups, h, w).transpose(1, 2).contiguous().view(b, c, h, w)

    def forward(self, x):
        x = self.stem(x)
        for _ in range(2):
            left, right = x.chunk(2, dim=1)
            x = self.shuffle(torch.cat((left, self.branch(right)), dim=1))
        return x.mean((2, 3))


@pytest.mark.parametrize("target", TARGETS)
def test_a_channel_shuffle_is_one_transpose_inside_the_partition(target):
    """The shuffle's NHWC -> NCHW, view, transpose, view, NHWC chain was three TRANSPOSEs (ShuffleNetV2:
    49): it is the one TRANSPOSE the shuffle is, of [N·H·W, g, C/g]."""
    torch.manual_seed(0)
    result, cal = _compile(ShuffleUnit(), (1, 3, 6, 6), target)
    _one_int8_partition(result, cal, target, transposes=_image_io(result) + 2)  # the input's and one per shuffle


class FlattenClassifier(nn.Module):
    """A CifarNet-style head: conv, pool, then a flatten over 4x4 positions into two linear layers."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc1, self.fc2 = nn.Linear(8 * 4 * 4, 16), nn.Linear(8 * 4 * 4, 4)

    def forward(self, x):
        x = torch.flatten(nn.functional.max_pool2d(torch.relu(self.conv(x)), 2), 1)
        return self.fc1(x), self.fc2(x)


@pytest.mark.parametrize("target", TARGETS)
def test_a_flatten_before_linear_layers_permutes_their_weights_not_the_data(target):
    """The flatten of an NHWC image into [N, C·H·W] was a TRANSPOSE back to NCHW order: the layers that read
    it take their weight columns in NHWC order instead, and the flatten is a RESHAPE."""
    torch.manual_seed(0)
    result, cal = _compile(FlattenClassifier(), (1, 3, 8, 8), target)
    _one_int8_partition(result, cal, target, transposes=1)  # the NCHW model input's


class DetectionHead(nn.Module):
    """An SSD / FPN style head: class logits of two feature levels flattened to [N, K, H·W] and joined along
    positions."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.down = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.cls = nn.Conv2d(8, 6, 1)

    def forward(self, x):
        p4 = torch.relu(self.stem(x))
        p5 = torch.relu(self.down(p4))
        return torch.cat([self.cls(p4).flatten(2), self.cls(p5).flatten(2)], dim=2)


@pytest.mark.parametrize("target", TARGETS)
def test_flattened_maps_joined_along_positions_are_transposed_once(target):
    """Each [N, K, H·W] flatten of an NHWC map was a TRANSPOSE before the CONCATENATION: the maps join
    untransposed and one TRANSPOSE gives the joined result its [N, K, positions] order."""
    torch.manual_seed(0)
    result, cal = _compile(DetectionHead(), (1, 3, 8, 8), target)
    _one_int8_partition(result, cal, target, transposes=2)  # the NCHW input's, and the joined output's


@pytest.mark.parametrize("target", TARGETS)
def test_qat_keeps_the_conv_before_a_hardsigmoid_trainable(target):
    """Folding a hardsigmoid rewrites the conv's weights into new constants: under QAT that would freeze
    the conv, so QAT keeps the hardsigmoid (as it keeps batch norms for pt2e's own fusion); for the NPU it
    decomposes into ADD + RELU6 and MUL."""
    torch.manual_seed(0)
    model = SqueezeExcite(*SQUEEZE_EXCITE["mobilenet_v3"]).eval()
    frozen = []

    generator = torch.Generator().manual_seed(0)
    cal = [(torch.randn(1, 3, 8, 8, generator=generator),) for _ in range(4)]

    def train(prepared):
        frozen.extend(name for name, p in prepared.named_parameters() if not p.requires_grad)
        optimizer = torch.optim.SGD(prepared.parameters(), lr=1e-3)
        for (x,) in cal:  # a few steps: the observers see data, the weights move
            optimizer.zero_grad()
            prepared(x).square().mean().backward()
            optimizer.step()

    result = compile(model, cal[0], target, cal, CompileOptions(show_progress=False), qat=train)
    assert frozen == []
    kinds = {op["op"] for op in result.report["ops"]}
    assert ("aten.hardsigmoid.default" in kinds) == (target == "imxrt700-cpu")
    _one_int8_partition(result, cal, target)


class GateAfterAdd(nn.Module):
    def forward(self, x, y):
        return nn.functional.hardsigmoid(x + y) * x


@pytest.mark.parametrize("target", TARGETS)
def test_a_hardsigmoid_no_conv_feeds_is_npu_ops_or_one_table(target):
    """With no conv or linear layer before it to fold into, a hardsigmoid is ADD with a fused RELU6 and a
    MUL on the NPU; on a CPU-only target it stays one table."""
    generator = torch.Generator().manual_seed(0)
    cal = [(torch.randn(1, 4, 5, 5, generator=generator), torch.randn(1, 4, 5, 5, generator=generator))
           for _ in range(8)]
    result = compile(GateAfterAdd(), cal[0], target, cal, CompileOptions(show_progress=False))
    _one_int8_partition(result, cal, target)
    kinds = {op["op"] for op in result.report["ops"]}
    assert ("aten.hardsigmoid.default" in kinds) == (target == "imxrt700-cpu")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("bounds", [(-1.0, 1.0), (0.0, 1.0), (-0.5, 3.0)])
def test_any_constant_clamp_after_a_conv_fuses_into_it(bounds, target):
    """Every hardtanh fuses into the conv before it at quantization (one rounding, no int8 tensor between);
    on the NPU, as the fused activations Neutron takes after a conv (RELU, RELU6) or else MINIMUM /
    MAXIMUM, never a fused RELU_N1_TO_1."""
    torch.manual_seed(0)
    result, cal = _compile(nn.Sequential(nn.Conv2d(3, 4, 3), nn.Hardtanh(*bounds)), (1, 3, 6, 6), target)
    _one_int8_partition(result, cal, target)
    assert _litert_ops(result)["RELU_N1_TO_1"] == 0
    fused = {op.builtinOptions.fusedActivationFunction for tflite in result.partitions
             for op in schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(tflite, 0)).subgraphs[0].operators
             if isinstance(op.builtinOptions, schema.Conv2DOptionsT)}
    assert fused <= {schema.ActivationFunctionType.NONE, schema.ActivationFunctionType.RELU,
                     schema.ActivationFunctionType.RELU6}
    if target == "imxrt700-cpu":  # one kernel: the clamp is the conv's activation_min / activation_max
        assert [op["op"] for op in result.report["ops"] if "quantize" not in op["op"]] == ["aten.convolution.default"]


@pytest.mark.parametrize("target", TARGETS)
def test_a_position_encoding_computed_in_forward_is_a_constant_of_the_partition(target):
    """EdgeNeXt / XCiT compute a Fourier position encoding from constants on every call; its cumsum, arange,
    floor division and power ran in float on the CPU, between NPU partitions. Folded at compile time, the
    model is one int8 partition."""
    from test_passes import FourierPositions

    torch.manual_seed(0)
    result, cal = _compile(FourierPositions(), (1, 8, 4, 5), target)
    _one_int8_partition(result, cal, target)


class NormalizedEmbedding(nn.Module):
    """A linear embedding normalized to unit length (F.normalize), and its 2-norm over the features."""

    def __init__(self, with_norm: bool):
        super().__init__()
        self.embed, self.with_norm = nn.Linear(16, 12), with_norm

    def forward(self, x):
        y = self.embed(x)
        return (torch.nn.functional.normalize(y, dim=-1), y.norm(dim=-1)) if self.with_norm else \
            torch.nn.functional.normalize(y, dim=-1)


@pytest.mark.parametrize("with_norm", [False, True])
@pytest.mark.parametrize("target", TARGETS)
def test_normalize_and_a_2_norm_are_int8(target, with_norm):
    """F.normalize is MUL, SUM, RSQRT and MUL: one partition on the NPU; a 2-norm's square root is a table
    (on the CPU beside the NPU). Both had run in float."""
    torch.manual_seed(0)
    result, cal = _compile(NormalizedEmbedding(with_norm), (1, 5, 16), target)
    if target == "imxrt700" and with_norm:  # the square root's table runs on the CPU beside the partition
        assert result.report["summary"]["ops_cpu_float"] == 0
        for inputs in cal[:3]:
            check_case(result, inputs)
    else:
        _one_int8_partition(result, cal, target)


@pytest.mark.parametrize("target", TARGETS)
def test_a_batch_norm_of_features_before_a_linear_layer_is_int8(target):
    """RepViT's and LeViT's heads: BatchNorm1d on [N, C] features, then a linear layer; the batch norm had
    stayed float on the CPU."""
    from test_passes import BnLinear, _trained

    result, cal = _compile(_trained(BnLinear(), (2, 6)), (2, 6), target)
    _one_int8_partition(result, cal, target)
