"""The capability table's rules that were once LiteRT converter refusals or TFLM checks at lowering time: each
at its boundary (the last value accepted, the first refused, naming the rule), and the safety net behind them.

A value no PyTorch model can produce (a NaN slope, a weight quantized along another axis, a pad past the dim
it reflects) is written into the int8 edge graph of a model at the limit: the table must refuse it, should an
edge graph ever hold it. Then: the LiteRT lowering refuses no node the table accepts, in these models and in
the examples (the pipeline's reconciliation loop, ``_delegate_to_npu``, must not fire).
"""

from __future__ import annotations

import logging
import math

import pytest
import torch
import torch.nn.functional as F
from compiled_examples import NAMES, compiled_example
from edge_graphs import int8_edge_program, nodes_named
from torch import nn

from imxrt.kernels.limits import REQUANTIZE_MAX_MULTIPLIER
from imxrt.npu import support
from imxrt.passes.qdq import DEQUANTIZE_PER_CHANNEL, find_clusters, is_quantize
from imxrt.pipeline import CompileOptions, compile
from imxrt.targets import get_target

pytestmark = pytest.mark.slow  # compiles a dozen models and the examples

NPU = get_target("imxrt700").npu
REFUSED_BY_THE_LOWERING = "the LiteRT lowering refused it"


class Fn(nn.Module):
    """A function of the input after a 1x1 conv, so the op reads an int8 tensor of a calibrated range."""

    def __init__(self, function, channels: int = 4):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 1)
        self.function = function

    def forward(self, x):
        return self.function(self.conv(x))


X4 = (1, 4, 6, 6)
# name: (model factory, input shape): the models at the limit of a rule (they compile, all on the NPU)
MODELS = {
    "reflection_pad": (lambda: Fn(lambda x: F.pad(x, (5, 5, 5, 5), mode="reflect")), X4),
    "constant_pad": (lambda: Fn(lambda x: F.pad(x, (0, 1, 2, 0))), X4),
    "leaky_relu": (lambda: Fn(lambda x: F.leaky_relu(x, 1e30)), X4),
    "prelu": (lambda: nn.Sequential(nn.Conv2d(4, 4, 1), nn.PReLU(4)), X4),
    "sum": (lambda: Fn(lambda x: x.sum((2, 3))), X4),
    "mean": (lambda: Fn(lambda x: x.mean(1)), X4),
    "conv": (lambda: nn.Conv2d(4, 8, 3), X4),
    "conv_transpose": (lambda: nn.ConvTranspose2d(4, 4, 2, stride=2), X4),
    "mul": (lambda: Fn(lambda x: x * x), X4),
    "neg": (lambda: Fn(torch.neg), X4),
    # after a max pool, not fused into the conv
    "hardtanh": (lambda: Fn(lambda x: F.hardtanh(F.max_pool2d(x, 2), -0.5, 0.5)), X4),
    "linear": (lambda: nn.Linear(6, 8), (2, 6)),
}


def _calibration(shape):
    generator = torch.Generator().manual_seed(0)
    return [(torch.randn(shape, generator=generator),) for _ in range(4)]


@pytest.fixture(scope="module")
def programs():
    """Each model's int8 edge program, built once; a test edits a fresh copy of the node it needs."""
    built = {}

    def program(name):
        if name not in built:
            factory, shape = MODELS[name]
            torch.manual_seed(0)
            cal = _calibration(shape)
            built[name] = int8_edge_program(factory().eval(), cal[0], cal)
        return built[name]

    return program


def _check(program, op: str):
    """support.check of the one ``op`` node of ``program``."""
    (node,) = nodes_named(program, op)
    return support.check(node, find_clusters(program.graph).get(node), NPU)


def _refused_by(program, op: str, rule) -> None:
    ok, reason = _check(program, op)
    assert not ok and support.rule_text(rule) in reason, reason


def _accepted(program, op: str) -> None:
    ok, reason = _check(program, op)
    assert ok, reason


def _set_arg(node, index: int, value) -> None:
    args = list(node.args)
    args[index] = value
    node.args = tuple(args)


def _output_quantize(program, op: str):
    (node,) = nodes_named(program, op)
    return find_clusters(program.graph)[node].quantizes[0]


def test_reflection_pad_smaller_than_dim(programs):
    program = programs("reflection_pad")
    _accepted(program, "aten.reflection_pad2d.default")  # 5 on a dim of 6
    (pad,) = nodes_named(program, "aten.reflection_pad2d.default")
    _set_arg(pad, 1, [6, 5, 5, 5])
    _refused_by(program, "aten.reflection_pad2d.default", support.reflection_pad_smaller_than_dim)
    _set_arg(pad, 1, [5, 5, 5, 5])


def test_pad_pairs_non_negative(programs):
    program = programs("constant_pad")
    _accepted(program, "aten.constant_pad_nd.default")
    (pad,) = nodes_named(program, "aten.constant_pad_nd.default")
    flat = list(pad.args[1])
    for refused in ([-1, 1, 2, 0], [0, 1, 2]):  # a crop; half a pair
        _set_arg(pad, 1, refused)
        _refused_by(program, "aten.constant_pad_nd.default", support.pad_pairs_non_negative)
    _set_arg(pad, 1, flat)


def test_leaky_relu_slope_is_a_number(programs):
    program = programs("leaky_relu")
    _accepted(program, "aten.leaky_relu.default")  # a slope past what int8 holds saturates
    (leaky,) = nodes_named(program, "aten.leaky_relu.default")
    _set_arg(leaky, 1, math.nan)
    _refused_by(program, "aten.leaky_relu.default", support.leaky_relu_slope_is_a_number)
    _set_arg(leaky, 1, 1e30)


def test_prelu_constant_weight(programs):
    program = programs("prelu")
    _accepted(program, "aten.prelu.default")
    (prelu,) = nodes_named(program, "aten.prelu.default")
    (conv,) = nodes_named(program, "aten.convolution.default")
    (conv_output,) = [n for n in conv.users if is_quantize(n)]
    weight = prelu.args[1]
    computed = program.graph.call_function(weight.target, (conv_output, *weight.args[1:]))
    _set_arg(prelu, 1, computed)
    _refused_by(program, "aten.prelu.default", support.prelu_constant_weight)
    _set_arg(prelu, 1, weight)


@pytest.mark.parametrize("name, op", [("sum", "aten.sum.dim_IntList"), ("mean", "aten.mean.dim")])
def test_reduction_without_dtype(programs, name, op):
    program = programs(name)
    _accepted(program, op)
    (node,) = nodes_named(program, op)
    node.kwargs = {**node.kwargs, "dtype": torch.float64}
    _refused_by(program, op, support.reduction_without_dtype)
    node.kwargs = {k: v for k, v in node.kwargs.items() if k != "dtype"}


@pytest.mark.parametrize("name, refused_axis", [("conv", 1), ("conv_transpose", 0)])
def test_conv_weight_per_output_channel(programs, name, refused_axis):
    program = programs(name)
    _accepted(program, "aten.convolution.default")
    (conv,) = nodes_named(program, "aten.convolution.default")
    dequantize = conv.args[1]
    axis = dequantize.args[3]
    _set_arg(dequantize, 3, refused_axis)
    _refused_by(program, "aten.convolution.default", support.conv_weight_per_output_channel)
    _set_arg(dequantize, 3, axis)


@pytest.mark.parametrize("axis, accepted", [(0, True), (1, False), (-1, False)])
def test_fully_connected_weight_per_output_channel(programs, axis, accepted):
    """The quantizer gives a linear layer a per-tensor weight; a per-channel one along its input features is
    refused whatever its scales (the table cannot read them)."""
    program = programs("linear")
    (linear,) = nodes_named(program, "aten.linear.default")
    dequantize = linear.args[1]
    target, args = dequantize.target, dequantize.args
    dequantize.target = DEQUANTIZE_PER_CHANNEL
    dequantize.args = (args[0], args[1], args[2], axis, *args[3:])
    try:
        if accepted:
            _accepted(program, "aten.linear.default")
        else:
            _refused_by(program, "aten.linear.default", support.fully_connected_weight_per_output_channel)
    finally:
        dequantize.target, dequantize.args = target, args


def test_conv_is_2d_counts_strides(programs):
    program = programs("conv")
    (conv,) = nodes_named(program, "aten.convolution.default")
    stride = conv.args[3]
    _set_arg(conv, 3, [1])
    _refused_by(program, "aten.convolution.default", support.conv_is_2d)
    _set_arg(conv, 3, stride)


def _scale_at(program, op: str, scale: float):
    quantize = _output_quantize(program, op)
    _set_arg(quantize, 1, scale)
    return quantize


@pytest.mark.parametrize("name, op, rule, limit", [
    # s1 * s2 / s_out below 2^15
    ("mul", "aten.mul.Tensor", support.mul_output_scale,
     lambda ins: ins[0] * ins[1] / REQUANTIZE_MAX_MULTIPLIER["MUL"]),
    # SUB(0, x): s_out above s_x / 2^19
    ("neg", "aten.neg.default", support.add_sub_output_scale, lambda ins: ins[0] / 2**19),
    # a requantize before the clamp: s_in / s_out below 2^23
    ("hardtanh", "aten.hardtanh.default", support.requantize_left_shift,
     lambda ins: ins[0] / REQUANTIZE_MAX_MULTIPLIER["QUANTIZE"]),
])
def test_tflm_output_scale_rules(programs, name, op, rule, limit):
    """The output scale 0.1% above the limit is accepted, 0.1% below it refused by the rule."""
    program = programs(name)
    (node,) = nodes_named(program, op)
    cluster = find_clusters(program.graph)[node]
    scales = [cluster.input_qparams(i).scale for i in range(len(cluster.dequantizes))] or [None]
    if name in ("mul", "neg"):
        scales = scales * 2 if len(scales) == 1 else scales
    original = cluster.output_qparams().scale
    boundary = float(torch.tensor(limit(scales), dtype=torch.float32))
    _scale_at(program, op, boundary * 1.001)
    _accepted(program, op)
    _scale_at(program, op, boundary * 0.999)
    _refused_by(program, op, rule)
    _scale_at(program, op, original)


def test_fully_connected_bias_scale(programs):
    """The float32 bias scale s_in * s_w is off the exact product by some d: an output step of d / 0.02 or more
    is accepted, a finer one refused."""
    import numpy as np

    program = programs("linear")
    (linear,) = nodes_named(program, "aten.linear.default")
    cluster = find_clusters(program.graph)[linear]
    s_in, s_w = (float(np.float32(cluster.input_qparams(i).scale)) for i in range(2))
    d = abs(s_in * s_w - float(np.float32(s_in) * np.float32(s_w)))
    if d == 0:
        pytest.skip("s_in * s_w is exact in float32")
    original = cluster.output_qparams().scale
    _scale_at(program, "aten.linear.default", d / 0.019)
    _accepted(program, "aten.linear.default")
    _scale_at(program, "aten.linear.default", d / 0.021)
    _refused_by(program, "aten.linear.default", support.fully_connected_bias_scale)
    _scale_at(program, "aten.linear.default", original)


# ---- the safety net never fires ------------------------------------------------------------------------


def _assert_the_lowering_refused_nothing(result, caplog) -> None:
    refused = [op["name"] for op in result.report["ops"] if REFUSED_BY_THE_LOWERING in (op["reason"] or "")]
    assert refused == [], f"the capability table accepted {refused}, the LiteRT lowering refused them: a table bug"
    assert "the capability table accepted a node the LiteRT lowering refused" not in caplog.text


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_lowering_refuses_nothing_the_table_accepts_in_the_rule_models(name, caplog):
    factory, shape = MODELS[name]
    torch.manual_seed(0)
    cal = _calibration(shape)
    with caplog.at_level(logging.WARNING, logger="imxrt"):
        result = compile(factory().eval(), cal[0], "imxrt700", cal, CompileOptions(show_progress=False))
    _assert_the_lowering_refused_nothing(result, caplog)


@pytest.mark.parametrize("name", NAMES)
def test_the_lowering_refuses_nothing_the_table_accepts_in_the_examples(name, caplog):
    with caplog.at_level(logging.WARNING, logger="imxrt"):
        _, _, result = compiled_example(name)
    _assert_the_lowering_refused_nothing(result, caplog)
