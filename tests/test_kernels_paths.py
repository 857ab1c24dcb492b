"""Kernel paths that the TFLM comparisons reach only on some shapes, each against a direct integer
reference (int64 sums of (q - zp) * w, then TFLite's two-step MultiplyByQuantizedMultiplier): depthwise
in C and, in numpy, over tap rows (many output positions) and over windows (few), with stride, dilation and a
depth multiplier; fully connected with the output stage folded into its matmul and without; the 65536-entry
pair tables."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from imxrt.kernels import conv, elementwise, fully_connected
from imxrt.kernels.requantize import (
    FloatOutputStage,
    prepare_output_stage,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
)


def reference_output(acc: np.ndarray, multipliers, shifts, zero_point: int, act_min: int, act_max: int):
    left, right = np.maximum(shifts, 0), np.maximum(-shifts, 0)
    high = saturating_rounding_doubling_high_mul(acc.astype(np.int64) << left, multipliers)
    return np.clip(rounding_divide_by_pot(high, right) + zero_point, act_min, act_max).astype(np.int8)


def reference_depthwise(x, params: conv.DepthwiseParams) -> np.ndarray:
    window = params.window
    centered = np.repeat(x.astype(np.int64) - params.input_zero_point, params.depth_multiplier, axis=3)
    padded = window.padded(centered)
    acc = np.zeros((x.shape[0], *window.output_size, params.weights.shape[-1]), np.int64) + params.bias
    for filter_y in range(window.filter_size[0]):
        for filter_x in range(window.filter_size[1]):
            acc += window.tap(padded, filter_y, filter_x) * params.weights[filter_y, filter_x].astype(np.int64)
    return reference_output(acc, params.multipliers, params.shifts, params.output_zero_point, params.act_min,
                            params.act_max)


def _depthwise(rng, input_hw, stride, dilation, same: bool) -> tuple[np.ndarray, conv.DepthwiseParams]:
    channels, multiplier = 3, 2
    x = rng.integers(-128, 128, (2, *input_hw, channels)).astype(np.int8)
    window = conv.make_window(input_hw, (3, 3), stride, dilation, same)
    out_channels = channels * multiplier
    params = conv.DepthwiseParams(
        window, multiplier, rng.integers(-127, 128, (3, 3, out_channels)).astype(np.int32),
        rng.integers(-5000, 5000, out_channels), -7, rng.integers(2**30, 2**31, out_channels),
        rng.integers(-9, -5, out_channels), 3, -128, 127)
    return x, params


@pytest.mark.parametrize("stride, dilation, same", [((1, 1), (1, 1), True), ((2, 2), (1, 1), True),
                                                    ((2, 3), (2, 1), False), ((1, 2), (2, 2), True)])
def test_depthwise_paths_equal_the_integer_reference(stride, dilation, same, monkeypatch):
    rng = np.random.default_rng(sum(stride) * 10 + sum(dilation))
    x, params = _depthwise(rng, (37, 41), stride, dilation, same)
    want = reference_depthwise(x, params)
    if params.native is not None:  # the C kernel, where it is built
        np.testing.assert_array_equal(conv.depthwise_conv2d(x, params), want, err_msg="C")
    monkeypatch.setattr(conv, "_native", None)
    params = dataclasses.replace(params)  # prepared again: on numpy
    assert params.native is None
    out_h, out_w = params.window.output_size
    for summed_windows in (0, out_h * out_w):  # the tap loop, then the einsum over windows
        monkeypatch.setattr(conv, "SUMMED_WINDOWS", summed_windows)
        np.testing.assert_array_equal(conv.depthwise_conv2d(x, params), want, err_msg=f"{summed_windows}")
        np.testing.assert_array_equal(conv.depthwise_conv2d(x, params), want, err_msg="second call, kept buffers")


def _fully_connected_case(rng, weight_limit: int):
    weights = rng.integers(-weight_limit, weight_limit + 1, (24, 300)).astype(np.int8)
    bias = rng.integers(-20000, 20000, 24)
    multipliers, shifts = rng.integers(2**30, 2**31, 24), rng.integers(-11, -6, 24)
    return weights, bias, multipliers, shifts


@pytest.mark.parametrize("zero_point, act_min", [(-128, -128), (9, -128)])
def test_fully_connected_folded_and_unfolded_equal_the_integer_reference(zero_point, act_min):
    """The folded matmul (scale and offset inside float64 weights) and the unfolded one (float32 matmul,
    then the output stage); act_min below zp_out keeps the negative-tie step."""
    rng = np.random.default_rng(5)
    weights, bias, multipliers, shifts = _fully_connected_case(rng, 127)
    x = rng.integers(-128, 128, (4, 300)).astype(np.int8)
    acc = (x.astype(np.int64) + 3) @ weights.T.astype(np.int64) + bias
    want = reference_output(acc, multipliers, shifts, zero_point, act_min, 127)
    params = fully_connected.prepare_fully_connected(weights, bias, -3, multipliers, shifts, zero_point, act_min, 127,
                                                     (4, 24))
    assert params.folded
    np.testing.assert_array_equal(fully_connected.fully_connected(x, params), want)
    unfolded = fully_connected.FullyConnectedParams(np.ascontiguousarray(weights.T.astype(np.float32)),
                                                    params.output, (4, 24))
    np.testing.assert_array_equal(fully_connected.fully_connected(x, unfolded), want)


def test_fold_refused_where_a_partial_sum_could_round():
    """Bias 2**22 and accumulators down to -2**22 at M = 2**30: every value the stage computes stays below
    2**53 (bias and accumulator cancel), but a folded matmul could sum bias and product terms of the same
    sign first, up to 2**53: the stage is float, the fold is refused; 2**20 folds."""
    refused = prepare_output_stage([2**30], [-1], [2**22], [-(2**22)], [0], 0, -128, 127)
    folds = prepare_output_stage([2**30], [-1], [2**22], [-(2**20)], [0], 0, -128, 127)
    assert isinstance(refused, FloatOutputStage) and isinstance(folds, FloatOutputStage)
    assert refused.fold(np.ones((3, 1))) is None and folds.fold(np.ones((3, 1))) is not None
    acc = np.array([[-(2**22)], [-(2**22) + 1], [-(2**22) + 255], [-(2**22) + 256], [-(2**21)], [0]])
    np.testing.assert_array_equal(refused(acc.astype(np.float64)),
                                  reference_output(acc + 2**22, np.array([2**30]), np.array([-1]), 0, -128, 127))


def test_pair_table_equals_the_kernel_with_broadcasting():
    params = elementwise.prepare_add(0.05, 3, 0.02, -7, 0.06, 1, -128, 127, subtract=True)
    table = elementwise.pair_table(elementwise.add, params)
    rng = np.random.default_rng(7)
    x1 = rng.integers(-128, 128, (2, 5, 5, 8)).astype(np.int8)
    x2 = rng.integers(-128, 128, (1, 5, 1, 8)).astype(np.int8)
    np.testing.assert_array_equal(elementwise.lookup_pair(x1, x2, table), elementwise.add(x1, x2, params))
    np.testing.assert_array_equal(elementwise.lookup_pair(x2, x1, table), elementwise.add(x2, x1, params))
