"""Regression tests of convolutions: 1-D and 2-D argument forms, grouped and transposed convolutions, and a
batch norm on its own (a depthwise convolution).

Each is a defect the conformance suite (benchmarks/conformance.py: ExecuTorch's own NXP and Cortex-M test
models) found, as the smallest model that showed it, on both targets where both apply.
"""

import numpy as np
import pytest
import torch
import torch.nn as nn
from program_checks import assert_pte_matches_quantized, check_case, odd_dim_orders
from regression_helpers import TARGETS, Elementwise
from regression_helpers import compile_seeded as _compile

import imxrt.runtime


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_a_grouped_transposed_conv_holds_only_dim_orders_kernels_take(target):
    """Its [4, 1, 3, 3] weight came out of a transpose with strides (9, 36, 3, 1), serialized as dim order
    [1, 0, 2, 3]; ExecuTorch's dequantize_per_channel wrote out of bounds on it and the process died
    (``double free or corruption``) after a few forwards."""
    torch.manual_seed(0)
    result, cal = _compile(nn.ConvTranspose2d(4, 4, 3, groups=4, bias=False), [(1, 4, 6, 6)], target)
    assert odd_dim_orders(result.pte) == []
    for inputs in cal:
        assert_pte_matches_quantized(result, inputs)


CONV1D_FORMS = {
    "default": lambda: nn.Conv1d(4, 8, 3),
    "no_bias": lambda: nn.Conv1d(4, 8, 3, bias=False),
    "stride_2": lambda: nn.Conv1d(4, 8, 3, stride=2),
    "dilation_2": lambda: nn.Conv1d(4, 8, 3, dilation=2),
    "padding_1": lambda: nn.Conv1d(4, 8, 3, padding=1),
    "same_odd": lambda: nn.Conv1d(4, 8, 3, padding="same"),
    "same_even": lambda: nn.Conv1d(4, 8, 4, padding="same", dilation=1),
    "valid": lambda: nn.Conv1d(4, 8, 5, padding="valid"),
    "conv2d_valid": lambda: nn.Conv2d(4, 8, 3, padding="valid"),
    "conv2d_same_even": lambda: nn.Conv2d(4, 8, (2, 4), padding="same"),
}


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("form", sorted(CONV1D_FORMS))
def test_every_conv_argument_form_compiles_to_int8(form, target):
    """Arguments are read from the schema: conv1d with defaults was refused ("non-positive dilation/groups",
    stride and dilation landed in the wrong positions), string padding stayed float (conv1d) or raised an
    IndexError in the LiteRT converter (conv2d "valid", one-element padding)."""
    torch.manual_seed(0)
    model = CONV1D_FORMS[form]()
    shape = (1, 4, 9, 10) if "conv2d" in form else (1, 4, 20)
    result, cal = _compile(model, [shape], target)
    summary = result.report["summary"]
    assert summary["ops_cpu_float"] == 0
    if target == "imxrt700":
        assert summary["partitions"] == 1 and summary["npu_mac_fraction"] == 1.0
    for inputs in cal[:3]:
        check_case(result, inputs)


# (kernel, stride, padding, output_padding, input size): seeded over the forms TRANSPOSE_CONV's SAME,
# VALID and VALID+SLICE cover
TRANSPOSE_CONVS = [(4, 2, 1, 1, 6), (4, 2, 1, 0, 6), (3, 2, 1, 1, 5), (3, 2, 0, 0, 5), (2, 2, 0, 0, 4),
                   (3, 1, 1, 0, 6), (5, 3, 2, 2, 4), (3, 3, 0, 2, 3), (4, 2, 2, 1, 7)]


@pytest.mark.slow
@pytest.mark.parametrize("kernel, stride, padding, output_padding, size", TRANSPOSE_CONVS)
def test_every_transposed_conv_partition_passes_litert_and_tflm(kernel, stride, padding, output_padding, size):
    """ConvTranspose2d(4, 8, 4, stride=2, padding=1, output_padding=1) on 6x6 was written with SAME
    padding, whose implied input (7) LiteRT's prepare refuses; TFLM ran it. check_case runs every
    partition in both."""
    torch.manual_seed(0)
    model = nn.ConvTranspose2d(4, 8, kernel, stride=stride, padding=padding, output_padding=output_padding)
    result, cal = _compile(model, [(1, 4, size, size)], "imxrt700")
    # Neutron's transposed conv: stride <= 2, output_padding <= padding (else int8 on the CPU)
    on_npu = stride <= 2 and output_padding <= padding
    assert result.report["summary"]["partitions"] == int(on_npu)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:2]:
        check_case(result, inputs)


def _batch_norm(module):
    torch.manual_seed(0)
    module.running_mean.normal_()
    module.running_var.uniform_(0.5, 2.0)
    module.weight.data.normal_()
    module.bias.data.normal_()
    return module


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_a_batch_norm_on_its_own_is_an_int8_depthwise_convolution(target):
    """A standalone nn.BatchNorm2d stayed float and took 40-110 s to compile (torchao's QAT conv-BN matcher
    on an unfused BN); it is a per-channel affine map: a depthwise 1x1 convolution."""
    for module, shape in ((nn.BatchNorm2d(4), (1, 4, 5, 5)), (nn.BatchNorm1d(4), (1, 4, 10))):
        result, cal = _compile(_batch_norm(module), [shape], target)
        assert result.report["summary"]["ops_cpu_float"] == 0
        for inputs in cal[:3]:
            check_case(result, inputs)
        float_out = module.eval()(cal[0][0]).detach().numpy()
        ours = imxrt.runtime.load(result.pte).forward(*cal[0])[0]
        assert np.abs(ours - float_out).max() <= 0.03 * np.abs(float_out).max()


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_a_grouped_transposed_conv_bias_has_a_scale_per_output_channel(target):
    """ConvTranspose2d(9, 3, 3, groups=3) (an upstream NXP case): the bias got one scale for its three
    channels (the weight's per-group scale), and ExecuTorch's C++ dequantize_per_channel aborted the
    process (signal 6) on it."""
    torch.manual_seed(0)
    result, cal = _compile(nn.ConvTranspose2d(9, 3, 3, groups=3), [(3, 9, 11, 13)], target)
    for inputs in cal[:2]:
        check_case(result, inputs)


def test_the_host_runtime_refuses_a_per_channel_count_the_c_kernel_would_abort_on():
    from imxrt.runtime import preconditions

    name = "quantized_decomposed::dequantize_per_channel.out"
    op = torch.ops.quantized_decomposed.dequantize_per_channel.out
    values = torch.zeros(3, 1, 2, dtype=torch.int8)
    problem = preconditions.check(name, op._schema, op,
                                  [values, torch.ones(1, dtype=torch.float64), torch.zeros(1, dtype=torch.int64), 0,
                                   -127, 127, torch.int8], {"out_dtype": None, "out": torch.empty(3, 1, 2)})
    assert problem is not None and "scales must be 3 float64 or float32 values (one per channel)" in problem


FORMS_1D_AND_SPLITS = {  # float on the CPU before (ExecuTorch's Cortex-M backend lowers them to int8)
    "grouped conv": (lambda: nn.Conv2d(8, 8, 3, groups=2), [(1, 8, 6, 6)]),
    "grouped conv without bias": (lambda: nn.Conv2d(6, 9, 3, groups=3, bias=False), [(1, 6, 5, 5)]),
    "split": (lambda: Elementwise(lambda x: [t * 2 for t in torch.split(x, [3, 5], 1)]), [(1, 8, 4, 4)]),
    "chunk": (lambda: Elementwise(lambda x: torch.chunk(x, 3, -1)), [(2, 8)]),
    "unbind": (lambda: Elementwise(lambda x: torch.unbind(x, 1)[1:]), [(2, 3, 4)]),
    "conv_transpose1d": (lambda: nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1, output_padding=1),
                         [(1, 4, 10)]),
    "max_pool1d": (lambda: nn.MaxPool1d(3, 2, padding=1), [(1, 4, 10)]),
    "avg_pool1d": (lambda: nn.AvgPool1d(3, 2, ceil_mode=True), [(1, 4, 10)]),
    "adaptive_avg_pool1d": (lambda: nn.AdaptiveAvgPool1d(5), [(1, 4, 10)]),
}


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", FORMS_1D_AND_SPLITS)
def test_grouped_convs_1d_ops_and_splits_are_int8(name, target):
    """A grouped conv is CMSIS-NN's grouped arm_convolve_s8 (a zero bias where the model has none), split /
    chunk / unbind are slices and selects, 1-D transposed convs and pools their 2-D forms over a height of 1."""
    make, shapes = FORMS_1D_AND_SPLITS[name]
    result, cal = _compile(make(), shapes, target)
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in cal[:2]:
        check_case(result, inputs)


@pytest.mark.slow
@pytest.mark.parametrize("output_padding", [(1, 1), (1, 0)])
def test_an_unpadded_transposed_conv_with_output_padding_runs_on_the_npu(output_padding):
    """ExecuTorch's conv_transpose2d_output_padding cases stayed on the CPU: without padding, TRANSPOSE_CONV's
    VALID output of the larger size leaves the output_padding rows at the bias alone, as PyTorch does."""
    conv = nn.ConvTranspose2d(4, 6, 3, stride=2, output_padding=output_padding)
    result, cal = _compile(conv, [(1, 4, 5, 6)], "imxrt700")
    assert result.report["summary"]["partitions"] == 1 and result.report["summary"]["ops_cpu_float"] == 0
    assert [op["placement"] for op in result.report["ops"] if "convolution" in op["op"]] == ["npu"]
    for inputs in cal[:2]:
        check_case(result, inputs)
