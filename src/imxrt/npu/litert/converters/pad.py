"""Padding: constant_pad_nd / pad / reflection_pad2d -> PAD, PADV2, MIRROR_PAD; and the explicit PAD
that conv and pool converters put in front of a VALID window when TFLite's SAME does not match."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from ai_edge_litert import schema_py_generated as schema
from executorch.exir.dialects._ops import ops as exir_ops
from torch.fx import Node

from imxrt.npu.litert import expressible, layout, qdq
from imxrt.npu.litert.context import LoweringContext, edge_shape
from imxrt.npu.litert.converters.common import options
from imxrt.npu.litert.ir import PerTensor, Tensor

_MIRROR_MODES = {"reflect": schema.MirrorPadMode.REFLECT}


def pad_tensor(
    ctx: LoweringContext,
    tensor: Tensor,
    paddings: Sequence[tuple[int, int]],
    sources: Iterable[Node],
    value: int | None = None,
) -> Tensor:
    """PAD ``tensor`` by stored-dim ``paddings`` (before, after) with the zero point, or PADV2 with the
    int8 ``value``. The result shares the input's qparams."""
    quant = tensor.quantization
    assert isinstance(quant, PerTensor)
    if value == quant.zero_point:
        value = None
    shape = tuple(d + before + after for d, (before, after) in zip(tensor.shape, paddings, strict=True))
    result = ctx.activation_tensor(tensor.name + "_padded", shape, quant)
    pads = ctx.constant_tensor("paddings", np.array(paddings, np.int32))
    if value is None:
        ctx.emit("PAD", [tensor, pads], [result], None, sources)
    else:
        fill = ctx.constant_tensor("pad_value", np.array([value], np.int8), quant)
        ctx.emit("PADV2", [tensor, pads, fill], [result], None, sources)
    return result


def stored_paddings(node: Node, flat: Sequence[int], rank: int) -> list[tuple[int, int]]:
    """PyTorch's flat pad list (last dim first: [left, right, top, bottom, ...]) as stored-dim pairs."""
    assert expressible.padding_pairs_ok(flat, rank), "support.pad_pairs_non_negative"
    edge = [(0, 0)] * rank
    for i in range(len(flat) // 2):
        edge[rank - 1 - i] = (int(flat[2 * i]), int(flat[2 * i + 1]))
    return [edge[d] for d in layout.stored_order(rank)]


def convert_constant_pad(ctx: LoweringContext, node: Node) -> None:
    """constant_pad_nd(x, pad, value) and pad(x, pad, "constant", value) -> PAD / PADV2."""
    x = ctx.tensor(node.args[0], node)
    out = ctx.output(node)
    flat = node.args[1]
    value = _pad_value(node)
    paddings = stored_paddings(node, flat, len(edge_shape(node.args[0])))
    fill = int(qdq.quantize_values(np.array([value], np.float32), x.quantization)[0])
    ctx.bind(out, pad_tensor(ctx, x, paddings, out.sources, value=fill))


def convert_reflection_pad(ctx: LoweringContext, node: Node) -> None:
    """reflection_pad2d(x, pad) and pad(x, pad, "reflect") -> MIRROR_PAD (REFLECT)."""
    x = ctx.tensor(node.args[0], node)
    out = ctx.output(node)
    shape = edge_shape(node.args[0])
    assert expressible.reflection_fits(shape, node.args[1]), "support.reflection_pad_smaller_than_dim"
    paddings = stored_paddings(node, node.args[1], len(shape))
    pads = ctx.constant_tensor("paddings", np.array(paddings, np.int32))
    mirror = options(schema.MirrorPadOptionsT, mode=schema.MirrorPadMode.REFLECT)
    ctx.emit_result("MIRROR_PAD", [x, pads], out, mirror, quantization=x.quantization)


def convert_pad(ctx: LoweringContext, node: Node) -> None:
    """aten.pad(x, pad, mode, value) by mode, should an edge graph hold one (``to_edge`` decomposes it, and the
    capability table has no row for it)."""
    mode = node.args[2] if len(node.args) > 2 else node.kwargs.get("mode", "constant")
    assert mode == "constant" or mode in _MIRROR_MODES, f"pad mode {mode!r}: LiteRT has constant and reflect"
    if mode == "constant":
        convert_constant_pad(ctx, node)
    else:
        convert_reflection_pad(ctx, node)


def _pad_value(node: Node) -> float:
    if node.target == exir_ops.edge.aten.pad.default:
        value = node.args[3] if len(node.args) > 3 else node.kwargs.get("value")
    else:
        value = node.args[2] if len(node.args) > 2 else node.kwargs.get("value")
    return 0.0 if value is None else float(value)
