"""Pooling: avg_pool2d, _adaptive_avg_pool2d, and mean over H and W -> AVERAGE_POOL_2D;
max_pool2d(_with_indices) -> MAX_POOL_2D. Both int8 kernels keep the input's qparams. Padding TFLite's SAME
cannot express (and a ceil-mode max pool's overhang) becomes a PAD in front: the zero point for an average that
counts padding, -128 for a max."""

from __future__ import annotations

from ai_edge_litert import schema_py_generated as schema
from torch.fx import Node

from imxrt.kernels.pooling import pool_output_size
from imxrt.npu.litert import layout, qdq
from imxrt.npu.litert.context import LoweringContext, edge_shape
from imxrt.npu.litert.converters.common import Padding, ceil_mode_windows, options, window_padding
from imxrt.npu.litert.converters.pad import pad_tensor
from imxrt.npu.litert.converters.reduce import MEAN

MAX_SELF_PADDING_POOL_STRIDE = 32  # Neutron: 4096 in a pool without padding, 32 in one that pads


def _pair(value, default=None) -> tuple[int, int]:
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        value = default
    if isinstance(value, int):
        return value, value
    return (int(value[0]), int(value[-1])) if len(value) else (0, 0)


def _arg(node: Node, index: int, name: str, default):
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)


def convert_avg_pool(ctx: LoweringContext, node: Node) -> None:
    """avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)."""
    kernel = _pair(node.args[1])
    stride = _pair(_arg(node, 2, "stride", None), kernel)
    pads = _pair(_arg(node, 3, "padding", 0))
    assert _arg(node, 6, "divisor_override", None) is None, "support.avg_pool_options"
    count_include_pad = _arg(node, 5, "count_include_pad", True)
    x = ctx.tensor(node.args[0], node)
    out = ctx.output(node)
    _, _, height, width = edge_shape(node.args[0])
    overhang, same = ceil_mode_windows((height, width), kernel, stride, pads) if \
        _arg(node, 4, "ceil_mode", False) else (False, None)
    if overhang:
        # PyTorch never counts a ceil-mode overhang; TFLite's SAME counts only real inputs
        assert same is not None and pads == (0, 0), "support.avg_pool_options"
        _emit_pool(ctx, "AVERAGE_POOL_2D", x, out, kernel, stride, same)
        return
    padding = Padding.VALID if pads == (0, 0) else None
    if padding is None and not count_include_pad:
        # TFLite's SAME average divides by the number of real inputs, as count_include_pad=False does.
        padding = window_padding((height, width), kernel, stride, (1, 1), pads)
    if padding is None:
        assert count_include_pad, "support.avg_pool_options"
        x = pad_tensor(ctx, x, [(0, 0), (pads[0], pads[0]), (pads[1], pads[1]), (0, 0)], out.sources)
        padding = Padding.VALID
    _emit_pool(ctx, "AVERAGE_POOL_2D", x, out, kernel, stride, padding)


def convert_adaptive_avg_pool(ctx: LoweringContext, node: Node) -> None:
    """_adaptive_avg_pool2d(x, output_size) with sizes that divide: a plain VALID average pool."""
    _, _, height, width = edge_shape(node.args[0])
    out_h, out_w = _pair(node.args[1])
    assert height % out_h == 0 and width % out_w == 0, "support.adaptive_pool_divisible"
    kernel = (height // out_h, width // out_w)
    x = ctx.tensor(node.args[0], node)
    _emit_pool(ctx, "AVERAGE_POOL_2D", x, ctx.output(node), kernel, kernel, Padding.VALID)


def convert_mean(ctx: LoweringContext, node: Node) -> None:
    """mean.dim over H and W of a rank-4 tensor (a global average) -> AVERAGE_POOL_2D over the whole plane:
    the kernel the Cortex-M runs for it as well (CMSIS-NN has no mean), so a mean rounds the same way on
    both devices; TFLite's MEAN rounds differently (a fixed-point 1/n). Other means -> MEAN."""
    in_shape = edge_shape(node.args[0])
    dims = _arg(node, 1, "dim", None)
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    if len(in_shape) != 4 or sorted(d % 4 for d in dims) != [2, 3] or node.kwargs.get("dtype") is not None:
        MEAN(ctx, node)
        return
    batch, channels, height, width = in_shape
    x = ctx.tensor(node.args[0], node)
    out = ctx.output(node)
    if _arg(node, 2, "keepdim", False):
        _emit_pool(ctx, "AVERAGE_POOL_2D", x, out, (height, width), (1, 1), Padding.VALID)
        return
    pooled_edge = [batch, channels, 1, 1]
    pooled = ctx.activation_tensor(out.anchor.name + "_pooled", layout.stored_shape(pooled_edge), x.quantization)
    pool = options(schema.Pool2DOptionsT, padding=Padding.VALID, strideH=1, strideW=1, filterHeight=height,
                   filterWidth=width)
    ctx.emit("AVERAGE_POOL_2D", [x], [pooled], pool, out.sources)
    ctx.bind(out, ctx.apply_steps(pooled, layout.view_steps(pooled_edge, out.edge_shape), out.sources))


def convert_max_pool(ctx: LoweringContext, node: Node) -> None:
    """max_pool2d_with_indices(x, kernel, stride, padding, dilation, ceil_mode) (indices unused) and
    max_pool2d with the same arguments."""
    kernel = _pair(node.args[1])
    stride = _pair(_arg(node, 2, "stride", None), kernel)
    pads = _pair(_arg(node, 3, "padding", 0))
    assert _pair(_arg(node, 4, "dilation", 1)) == (1, 1), "support.max_pool_options"
    x = ctx.tensor(node.args[0], node)
    out = ctx.output(node)
    _, _, height, width = edge_shape(node.args[0])
    ceil_mode = bool(_arg(node, 5, "ceil_mode", False))
    # TFLite's SAME max ignores padded positions, as PyTorch's -inf padding does; Neutron takes a stride
    # above 32 only in a pool that does not pad itself.
    self_padding = not ceil_mode and max(stride) <= MAX_SELF_PADDING_POOL_STRIDE
    padding = window_padding((height, width), kernel, stride, (1, 1), pads) if self_padding else None
    if padding is None:
        # ceil mode: the last window may overhang the padding; -128 there too, then a floor-mode pool
        after = [max(p, (pool_output_size(size, k, s, p, 1, ceil_mode) - 1) * s + k - size - p)
                 for size, k, s, p in zip((height, width), kernel, stride, pads, strict=True)]
        paddings = [(0, 0), (pads[0], after[0]), (pads[1], after[1]), (0, 0)]
        x = pad_tensor(ctx, x, paddings, out.sources, value=qdq.INT8_MIN)
        padding = Padding.VALID
    _emit_pool(ctx, "MAX_POOL_2D", x, out, kernel, stride, padding)


def _emit_pool(ctx, builtin, x, out, kernel, stride, padding) -> None:
    pool = options(
        schema.Pool2DOptionsT, padding=padding, strideH=stride[0], strideW=stride[1], filterHeight=kernel[0],
        filterWidth=kernel[1],
    )
    ctx.emit_result(builtin, [x], out, pool, quantization=x.quantization)
