"""Graph passes on the exported aten graph: each keeps the model's float outputs and removes its op."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from edge_graphs import aten_passes

aten = torch.ops.aten


def _targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def _trained(model, *shapes):
    """Move BN statistics away from the identity so folding is really exercised."""
    torch.manual_seed(0)
    model.train()
    for _ in range(3):
        model(*(torch.randn(4, *s[1:]) for s in shapes))
    return model.eval()


class ConvBn(nn.Module):
    def __init__(self, bias: bool):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=bias)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


class LinearBn(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 5)
        self.bn = nn.BatchNorm1d(5)

    def forward(self, x):
        return self.bn(self.linear(x))


class BnLinear(nn.Module):
    """A classifier head normalizing its features before the linear layer (RepViT, LeViT)."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(6)
        self.linear = nn.Linear(6, 5)

    def forward(self, x):
        return self.linear(self.bn(x))


class Conv1dBnDivDropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 6, 3, stride=2, padding=1, dilation=1)
        self.bn = nn.BatchNorm1d(6)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.bn(self.conv(x))) / 4.0


@pytest.mark.parametrize(
    "model, shape",
    [(ConvBn(bias=True), (1, 3, 8, 8)), (ConvBn(bias=False), (1, 3, 8, 8)), (LinearBn(), (2, 6)),
     (BnLinear(), (2, 6)), (Conv1dBnDivDropout(), (1, 4, 16))],
    ids=["conv_bn", "conv_nobias_bn", "linear_bn", "bn_linear", "conv1d_bn_div_dropout"],
)
def test_passes_remove_their_ops_and_keep_the_outputs(model, shape):
    model = _trained(model, shape)
    x = torch.randn(*shape)
    gm = torch.export.export(model, (x,)).module(check_guards=False)
    expected = model(x)
    gm = aten_passes(gm)
    targets = _targets(gm)
    assert aten.batch_norm.default not in targets
    assert aten.dropout.default not in targets
    assert aten.conv1d.default not in targets
    assert aten.div.Tensor not in targets
    torch.testing.assert_close(gm(x), expected, rtol=1e-5, atol=1e-5)


class Stacks(nn.Module):
    """torch.stack along the first dim, a middle one and a new last one (negative), of [2, 3, 4] values."""

    def forward(self, x):
        a, b = torch.relu(x), x * 2
        return torch.stack([a, b]), torch.stack([a, b, x], 1), torch.stack([a, b], -1)


def test_a_stack_becomes_a_concatenation_and_views_with_the_same_values():
    x = torch.randn(2, 3, 4)
    model = Stacks().eval()
    gm = aten_passes(torch.export.export(model, (x,)).module(check_guards=False))
    targets = _targets(gm)
    assert aten.stack.default not in targets and targets.count(aten.cat.default) == 3
    for got, expected in zip(gm(x), model(x), strict=True):
        assert torch.equal(got, expected)


def test_division_becomes_multiplication_by_the_reciprocal():
    class Div(nn.Module):
        def forward(self, x):
            return x / 8.0

    gm = aten_passes(torch.export.export(Div(), (torch.randn(3),)).module(check_guards=False))
    (mul,) = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert mul.target == aten.mul.Tensor and mul.args[1] == 0.125


def test_division_by_a_tensor_is_kept():
    class Div(nn.Module):
        def forward(self, x, y):
            return x / y

    gm = aten_passes(torch.export.export(Div(), (torch.randn(3), torch.rand(3) + 1)).module(
        check_guards=False))
    assert aten.div.Tensor in _targets(gm)


def test_batch_norm_with_a_second_user_of_the_conv_is_not_folded_but_becomes_a_depthwise_conv():
    class Branch(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(2, 2, 1)
            self.bn = nn.BatchNorm2d(2)

        def forward(self, x):
            y = self.conv(x)
            return self.bn(y) + y

    model = _trained(Branch(), (1, 2, 4, 4))
    x = torch.randn(1, 2, 4, 4)
    gm = aten_passes(torch.export.export(model, (x,)).module(check_guards=False))
    assert aten.batch_norm.default not in _targets(gm) and _targets(gm).count(aten.conv2d.default) == 2
    torch.testing.assert_close(gm(x), model(x))


def test_pad_modes_become_core_ops_and_int_scalars_become_floats():
    class PadScale(nn.Module):
        def forward(self, x):
            y = nn.functional.pad(x, (1, 1, 2, 2), mode="reflect")
            y = nn.functional.pad(y, (1, 0), mode="constant", value=0.5)
            return nn.functional.pad(y, (1, 1, 1, 1), mode="replicate") * 2 + True

    x = torch.randn(1, 2, 5, 5)
    gm = torch.export.export(PadScale(), (x,)).module(check_guards=False)
    expected = PadScale()(x)
    gm = aten_passes(gm)
    targets = _targets(gm)
    assert aten.pad.default not in targets
    assert {aten.reflection_pad2d.default, aten.constant_pad_nd.default, aten.replication_pad2d.default} <= set(targets)
    scalars = [a for n in gm.graph.nodes if n.target in (aten.mul.Tensor, aten.add.Tensor) for a in n.args[1:]]
    assert scalars and all(type(a) is float for a in scalars)
    torch.testing.assert_close(gm(x), expected)


class OneDimReflectPads(nn.Module):
    """Reflect pads of a [N, C, L] signal and of an unbatched [C, L] waveform (F.pad of the last dim)."""

    def forward(self, x, wave):
        return nn.functional.pad(x, (2, 1), mode="reflect"), nn.functional.pad(wave, (0, 3), mode="reflect")


def test_a_1d_reflection_pad_becomes_the_2d_one_over_a_height_of_1():
    """Neutron has MIRROR_PAD as the 2-D pad only: reflection_pad1d had stayed on the CPU between partitions."""
    inputs = (torch.randn(2, 3, 6), torch.randn(1, 9))
    gm = aten_passes(torch.export.export(OneDimReflectPads(), inputs).module(check_guards=False))
    targets = _targets(gm)
    assert aten.reflection_pad1d.default not in targets and targets.count(aten.reflection_pad2d.default) == 2
    for got, expected in zip(gm(*inputs), OneDimReflectPads()(*inputs), strict=True):
        assert torch.equal(got, expected)


class Squares(nn.Module):
    def forward(self, x):
        return x ** 2 + torch.square(x) + x.pow(3)


@pytest.mark.parametrize("npu", [True, False])
def test_a_square_is_a_product_on_targets_with_an_npu(npu):
    """x ** 2 and square(x) become x * x where the NPU runs MUL (it has no POW kernel); a CPU-only target keeps
    them whole (one table); other powers stay."""
    x = torch.randn(2, 5)
    gm = aten_passes(torch.export.export(Squares(), (x,)).module(check_guards=False), npu=npu)
    targets = _targets(gm)
    squares = [t for t in targets if t in (aten.pow.Tensor_Scalar, aten.square.default)]
    assert len(squares) == (1 if npu else 3)
    torch.testing.assert_close(gm(x), Squares()(x))


class _Constants(nn.Module):
    """Reads six constants: two equal int8 tensors, one of them under another dtype, a different one, and
    0.0 beside -0.0 (equal as numbers, not as bytes)."""

    def __init__(self):
        super().__init__()
        weight = torch.arange(-8, 8, dtype=torch.int8).reshape(4, 4)
        self.register_buffer("a", weight.clone())
        self.register_buffer("b", weight.clone())
        self.register_buffer("c", weight.to(torch.int32))
        self.register_buffer("d", weight.flip(0).clone())
        self.register_buffer("zero", torch.zeros(4))
        self.register_buffer("negative_zero", -torch.zeros(4))

    def forward(self, x):
        return x + self.a + self.b + self.c + self.d + self.zero + self.negative_zero


def test_equal_constants_become_one_attribute_and_each_user_keeps_its_node():
    from imxrt.passes.share_equal_constants import ShareEqualConstantsPass

    model = _Constants()
    x = torch.randn(4, 4)
    gm = torch.fx.symbolic_trace(model)
    result = ShareEqualConstantsPass()(gm)
    assert result.modified
    reads = [n for n in result.graph_module.graph.nodes if n.op == "get_attr"]
    assert [n.target for n in reads] == ["a", "a", "c", "d", "zero", "negative_zero"]
    assert not hasattr(result.graph_module, "b")  # deleted, so an export does not lift it
    assert all(len(n.users) == 1 for n in reads)
    torch.testing.assert_close(result.graph_module(x), model(x), rtol=0, atol=0)
    assert not ShareEqualConstantsPass()(result.graph_module).modified


class FourierPositions(nn.Module):
    """A sine / cosine position encoding computed in forward from constants alone (row and column indices by
    cumulative sums of ones, frequencies by an integer division and a power), projected by a 1x1 conv and
    added to the input: what EdgeNeXt and XCiT compute on every call."""

    def __init__(self):
        super().__init__()
        self.project = nn.Conv2d(16, 8, 1)

    def forward(self, x):
        rows = torch.ones(1, 4, 5).cumsum(1)[..., None]
        columns = torch.ones(1, 4, 5).cumsum(2)[..., None]
        frequencies = 100.0 ** (2 * torch.div(torch.arange(4, dtype=torch.float32), 2, rounding_mode="floor") / 4)
        angles = [rows / frequencies, columns / frequencies]
        positions = torch.cat([f(a) for a in angles for f in (torch.sin, torch.cos)], dim=3).permute(0, 3, 1, 2)
        return torch.relu(x + self.project(positions))


def test_a_value_computed_from_constants_alone_becomes_one_constant():
    """The encoding's ops (cumsum, arange, floor division, pow, sin, cos, the conv of it) had run in float;
    folded, the add reads one constant, the values are the model's, and a zeros state a layer reads stays."""
    torch.manual_seed(0)
    model, x = FourierPositions().eval(), torch.randn(1, 8, 4, 5)
    gm = aten_passes(torch.export.export(model, (x,), strict=False).module(check_guards=False))
    assert _targets(gm) == [aten.add.Tensor, aten.relu.default]
    (add,) = [n for n in gm.graph.nodes if n.target == aten.add.Tensor]
    assert add.args[1].op == "get_attr"
    torch.testing.assert_close(gm(x), model(x), atol=0, rtol=0)
    gru = nn.GRU(3, 4, batch_first=True).eval()
    inputs = (torch.randn(1, 5, 3), torch.zeros(1, 1, 4))
    exported = torch.export.export(_ZeroState(gru), inputs[:1], strict=False).module(check_guards=False)
    from imxrt.passes import FoldConstantsPass
    folded = FoldConstantsPass()(exported).graph_module
    assert aten.zeros.default in _targets(folded) and aten.gru.input in _targets(folded)


class _ZeroState(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        return self.layer(x, torch.zeros(1, x.shape[0], 4))[0]


class Norms(nn.Module):
    """F.normalize over the last dim (XCiT's queries and keys, an embedding head), torch.norm over two dims
    (ConvNeXt-V2's global response norm) and x.norm over one dim without keepdim."""

    def forward(self, x):
        return F.normalize(x, dim=-1), torch.norm(x, p=2, dim=(1, 2), keepdim=True), x.norm(dim=1)


def test_a_2_norm_is_a_sum_of_squares_and_normalize_a_product_by_its_reciprocal_root():
    """linalg_vector_norm had no int8 rule and decomposed only after quantization: it ran in float."""
    x = torch.randn(2, 4, 6)
    gm = aten_passes(torch.export.export(Norms(), (x,), strict=False).module(check_guards=False))
    targets = _targets(gm)
    assert aten.linalg_vector_norm.default not in targets and aten.div.Tensor not in targets
    assert targets.count(aten.rsqrt.default) == 1 and targets.count(aten.sqrt.default) == 2
    for got, expected in zip(gm(x), Norms()(x), strict=True):
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)
