"""Reductions over dims: mean.dim, sum.dim_IntList, amax, amin -> MEAN, SUM, REDUCE_MAX, REDUCE_MIN;
and _softmax -> SOFTMAX (over the stored last axis, TRANSPOSEs around it for another)."""

from __future__ import annotations

from dataclasses import dataclass

from ai_edge_litert import schema_py_generated as schema
from torch.fx import Node

from imxrt.npu.litert import layout
from imxrt.npu.litert.context import LoweringContext, edge_shape
from imxrt.npu.litert.converters.common import options
from imxrt.npu.litert.ir import PerTensor

# TFLM's int8 softmax writes these qparams (TFLite's converter uses the same).
SOFTMAX_OUTPUT = PerTensor(scale=1.0 / 256.0, zero_point=-128)


@dataclass(frozen=True)
class Reduce:
    """reduce(x, dims, keepdim). ``keeps_qparams``: the int8 kernel picks raw values (max / min), so
    its result has the input's qparams; MEAN and SUM requantize themselves."""

    builtin: str
    keeps_qparams: bool = False

    def __call__(self, ctx: LoweringContext, node: Node) -> None:
        in_shape = edge_shape(node.args[0])
        rank = len(in_shape)
        dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        if dims is None or dims == []:
            dims = list(range(rank))
        dims = [dims] if isinstance(dims, int) else dims
        keepdim = bool(node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False))
        assert node.kwargs.get("dtype") is None, "support.reduction_without_dtype"
        axes = sorted({layout.stored_axis(d, rank) for d in dims})
        x = ctx.tensor(node.args[0], node)
        out = ctx.output(node)
        quant = x.quantization if self.keeps_qparams else None
        reducer_options = lambda keep: options(schema.ReducerOptionsT, keepDims=keep)  # noqa: E731
        axes_tensor = ctx.int32_constant("axes", axes)
        # Without keepdim the remaining stored dims must already be in the output's stored order (NHWC for
        # a rank-4 result: a 5-D input reduced over dim 0 is not), else reduce with keepdim and let a view
        # put them in order.
        remaining = [layout.stored_order(rank)[k] for k in range(rank) if k not in axes]
        position = {d: i for i, d in enumerate(sorted(remaining))}
        in_output_order = [position[d] for d in remaining] == list(layout.stored_order(len(remaining)))
        if keepdim or in_output_order:
            ctx.emit_result(self.builtin, [x, axes_tensor], out, reducer_options(keepdim), quantization=quant)
            return
        kept_edge = [1 if d in {a % rank for a in dims} else s for d, s in enumerate(in_shape)]
        kept = ctx.activation_tensor(
            out.anchor.name + "_kept", layout.stored_shape(kept_edge), quant or out.quantization
        )
        ctx.emit(self.builtin, [x, axes_tensor], [kept], reducer_options(True), out.sources)
        ctx.bind(out, ctx.apply_steps(kept, layout.view_steps(kept_edge, out.edge_shape), out.sources))


def convert_softmax(ctx: LoweringContext, node: Node) -> None:
    """_softmax(x, dim, half_to_float): TFLite's SOFTMAX works on the last stored axis (the channel dim of
    an NHWC value, the last dim of any other); over another axis, a TRANSPOSE swaps it to the end and back
    (a softmax over the width of an image)."""
    rank = len(edge_shape(node.args[0]))
    axis = layout.stored_axis(int(node.args[1]), rank)
    x = ctx.tensor(node.args[0], node)
    out = ctx.output(node)
    swap = list(range(rank))
    swap[axis], swap[-1] = swap[-1], swap[axis]  # its own inverse
    moved = ctx.apply_steps(x, layout.permute_steps(x.shape, swap), out.sources)
    softmax = options(schema.SoftmaxOptionsT, beta=1.0)
    result = ctx.activation_tensor(out.anchor.name + "_softmax", moved.shape, SOFTMAX_OUTPUT)
    ctx.emit("SOFTMAX", [moved], [result], softmax, out.sources)
    ctx.bind(out, ctx.apply_steps(result, layout.permute_steps(result.shape, swap), out.sources))


MEAN = Reduce("MEAN")
SUM = Reduce("SUM")
REDUCE_MAX = Reduce("REDUCE_MAX", keeps_qparams=True)
REDUCE_MIN = Reduce("REDUCE_MIN", keeps_qparams=True)
