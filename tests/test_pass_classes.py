"""Every graph pass class, alone on a tiny graph: what it changes, and that the numbers stay the same.

One case per class in ``imxrt.passes`` (``test_every_pass_class_has_a_case`` finds them by module scan): the
graph before the pass has the ops the pass rewrites, the graph after has what it rewrites them into, and the
graph module computes the same outputs on a random input before and after. Exactly the same where the
rewrite is exact in float; otherwise within a tolerance whose reason the case states.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase

import imxrt.passes
from imxrt.passes import (
    AddBatchDimensionPass,
    Convert1dOpsTo2dPass,
    ConvertAddmmToLinearPass,
    ConvertClampTensorPass,
    ConvertConv1dToConv2dPass,
    ConvertDivToMulPass,
    ConvertMatmulToBmmPass,
    ConvertPadToCoreOpPass,
    ConvertPoolsTo2dPass,
    ConvertScalarOperandsToFloatPass,
    ConvertSplitToSlicesPass,
    ConvertStackToCatPass,
    DecomposeAttentionPass,
    DecomposeGeluPass,
    DecomposeHardsigmoidPass,
    DecomposeLayerNormPass,
    DecomposeMagnitudePass,
    DecomposeMedianPass,
    DecomposeSiluPass,
    DecomposeSquarePass,
    DecomposeVectorNormPass,
    FoldBatchNormPass,
    FoldConstantsPass,
    FoldHardsigmoidPass,
    FoldLayerNormAffinePass,
    FunctionalizeInPlacePass,
    RemoveIdentityCopiesPass,
    RemoveNoOpsPass,
    RescaleBatchMatmulOperandsPass,
    SinkBatchViewsPass,
    SinkSqueezePass,
    UnrollRecurrentLayersPass,
    UnshareParametersPass,
)
from imxrt.passes.share_equal_constants import ShareEqualConstantsPass
from imxrt.quantization.rules import NPU_AND_CPU, qparam_flow

aten = torch.ops.aten


def _get_attrs(gm: GraphModule) -> int:
    return sum(node.op == "get_attr" for node in gm.graph.nodes)


def _attributes_read(gm: GraphModule) -> int:
    return len({node.target for node in gm.graph.nodes if node.op == "get_attr"})


def _layer_norms_with_affine(gm: GraphModule) -> int:
    return sum(node.target == aten.layer_norm.default and any(a is not None for a in node.args[2:4])
               for node in gm.graph.nodes)


def _int_scalar_operands(gm: GraphModule) -> int:
    return sum(node.op == "call_function" and any(type(a) is int for a in node.args[1:2]) for node in gm.graph.nodes)


Fact = object  # an op (how many calls of it the graph has) or a function of the graph module giving a count


@dataclass
class Case:
    """A graph, its inputs, and the counts of facts the graph has before and after the pass."""

    gm: GraphModule
    inputs: tuple
    before: dict[Fact, int]
    after: dict[Fact, int]
    # (absolute tolerance, why the rewrite is not exact in float); None: the outputs are bit-identical
    tolerance: tuple[float, str] | None = None
    graph_pass: PassBase | None = None  # default: the pass class with no arguments


def _count(gm: GraphModule, fact: Fact) -> int:
    if inspect.isfunction(fact):
        return fact(gm)
    return sum(node.op == "call_function" and node.target == fact for node in gm.graph.nodes)


def _aten(module: nn.Module, *inputs) -> GraphModule:
    """The exported aten graph module of ``module`` (eval mode), as the pipeline's passes see it."""
    return torch.export.export(module.eval(), inputs, strict=False).module(check_guards=False)


def _inputs(*shapes) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    return tuple(torch.randn(*shape, generator=generator) for shape in shapes)


class _Forward(nn.Module):
    """A module whose forward is ``function`` (with ``self`` for its parameters)."""

    def __init__(self, function, **children):
        super().__init__()
        self.function = function
        for name, child in children.items():
            setattr(self, name, child)

    def forward(self, *inputs):
        return self.function(self, *inputs)


def _case(function, shapes, before, after, tolerance=None, graph_pass=None, **children) -> Case:
    inputs = _inputs(*shapes)
    return Case(_aten(_Forward(function, **children), *inputs), inputs, before, after, tolerance, graph_pass)


# --- one case per pass class -----------------------------------------------------------------------------------

def add_batch_dimension() -> Case:
    """A conv of an unbatched [C, H, W] input reads a batch of one, squeezed after."""
    return _case(lambda m, x: m.conv(x), [(3, 6, 6)], {aten.conv2d.default: 1, aten.unsqueeze.default: 0},
                 {aten.conv2d.default: 1, aten.unsqueeze.default: 1, aten.squeeze.dims: 1},
                 conv=nn.Conv2d(3, 4, 3))


def convert_1d_ops_to_2d() -> Case:
    return _case(lambda m, x: F.max_pool1d(x, 3, 2, 1), [(1, 4, 16)], {aten.max_pool1d.default: 1},
                 {aten.max_pool1d.default: 0, aten.max_pool2d.default: 1})


def convert_pools_to_2d() -> Case:
    """A 3-D max pool with padding, dilation and ceil mode: the maximum over depth of the H x W maxima."""
    return _case(lambda m, x: F.max_pool3d(x, (2, 3, 2), (1, 2, 2), (1, 1, 0), (2, 1, 2), True), [(1, 2, 7, 9, 11)],
                 {aten.max_pool3d.default: 1, aten.max_pool2d.default: 0},
                 {aten.max_pool3d.default: 0, aten.max_pool2d.default: 2})


def decompose_median() -> Case:
    """The median along a dim of 5 values is the last of the 3 smallest."""
    return _case(lambda m, x: torch.median(x, 1, keepdim=True).values, [(3, 5, 4)],
                 {aten.median.dim: 1, aten.topk.default: 0}, {aten.median.dim: 0, aten.topk.default: 1})


def convert_addmm_to_linear() -> Case:
    return _case(lambda m, x: torch.addmm(m.b, x, m.w), [(2, 6)], {aten.addmm.default: 1, aten.linear.default: 0},
                 {aten.addmm.default: 0, aten.linear.default: 1},
                 tolerance=(1e-6, "the linear multiplies by a transposed copy of W: another summation order"),
                 w=nn.Parameter(torch.randn(6, 5)), b=nn.Parameter(torch.randn(5)))


def convert_clamp_tensor() -> Case:
    return _case(lambda m, x: torch.clamp(x, torch.full_like(x, -0.5), torch.full_like(x, 0.5)), [(2, 8)],
                 {aten.clamp.Tensor: 1, aten.clamp.default: 0}, {aten.clamp.Tensor: 0, aten.clamp.default: 1})


def convert_conv1d_to_conv2d() -> Case:
    return _case(lambda m, x: m.conv(x), [(1, 4, 16)], {aten.conv1d.default: 1, aten.conv2d.default: 0},
                 {aten.conv1d.default: 0, aten.conv2d.default: 1}, conv=nn.Conv1d(4, 6, 3, stride=2, padding=1))


def convert_div_to_mul() -> Case:
    """x / 4 is x * 0.25 exactly: a power of two's reciprocal is exact."""
    return _case(lambda m, x: x / 4.0, [(2, 8)], {aten.div.Tensor: 1, aten.mul.Tensor: 0},
                 {aten.div.Tensor: 0, aten.mul.Tensor: 1})


def convert_matmul_to_bmm() -> Case:
    return _case(lambda m, a, b: a @ b, [(2, 3, 4, 5), (2, 3, 5, 6)], {aten.matmul.default: 1, aten.bmm.default: 0},
                 {aten.matmul.default: 0, aten.bmm.default: 1})


def convert_pad_to_core_op() -> Case:
    return _case(lambda m, x: F.pad(x, (1, 1, 2, 2), mode="reflect"), [(1, 2, 5, 5)],
                 {aten.pad.default: 1, aten.reflection_pad2d.default: 0},
                 {aten.pad.default: 0, aten.reflection_pad2d.default: 1})


def convert_scalar_operands_to_float() -> Case:
    """x * 2 with an int 2 becomes x * 2.0; 1.0 - x (rsub) a sub from a float constant."""
    return _case(lambda m, x: (x * 2, 1.0 - x), [(2, 8)], {_int_scalar_operands: 1, aten.rsub.Scalar: 1},
                 {_int_scalar_operands: 0, aten.rsub.Scalar: 0, aten.sub.Tensor: 1})


def convert_split_to_slices() -> Case:
    return _case(lambda m, x: [p * 2 for p in torch.split(x, [3, 5], 1)], [(2, 8)],
                 {aten.split_with_sizes.default: 1, aten.slice.Tensor: 0},
                 {aten.split_with_sizes.default: 0, aten.slice.Tensor: 2})


def convert_stack_to_cat() -> Case:
    return _case(lambda m, x: torch.stack([torch.relu(x), x * 2], 1), [(2, 3, 4)],
                 {aten.stack.default: 1, aten.cat.default: 0}, {aten.stack.default: 0, aten.cat.default: 1})


def decompose_attention() -> Case:
    return _case(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v), [(1, 2, 4, 8)] * 3,
                 {aten.scaled_dot_product_attention.default: 1, aten.bmm.default: 0},
                 {aten.scaled_dot_product_attention.default: 0, aten.bmm.default: 2, aten._softmax.default: 0},
                 tolerance=(1e-6, "the scale multiplies the scores after the product, not the queries before"))


def decompose_gelu() -> Case:
    return _case(lambda m, x: F.gelu(x, approximate="tanh"), [(2, 64)], {aten.gelu.default: 1},
                 {aten.gelu.default: 0, aten.sigmoid.default: 1, aten.hardtanh.default: 1},
                 tolerance=(1e-6, "tanh(z) as 2·sigmoid(2z) - 1, and the clamp at ±5: within 4.6e-8·|x| in float"))


def decompose_hardsigmoid() -> Case:
    return _case(lambda m, x: F.hardsigmoid(x * 4), [(2, 64)], {aten.hardsigmoid.default: 1},
                 {aten.hardsigmoid.default: 0, aten.hardtanh.default: 1},
                 tolerance=(1e-7, "a product by 1/6 instead of a division by 6: one rounding apart"))


def decompose_layer_norm() -> Case:
    return _case(lambda m, x: m.norm(x), [(1, 4, 16)], {aten.layer_norm.default: 1},
                 {aten.layer_norm.default: 0, aten.rsqrt.default: 1, aten.linear.default: 2},
                 tolerance=(1e-5, "the means are fully connected layers: another summation order"),
                 norm=nn.LayerNorm(16))


def decompose_silu() -> Case:
    return _case(lambda m, x: F.silu(x), [(2, 64)], {aten.silu.default: 1},
                 {aten.silu.default: 0, aten.sigmoid.default: 1, aten.mul.Tensor: 1},
                 tolerance=(1e-6, "x · sigmoid(x) rounds twice where the fused kernel computes x / (1 + exp(-x))"))


def decompose_square() -> Case:
    return _case(lambda m, x: x ** 2, [(2, 8)], {aten.pow.Tensor_Scalar: 1},
                 {aten.pow.Tensor_Scalar: 0, aten.mul.Tensor: 1})


def decompose_magnitude() -> Case:
    """|re + i im| of a spectrum's two halves: its largest projection on 4 directions, within ±0.12 %."""
    def magnitude(m, x):
        re, im = x[:, :4], x[:, 4:]
        return (re ** 2 + im * im).sqrt()

    return _case(magnitude, [(2, 8)],
                 {aten.sqrt.default: 1, aten.maximum.default: 0},
                 {aten.sqrt.default: 0, aten.pow.Tensor_Scalar: 0, aten.abs.default: 2, aten.maximum.default: 4},
                 tolerance=(0.0012 * 5, "the largest projection is within ±0.12 % of the magnitude (|x| < 5)"))


def decompose_vector_norm() -> Case:
    return _case(lambda m, x: torch.norm(x, p=2, dim=1), [(2, 4, 6)], {aten.linalg_vector_norm.default: 1},
                 {aten.linalg_vector_norm.default: 0, aten.sqrt.default: 1, aten.mul.Tensor: 1},
                 tolerance=(1e-6, "the sum of squares is summed in another order than the norm kernel's"))


def _trained_batch_norm(channels: int) -> nn.BatchNorm2d:
    norm = nn.BatchNorm2d(channels)
    with torch.no_grad():
        norm.running_mean.uniform_(-1, 1)
        norm.running_var.uniform_(0.5, 2)
        norm.weight.uniform_(0.5, 2)
        norm.bias.uniform_(-1, 1)
    return norm


def fold_batch_norm() -> Case:
    return _case(lambda m, x: m.norm(m.conv(x)), [(1, 3, 6, 6)], {aten.batch_norm.default: 1},
                 {aten.batch_norm.default: 0, aten.conv2d.default: 1},
                 tolerance=(1e-5, "the conv's weights and bias are rescaled: each product rounds differently"),
                 conv=nn.Conv2d(3, 4, 3), norm=_trained_batch_norm(4))


def fold_constants() -> Case:
    """A value computed from constants alone (a cumulative sum of ones) becomes one module constant."""
    return _case(lambda m, x: x + torch.ones(8).cumsum(0), [(2, 8)], {aten.cumsum.default: 1, _get_attrs: 0},
                 {aten.cumsum.default: 0, aten.add.Tensor: 1, _get_attrs: 1})


def fold_hardsigmoid() -> Case:
    return _case(lambda m, x: F.hardsigmoid(m.conv(x)), [(1, 3, 6, 6)], {aten.hardsigmoid.default: 1},
                 {aten.hardsigmoid.default: 0, aten.hardtanh.default: 1, aten.conv2d.default: 1},
                 tolerance=(1e-6, "the conv's weights are divided by 6 before the products, not the sum after"),
                 conv=nn.Conv2d(3, 4, 3))


def fold_layer_norm_affine() -> Case:
    norm = nn.LayerNorm(8)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 2)
        norm.bias.uniform_(-1, 1)
    return _case(lambda m, x: m.fc(m.norm(x)), [(1, 3, 8)], {_layer_norms_with_affine: 1},
                 {_layer_norms_with_affine: 0, aten.layer_norm.default: 1, aten.linear.default: 1},
                 tolerance=(1e-5, "γ and β are multiplied into W and b: the products round differently"),
                 norm=norm, fc=nn.Linear(8, 5))


def functionalize_in_place() -> Case:
    def forward(m, x):
        y = x * 2
        y.add_(1.0)
        return torch.relu_(y)

    return _case(forward, [(2, 8)], {aten.add_.Tensor: 1, aten.relu_.default: 1},
                 {aten.add_.Tensor: 0, aten.relu_.default: 0, aten.add.Tensor: 1, aten.relu.default: 1})


def remove_identity_copies() -> Case:
    """An edge graph (this pass runs after to_edge): a transposed value made contiguous is already dense."""
    from executorch.exir import EdgeCompileConfig, to_edge
    from executorch.exir.dialects._ops import ops as exir_ops

    inputs = _inputs((2, 3, 4))
    program = torch.export.export(_Forward(lambda m, x: torch.relu(x.transpose(1, 2).contiguous())).eval(), inputs)
    edge = to_edge(program, compile_config=EdgeCompileConfig(_check_ir_validity=False)).exported_program()
    clone = exir_ops.edge.dim_order_ops._clone_dim_order.default
    return Case(edge.graph_module, inputs, {clone: 1}, {clone: 0, exir_ops.edge.aten.permute_copy.default: 1})


def remove_noops() -> Case:
    return _case(lambda m, x: F.dropout(x.clone(), 0.3, training=False) * 2, [(2, 8)],
                 {aten.dropout.default: 1, aten.clone.default: 1}, {aten.dropout.default: 0, aten.clone.default: 0})


def rescale_batch_matmul_operands() -> Case:
    """A softmax's output (zero point -128) read by a bmm is requantized by a mul by 1: exact in float."""
    flow = qparam_flow(NPU_AND_CPU)  # the quantizer's fixed and shared qparams, as the pipeline passes them
    return _case(lambda m, s, v: torch.bmm(torch.softmax(s, -1), v), [(2, 4, 5), (2, 5, 3)], {aten.mul.Tensor: 0},
                 {aten.mul.Tensor: 1, aten.bmm.default: 1}, graph_pass=RescaleBatchMatmulOperandsPass(flow))


class _EqualBuffers(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("a", torch.arange(8.0))
        self.register_buffer("b", torch.arange(8.0))

    def forward(self, x):
        return x + self.a + self.b


def share_equal_constants() -> Case:
    """Two buffers of equal bytes become one attribute, each reader keeping its own node (a traced graph:
    the pass runs on pt2e's converted module, whose constants are module attributes)."""
    inputs = _inputs((2, 8))
    return Case(torch.fx.symbolic_trace(_EqualBuffers()), inputs, {_attributes_read: 2, _get_attrs: 2},
                {_attributes_read: 1, _get_attrs: 2})


def sink_batch_views() -> Case:
    """The view splitting a bmm's merged batch sinks past the scale and softmax and cancels the next view."""
    def forward(m, p, v):
        scores = torch.softmax(p.view(2, 3, 4, 5) * 0.5, -1)
        return torch.bmm(scores.view(6, 4, 5), v)

    return _case(forward, [(6, 4, 5), (6, 5, 3)], {aten.view.default: 2}, {aten.view.default: 0})


def sink_squeeze() -> Case:
    """A relu between a squeeze and an unsqueeze of the same unit dim runs on the rank-4 value."""
    return _case(lambda m, x: torch.relu(x.squeeze(2)).unsqueeze(2), [(1, 4, 1, 8)],
                 {aten.squeeze.dim: 1, aten.unsqueeze.default: 1},
                 {aten.squeeze.dim: 0, aten.unsqueeze.default: 0, aten.relu.default: 1})


def unroll_recurrent_layers() -> Case:
    return _case(lambda m, x: m.gru(x)[0], [(1, 3, 4)], {aten.gru.input: 1},
                 {aten.gru.input: 0, aten.sigmoid.default: 3, aten.tanh.default: 3},
                 tolerance=(1e-6, "the gates are linear layers, their biases summed: another summation order"),
                 gru=nn.GRU(4, 5, batch_first=True))


def unshare_parameters() -> Case:
    """A layer applied twice: each use reads the weight and the bias through its own node."""
    return _case(lambda m, x: m.fc(torch.relu(m.fc(x))), [(2, 6)], {_get_attrs: 2}, {_get_attrs: 4},
                 fc=nn.Linear(6, 6))


CASES: dict[type[PassBase], Callable[[], Case]] = {
    AddBatchDimensionPass: add_batch_dimension,
    Convert1dOpsTo2dPass: convert_1d_ops_to_2d,
    ConvertAddmmToLinearPass: convert_addmm_to_linear,
    ConvertClampTensorPass: convert_clamp_tensor,
    ConvertConv1dToConv2dPass: convert_conv1d_to_conv2d,
    ConvertDivToMulPass: convert_div_to_mul,
    ConvertMatmulToBmmPass: convert_matmul_to_bmm,
    ConvertPadToCoreOpPass: convert_pad_to_core_op,
    ConvertPoolsTo2dPass: convert_pools_to_2d,
    ConvertScalarOperandsToFloatPass: convert_scalar_operands_to_float,
    ConvertSplitToSlicesPass: convert_split_to_slices,
    ConvertStackToCatPass: convert_stack_to_cat,
    DecomposeAttentionPass: decompose_attention,
    DecomposeGeluPass: decompose_gelu,
    DecomposeHardsigmoidPass: decompose_hardsigmoid,
    DecomposeLayerNormPass: decompose_layer_norm,
    DecomposeMagnitudePass: decompose_magnitude,
    DecomposeMedianPass: decompose_median,
    DecomposeSiluPass: decompose_silu,
    DecomposeSquarePass: decompose_square,
    DecomposeVectorNormPass: decompose_vector_norm,
    FoldBatchNormPass: fold_batch_norm,
    FoldConstantsPass: fold_constants,
    FoldHardsigmoidPass: fold_hardsigmoid,
    FoldLayerNormAffinePass: fold_layer_norm_affine,
    FunctionalizeInPlacePass: functionalize_in_place,
    RemoveIdentityCopiesPass: remove_identity_copies,
    RemoveNoOpsPass: remove_noops,
    RescaleBatchMatmulOperandsPass: rescale_batch_matmul_operands,
    ShareEqualConstantsPass: share_equal_constants,
    SinkBatchViewsPass: sink_batch_views,
    SinkSqueezePass: sink_squeeze,
    UnrollRecurrentLayersPass: unroll_recurrent_layers,
    UnshareParametersPass: unshare_parameters,
}


def _outputs(gm: GraphModule, inputs: tuple) -> list[torch.Tensor]:
    """``gm``'s outputs on copies of ``inputs`` (a graph with in-place ops writes into them), flattened."""
    result = gm(*(x.clone() for x in inputs))
    return [t for t in torch.utils._pytree.tree_leaves(result) if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize("pass_type", CASES, ids=lambda pass_type: pass_type.__name__)
def test_pass_rewrites_its_ops_and_keeps_the_numbers(pass_type):
    torch.manual_seed(0)  # the cases' parameters
    case = CASES[pass_type]()
    for fact, count in case.before.items():
        assert _count(case.gm, fact) == count, f"before {pass_type.__name__}: {fact}"
    unchanged = {fact: _count(case.gm, fact) for fact in case.after}
    assert unchanged != case.after, "the case must tell the graph after the pass from the graph before"
    expected = _outputs(case.gm, case.inputs)
    result = (case.graph_pass or pass_type())(case.gm)
    assert result.modified
    for fact, count in case.after.items():
        assert _count(result.graph_module, fact) == count, f"after {pass_type.__name__}: {fact}"
    got = _outputs(result.graph_module, case.inputs)
    assert len(got) == len(expected)
    for value, reference in zip(got, expected, strict=True):
        if case.tolerance is None:
            assert torch.equal(value, reference)
        else:
            torch.testing.assert_close(value, reference, rtol=0, atol=case.tolerance[0])


def _pass_classes() -> set[type[PassBase]]:
    """Every ``PassBase`` subclass defined in a module of ``imxrt.passes``."""
    found = set()
    for module_info in pkgutil.iter_modules(imxrt.passes.__path__):
        module = importlib.import_module(f"imxrt.passes.{module_info.name}")
        found |= {cls for _, cls in inspect.getmembers(module, inspect.isclass)
                  if issubclass(cls, PassBase) and cls is not PassBase and cls.__module__ == module.__name__}
    return found


def test_every_pass_class_has_a_case():
    classes = _pass_classes()
    assert len(classes) >= 31
    missing = sorted(pass_type.__name__ for pass_type in classes - set(CASES))
    assert not missing, f"pass classes without a case here: {missing}"
    assert not set(CASES) - classes
