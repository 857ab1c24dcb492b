"""Binary elementwise int8 ops with numpy broadcasting: ADD, SUB, MUL, MAXIMUM, MINIMUM, PRELU
(TFLM reference kernels).

ADD/SUB: both inputs go to a common scale 2 * max(s1, s2) with 20 bits of headroom:
    v_i = MBQM((q_i - zp_i) << 20, M_i, shift_i),  M_i = s_i / (2 max(s1, s2))
    q_out = clamp(MBQM(v_1 +/- v_2, M_out, shift_out) + zp_out),  M_out = 2 max(s1, s2) / (2**20 s_out)
MUL: q_out = clamp(MBQM((q_1 - zp_1)(q_2 - zp_2), M, shift) + zp_out),  M = s1 s2 / s_out

Two int8 inputs take only 65536 value pairs: ``pair_table`` runs a kernel once on all of them when
preparing, and ``lookup_pair`` evaluates it as one table read per element (bit-identical by construction).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from imxrt.kernels.requantize import multiply_by_quantized_multiplier, quantize_multiplier_scalar, to_int8

ADD_LEFT_SHIFT = 20  # int8 headroom bits of TFLite's ADD / SUB


@dataclass(frozen=True)
class AddParams:
    input1_zero_point: int
    input1_multiplier: int
    input1_shift: int
    input2_zero_point: int
    input2_multiplier: int
    input2_shift: int
    output_multiplier: int
    output_shift: int
    output_zero_point: int
    act_min: int
    act_max: int
    subtract: bool


def prepare_add(scale1: float, zero_point1: int, scale2: float, zero_point2: int, output_scale: float,
                output_zero_point: int, act_min: int, act_max: int, subtract: bool = False) -> AddParams:
    twice_max_input_scale = 2.0 * float(max(np.float32(scale1), np.float32(scale2)))
    m1 = quantize_multiplier_scalar(float(scale1) / twice_max_input_scale)
    m2 = quantize_multiplier_scalar(float(scale2) / twice_max_input_scale)
    m_out = quantize_multiplier_scalar(twice_max_input_scale / ((1 << ADD_LEFT_SHIFT) * float(output_scale)))
    return AddParams(int(zero_point1), *m1, int(zero_point2), *m2, *m_out, int(output_zero_point), act_min,
                     act_max, subtract)


def add(x1: np.ndarray, x2: np.ndarray, params: AddParams) -> np.ndarray:
    v1 = multiply_by_quantized_multiplier((x1.astype(np.int64) - params.input1_zero_point) << ADD_LEFT_SHIFT,
                                          params.input1_multiplier, params.input1_shift)
    v2 = multiply_by_quantized_multiplier((x2.astype(np.int64) - params.input2_zero_point) << ADD_LEFT_SHIFT,
                                          params.input2_multiplier, params.input2_shift)
    raw = v1 - v2 if params.subtract else v1 + v2
    acc = multiply_by_quantized_multiplier(raw, params.output_multiplier, params.output_shift)
    return to_int8(acc, params.output_zero_point, params.act_min, params.act_max)


@dataclass(frozen=True)
class MulParams:
    input1_zero_point: int
    input2_zero_point: int
    multiplier: int
    shift: int
    output_zero_point: int
    act_min: int
    act_max: int


def prepare_mul(scale1: float, zero_point1: int, scale2: float, zero_point2: int, output_scale: float,
                output_zero_point: int, act_min: int, act_max: int) -> MulParams:
    multiplier, shift = quantize_multiplier_scalar(float(scale1) * float(scale2) / float(output_scale))
    return MulParams(int(zero_point1), int(zero_point2), multiplier, shift, int(output_zero_point), act_min,
                     act_max)


def mul(x1: np.ndarray, x2: np.ndarray, params: MulParams) -> np.ndarray:
    product = (x1.astype(np.int64) - params.input1_zero_point) * (x2.astype(np.int64) - params.input2_zero_point)
    acc = multiply_by_quantized_multiplier(product, params.multiplier, params.shift)
    return to_int8(acc, params.output_zero_point, params.act_min, params.act_max)


def maximum(x1: np.ndarray, x2: np.ndarray) -> np.ndarray:
    """Raw values: inputs and output share qparams."""
    return np.maximum(x1, x2)


def minimum(x1: np.ndarray, x2: np.ndarray) -> np.ndarray:
    return np.minimum(x1, x2)


@dataclass(frozen=True)
class PreluParams:
    input_zero_point: int
    alpha_zero_point: int
    identity_multiplier: int  # s_in / s_out
    identity_shift: int
    alpha_multiplier: int  # s_in * s_alpha / s_out
    alpha_shift: int
    output_zero_point: int


def prepare_prelu(input_scale: float, input_zero_point: int, alpha_scale: float, alpha_zero_point: int,
                  output_scale: float, output_zero_point: int) -> PreluParams:
    identity = quantize_multiplier_scalar(float(input_scale) / float(output_scale))
    with_alpha = quantize_multiplier_scalar(float(input_scale) * float(alpha_scale) / float(output_scale))
    return PreluParams(int(input_zero_point), int(alpha_zero_point), *identity, *with_alpha, int(output_zero_point))


def prelu(x: np.ndarray, alpha: np.ndarray, params: PreluParams) -> np.ndarray:
    """q - zp >= 0: MBQM(q - zp, M_1); else MBQM((q - zp)(a - zp_a), M_2); alpha broadcasts."""
    centered = x.astype(np.int64) - params.input_zero_point
    positive = multiply_by_quantized_multiplier(centered, params.identity_multiplier, params.identity_shift)
    negative = multiply_by_quantized_multiplier(centered * (alpha.astype(np.int64) - params.alpha_zero_point),
                                                params.alpha_multiplier, params.alpha_shift)
    return to_int8(np.where(centered >= 0, positive, negative), params.output_zero_point, -128, 127)


def pair_table(kernel, params) -> np.ndarray:
    """``kernel(q1, q2, params)`` on every int8 pair: int8[65536], entry (q1 & 0xFF) << 8 | (q2 & 0xFF)."""
    values = np.arange(-128, 128, dtype=np.int8)
    first, second = np.repeat(values, 256), np.tile(values, 256)
    order = (first.view(np.uint8).astype(np.intp) << 8) | second.view(np.uint8)
    table = np.empty(65536, np.int8)
    table[order] = kernel(first, second, params)
    table.setflags(write=False)
    return table


def lookup_pair(x1: np.ndarray, x2: np.ndarray, table: np.ndarray) -> np.ndarray:
    """The table's entry for each (broadcast) pair of int8 elements."""
    x1, x2 = np.broadcast_arrays(x1, x2)
    index = np.left_shift(x1.view(np.uint8), 8, dtype=np.uint16)
    index |= x2.view(np.uint8)
    return np.take(table, index)
