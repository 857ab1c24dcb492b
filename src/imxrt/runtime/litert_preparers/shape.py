"""LiteRT preparers, data movement: TRANSPOSE, RESHAPE, SLICE, STRIDED_SLICE, CONCATENATION, SPLIT, SPLIT_V."""

from __future__ import annotations

from imxrt.kernels import movement
from imxrt.runtime.litert_model import (
    OUTPUT,
    SLICE_BEGIN,
    SLICE_INPUT,
    SLICE_SIZE,
    SPLIT_AXIS,
    SPLIT_INPUT,
    SPLIT_V_AXIS,
    SPLIT_V_INPUT,
    STRIDED_SLICE_BEGIN,
    STRIDED_SLICE_END,
    STRIDED_SLICE_INPUT,
    STRIDED_SLICE_STRIDES,
    TRANSPOSE_INPUT,
    TRANSPOSE_PERM,
    UNARY_INPUT,
    OperatorView,
)
from imxrt.runtime.litert_preparers.common import Evaluate


def prepare_transpose(op: OperatorView) -> Evaluate:
    perm = tuple(int(p) for p in op.constant(TRANSPOSE_PERM))
    return lambda args: [movement.transpose(args[TRANSPOSE_INPUT], perm)]


def prepare_reshape(op: OperatorView) -> Evaluate:
    shape = op.shape(OUTPUT, True)
    return lambda args: [movement.reshape(args[UNARY_INPUT], shape)]


def prepare_slice(op: OperatorView) -> Evaluate:
    begin = op.constant(SLICE_BEGIN).reshape(-1)
    size = op.constant(SLICE_SIZE).reshape(-1)
    index = tuple(slice(int(b), None if int(s) == -1 else int(b) + int(s)) for b, s in zip(begin, size, strict=True))
    return lambda args: [movement.slice_(args[SLICE_INPUT], index)]


def prepare_strided_slice(op: OperatorView) -> Evaluate:
    options = op.options
    if options.ellipsisMask or options.newAxisMask:
        raise op.unsupported("uses an ellipsis or new-axis mask")
    index, shrink = movement.strided_slice_index(
        op.shape(STRIDED_SLICE_INPUT), op.constant(STRIDED_SLICE_BEGIN), op.constant(STRIDED_SLICE_END),
        op.constant(STRIDED_SLICE_STRIDES), options.beginMask, options.endMask, options.shrinkAxisMask,
        bool(getattr(options, "offset", False)))
    return lambda args: [movement.strided_slice(args[STRIDED_SLICE_INPUT], index, shrink)]


def prepare_concatenation(op: OperatorView) -> Evaluate:
    axis = op.options.axis % len(op.shape(OUTPUT, True))
    return lambda args: [movement.concatenation(args, axis)]


def prepare_split(op: OperatorView) -> Evaluate:
    rank = len(op.shape(SPLIT_INPUT))
    axis = int(op.constant(SPLIT_AXIS).reshape(-1)[0]) % rank
    sizes = tuple(op.shape(i, True)[axis] for i in range(len(op.outputs)))
    return lambda args: movement.split(args[SPLIT_INPUT], sizes, axis)


def prepare_split_v(op: OperatorView) -> Evaluate:
    rank = len(op.shape(SPLIT_V_INPUT))
    axis = int(op.constant(SPLIT_V_AXIS).reshape(-1)[0]) % rank
    sizes = tuple(op.shape(i, True)[axis] for i in range(len(op.outputs)))
    return lambda args: movement.split(args[SPLIT_V_INPUT], sizes, axis)
