"""The convolutions and pools in C (imxrt.kernels._native) against TFLM and against the numpy kernels they stand in for.

Each case is a seeded random single-op graph (input, weights, bias, scales and zero points drawn per case) at an
edge the C loops treat apart: padding on one side only, strides and dilations of each axis, depth multipliers,
one input channel, channel counts that are not a multiple of the vector width, depths past one vector, more
output positions than one tile of gathered rows, per-tensor and per-channel multipliers, multipliers above one
(a left shift), activation clamps, zero points at the ends of int8, a batch of two. TFLM runs the `.tflite`; the
LiteRT executor runs it on the C kernels, then again on the numpy ones; the three must agree bit for bit. The
cortex_m ops (PyTorch's symmetric padding, NCHW twins) run the same cases on both paths. The C kernels run each
case twice, on their AVX2 loops (where the CPU has them) and on their portable ones. The C types refuse buffers
that do not fit them, and layers outside their integers stay on numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch
from ai_edge_litert import schema_py_generated as schema
from oracles import run_tflm

from imxrt.kernels import conv, pooling
from imxrt.kernels.requantize import ACT_NONE, ACT_RELU, ACT_RELU6, activation_range, quantize_multiplier
from imxrt.npu.litert import ir
from imxrt.npu.litert.writer import write_model
from imxrt.runtime.litert import LiteRTRunner

cortex_m = torch.ops.cortex_m
_native = conv._native
pytestmark = pytest.mark.skipif(_native is None, reason="imxrt.kernels._native is not built (no C compiler at "
                                                        "install): test_kernels_native.py says so")


@pytest.fixture(params=["avx2", "portable"])
def loops(request):
    """The C kernels' inner loops for the test, the import's choice restored after it."""
    chosen = _native.loops()
    try:
        _native.use_loops(request.param)
    except ValueError:
        pytest.skip(f"no {request.param} loops on this CPU")
    yield request.param
    _native.use_loops(chosen)


@dataclass(frozen=True)
class Case:
    input_shape: tuple[int, int, int, int]  # NHWC
    filter_hw: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    same: bool = True
    out_channels: int = 0  # convolutions; 0: the input's
    depth_multiplier: int = 1  # depthwise
    per_channel: bool = True
    fused: int = ACT_NONE
    gain: float = 1.0  # the real multiplier's order of magnitude: above 1 is a left shift
    zero_points: tuple[int, int] | None = None  # (input, output); None: drawn


CONV_CASES = {
    "pointwise_odd_channels": Case((1, 7, 9, 5), (1, 1), out_channels=7),
    "same_3x3_relu": Case((1, 12, 10, 16), (3, 3), out_channels=13, fused=ACT_RELU),
    "stride2_even_same_pads_after_only": Case((1, 16, 16, 8), (3, 3), (2, 2), out_channels=12, fused=ACT_RELU6),
    "stride_2x3_dilation_2x1_valid_batch2": Case((2, 17, 19, 6), (3, 3), (2, 3), (2, 1), same=False, out_channels=9,
                                                 per_channel=False),
    "tall_filter_dilated_same": Case((1, 20, 11, 3), (5, 3), (1, 2), (2, 2), out_channels=4),
    "deep_720": Case((1, 5, 6, 80), (3, 3), out_channels=6),
    "more_positions_than_a_tile": Case((1, 30, 26, 3), (1, 1), out_channels=3, zero_points=(-128, 127)),
    "one_output_position": Case((1, 3, 3, 7), (3, 3), same=False, out_channels=5, zero_points=(127, -128)),
    "gain_above_one_per_tensor": Case((1, 6, 7, 4), (3, 3), out_channels=5, per_channel=False, gain=6.0),
}

DEPTHWISE_CASES = {
    "same_3x3": Case((1, 11, 9, 16), (3, 3)),
    "odd_channels_relu6": Case((1, 10, 7, 13), (3, 3), fused=ACT_RELU6),
    "stride2_even_same_pads_after_only": Case((1, 12, 12, 24), (3, 3), (2, 2)),
    "stride_1x2_dilation_2_valid": Case((2, 13, 15, 9), (3, 3), (1, 2), (2, 2), same=False, per_channel=False),
    "multiplier_3": Case((1, 9, 8, 5), (3, 3), depth_multiplier=3, fused=ACT_RELU),
    "one_input_channel_multiplier_8": Case((1, 14, 6, 1), (4, 3), (2, 1), depth_multiplier=8),
    "wide_5x5_gain_above_one": Case((1, 8, 9, 40), (5, 5), gain=4.0, zero_points=(-128, 127)),
    "one_output_position": Case((1, 3, 3, 17), (3, 3), same=False, zero_points=(127, -128)),
}

POOL_CASES = {  # out_channels and weights unused; fused clamps the output
    "same_3x3_partial_windows": Case((1, 7, 8, 5), (3, 3)),
    "valid_2x2_stride2_batch2": Case((2, 9, 10, 16), (2, 2), (2, 2), same=False),
    "stride_past_filter": Case((1, 11, 13, 3), (2, 3), (3, 4)),
    "filter_past_input_same_relu": Case((1, 5, 4, 33), (7, 6), fused=ACT_RELU),
    "global_relu6": Case((1, 6, 5, 20), (6, 5), same=False, fused=ACT_RELU6),
}


def _f32(value: float) -> float:
    return float(np.float32(value))


class _Draw:
    """Seeded draws of a case's values: input, weights, scales, bias and zero points."""

    def __init__(self, name: str, case: Case):
        self.rng = np.random.default_rng(sum(map(ord, name)))
        self.case = case
        self.x = self.rng.integers(-128, 128, case.input_shape).astype(np.int8)
        self.zp_in, self.zp_out = case.zero_points or (int(v) for v in self.rng.integers(-128, 128, 2))
        self.s_in = _f32(self.rng.uniform(0.01, 0.1))

    def weights(self, shape, channel_axis: int):
        """int8 weights (with -128), a float32 scale per output channel (or one), an int32 bias and the output
        scale that puts the real multipliers near ``case.gain``."""
        w = self.rng.integers(-128, 128, shape).astype(np.int8)
        channels = shape[channel_axis]
        scales = self.rng.uniform(0.002, 0.02, channels if self.case.per_channel else 1).astype(np.float32)
        bias = self.rng.integers(-20000, 20000, channels).astype(np.int32)
        depth = int(np.prod(shape)) // channels
        s_out = _f32(self.s_in * float(scales.mean()) * np.sqrt(depth) * 40 / self.case.gain)
        return w, scales, bias, s_out


def _tensor(name, shape, scale, zero_point) -> ir.Tensor:
    return ir.Tensor(name, tuple(shape), np.dtype(np.int8), ir.PerTensor(scale, zero_point))


def _constant(name: str, array: np.ndarray, quantization) -> ir.Tensor:
    return ir.Tensor(name, tuple(array.shape), array.dtype, quantization, array.tobytes())


def _weight_quantization(scales: np.ndarray, axis: int):
    if len(scales) > 1:
        return ir.PerChannel(tuple(float(s) for s in scales), axis)
    return ir.PerTensor(float(scales[0]), 0)


def _bias_quantization(s_in: float, scales: np.ndarray):
    return ir.PerChannel(tuple(_f32(s_in * float(s)) for s in scales), 0) if len(scales) > 1 else \
        ir.PerTensor(_f32(s_in * float(scales[0])), 0)


def _options(cls, **fields):
    obj = cls()
    for name, value in fields.items():
        setattr(obj, name, value)
    return obj


def _output_hw(case: Case) -> tuple[int, int]:
    window = conv.make_window(case.input_shape[1:3], case.filter_hw, case.stride, case.dilation, case.same)
    return window.output_size


def _conv_graph(name: str, case: Case, depthwise: bool) -> tuple[bytes, np.ndarray]:
    draw = _Draw(name, case)
    kh, kw = case.filter_hw
    channels = case.input_shape[3]
    if depthwise:
        out_channels = channels * case.depth_multiplier
        w, scales, bias, s_out = draw.weights((1, kh, kw, out_channels), 3)
        builtin, axis = "DEPTHWISE_CONV_2D", 3
        opts = _options(schema.DepthwiseConv2DOptionsT, depthMultiplier=case.depth_multiplier)
    else:
        out_channels = case.out_channels
        w, scales, bias, s_out = draw.weights((out_channels, kh, kw, channels), 0)
        builtin, axis, opts = "CONV_2D", 0, _options(schema.Conv2DOptionsT)
    for field, value in (("padding", schema.Padding.SAME if case.same else schema.Padding.VALID),
                         ("strideH", case.stride[0]), ("strideW", case.stride[1]),
                         ("dilationHFactor", case.dilation[0]), ("dilationWFactor", case.dilation[1]),
                         ("fusedActivationFunction", case.fused)):
        setattr(opts, field, value)
    x = _tensor("x", case.input_shape, draw.s_in, draw.zp_in)
    out = _tensor("out", (case.input_shape[0], *_output_hw(case), out_channels), s_out, draw.zp_out)
    operator = ir.Operator(builtin, (x, _constant("w", w, _weight_quantization(scales, axis)),
                                     _constant("b", bias, _bias_quantization(draw.s_in, scales))), (out,), opts, ())
    return write_model(ir.Graph(inputs=[x], outputs=[out], operators=[operator])), draw.x


def _pool_graph(name: str, case: Case, builtin: str) -> tuple[bytes, np.ndarray]:
    draw = _Draw(name, case)
    x = _tensor("x", case.input_shape, draw.s_in, draw.zp_in)
    out = _tensor("out", (case.input_shape[0], *_output_hw(case), case.input_shape[3]), draw.s_in, draw.zp_in)
    opts = _options(schema.Pool2DOptionsT, padding=schema.Padding.SAME if case.same else schema.Padding.VALID,
                    strideH=case.stride[0], strideW=case.stride[1], filterHeight=case.filter_hw[0],
                    filterWidth=case.filter_hw[1], fusedActivationFunction=case.fused)
    operator = ir.Operator(builtin, (x,), (out,), opts, ())
    return write_model(ir.Graph(inputs=[x], outputs=[out], operators=[operator])), draw.x


def _recorded(monkeypatch, module, name: str) -> list:
    """Calls of ``module.name`` from now on record what they return (the prepared params)."""
    made, real = [], getattr(module, name)

    def record(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]
    monkeypatch.setattr(module, name, record)
    return made


def _three_ways(tflite: bytes, x: np.ndarray, monkeypatch, module, name: str) -> None:
    """TFLM, the executor on the C kernel (checked to be the one that ran), and on the numpy kernel agree."""
    want = run_tflm(tflite, [x])[0]
    with monkeypatch.context() as patch:
        made = _recorded(patch, module, name)
        native = LiteRTRunner.from_bytes(tflite).run([x])[0]
    assert made and all(params.native is not None for params in made), "the C kernel did not run"
    np.testing.assert_array_equal(native, want, err_msg="C kernel vs TFLM")
    with monkeypatch.context() as patch:
        patch.setattr(module, "_native", None)
        numpy_path = LiteRTRunner.from_bytes(tflite).run([x])[0]
    np.testing.assert_array_equal(numpy_path, want, err_msg="numpy kernel vs TFLM")


@pytest.mark.parametrize("name", list(CONV_CASES))
def test_conv_equals_tflm_and_the_numpy_kernel(name, monkeypatch, loops):
    tflite, x = _conv_graph(name, CONV_CASES[name], depthwise=False)
    _three_ways(tflite, x, monkeypatch, conv, "prepare_conv")


@pytest.mark.parametrize("name", list(DEPTHWISE_CASES))
def test_depthwise_equals_tflm_and_the_numpy_kernel(name, monkeypatch, loops):
    tflite, x = _conv_graph(name, DEPTHWISE_CASES[name], depthwise=True)
    _three_ways(tflite, x, monkeypatch, conv, "DepthwiseParams")


@pytest.mark.parametrize("builtin", ["AVERAGE_POOL_2D", "MAX_POOL_2D"])
@pytest.mark.parametrize("name", list(POOL_CASES))
def test_pool_equals_tflm_and_the_numpy_kernel(name, builtin, monkeypatch, loops):
    tflite, x = _pool_graph(name, POOL_CASES[name], builtin)
    _three_ways(tflite, x, monkeypatch, pooling, "prepare_pool")


# --- the cortex_m ops: PyTorch's symmetric padding, on both paths


def _symmetric_padding(case: Case) -> list[int]:
    """PyTorch's padding on each side: the SAME padding before (what TFLite pads after may be one more)."""
    window = conv.make_window(case.input_shape[1:3], case.filter_hw, case.stride, case.dilation, case.same)
    return list(window.pad_before)


def _both_paths(monkeypatch, call) -> None:
    native = call()
    with monkeypatch.context() as patch:
        patch.setattr(conv, "_native", None)
        patch.setattr(pooling, "_native", None)
        numpy_path = call()
    np.testing.assert_array_equal(native, numpy_path)


def _requantization(draw: _Draw, scales: np.ndarray, s_out: float, channels: int):
    multipliers, shifts = quantize_multiplier(draw.s_in * np.broadcast_to(scales, channels).astype(np.float64) / s_out)
    return torch.from_numpy(multipliers.astype(np.int32)), torch.from_numpy(shifts.astype(np.int32))


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("name", list(CONV_CASES))
def test_cortex_m_conv_c_kernel_equals_numpy(name, layout, monkeypatch, loops):
    case = CONV_CASES[name]
    draw = _Draw(name, case)
    w, scales, bias, s_out = draw.weights((case.out_channels, *case.filter_hw, case.input_shape[3]), 0)
    act_min, act_max = activation_range(case.fused, s_out, draw.zp_out)
    x = torch.from_numpy(draw.x)
    args = (torch.from_numpy(w), torch.from_numpy(bias), list(case.stride), _symmetric_padding(case),
            list(case.dilation), -draw.zp_in, draw.zp_out, *_requantization(draw, scales, s_out, case.out_channels),
            act_min, act_max, torch.empty(0, dtype=torch.uint8))
    if layout == "nhwc":
        _both_paths(monkeypatch, lambda: cortex_m.quantized_conv2d_nhwc(x, *args).numpy())
    else:
        _both_paths(monkeypatch, lambda: cortex_m.quantized_conv2d(x.permute(0, 3, 1, 2), *args).numpy())


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("name", list(DEPTHWISE_CASES))
def test_cortex_m_depthwise_c_kernel_equals_numpy(name, layout, monkeypatch, loops):
    case = DEPTHWISE_CASES[name]
    draw = _Draw(name, case)
    channels = case.input_shape[3] * case.depth_multiplier
    w, scales, bias, s_out = draw.weights((1, *case.filter_hw, channels), 3)
    act_min, act_max = activation_range(case.fused, s_out, draw.zp_out)
    x = torch.from_numpy(draw.x)
    args = (torch.from_numpy(w), torch.from_numpy(bias), list(case.stride), _symmetric_padding(case),
            list(case.dilation), case.depth_multiplier, -draw.zp_in, draw.zp_out,
            *_requantization(draw, scales, s_out, channels), act_min, act_max, torch.empty(0, dtype=torch.uint8))
    if layout == "nhwc":
        _both_paths(monkeypatch, lambda: cortex_m.quantized_depthwise_conv2d_nhwc(x, *args).numpy())
    else:
        _both_paths(monkeypatch, lambda: cortex_m.quantized_depthwise_conv2d(x.permute(0, 3, 1, 2), *args).numpy())


@pytest.mark.parametrize("name", list(POOL_CASES))
def test_cortex_m_pools_c_kernel_equals_numpy(name, monkeypatch, loops):
    case = POOL_CASES[name]
    draw = _Draw(name, case)
    x = torch.from_numpy(draw.x)
    padding = _symmetric_padding(case)
    act_min, act_max = activation_range(case.fused, draw.s_in, draw.zp_in)
    _both_paths(monkeypatch, lambda: cortex_m.quantized_avg_pool2d_nhwc(
        x, list(case.filter_hw), list(case.stride), padding, True, draw.zp_in, 1 << 30, 1,
        torch.empty(0, dtype=torch.uint8)).numpy())
    _both_paths(monkeypatch, lambda: cortex_m.quantized_max_pool2d_nhwc(
        x, list(case.filter_hw), list(case.stride), padding, [1, 1], True, draw.zp_in, draw.zp_in, act_min,
        act_max).numpy())


# --- what the C types take


def test_layers_outside_the_c_kernels_integers_stay_on_numpy():
    """An input zero point or a clamp outside int8 (a crafted file's: numpy wraps a value past int8, the vector
    loops saturate it), and more taps than int32 sums of centered values hold (``conv.NATIVE_MAX_TERMS``)."""
    window = conv.make_window((4, 4), (1, 1), (1, 1), (1, 1), True)
    filters = np.ones((2, 1, 1, 3), np.int8)
    assert conv.prepare_conv(filters, None, window, 0, [1 << 30], [-3], 0, -128, 127).native is not None
    assert conv.prepare_conv(filters, None, window, 200, [1 << 30], [-3], 0, -128, 127).native is None
    assert conv.prepare_conv(filters, None, window, 0, [1 << 30], [-3], 0, -200, 127).native is None
    assert conv.prepare_conv(filters, None, window, 0, [1 << 30], [-3], 0, 5, 4).native is None
    deep = np.ones((1, 1, 1, conv.NATIVE_MAX_TERMS + 1), np.int8)
    assert conv.prepare_conv(deep, None, window, 0, [1 << 30], [-20], 0, -128, 127).native is None


def test_the_c_types_refuse_buffers_that_do_not_fit():
    window = conv.make_window((4, 5), (3, 3), (1, 1), (1, 1), True)
    params = conv.prepare_conv(np.ones((2, 3, 3, 3), np.int8), None, window, 0, [1 << 30], [-6], 0, -128, 127)
    layer, out = params.native, np.empty((1, 4, 5, 2), np.int8)
    layer.run(np.zeros((1, 4, 5, 3), np.int8), out)
    with pytest.raises(ValueError, match="4-D NHWC int8 array with 3 channels"):
        layer.run(np.zeros((1, 4, 5, 4), np.int8), out)
    with pytest.raises(ValueError, match="got 3 dimensions"):
        layer.run(np.zeros((4, 5, 3), np.int8), out)
    with pytest.raises(ValueError, match="out .* expected 80 items"):
        layer.run(np.zeros((2, 4, 5, 3), np.int8), out)
    with pytest.raises(ValueError, match="x: .* of 1 bytes, got 240 bytes of 4-byte items"):
        layer.run(np.zeros((1, 4, 5, 3), np.int32), out)
    with pytest.raises(ValueError, match="not C-contiguous"):
        layer.run(np.zeros((1, 4, 10, 3), np.int8)[:, :, ::2], out)
    pool = pooling.prepare_pool(window, (4, 5), -128, 127).native
    with pytest.raises(ValueError, match="out .* expected 60 items"):
        pool.average(np.zeros((1, 4, 5, 3), np.int8), out)
    with pytest.raises(ValueError, match="strides and dilations must be in"):
        _native.Pool((3, 3, 0, 1, 1, 1, 0, 0, 4, 5), -128, 127)
    with pytest.raises(ValueError, match="input_zero_point 128 is outside"):
        _native.DepthwiseConvolution(np.ones(9, np.int8), 1, window.native_form(), 128, *[np.zeros(1, np.int64)] * 6,
                                     0, -128, 127)


def test_the_loops_are_chosen_by_name():
    chosen = _native.loops()
    assert chosen in ("avx2", "portable")
    with pytest.raises(ValueError, match="takes 'avx2' or 'portable'"):
        _native.use_loops("sse")
    assert _native.loops() == chosen
