"""FULLY_CONNECTED and BATCH_MATMUL (TFLM reference_integer_ops::FullyConnected / reference_ops::BatchMatMul).

FC:  acc[b, o] = bias[o] + sum_i w[o, i] * (q[b, i] - zp_in);  q_out = clamp(MBQM(acc, M[o], s[o]) + zp_out)
     per-channel M[o] = s_in * s_w[o] / s_out (double); per-tensor M = float(s_in * s_w) / s_out.
     The zero point folds into the bias and the output stage is prepared once (see conv.py). Where the C
     extension is built (``_native.c``), a layer runs there in one call: the same integer output stage, without
     numpy's per-call cost, which is most of a small layer's time.
BMM: acc = (a - zp_a) @ (b - zp_b);  M = s_a * s_b / s_out;  no activation.
Sums are exact float matmuls (see conv.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from imxrt.kernels.conv import _exact_float, _input_range, _sum_dtype, accumulator_range
from imxrt.kernels.requantize import (
    FloatOutputStage,
    OutputStage,
    integer_stage_constants,
    multiply_by_quantized_multiplier,
    prepare_output_stage,
    to_int8,
)
from imxrt.kernels.scratch import Scratch

try:
    from imxrt.kernels import _native
except ImportError:  # installed without a C compiler: the numpy path computes the same numbers, slower
    _native = None

NATIVE_MAX_DEPTH = 131071  # _native.c: int32 sums of int8 products (each at most 2**14) stay below 2**31


@dataclass(frozen=True)
class FullyConnectedParams:
    weights: np.ndarray  # [in, out] float (exact integers); or, folded, float64 [in + 1, out] (see below)
    output: OutputStage  # the bias folded with -zp_in * sum_i w[o, i], MBQM, zp_out, clamp
    output_shape: tuple[int, ...]
    folded: bool = False  # the output stage's scale and offset are in ``weights``: [q, 1] @ weights = z
    scratch: Scratch = field(default_factory=Scratch, repr=False, compare=False)
    native: object | None = field(default=None, repr=False, compare=False)  # _native.FullyConnected, when built


def prepare_fully_connected(weights: np.ndarray, bias: np.ndarray | None, input_zero_point: int, multipliers,
                            shifts, output_zero_point: int, act_min: int, act_max: int, output_shape,
                            native: bool = True) -> FullyConnectedParams:
    """``weights`` int8 [out, in]. The zero point folds into the bias, so the matmul reads raw int8:
    acc[b, o] = (bias[o] - zp_in * sum_i w[o, i]) + sum_i w[o, i] q[b, i]. When exact, the output stage's
    scale and offset fold into the weights too: one float64 matmul, then only the clamp (a small layer's
    time is its number of numpy calls). ``native``: run in the C extension when it is built and the layer
    fits it (``native_layer``); False keeps the numpy path."""
    out_features = weights.shape[0]
    by_channel = weights.astype(np.int64)
    low, high = accumulator_range(by_channel, *_input_range(input_zero_point))
    bias = np.zeros(out_features, np.int64) if bias is None else bias.astype(np.int64)
    folded = bias - int(input_zero_point) * by_channel.sum(axis=1)
    output = prepare_output_stage(multipliers, shifts, folded, low, high, output_zero_point, act_min, act_max)
    layer = (native_layer(weights, folded, multipliers, shifts, low, high, output_zero_point, act_min, act_max)
             if native else None)
    scaled = output.fold(by_channel.T) if isinstance(output, FloatOutputStage) else None
    if scaled is not None:
        return FullyConnectedParams(np.ascontiguousarray(scaled), output, tuple(output_shape), folded=True,
                                    native=layer)
    return FullyConnectedParams(np.ascontiguousarray(by_channel.T.astype(_sum_dtype(low, high))), output,
                                tuple(output_shape), native=layer)


def native_layer(weights: np.ndarray, bias: np.ndarray, multipliers, shifts, acc_min, acc_max,
                 output_zero_point: int, act_min: int, act_max: int):
    """The layer as ``_native.FullyConnected`` (int8 ``weights`` [out, in], ``bias`` with the input zero point
    folded), or None when the extension is not built or the layer is outside what its integers hold: depth
    past ``NATIVE_MAX_DEPTH``, a value of the output stage, (acc + bias) M' + K for acc in [acc_min, acc_max],
    reaching 2**63, or a clamp outside int8 (``integer_stage_constants``)."""
    depth = weights.shape[1]
    if _native is None or not 1 <= depth <= NATIVE_MAX_DEPTH:
        return None
    stage = integer_stage_constants(bias, multipliers, shifts, acc_min, acc_max, weights.shape[0], act_min, act_max)
    if stage is None:
        return None
    return _native.FullyConnected(np.ascontiguousarray(weights, dtype=np.int8), depth, *stage,
                                  int(output_zero_point), int(act_min), int(act_max))


def fully_connected(x: np.ndarray, params: FullyConnectedParams) -> np.ndarray:
    if params.native is not None:
        out = np.empty(params.output_shape, np.int8)
        params.native.run(np.ascontiguousarray(x, dtype=np.int8), out)
        return out
    weights = params.weights
    if params.folded:
        rows = x.size // (weights.shape[0] - 1)
        augmented = params.scratch.get("rows", (rows, weights.shape[0]), np.float64, fill=1.0)  # [q, 1]
        np.copyto(augmented[:, :-1], x.reshape(rows, -1))  # the last column keeps its 1
        z = np.dot(augmented, weights, out=params.scratch.get("z", (rows, weights.shape[1]), np.float64))
        return params.output.finish(z).reshape(params.output_shape)
    rows = x.reshape(-1, weights.shape[0]).astype(weights.dtype)
    acc = np.dot(rows, weights, out=params.scratch.get("acc", (rows.shape[0], weights.shape[1]), weights.dtype))
    return params.output(acc).reshape(params.output_shape)


def bind_fully_connected(params: FullyConnectedParams) -> Callable[[np.ndarray], np.ndarray]:
    """``fully_connected`` for the batch of ``params.output_shape``, with its buffers and views bound once:
    a small layer's time is its count of numpy calls plus the Python around them."""
    if params.native is not None:
        run_native, output_shape = params.native.run, params.output_shape

        def run(x: np.ndarray) -> np.ndarray:
            out = np.empty(output_shape, np.int8)  # a new array: results never live in a kept buffer
            run_native(x if x.flags.c_contiguous else np.ascontiguousarray(x), out)
            return out
        return run
    if not params.folded:
        return functools.partial(fully_connected, params=params)
    weights, finish, output_shape = params.weights, params.output.finish, params.output_shape
    rows = int(np.prod(output_shape[:-1], dtype=np.int64))
    augmented = np.ones((rows, weights.shape[0]))  # [q, 1]
    inputs = augmented[:, :-1]
    z = np.empty((rows, weights.shape[1]))

    def run(x: np.ndarray) -> np.ndarray:
        np.copyto(inputs, x.reshape(inputs.shape))  # the last column keeps its 1
        np.dot(augmented, weights, out=z)
        return finish(z).reshape(output_shape)
    return run


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
