"""Data movement: view / squeeze / unsqueeze / clone / copies -> RESHAPE or nothing; permute_copy ->
TRANSPOSE composed with the layout; slice_copy -> SLICE; select_copy -> SLICE and RESHAPE; cat ->
CONCATENATION. All keep qparams."""

from __future__ import annotations

import math

import numpy as np
from executorch.exir.dialects._ops import ops as exir_ops
from torch.fx import Node

from imxrt.npu.litert import layout, qdq
from imxrt.npu.litert.context import LoweringContext, edge_shape
from imxrt.npu.litert.ir import Tensor

_LINEAR = exir_ops.edge.aten.linear.default


def convert_view(ctx: LoweringContext, node: Node) -> None:
    """Any op that only reinterprets the edge shape in row-major order (view, squeeze, unsqueeze, clone,
    copies): a RESHAPE, a TRANSPOSE where the NHWC order differs from the edge order, or nothing. A flatten
    of an image read only by fully connected layers is a RESHAPE of the NHWC bytes: the layers permute
    their weight columns instead (``LoweringContext.feature_orders``)."""
    x = ctx.tensor(node.args[0], node)
    out = ctx.output(node)
    in_shape = edge_shape(node.args[0])
    if _flattens_image_into_fully_connected(node, in_shape, out):
        n, c, h, w = in_shape
        flat = ctx.bind(out, ctx.apply_steps(x, [layout.Reshape(out.shape)], out.sources))
        # stored position (h, w, c) holds edge feature c·H·W + h·W + w
        ctx.feature_orders[flat.name] = np.arange(c * h * w).reshape(c, h, w).transpose(1, 2, 0).reshape(-1)
        return
    steps = layout.view_steps(in_shape, out.edge_shape)
    ctx.bind(out, ctx.apply_steps(x, steps, out.sources))


def _flattens_image_into_fully_connected(node: Node, in_shape: tuple[int, ...], out) -> bool:
    """[N, C, H, W] -> [N, C·H·W] (H·W > 1) whose every reader, in this partition, is the input of a linear
    layer with a constant weight."""
    if len(in_shape) != 4 or in_shape[2] * in_shape[3] == 1 or out.edge_shape != (in_shape[0], math.prod(in_shape[1:])):
        return False
    readers = [op for dq in out.anchor.users for op in dq.users] if all(
        qdq.is_dequantize(dq) for dq in out.anchor.users) else []
    return bool(readers) and all(op.target == _LINEAR and op.args[0] in out.anchor.users for op in readers)


def convert_permute(ctx: LoweringContext, node: Node) -> None:
    """permute_copy(x, dims) composed with the layout: nothing if the stored order does not change."""
    x = ctx.tensor(node.args[0], node)
    out = ctx.output(node)
    rank = len(edge_shape(node.args[0]))
    assert rank == len(out.edge_shape), "a permutation keeps the rank"
    perm = [int(d) % rank for d in node.args[1]]
    steps = layout.permute_steps(x.shape, layout.stored_permutation(perm))
    ctx.bind(out, ctx.apply_steps(x, steps, out.sources))


def convert_select(ctx: LoweringContext, node: Node) -> None:
    """select_copy(x, dim, index) -> SLICE of one element along the stored axis, then the view that drops
    the dim (a RESHAPE, or a TRANSPOSE where the stored order changes with the rank). SLICEs of one tensor
    later join into one SPLIT_V: a cell loop's ``x[:, t]`` is one kernel."""
    shape = edge_shape(node.args[0])
    rank = len(shape)
    dim = int(node.args[1]) % rank
    index = int(node.args[2]) % shape[dim]
    x = ctx.tensor(node.args[0], node)
    out = ctx.output(node)
    sliced_edge = tuple(1 if d == dim else n for d, n in enumerate(shape))
    sliced = ctx.activation_tensor(out.anchor.name + "_slice", layout.stored_shape(sliced_edge), x.quantization)
    ctx.emit("SLICE", _slice_operands(ctx, x, layout.stored_axis(dim, rank), index, 1), [sliced], None, out.sources)
    ctx.bind(out, ctx.apply_steps(sliced, layout.view_steps(sliced_edge, out.edge_shape), out.sources))


def convert_slice(ctx: LoweringContext, node: Node) -> None:
    """slice_copy(x, dim, start, end, step=1) -> SLICE on the stored axis."""
    shape = edge_shape(node.args[0])
    rank = len(shape)
    dim = int(node.args[1]) % rank if len(node.args) > 1 else 0
    start = node.args[2] if len(node.args) > 2 else None
    end = node.args[3] if len(node.args) > 3 else None
    step = node.args[4] if len(node.args) > 4 else 1
    assert step == 1, "support.slice_unit_step"
    start, end, _ = slice(start, end).indices(shape[dim])
    x = ctx.tensor(node.args[0], node)
    out = ctx.output(node)
    inputs = _slice_operands(ctx, x, layout.stored_axis(dim, rank), start, max(end - start, 0))
    ctx.emit_result("SLICE", inputs, out, quantization=x.quantization)


def _slice_operands(ctx: LoweringContext, x: Tensor, axis: int, start: int, length: int) -> list[Tensor]:
    """SLICE's inputs cutting ``length`` elements from ``start`` along stored ``axis`` of ``x``."""
    begin = [0] * len(x.shape)
    begin[axis] = start
    size = list(x.shape)
    size[axis] = length
    return [x, ctx.int32_constant("begin", begin), ctx.int32_constant("size", size)]


def convert_cat(ctx: LoweringContext, node: Node) -> None:
    """cat(tensors, dim) -> CONCATENATION; inputs with other qparams than the output are requantized
    first (the int8 kernel copies bytes)."""
    out = ctx.output(node)
    rank = len(out.edge_shape)
    dim = int(node.args[1]) if len(node.args) > 1 else 0
    parts = [a for a in node.args[0] if int(np.prod(edge_shape(a))) > 0]
    tensors = [ctx.tensor(a, node) for a in parts]
    tensors = [t if t.quantization == out.quantization else ctx.requantize(t, out.quantization, out.sources)
               for t in tensors]
    joined = ctx.activation_tensor(out.anchor.name, out.shape, out.quantization)
    ctx.bind(out, ctx.concatenate(tensors, joined, layout.stored_axis(dim, rank), out.sources))
