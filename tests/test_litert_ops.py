"""One tiny model per converter: the partition lowers to the expected LiteRT ops, runs in TFLM and LiteRT
within one quantization step of the quantized PyTorch program, and lowers to the same bytes twice."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from litert_harness import check_lowering, op_names
from torch import nn


class Fn(nn.Module):
    def __init__(self, fn, *parameters: nn.Parameter):
        super().__init__()
        self.fn, self.params = fn, nn.ParameterList(parameters)

    def forward(self, *xs):
        return self.fn(*xs, *self.params)


def x4(c=4, h=8, w=8):
    return torch.randn(1, c, h, w)


def cl(t):
    return t.to(memory_format=torch.channels_last)


@dataclass(frozen=True)
class Case:
    fn: object  # a function of the inputs (and parameters), or a module
    inputs: object  # () -> input tuple
    ops: list[str] | set[str]  # the exact op list, or (calibration-dependent cases) the allowed ops
    parameters: tuple = ()
    partitioner: str = "npu"  # "all": the NPU partitioner does not take the op, test the converter anyway


# Channels_last rank-4 inputs keep boundary layout ops out of the expected lists where they do not
# matter; NCHW inputs where the boundary is what the case is about.
CASES = {
    # binary elementwise
    "add": Case(lambda a, b: a + b, lambda: (cl(x4()), cl(x4())), ["ADD"]),
    "sub": Case(lambda a, b: a - b, lambda: (cl(x4()), cl(x4())), ["SUB"]),
    "mul": Case(lambda a, b: a * b, lambda: (cl(x4()), cl(x4())), ["MUL"]),
    "mul_scalar": Case(lambda a: a * 0.5, lambda: (cl(x4()),), ["MUL"]),
    "mul_negative_scalar_then_add_scalar": Case(
        lambda a: a * -1.5 + 1.0, lambda: (cl(x4()),), ["MUL", "ADD"]
    ),
    "mul_broadcast_vector": Case(lambda a, b: a * b, lambda: (cl(x4()), torch.randn(8)), ["RESHAPE", "MUL"]),
    "add_rank2": Case(lambda a, b: a + b, lambda: (torch.randn(3, 5), torch.randn(3, 5)), ["ADD"]),
    "maximum": Case(torch.maximum, lambda: (cl(x4()), cl(x4())), ["MAXIMUM"]),
    "minimum": Case(torch.minimum, lambda: (cl(x4()), cl(x4())), ["MINIMUM"]),
    # activations and unary math
    "relu": Case(torch.relu, lambda: (cl(x4()),), ["RELU"]),
    "relu6": Case(F.relu6, lambda: (cl(x4()),), ["QUANTIZE", "RELU6"]),
    "hardtanh_n1_1": Case(F.hardtanh, lambda: (cl(x4() * 2),), {"QUANTIZE", "MAXIMUM", "MINIMUM"}),
    "clamp_0_1": Case(
        lambda a: torch.clamp(a, 0.0, 1.0), lambda: (cl(x4() * 2),), {"QUANTIZE", "MAXIMUM", "MINIMUM"}
    ),
    "leaky_relu": Case(lambda a: F.leaky_relu(a, 0.1), lambda: (cl(x4()),), ["LEAKY_RELU"]),
    "hardswish": Case(F.hardswish, lambda: (cl(x4() * 3),), ["HARD_SWISH"]),
    "sigmoid": Case(torch.sigmoid, lambda: (cl(x4() * 3),), ["LOGISTIC"]),
    "tanh": Case(torch.tanh, lambda: (cl(x4()),), ["TANH"]),
    "abs": Case(torch.abs, lambda: (cl(x4()),), ["ABS"]),
    "neg": Case(torch.neg, lambda: (cl(x4()),), ["SUB"]),
    "rsqrt": Case(torch.rsqrt, lambda: (cl(x4().abs() + 0.1),), ["RSQRT"]),
    "prelu_shared": Case(
        lambda a, w: F.prelu(a, w), lambda: (cl(x4()),), ["PRELU"], (nn.Parameter(torch.tensor([0.2])),)
    ),
    "prelu_per_channel": Case(
        lambda a, w: F.prelu(a, w),
        lambda: (cl(x4()),),
        ["PRELU"],
        (nn.Parameter(torch.tensor([0.1, -0.3, 0.5, 0.25])),),
    ),
    # pooling and reductions
    "avg_pool_counting_padding": Case(
        lambda a: F.avg_pool2d(a, 3, 2, 1), lambda: (cl(x4()),), ["PAD", "AVERAGE_POOL_2D"]
    ),
    "avg_pool_same": Case(
        lambda a: F.avg_pool2d(a, 3, 1, 1, count_include_pad=False),
        lambda: (cl(x4()),),
        ["AVERAGE_POOL_2D"],
        partitioner="all",
    ),
    "avg_pool_2x2": Case(lambda a: F.avg_pool2d(a, 2), lambda: (cl(x4()),), ["AVERAGE_POOL_2D"]),
    "adaptive_avg_pool": Case(
        lambda a: F.adaptive_avg_pool2d(a, 2), lambda: (cl(x4()),), ["AVERAGE_POOL_2D"]
    ),
    "max_pool_padded": Case(
        lambda a: F.max_pool2d(a, 3, 2, 1), lambda: (cl(x4()),), ["PADV2", "MAX_POOL_2D"]
    ),
    "max_pool_same": Case(lambda a: F.max_pool2d(a, 3, 1, 1), lambda: (cl(x4()),), ["MAX_POOL_2D"]),
    # (1, 4, 1, 1) comes out contiguous: its NCHW order equals NHWC, so a RESHAPE, not a TRANSPOSE
    # a mean over H and W is a whole-plane AVERAGE_POOL_2D: the Cortex-M's kernel for it too, so both round alike
    "mean_hw_keepdim": Case(lambda a: a.mean((2, 3), keepdim=True), lambda: (cl(x4()),),
                            ["AVERAGE_POOL_2D", "RESHAPE"]),
    "mean_hw": Case(lambda a: a.mean((2, 3)), lambda: (cl(x4()),), ["AVERAGE_POOL_2D", "RESHAPE"]),
    "mean_h": Case(lambda a: a.mean(2), lambda: (cl(x4()),), ["MEAN", "TRANSPOSE", "RESHAPE"]),
    "amax_hw": Case(lambda a: a.amax((2, 3)), lambda: (cl(x4()),), ["REDUCE_MAX"]),
    "amin_c": Case(lambda a: a.amin(1, keepdim=True), lambda: (cl(x4()),), ["REDUCE_MIN", "RESHAPE"]),
    "softmax_rank2": Case(lambda a: torch.softmax(a, -1), lambda: (torch.randn(2, 10),), ["SOFTMAX"]),
    "softmax_channels": Case(lambda a: torch.softmax(a, 1), lambda: (cl(x4()),), ["SOFTMAX", "TRANSPOSE"]),
    # over the width of an NHWC value: a TRANSPOSE moves it last; the one back folds into the NCHW output
    "softmax_width": Case(lambda a: torch.softmax(a, 3), lambda: (cl(x4()),), ["TRANSPOSE", "SOFTMAX", "TRANSPOSE"]),
    # weighted
    "linear_rank3": Case(nn.Linear(5, 3), lambda: (torch.randn(2, 4, 5),), ["FULLY_CONNECTED"]),
    "linear_rank4_nchw": Case(nn.Linear(8, 3), lambda: (x4(),), ["FULLY_CONNECTED"]),
    "matmul_constant_weight": Case(
        lambda a, w: a @ w, lambda: (torch.randn(2, 6),), ["FULLY_CONNECTED"], (nn.Parameter(torch.randn(6, 4)),)
    ),
    "linear_decomposed_to_addmm": Case(
        nn.Linear(6, 4), lambda: (torch.randn(2, 6),), ["FULLY_CONNECTED"], partitioner="all_decomposed"
    ),
    "linear_relu_decomposed": Case(
        nn.Sequential(nn.Linear(6, 4), nn.ReLU()),
        lambda: (torch.randn(2, 6),),
        ["FULLY_CONNECTED"],
        partitioner="all_decomposed",
    ),
    "bmm": Case(
        torch.bmm, lambda: (torch.randn(2, 3, 4), torch.randn(2, 4, 5)), ["BATCH_MATMUL"], partitioner="all"
    ),
    # data movement with a compute op in front (a lone move is no NPU partition)
    "cat_channels": Case(
        lambda a, b: torch.cat([a, b * 2.0], 1), lambda: (cl(x4()), cl(x4())), ["MUL", "CONCATENATION"]
    ),
    "pad_after_add": Case(lambda a: F.pad(a + 1.0, (1, 2, 0, 1)), lambda: (cl(x4()),), ["ADD", "PAD"]),
    "pad_value_after_add": Case(
        lambda a: F.pad(a + 1.0, (1, 1, 1, 1), value=0.5),
        lambda: (cl(x4()),),
        ["ADD", "PADV2"],
        partitioner="all",
    ),
    "reflection_pad_after_add": Case(
        lambda a: F.pad(a + 1.0, (1, 2, 0, 1), mode="reflect"),
        lambda: (cl(x4()),),
        ["ADD", "MIRROR_PAD"],
        partitioner="all",
    ),
    "flatten_nchw": Case(
        lambda a: torch.relu(a).flatten(1), lambda: (x4(),), ["TRANSPOSE", "RELU", "TRANSPOSE", "RESHAPE"]
    ),
    "flatten_after_pool": Case(
        lambda a: F.adaptive_avg_pool2d(a, 1).flatten(1), lambda: (x4(),),
        ["TRANSPOSE", "AVERAGE_POOL_2D", "RESHAPE"]
    ),
    "permute_nchw_to_nhwc": Case(
        lambda a: torch.relu(a).permute(0, 2, 3, 1), lambda: (x4(),), ["TRANSPOSE", "RELU"]
    ),
    "slice_channels": Case(
        lambda a: torch.relu(a)[:, 1:3], lambda: (cl(x4()),), ["RELU", "SLICE", "TRANSPOSE"]
    ),
    "squeeze_unsqueeze": Case(
        lambda a: torch.relu(a)[:, :1].squeeze(1).unsqueeze(0),
        lambda: (cl(x4()),),
        ["RELU", "SLICE", "RESHAPE"],
    ),
    "upsample_nearest": Case(
        lambda a: F.interpolate(torch.relu(a), scale_factor=2),
        lambda: (cl(x4()),),
        ["RELU", "RESIZE_NEAREST_NEIGHBOR"],
    ),
    "upsample_bilinear": Case(
        lambda a: F.interpolate(a, scale_factor=2, mode="bilinear"),
        lambda: (cl(x4()),),
        ["RESIZE_BILINEAR", "QUANTIZE"],
    ),
    "upsample_bilinear_align_corners": Case(
        # 8 -> 15: a corner-aligned scale of (15 - 1) / (8 - 1) = 2, one Neutron takes; every input pixel
        # is an output pixel, so the output's range is the input's and no requantization follows
        lambda a: F.interpolate(a, size=(15, 15), mode="bilinear", align_corners=True),
        lambda: (cl(x4()),),
        ["RESIZE_BILINEAR"],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_op(name):
    torch.manual_seed(0)
    case = CASES[name]
    model = case.fn if isinstance(case.fn, nn.Module) else Fn(case.fn, *case.parameters)
    result = check_lowering(model, case.inputs(), partitioner=case.partitioner)
    if isinstance(case.ops, set):
        assert set(op_names(result.subgraph)) <= case.ops
    else:
        assert op_names(result.subgraph) == case.ops
