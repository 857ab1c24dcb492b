"""LiteRT preparers, fully connected layers and matmuls: FULLY_CONNECTED (in C where the extension is built,
then ``BlasFree``), BATCH_MATMUL."""

from __future__ import annotations

import numpy as np

from imxrt.kernels import fully_connected
from imxrt.kernels.requantize import fully_connected_multiplier, quantize_multiplier
from imxrt.runtime.litert_model import BINARY_LHS, BINARY_RHS, FC_BIAS, FC_INPUT, FC_WEIGHTS, OUTPUT, OperatorView
from imxrt.runtime.litert_preparers.common import BlasFree, Evaluate, optional_bias, requantize_multipliers


def prepare_fully_connected(op: OperatorView) -> Evaluate | BlasFree:
    op.require_int8(FC_INPUT, FC_WEIGHTS)
    weights = op.constant(FC_WEIGHTS)  # [out, in]
    weight_scales = op.scales(FC_WEIGHTS)
    if len(weight_scales) > 1:
        multipliers, shifts = requantize_multipliers(op, FC_INPUT, FC_WEIGHTS, weights.shape[0])
    else:
        multipliers, shifts = quantize_multiplier(fully_connected_multiplier(
            op.scale(FC_INPUT), weight_scales[0], op.scale(OUTPUT, True)))
    params = fully_connected.prepare_fully_connected(
        weights, optional_bias(op, FC_BIAS), op.zero_point(FC_INPUT), multipliers, shifts,
        op.zero_point(OUTPUT, True), *op.fused(), op.shape(OUTPUT, True))
    run = fully_connected.bind_fully_connected(params)
    evaluate = lambda args: [run(args[FC_INPUT])]  # noqa: E731
    return BlasFree(evaluate) if params.native is not None else evaluate


def prepare_batch_matmul(op: OperatorView) -> Evaluate:
    op.require_int8(BINARY_LHS, BINARY_RHS)
    options = op.options
    adjoint_lhs = bool(options.adjX) if options is not None else False
    adjoint_rhs = bool(options.adjY) if options is not None else False
    lhs_shape = op.shape(BINARY_LHS)
    depth = lhs_shape[-2] if adjoint_lhs else lhs_shape[-1]
    real = np.float64(op.scale(BINARY_LHS)) * np.float64(op.scale(BINARY_RHS)) / np.float64(op.scale(OUTPUT, True))
    multiplier, shift = (int(v[0]) for v in quantize_multiplier(real))
    params = fully_connected.prepare_batch_matmul(depth, op.zero_point(BINARY_LHS), op.zero_point(BINARY_RHS),
                                                  adjoint_lhs, adjoint_rhs, multiplier, shift,
                                                  op.zero_point(OUTPUT, True))
    output_shape = op.shape(OUTPUT, True)
    return lambda args: [fully_connected.batch_matmul(args[BINARY_LHS], args[BINARY_RHS], params)
                         .reshape(output_shape)]
