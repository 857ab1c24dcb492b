"""LiteRT preparers, padding: PAD, PADV2, MIRROR_PAD."""

from __future__ import annotations

from ai_edge_litert import schema_py_generated as schema

from imxrt.kernels import movement
from imxrt.runtime.litert_model import OUTPUT, PAD_INPUT, PAD_PADDINGS, PAD_VALUE, OperatorView
from imxrt.runtime.litert_preparers.common import Evaluate


def prepare_pad(op: OperatorView) -> Evaluate:
    paddings = tuple((int(b), int(a)) for b, a in op.constant(PAD_PADDINGS).reshape(-1, 2))
    if op.has_input(PAD_VALUE):
        value = op.constant(PAD_VALUE).reshape(-1)[0]
    else:
        value = op.zero_point(OUTPUT, True) if op.tensor(OUTPUT, True).type == schema.TensorType.INT8 else 0
    return lambda args: [movement.pad(args[PAD_INPUT], paddings, value)]


def prepare_mirror_pad(op: OperatorView) -> Evaluate:
    paddings = tuple((int(b), int(a)) for b, a in op.constant(PAD_PADDINGS).reshape(-1, 2))
    symmetric = op.options.mode == schema.MirrorPadMode.SYMMETRIC
    return lambda args: [movement.mirror_pad(args[PAD_INPUT], paddings, symmetric)]
