"""upsample_nearest2d.vec -> RESIZE_NEAREST_NEIGHBOR; upsample_bilinear2d.vec -> RESIZE_BILINEAR.

PyTorch nearest reads src = floor(dst * in / out): TFLite's default (no align_corners, no half pixel).
PyTorch bilinear align_corners=True is TFLite align_corners; align_corners=False samples at
(dst + 0.5) * in / out - 0.5 clamped at 0, which is TFLite's half_pixel_centers. Both int8 kernels keep
the input's qparams.
"""

from __future__ import annotations

from ai_edge_litert import schema_py_generated as schema
from torch.fx import Node

from imxrt.npu.litert.context import LoweringContext
from imxrt.npu.litert.converters.common import options


def convert_upsample_nearest(ctx: LoweringContext, node: Node) -> None:
    x = ctx.tensor(node.args[0], node)
    out = ctx.output(node)
    _check_integer_scale(node, x.shape, out.shape)
    size = ctx.int32_constant("size", out.shape[1:3])
    resize = options(schema.ResizeNearestNeighborOptionsT, alignCorners=False, halfPixelCenters=False)
    ctx.emit_result("RESIZE_NEAREST_NEIGHBOR", [x, size], out, resize, quantization=x.quantization)


def convert_upsample_bilinear(ctx: LoweringContext, node: Node) -> None:
    align_corners = bool(node.args[2])
    x = ctx.tensor(node.args[0], node)
    out = ctx.output(node)
    size = ctx.int32_constant("size", out.shape[1:3])
    resize = options(
        schema.ResizeBilinearOptionsT, alignCorners=align_corners, halfPixelCenters=not align_corners
    )
    ctx.emit_result("RESIZE_BILINEAR", [x, size], out, resize, quantization=x.quantization)


def _check_integer_scale(node: Node, in_shape, out_shape) -> None:
    """Nearest source rows agree with TFLite's in/out ratio when each output dim is a multiple of the
    input dim (PyTorch uses 1/scale_factor, which equals in/out then)."""
    assert all(out_shape[d] % in_shape[d] == 0 for d in (1, 2)), "support.resize_scale"
