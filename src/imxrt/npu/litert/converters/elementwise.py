"""Elementwise ops: binary (ADD, SUB, MUL, MAXIMUM, MINIMUM), unary activations and math, clamps.

Simple ops are rows of data (``Binary``, ``Unary``); a constant operand (a float constant or a Python
scalar the quantizer left float) is quantized here symmetrically, so ``x * 0.5`` keeps its exact value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from ai_edge_litert import schema_py_generated as schema
from torch.fx import Node

from imxrt.kernels import activations
from imxrt.npu.litert import expressible, layout, qdq
from imxrt.npu.litert.context import LoweringContext, clamp_range, edge_shape
from imxrt.npu.litert.converters.common import options
from imxrt.npu.litert.ir import PerTensor, Tensor

# The options object of each binary op with a fused activation.
_OPTIONS = {"ADD": schema.AddOptionsT, "SUB": schema.SubOptionsT, "MUL": schema.MulOptionsT}


@dataclass(frozen=True)
class Binary:
    """A two-operand op with numpy-style broadcasting. ``fusable``: TFLite has a fused activation;
    ``shares_qparams``: the int8 kernel compares raw values, so inputs and output share qparams."""

    builtin: str
    fusable: bool = False
    shares_qparams: bool = False

    def __call__(self, ctx: LoweringContext, node: Node) -> None:
        assert node.kwargs.get("alpha", 1) == 1, "support.add_sub_unit_alpha"
        out = ctx.output(node, fusable=self.fusable)
        operands = [broadcast_operand(ctx, node, arg, len(out.edge_shape)) for arg in node.args[:2]]
        op_options = None
        if self.fusable:
            op_options = options(_OPTIONS[self.builtin], fusedActivationFunction=out.fused)
        quant = None
        if self.shares_qparams:
            quant = operands[0].quantization
            operands = [t if t.quantization == quant else _requantized(ctx, t, quant, out.sources)
                        for t in operands]
        ctx.emit_result(self.builtin, operands, out, op_options, quantization=quant)


@dataclass(frozen=True)
class Unary:
    """A one-operand op; the int8 kernel requantizes to the output qparams itself."""

    builtin: str

    def __call__(self, ctx: LoweringContext, node: Node) -> None:
        x = ctx.tensor(node.args[0], node)
        ctx.emit_result(self.builtin, [x], ctx.output(node))


def convert_leaky_relu(ctx: LoweringContext, node: Node) -> None:
    slope = float(node.args[1]) if len(node.args) > 1 else float(node.kwargs.get("negative_slope", 0.01))
    x = ctx.tensor(node.args[0], node)
    out = ctx.output(node)
    assert isinstance(x.quantization, PerTensor)
    assert expressible.slope_is_a_number(slope), "support.leaky_relu_slope_is_a_number"
    # a slope TFLite's requantization cannot hold is written as the one that saturates the same codes
    alpha = activations.saturating_leaky_alpha(x.quantization.scale, out.quantization.scale, slope)
    ctx.emit_result("LEAKY_RELU", [x], out, options(schema.LeakyReluOptionsT, alpha=alpha))


def convert_neg(ctx: LoweringContext, node: Node) -> None:
    """neg(x) -> SUB(0, x); the zero constant takes x's scale, so no precision is lost aligning it."""
    x = ctx.tensor(node.args[0], node)
    assert isinstance(x.quantization, PerTensor)
    zero_quantization = PerTensor(x.quantization.scale, 0)
    zero = ctx.constant_tensor("zero", np.zeros([1] * len(x.shape), np.int8), zero_quantization)
    ctx.emit_result("SUB", [zero, x], ctx.output(node), options(schema.SubOptionsT))


def convert_prelu(ctx: LoweringContext, node: Node) -> None:
    """prelu(x, weight): the weight (1 or C values) applies along edge dim 1, not the last dim."""
    x = ctx.tensor(node.args[0], node)
    rank = len(edge_shape(node.args[0]))
    alpha = ctx.tensor(node.args[1], node)
    count = int(np.prod(alpha.shape))
    edge_alpha_shape = [1] * rank
    if count > 1:
        edge_alpha_shape[1] = count
    assert alpha.is_constant, "support.prelu_constant_weight"
    data = np.frombuffer(alpha.data, np.int8).reshape(edge_alpha_shape)
    alpha = ctx.constant_tensor(alpha.name, layout.stored_array(data), alpha.quantization)
    ctx.emit_result("PRELU", [x, alpha], ctx.output(node))


def convert_clamp(ctx: LoweringContext, node: Node) -> None:
    """relu / hardtanh / clamp on their own: RELU requantizes itself; the others requantize to the
    output qparams first, then clamp in the int8 domain (exact)."""
    low, high = clamp_range(node)
    x = ctx.tensor(node.args[0], node)
    out = ctx.output(node)
    if (low, high) == (0.0, math.inf):
        ctx.emit_result("RELU", [x], out)
        return
    if x.quantization != out.quantization:
        x = ctx.requantize(x, out.quantization, out.sources)
    ctx.bind(out, ctx.clamp(x, low, high, out.sources))


def broadcast_operand(ctx: LoweringContext, node: Node, arg: object, rank: int) -> Tensor:
    """An operand brought to the output's rank (leading 1s, as numpy broadcasting aligns trailing
    dims) in the stored layout. Python scalars become int8 constants."""
    if isinstance(arg, (int, float)):
        return ctx.float_constant(f"{node.name}_scalar", np.full([1] * rank, float(arg), np.float32))
    if ctx.is_constant_expression(arg) and not qdq.is_dequantize(arg):
        value = ctx.constant_value(arg)
        if value.dtype.is_floating_point:
            values = qdq.as_numpy(value.float())
            padded = [1] * (rank - values.ndim) + list(values.shape)
            return ctx.float_constant(arg.name, values.reshape(padded))
    tensor = ctx.tensor(arg, node)
    shape = edge_shape(arg) if isinstance(arg, Node) else ()
    if len(shape) == rank:
        return tensor
    padded = (1,) * (rank - len(shape)) + shape
    if tensor.is_constant:
        data = np.frombuffer(tensor.data, tensor.dtype).reshape(shape)
        stored = layout.stored_array(data.reshape(padded))
        return ctx.constant_tensor(tensor.name, stored, tensor.quantization)
    return ctx.apply_steps(tensor, layout.view_steps(shape, padded), [node])


def _requantized(ctx: LoweringContext, tensor: Tensor, quant: PerTensor, sources) -> Tensor:
    if tensor.is_constant:
        assert isinstance(tensor.quantization, PerTensor)
        old = tensor.quantization
        values = (np.frombuffer(tensor.data, np.int8).astype(np.float32) - old.zero_point) * old.scale
        data = qdq.quantize_values(values, quant).reshape(tensor.shape)
        return ctx.constant_tensor(tensor.name, data, quant)
    return ctx.requantize(tensor, quant, sources)


ADD = Binary("ADD", fusable=True)
SUB = Binary("SUB", fusable=True)
MUL = Binary("MUL", fusable=True)
MAXIMUM = Binary("MAXIMUM", shares_qparams=True)
MINIMUM = Binary("MINIMUM", shares_qparams=True)
