"""CMSIS-NN scratch sizes: ours equal the real ``arm_*_get_buffer_size`` functions for every ISA.

The oracle is ``executorch.backends.cortex_m.library.cmsis_nn``, a host build of CMSIS-NN's own size
functions (its ``_mve``/``_dsp``/plain entry points, chosen by ``Backend``). Each test draws a few hundred
seeded shapes per ISA, weighted towards the corner cases where the kernel choice changes.
"""

from __future__ import annotations

import doctest
import random

import pytest

import imxrt.cpu.scratch as scratch
from imxrt.cpu.isa import CORES, Isa
from imxrt.cpu.scratch import (
    SCRATCH_ARGUMENTS,
    ConvKernel,
    avg_pool2d_scratch_bytes,
    batch_matmul_scratch_bytes,
    conv2d_kernel,
    conv2d_scratch_bytes,
    depthwise_conv2d_scratch_bytes,
    fully_connected_scratch_bytes,
    needs_scratch,
    transpose_conv2d_scratch_bytes,
)

cmsis_nn = pytest.importorskip("executorch.backends.cortex_m.library.cmsis_nn")
try:
    _BACKEND = {
        Isa.SCALAR: cmsis_nn.resolve_backend(cmsis_nn.CortexM.M0),
        Isa.DSP: cmsis_nn.resolve_backend(cmsis_nn.CortexM.M33),
        Isa.MVE: cmsis_nn.resolve_backend(cmsis_nn.CortexM.M55),
    }
except ModuleNotFoundError:  # the wrapper imports, but its compiled CMSIS-NN extension is missing
    pytest.skip("CMSIS-NN size functions are not built into this executorch", allow_module_level=True)
A8W8 = cmsis_nn.DataType.A8W8
SHAPES_PER_ISA = 300
ISAS = list(Isa)


def _conv_out(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


def _input_size(rng: random.Random, kernel: int, dilation: int, pad: int, low: int = 1, high: int = 40) -> int:
    """An input extent that leaves at least one output position."""
    return rng.randint(max(low, dilation * (kernel - 1) + 1 - 2 * pad), max(high, dilation * (kernel - 1) + 1))


# --- convolution -------------------------------------------------------------------------------------------


def _conv_case(rng: random.Random):
    """One convolution, of a kind picked so every wrapper branch and its boundaries get hundreds of draws."""
    kind = rng.choice(["1x1", "1x1", "1xn", "1xn", "1xn", "general", "general", "grouped"])
    c_in = rng.choice([1, 2, 3, 4, 8, 12, 16, 17, 24, 32, 64, rng.randint(1, 300)])
    c_out = rng.randint(1, 64)
    groups = 1
    if kind == "1x1":
        kernel, dilation = (1, 1), (1, 1)
        padding = (0, 0) if rng.random() < 0.8 else (rng.randint(0, 1), rng.randint(0, 1))
        stride = (1, 1) if rng.random() < 0.6 else (rng.randint(1, 3), rng.randint(1, 3))
        height = rng.randint(1, 20)
    elif kind == "1xn":
        kernel = (1, rng.randint(1, 9))
        padding = (0, rng.randint(0, 4)) if rng.random() < 0.9 else (1, rng.randint(0, 4))
        stride = (rng.randint(1, 2), rng.choice([1, 1, 2, 3, 4, 5]))
        dilation = (rng.randint(1, 2), 1 if rng.random() < 0.85 else 2)
        height = 1
    else:
        kernel = (rng.randint(1, 7), rng.randint(1, 7))
        padding = (rng.randint(0, 3), rng.randint(0, 3))
        stride = (rng.randint(1, 4), rng.randint(1, 4))
        dilation = (rng.randint(1, 3), rng.randint(1, 3)) if rng.random() < 0.3 else (1, 1)
        height = _input_size(rng, kernel[0], dilation[0], padding[0])
        if kind == "grouped":
            groups = rng.choice([2, 3, 4])
            c_in, c_out = c_in * groups, c_out * groups
    width = _input_size(rng, kernel[1], dilation[1], padding[1])
    height = max(height, dilation[0] * (kernel[0] - 1) + 1 - 2 * padding[0])
    batch = rng.choice([1, 1, 1, 2])
    input_nhwc = (batch, height, width, c_in)
    filter_ohwi = (c_out, kernel[0], kernel[1], c_in // groups)
    output_nhwc = (
        batch,
        _conv_out(height, kernel[0], stride[0], padding[0], dilation[0]),
        _conv_out(width, kernel[1], stride[1], padding[1], dilation[1]),
        c_out,
    )
    return input_nhwc, filter_ohwi, output_nhwc, stride, padding, dilation


def _conv_oracle(isa, input_nhwc, filter_ohwi, output_nhwc, stride, padding, dilation) -> int:
    return cmsis_nn.convolve_wrapper_buffer_size(
        _BACKEND[isa], A8W8, input_nhwc=input_nhwc, filter_nhwc=filter_ohwi, output_nhwc=output_nhwc,
        padding_hw=padding, stride_hw=stride, dilation_hw=dilation,
    )


@pytest.mark.parametrize("isa", ISAS, ids=lambda isa: isa.value)
def test_conv2d_scratch_matches_cmsis_nn(isa):
    rng = random.Random(20260101)
    kernels = set()
    for _ in range(SHAPES_PER_ISA):
        case = _conv_case(rng)
        kernels.add(conv2d_kernel(case[0], case[1], case[3], case[4], case[5]))
        assert conv2d_scratch_bytes(isa, *case) == _conv_oracle(isa, *case), case
    assert kernels == set(ConvKernel)  # every branch of the wrapper was exercised


def test_conv2d_kernel_choice_at_its_boundaries():
    """1x1 needs pad 0 and an ungrouped filter; 1xN needs stride_w*C_in % 4 == 0."""
    one_by_one = ((1, 8, 8, 16), (8, 1, 1, 16), (1, 1), (0, 0), (1, 1))
    assert conv2d_kernel(*one_by_one) is ConvKernel.ONE_BY_ONE_FAST
    assert conv2d_kernel((1, 8, 8, 16), (8, 1, 1, 16), (2, 1), (0, 0), (1, 1)) is ConvKernel.ONE_BY_ONE
    assert conv2d_kernel((1, 8, 8, 16), (8, 1, 1, 16), (1, 1), (1, 0), (1, 1)) is ConvKernel.IM2COL
    assert conv2d_kernel((1, 8, 8, 16), (8, 1, 1, 8), (1, 1), (0, 0), (1, 1)) is ConvKernel.IM2COL
    assert conv2d_kernel((1, 1, 16, 4), (8, 1, 3, 4), (1, 1), (0, 1), (1, 1)) is ConvKernel.ONE_BY_N
    assert conv2d_kernel((1, 1, 16, 6), (8, 1, 3, 6), (1, 1), (0, 1), (1, 1)) is ConvKernel.IM2COL
    assert conv2d_kernel((1, 1, 16, 6), (8, 1, 3, 6), (1, 2), (0, 1), (1, 1)) is ConvKernel.ONE_BY_N


# --- depthwise ---------------------------------------------------------------------------------------------


def _depthwise_case(rng: random.Random):
    kind = rng.choice(["3x3", "3x3", "other", "other", "c_in_1", "multiplier"])
    if kind == "3x3":
        kernel, padding = (3, 3), (rng.randint(0, 2), rng.randint(0, 2))
    else:
        kernel = (rng.randint(1, 7), rng.randint(1, 7))
        padding = (rng.randint(0, 3), rng.randint(0, 3))
    c_in = 1 if kind == "c_in_1" else rng.choice([1, 1, 2, 3, 8, 16, 124, 125, rng.randint(1, 200)])
    multiplier = rng.randint(2, 8) if kind in ("c_in_1", "multiplier") else 1
    c_out = c_in * multiplier
    stride = (rng.randint(1, 3), rng.randint(1, 3))
    dilation = (rng.randint(1, 2), rng.randint(1, 2)) if rng.random() < 0.25 else (1, 1)
    batch = 1 if rng.random() < 0.8 else 2
    height = _input_size(rng, kernel[0], dilation[0], padding[0])
    width = _input_size(rng, kernel[1], dilation[1], padding[1])
    input_nhwc = (batch, height, width, c_in)
    filter_shape = (1, kernel[0], kernel[1], c_out)
    output_nhwc = (
        batch,
        _conv_out(height, kernel[0], stride[0], padding[0], dilation[0]),
        _conv_out(width, kernel[1], stride[1], padding[1], dilation[1]),
        c_out,
    )
    return input_nhwc, filter_shape, output_nhwc, stride, padding, dilation


@pytest.mark.parametrize("isa", ISAS, ids=lambda isa: isa.value)
def test_depthwise_conv2d_scratch_matches_cmsis_nn(isa):
    rng = random.Random(20260102)
    for _ in range(SHAPES_PER_ISA):
        input_nhwc, filter_shape, output_nhwc, stride, padding, dilation = case = _depthwise_case(rng)
        _, kernel_h, kernel_w, c_out = filter_shape
        expected = cmsis_nn.depthwise_conv_wrapper_buffer_size(
            _BACKEND[isa], A8W8, input_nhwc=input_nhwc, filter_nhwc=(c_out, kernel_h, kernel_w, 1),
            output_nhwc=output_nhwc, padding_hw=padding, stride_hw=stride, dilation_hw=dilation,
            ch_mult=c_out // input_nhwc[3],
        )
        assert depthwise_conv2d_scratch_bytes(isa, *case) == expected, case


# --- transpose convolution ---------------------------------------------------------------------------------


def _transpose_conv_case(rng: random.Random):
    c_in = rng.choice([1, 4, 8, 15, 16, 17, 18, 32, 64, rng.randint(1, 128)])
    c_out = rng.randint(1, 64)
    kernel = (rng.randint(1, 5), rng.randint(1, 5))
    stride = (rng.choice([1, 2, 2, 3, 4]), rng.choice([1, 2, 2, 3, 4]))
    padding = (rng.randint(0, kernel[0] - 1), rng.randint(0, kernel[1] - 1))
    output_padding = (rng.randint(0, stride[0] - 1), rng.randint(0, stride[1] - 1))
    batch = rng.choice([1, 1, 2])
    height, width = rng.randint(1, 24), rng.randint(1, 24)
    out_h = (height - 1) * stride[0] - 2 * padding[0] + kernel[0] + output_padding[0]
    out_w = (width - 1) * stride[1] - 2 * padding[1] + kernel[1] + output_padding[1]
    if out_h < 1 or out_w < 1:
        padding, output_padding = (0, 0), (0, 0)
        out_h = (height - 1) * stride[0] + kernel[0]
        out_w = (width - 1) * stride[1] + kernel[1]
    input_nhwc = (batch, height, width, c_in)
    filter_shape = (c_out, kernel[0], kernel[1], c_in)
    output_nhwc = (batch, out_h, out_w, c_out)
    return input_nhwc, filter_shape, output_nhwc, stride, padding, output_padding


@pytest.mark.parametrize("isa", ISAS, ids=lambda isa: isa.value)
def test_transpose_conv2d_scratch_matches_cmsis_nn(isa):
    rng = random.Random(20260103)
    reverse_paths = set()
    for _ in range(SHAPES_PER_ISA):
        input_nhwc, filter_shape, output_nhwc, stride, padding, output_padding = _transpose_conv_case(rng)
        common = dict(
            input_nhwc=input_nhwc, filter_nhwc=filter_shape, padding_hw=padding, stride_hw=stride,
            dilation_hw=(1, 1), padding_offsets_hw=output_padding,
        )
        expected = (
            cmsis_nn.transpose_conv_buffer_size(_BACKEND[isa], A8W8, output_nhwc=output_nhwc, **common),
            cmsis_nn.transpose_conv_reverse_conv_buffer_size(_BACKEND[isa], A8W8, **common),
        )
        ours = transpose_conv2d_scratch_bytes(isa, input_nhwc, filter_shape, output_nhwc, stride, padding)
        assert ours == expected, (input_nhwc, filter_shape, output_nhwc, stride, padding)
        reverse_paths.add(ours[1] > 0)
    assert reverse_paths == {True, False}


# --- fully connected, batch matmul, average pool -----------------------------------------------------------


@pytest.mark.parametrize("isa", ISAS, ids=lambda isa: isa.value)
def test_fully_connected_scratch_matches_cmsis_nn(isa):
    rng = random.Random(20260104)
    for _ in range(SHAPES_PER_ISA):
        in_features, out_features = rng.randint(1, 2048), rng.randint(1, 2048)
        expected = cmsis_nn.fully_connected_buffer_size(
            _BACKEND[isa], A8W8, filter_nhwc=(in_features, 1, 1, out_features)
        )
        assert fully_connected_scratch_bytes(isa, in_features, out_features) == expected


@pytest.mark.parametrize("isa", ISAS, ids=lambda isa: isa.value)
def test_batch_matmul_scratch_matches_cmsis_nn(isa):
    """The stock runtime sizes ``arm_batch_matmul_s8`` with the fully connected function, filter [K, -, -, N]."""
    rng = random.Random(20260105)
    for _ in range(SHAPES_PER_ISA):
        batch, rows, inner, columns = rng.randint(1, 8), rng.randint(1, 64), rng.randint(1, 256), rng.randint(1, 256)
        expected = cmsis_nn.fully_connected_buffer_size(_BACKEND[isa], A8W8, filter_nhwc=(inner, -1, -1, columns))
        assert batch_matmul_scratch_bytes(isa, (batch, rows, inner), (batch, columns, inner)) == expected


@pytest.mark.parametrize("isa", ISAS, ids=lambda isa: isa.value)
def test_avg_pool2d_scratch_matches_cmsis_nn(isa):
    rng = random.Random(20260106)
    for _ in range(SHAPES_PER_ISA):
        kernel = (rng.randint(1, 7), rng.randint(1, 7))
        stride = (rng.randint(1, 3), rng.randint(1, 3))
        padding = (rng.randint(0, kernel[0] // 2), rng.randint(0, kernel[1] // 2))
        height, width = rng.randint(kernel[0], 40), rng.randint(kernel[1], 40)
        channels, batch = rng.randint(1, 512), rng.choice([1, 2])
        out_w = _conv_out(width, kernel[1], stride[1], padding[1], 1)
        input_nhwc = (batch, height, width, channels)
        output_nhwc = (batch, _conv_out(height, kernel[0], stride[0], padding[0], 1), out_w, channels)
        expected = cmsis_nn.avgpool_buffer_size(_BACKEND[isa], A8W8, dim_dst_width=out_w, ch_src=channels)
        assert avg_pool2d_scratch_bytes(isa, input_nhwc, output_nhwc, kernel, stride, padding) == expected


# --- spot values, op table, ISA mapping --------------------------------------------------------------------

SPOT_VALUES = {  # reference table: (SCALAR, DSP, MVE) bytes
    "conv 1x32x32x16 3x3 -> 32": (
        lambda isa: conv2d_scratch_bytes(isa, (1, 32, 32, 16), (32, 3, 3, 16), (1, 32, 32, 32), (1, 1), (1, 1), (1, 1)),
        (576, 576, 576),
    ),
    "conv 1x32x32x3 3x3 -> 16": (
        lambda isa: conv2d_scratch_bytes(isa, (1, 32, 32, 3), (16, 3, 3, 3), (1, 32, 32, 16), (1, 1), (1, 1), (1, 1)),
        (112, 112, 128),
    ),
    "depthwise 5x5 pad 2 C 16": (
        lambda isa: depthwise_conv2d_scratch_bytes(
            isa, (1, 16, 16, 16), (1, 5, 5, 16), (1, 16, 16, 16), (1, 1), (2, 2), (1, 1)
        ),
        (0, 800, 12400),
    ),
    "avg_pool C 64": (
        lambda isa: avg_pool2d_scratch_bytes(isa, (1, 8, 8, 64), (1, 4, 4, 64), (2, 2), (2, 2), (0, 0)),
        (0, 256, 0),
    ),
}


@pytest.mark.parametrize("name", SPOT_VALUES)
def test_spot_values_from_the_reference_table(name):
    size, expected = SPOT_VALUES[name]
    assert tuple(size(isa) for isa in (Isa.SCALAR, Isa.DSP, Isa.MVE)) == expected


def test_module_docstring_example():
    assert doctest.testmod(scratch).failed == 0


def test_ops_with_scratch_are_the_ones_with_sized_kernels():
    with_scratch = {name for name, arguments in SCRATCH_ARGUMENTS.items() if arguments}
    assert with_scratch == {
        f"quantized_{op}{suffix}" for op in ("conv2d", "depthwise_conv2d", "transpose_conv2d", "avg_pool2d")
        for suffix in ("", "_nhwc")
    } | {"quantized_batch_matmul"}
    assert SCRATCH_ARGUMENTS["quantized_transpose_conv2d"] == ("scratch", "output_scratch")
    assert needs_scratch("quantized_conv2d") and not needs_scratch("quantized_max_pool2d")
    with pytest.raises(KeyError, match="quantized_conv3d"):
        needs_scratch("quantized_conv3d")


def test_core_paths_agree_with_cmsis_nn():
    """Our core table picks the same CMSIS-NN path as CMSIS-NN's own resolve_backend, for every core it knows."""
    for member in cmsis_nn.CortexM.__members__.values():
        core = CORES["cortex-" + member.name.lower()]
        assert _BACKEND[core.isa] == cmsis_nn.resolve_backend(member), core.name
