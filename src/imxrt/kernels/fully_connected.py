"""FULLY_CONNECTED and BATCH_MATMUL (TFLM reference_integer_ops::FullyConnected / reference_ops::BatchMatMul).

FC:  acc[b, o] = bias[o] + sum_i w[o, i] * (q[b, i] - zp_in);  q_out = clamp(MBQM(acc, M[o], s[o]) + zp_out)
     per-channel M[o] = s_in * s_w[o] / s_out (double); per-tensor M = float(s_in * s_w) / s_out.
BMM: acc = (a - zp_a) @ (b - zp_b);  M = s_a * s_b / s_out;  no activation.
Sums are exact float matmuls (see conv.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from imxrt.kernels.conv import _exact_float
from imxrt.kernels.requantize import multiply_by_quantized_multiplier, to_int8


@dataclass(frozen=True)
class FullyConnectedParams:
    weights: np.ndarray  # [in, out] float (exact integers)
    bias: np.ndarray  # int64[out]
    input_zero_point: int
    multipliers: np.ndarray  # int64[out] (or [1])
    shifts: np.ndarray
    output_zero_point: int
    act_min: int
    act_max: int
    output_shape: tuple[int, ...]


def prepare_fully_connected(weights: np.ndarray, bias: np.ndarray | None, input_zero_point: int, multipliers,
                            shifts, output_zero_point: int, act_min: int, act_max: int, output_shape
                            ) -> FullyConnectedParams:
    """``weights`` int8 [out, in]."""
    out_features, in_features = weights.shape
    dtype = _exact_float(in_features, 255 * 128)
    bias = np.zeros(out_features, np.int64) if bias is None else bias.astype(np.int64)
    return FullyConnectedParams(np.ascontiguousarray(weights.T.astype(dtype)), bias, int(input_zero_point),
                                np.asarray(multipliers, np.int64), np.asarray(shifts, np.int64),
                                int(output_zero_point), act_min, act_max, tuple(output_shape))


def fully_connected(x: np.ndarray, params: FullyConnectedParams) -> np.ndarray:
    in_features = params.weights.shape[0]
    centered = x.reshape(-1, in_features).astype(params.weights.dtype) - params.input_zero_point
    acc = (centered @ params.weights).astype(np.int64) + params.bias
    acc = multiply_by_quantized_multiplier(acc, params.multipliers, params.shifts)
    return to_int8(acc, params.output_zero_point, params.act_min, params.act_max).reshape(params.output_shape)


@dataclass(frozen=True)
class BatchMatMulParams:
    lhs_zero_point: int
    rhs_zero_point: int
    adjoint_lhs: bool
    adjoint_rhs: bool
    multiplier: int
    shift: int
    output_zero_point: int
    dtype: type  # float type exact for the accumulation depth


def prepare_batch_matmul(depth: int, lhs_zero_point: int, rhs_zero_point: int, adjoint_lhs: bool,
                         adjoint_rhs: bool, multiplier: int, shift: int, output_zero_point: int
                         ) -> BatchMatMulParams:
    return BatchMatMulParams(int(lhs_zero_point), int(rhs_zero_point), bool(adjoint_lhs), bool(adjoint_rhs),
                             multiplier, shift, int(output_zero_point), _exact_float(depth, 255 * 255))


def batch_matmul(lhs: np.ndarray, rhs: np.ndarray, params: BatchMatMulParams) -> np.ndarray:
    a = lhs.astype(params.dtype) - params.lhs_zero_point
    b = rhs.astype(params.dtype) - params.rhs_zero_point
    if params.adjoint_lhs:
        a = np.swapaxes(a, -1, -2)
    if params.adjoint_rhs:
        b = np.swapaxes(b, -1, -2)
    acc = np.matmul(a, b).astype(np.int64)
    acc = multiply_by_quantized_multiplier(acc, params.multiplier, params.shift)
    return to_int8(acc, params.output_zero_point, -128, 127)
