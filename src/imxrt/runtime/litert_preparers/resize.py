"""LiteRT preparers, resizing: RESIZE_NEAREST_NEIGHBOR, RESIZE_BILINEAR."""

from __future__ import annotations

from imxrt.kernels import movement
from imxrt.runtime.litert_model import CHANNELS, HEIGHT, OUTPUT, RESIZE_INPUT, OperatorView
from imxrt.runtime.litert_preparers.common import Evaluate


def _resize_sizes(op: OperatorView) -> tuple[tuple[int, int], tuple[int, int], bool, bool]:
    input_shape, output_shape = op.shape(RESIZE_INPUT), op.shape(OUTPUT, True)
    options = op.options
    return (input_shape[HEIGHT:CHANNELS], output_shape[HEIGHT:CHANNELS], bool(options.alignCorners),
            bool(options.halfPixelCenters))


def prepare_resize_nearest(op: OperatorView) -> Evaluate:
    (in_h, in_w), (out_h, out_w), align_corners, half_pixel = _resize_sizes(op)
    rows = movement.nearest_indices(in_h, out_h, align_corners, half_pixel)
    cols = movement.nearest_indices(in_w, out_w, align_corners, half_pixel)
    return lambda args: [movement.resize_nearest(args[RESIZE_INPUT], rows, cols)]


def prepare_resize_bilinear(op: OperatorView) -> Evaluate:
    op.require_int8(RESIZE_INPUT)
    (in_h, in_w), (out_h, out_w), align_corners, half_pixel = _resize_sizes(op)
    rows = movement.bilinear_axis(in_h, out_h, align_corners, half_pixel)
    cols = movement.bilinear_axis(in_w, out_w, align_corners, half_pixel)
    return lambda args: [movement.resize_bilinear(args[RESIZE_INPUT], rows, cols)]
