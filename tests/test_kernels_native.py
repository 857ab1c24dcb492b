"""The fully connected layer in C (imxrt.kernels._native) and the numpy path it stands in for (the convolutions
and pools in C: test_kernels_native_conv.py).

Every TFLM comparison of a FULLY_CONNECTED op runs the C kernel when it is built; here the numpy path runs
the same models against TFLM too (and the numpy convolutions and pools two whole partitions), both run layer
shapes the models do not reach (channel counts that are not a multiple of four or exceed 256, several rows,
depths of one), each against the direct integer reference, and the C type refuses buffers that do not fit it.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_kernels_models import partition
from test_kernels_ops import assert_bit_exact, lowered
from test_kernels_paths import reference_output

from imxrt.kernels import conv, fully_connected, pooling

FC_MODELS = ["op_linear_rank3", "op_linear_decomposed_to_addmm", "op_linear_relu_decomposed"]


def test_the_c_kernels_are_built():
    """`pip install -e .` compiles kernels/_native.c; without a C compiler the install succeeds but the host
    runtime falls back to numpy (same numbers, several times slower)."""
    try:
        from imxrt.kernels import _native
    except ImportError as e:
        pytest.fail(f"imxrt.kernels._native is not built ({e}): install a C compiler and reinstall imxrt")
    assert fully_connected._native is conv._native is pooling._native is _native


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ds_cnn", "mobilenet_v2"])
def test_numpy_convolutions_and_pools_run_the_partition_bit_exactly(name, monkeypatch):
    """Without the C kernels (an install without a compiler) the numpy ones give TFLM's numbers on whole
    models: DS-CNN's strided stem and depthwise layers, MobileNetV2's inverted residuals and average pool (the
    C ones are checked on the same partitions by test_kernels_models.py, on edge cases by
    test_kernels_native_conv.py)."""
    for module in (conv, fully_connected, pooling):
        monkeypatch.setattr(module, "_native", None)
    assert_bit_exact(partition(name), range(2))


@pytest.mark.parametrize("name", FC_MODELS)
def test_numpy_path_is_bit_exact_against_tflm(name, monkeypatch):
    monkeypatch.setattr(fully_connected, "_native", None)
    assert_bit_exact(lowered(name), range(3))


@pytest.mark.slow
def test_numpy_path_runs_the_autoencoder_partition_bit_exactly(monkeypatch):
    """Ten FULLY_CONNECTED layers, per-tensor multipliers, relu folded into the output range."""
    monkeypatch.setattr(fully_connected, "_native", None)
    assert_bit_exact(partition("autoencoder"), range(3))


LAYERS = {  # name: (rows, depth, channels, zp_in, zp_out, act_min, per-channel multipliers)
    "per_tensor": (1, 640, 128, -3, 5, -128, False),
    "odd_channels_relu": (3, 37, 7, 12, -20, -20, True),
    "wide": (2, 19, 300, 0, 0, -128, True),
    "depth_one": (4, 1, 5, -128, 127, -128, False),
    "negative_tie_step": (2, 64, 9, 9, 9, -128, True),
}


@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize("native", [True, False], ids=["c", "numpy"])
def test_layer_equals_the_integer_reference(name, native):
    rows, depth, channels, zp_in, zp_out, act_min, per_channel = LAYERS[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    weights = rng.integers(-127, 128, (channels, depth)).astype(np.int8)
    bias = rng.integers(-30000, 30000, channels)
    count = channels if per_channel else 1
    multipliers, shifts = rng.integers(2**30, 2**31, count), rng.integers(-12, -5, count)
    x = rng.integers(-128, 128, (rows, depth)).astype(np.int8)
    acc = (x.astype(np.int64) - zp_in) @ weights.T.astype(np.int64) + bias
    want = reference_output(acc, multipliers, shifts, zp_out, act_min, 127)
    params = fully_connected.prepare_fully_connected(weights, bias, zp_in, multipliers, shifts, zp_out, act_min, 127,
                                                     (rows, channels), native=native)
    assert (params.native is not None) == native
    np.testing.assert_array_equal(fully_connected.fully_connected(x, params), want)
    np.testing.assert_array_equal(fully_connected.bind_fully_connected(params)(x), want, err_msg="bound")


def test_a_layer_past_the_c_kernels_integers_stays_on_numpy():
    """A multiplier shifted left by 24 (M > 1) over accumulators near 2**23: (acc + bias) M' reaches 2**63."""
    weights = np.full((2, 600), 127, np.int8)
    params = fully_connected.prepare_fully_connected(weights, None, -128, [2**30], [24], 0, -128, 127, (1, 2))
    assert params.native is None


def test_the_c_type_refuses_buffers_that_do_not_fit():
    from imxrt.kernels import _native

    params = fully_connected.prepare_fully_connected(np.ones((3, 4), np.int8), None, 0, [2**30], [-3], 0, -128, 127,
                                                     (1, 3))
    layer = params.native
    assert (layer.depth, layer.channels) == (4, 3)
    with pytest.raises(ValueError, match="not whole rows of depth 4"):
        layer.run(np.zeros(5, np.int8), np.empty(3, np.int8))
    with pytest.raises(ValueError, match="out .* expected 6 items"):
        layer.run(np.zeros(8, np.int8), np.empty(3, np.int8))
    with pytest.raises(ValueError, match="x .* 1 bytes"):
        layer.run(np.zeros(4, np.int32), np.empty(3, np.int8))
    with pytest.raises(ValueError, match="not C-contiguous"):
        layer.run(np.zeros((4, 2), np.int8)[:, 0], np.empty(3, np.int8))  # not contiguous
    with pytest.raises(ValueError, match="depth 0 is outside"):
        _native.FullyConnected(np.ones(4, np.int8), 0, *[np.zeros(4, np.int64)] * 6, 0, -128, 127)
