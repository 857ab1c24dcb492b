"""linear / addmm / mm with a constant weight -> FULLY_CONNECTED (weights [out, in], per tensor as the
quantizer gives them, or per channel along out); bmm, and mm of two activations -> BATCH_MATMUL."""

from __future__ import annotations

import numpy as np
from ai_edge_litert import schema_py_generated as schema
from executorch.exir.dialects._ops import ops as exir_ops
from torch.fx import Node

from imxrt.npu.litert import expressible, layout, qdq
from imxrt.npu.litert.context import LoweringContext, edge_shape
from imxrt.npu.litert.converters.common import options
from imxrt.npu.litert.ir import PerChannel, PerTensor

aten = exir_ops.edge.aten
_TRANSPOSE_2D = {aten.permute_copy.default, aten.t_copy.default}


def convert_linear(ctx: LoweringContext, node: Node) -> None:
    """linear(x, weight[out, in], bias)."""
    bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
    _fully_connected(ctx, node, node.args[0], node.args[1], bias, weight_is_transposed=False)


def convert_addmm(ctx: LoweringContext, node: Node) -> None:
    """addmm(bias, x, mat2[in, out]): FC with weight mat2^T; alpha = beta = 1 only."""
    assert node.kwargs.get("alpha", 1) == 1 and node.kwargs.get("beta", 1) == 1, "support.addmm_unit_scaling"
    _fully_connected(ctx, node, node.args[1], node.args[2], node.args[0], weight_is_transposed=True)


def convert_mm(ctx: LoweringContext, node: Node) -> None:
    """mm(x, mat2[in, out]): FC if mat2 is a symmetric int8 constant (FC weights have zero point 0),
    else BATCH_MATMUL, which takes a constant or activation mat2 with any zero point."""
    if ctx.is_constant_expression(node.args[1]) and _is_symmetric_weight(ctx, node.args[1]):
        _fully_connected(ctx, node, node.args[0], node.args[1], None, weight_is_transposed=True)
    else:
        convert_bmm(ctx, node)


def _is_symmetric_weight(ctx: LoweringContext, arg: Node) -> bool:
    if isinstance(arg, Node) and arg.target in _TRANSPOSE_2D:
        arg = arg.args[0]
    if qdq.is_dequantize(arg):
        return qdq.per_tensor_qparams(arg).zero_point == 0
    return qdq.is_dequantize_per_channel(arg)


def convert_bmm(ctx: LoweringContext, node: Node) -> None:
    """bmm(a, b) -> BATCH_MATMUL (rank 3, or rank 2 for mm)."""
    a, b = (ctx.tensor(arg, node) for arg in node.args[:2])
    assert len(a.shape) < 4 and len(b.shape) < 4, "support.bmm_rank3_zero_points (mm: rank 2)"
    out = ctx.output(node)
    matmul = options(schema.BatchMatMulOptionsT, adjX=False, adjY=False)
    ctx.emit_result("BATCH_MATMUL", [a, b], out, matmul)


def _fully_connected(ctx, node, x_arg, weight_arg, bias_arg, weight_is_transposed: bool) -> None:
    x = ctx.tensor(x_arg, node)
    out = ctx.output(node, fusable=True)
    weight, scales, weight_name = _fc_weight(ctx, node, weight_arg, weight_is_transposed)
    if x.name in ctx.feature_orders:  # x is a flattened NHWC image: read its bytes in stored order
        weight = np.ascontiguousarray(weight[:, ctx.feature_orders[x.name]])
        weight_name += "_nhwc"
    assert isinstance(x.quantization, PerTensor)
    bias_scales = np.float32(x.quantization.scale) * scales.astype(np.float32)
    if len(set(scales.tolist())) == 1:  # a per-tensor weight stays per tensor: TFLM's per-tensor FC path
        filters = ctx.constant_tensor(weight_name, weight, PerTensor(float(scales[0]), 0))
        bias = ctx.bias(bias_arg, node, bias_scales, per_tensor=True)
    else:
        filters = ctx.constant_tensor(weight_name, weight, PerChannel(tuple(scales), axis=0))
        bias = ctx.bias(bias_arg, node, bias_scales)
    rank = len(edge_shape(x_arg))
    if rank <= 2:
        fc = options(schema.FullyConnectedOptionsT, fusedActivationFunction=out.fused)
        ctx.emit_result("FULLY_CONNECTED", [x, filters, bias], out, fc)
        return
    # FC works on the last edge dim: run it in edge order (NCHW for rank 4), then back to stored order.
    nhwc = layout.is_nhwc(rank)
    x = ctx.apply_steps(x, layout.permute_steps(x.shape, layout.NCHW_FROM_NHWC) if nhwc else [], out.sources)
    result = ctx.activation_tensor(out.anchor.name + "_fc", out.edge_shape, out.quantization)
    fc = options(schema.FullyConnectedOptionsT, fusedActivationFunction=out.fused, keepNumDims=True)
    ctx.emit("FULLY_CONNECTED", [x, filters, bias], [result], fc, out.sources)
    steps = layout.permute_steps(result.shape, layout.NHWC_FROM_NCHW) if nhwc else []
    ctx.bind(out, ctx.apply_steps(result, steps, out.sources))


def _fc_weight(ctx, node, arg, transposed: bool) -> tuple[np.ndarray, np.ndarray, str]:
    """FC weights [out, in] and their per-out-channel scales. ``transposed``: the op reads mat2 = W^T,
    given either as permute_copy(dequantize(W), [1, 0]) or as a constant [in, out]."""
    if transposed and isinstance(arg, Node) and arg.target in _TRANSPOSE_2D:
        arg, transposed = arg.args[0], False
    data, scales, axis = ctx.weight(arg, node)
    assert data.ndim == 2, "support.linear_weight_rank2"
    if transposed:
        data, axis = data.T, 1 - axis
    per_tensor = len(set(scales.tolist())) == 1
    assert expressible.fully_connected_weight_axis_ok(per_tensor, axis), \
        "support.fully_connected_weight_per_output_channel"
    if axis != 0:
        scales = np.full(data.shape[0], scales[0])
    return np.ascontiguousarray(data), scales, arg.name
