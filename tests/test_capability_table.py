"""The NPU capability table's promise: what the partitioner accepts, the LiteRT lowering expresses.

Every row of ``npu.support.SUPPORTED`` is reached by at least one small model below (in more than one
argument form where the op has them: negative dims, keepdim, broadcasting, scalar operands, strides). On
imxrt700 each compiles with no node handed back by the LiteRT lowering (the compile would still succeed,
the node running on the CPU: that fallback is for the table's gaps, and this test finds them), and each
runs bit-exactly against TFLM within the README's rounding of the quantized program.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from program_checks import check_case
from torch import nn

from imxrt.npu import support
from imxrt.pipeline import CompileOptions, compile


class Fn(nn.Module):
    """A function of the inputs, after a 1x1 conv on the first so the op sits inside an int8 cluster."""

    def __init__(self, function, channels: int | None = None):
        super().__init__()
        self.function = function
        self.conv = nn.Conv2d(channels, channels, 1) if channels else None

    def forward(self, x, *rest):
        if self.conv is not None:
            x = self.conv(x)
        return self.function(x, *rest)


class Linear3d(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8, 6))

    def forward(self, x):
        return x @ self.weight.t()


class Addmm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.randn(6, 8)), nn.Parameter(torch.randn(8))

    def forward(self, x):
        return torch.addmm(self.bias, x, self.weight)


X4 = (1, 4, 6, 6)
# Rows for edge forms the pipeline does not emit (max_pool2d becomes max_pool2d_with_indices, squeeze(dim)
# squeeze.dims, clone a dim-order clone, addmm a linear before quantization); kept so that an edge graph
# built another way still partitions.
NOT_EMITTED_BY_EXPORT = {"aten.max_pool2d.default", "aten.squeeze_copy.dim", "aten.clone.default",
                         "aten.addmm.default"}
FORMS = {
    "conv2d": (lambda: nn.Conv2d(4, 8, 3, stride=2, padding=1), [X4]),
    "depthwise": (lambda: nn.Conv2d(4, 8, 3, padding=1, groups=4), [X4]),
    "conv_transpose": (lambda: nn.ConvTranspose2d(4, 4, 2, stride=2), [X4]),
    "linear": (lambda: nn.Linear(6, 8), [(2, 6)]),
    "linear_rank3": (lambda: nn.Linear(6, 8), [(1, 3, 6)]),
    "matmul_constant": (Linear3d, [(3, 6)]),
    "bmm": (lambda: Fn(lambda x, y: torch.bmm(torch.tanh(x), torch.tanh(y))), [(2, 3, 4), (2, 4, 5)]),  # zp 0
    # any operands: the quantizer makes a computed operand symmetric, softmax's is requantized to zero point 0
    "bmm_of_softmax": (lambda: Fn(lambda x, y: torch.bmm(torch.softmax(x, -1), y * 2.0)), [(2, 3, 4), (2, 4, 5)]),
    "addmm": (Addmm, [(3, 6)]),
    "add_broadcast": (lambda: Fn(torch.add, 4), [X4, (1, 4, 1, 1)]),
    "add_scalar": (lambda: Fn(lambda x: x + 0.5, 4), [X4]),
    "sub": (lambda: Fn(torch.sub, 4), [X4, X4]),
    "sub_scalar_first": (lambda: Fn(lambda x: 1.0 - x, 4), [X4]),
    "mul_broadcast": (lambda: Fn(torch.mul, 4), [X4, (1, 4, 1, 1)]),
    "mul_scalar": (lambda: Fn(lambda x: x * 3.0, 4), [X4]),
    "maximum": (lambda: Fn(torch.maximum), [X4, X4]),
    "minimum": (lambda: Fn(torch.minimum), [X4, X4]),
    "cat_negative_dim": (lambda: Fn(lambda x, y: torch.cat([x, y], -3), 4), [X4, X4]),
    "avg_pool": (lambda: Fn(lambda x: F.avg_pool2d(x, 3, 2, 1), 4), [X4]),
    "adaptive_avg_pool": (lambda: Fn(lambda x: F.adaptive_avg_pool2d(x, 3), 4), [X4]),
    "max_pool": (lambda: Fn(lambda x: F.max_pool2d(x, 3, 2, 1), 4), [X4]),
    "max_pool_indices": (lambda: Fn(lambda x: F.max_pool2d(x, 2, return_indices=True)[0], 4), [X4]),
    "mean_hw_keepdim": (lambda: Fn(lambda x: x.mean((-1, -2), keepdim=True), 4), [X4]),
    "mean_channels": (lambda: Fn(lambda x: x.mean(1), 4), [X4]),
    "sum": (lambda: Fn(lambda x: x.sum((2, 3)), 4), [X4]),
    "amax": (lambda: Fn(lambda x: x.amax(-1), 4), [X4]),
    "amin": (lambda: Fn(lambda x: x.amin(1, keepdim=True), 4), [X4]),
    "softmax": (lambda: Fn(lambda x: torch.softmax(x, -1)), [(2, 10)]),
    "relu": (lambda: Fn(torch.relu, 4), [X4]),
    "relu_alone": (lambda: Fn(torch.relu), [X4]),
    "hardtanh": (lambda: Fn(lambda x: F.hardtanh(x, -0.5, 0.5), 4), [X4]),
    "clamp": (lambda: Fn(lambda x: x.clamp(-1.0, 0.25)), [X4]),
    "clamp_min": (lambda: Fn(lambda x: x.clamp(min=-0.2)), [X4]),
    "sigmoid": (lambda: Fn(torch.sigmoid, 4), [X4]),
    "tanh": (lambda: Fn(torch.tanh, 4), [X4]),
    "exp": (lambda: Fn(torch.exp, 4), [X4]),
    "log": (lambda: Fn(lambda x: torch.log(x.abs() + 1.0)), [X4]),
    "rsqrt": (lambda: Fn(lambda x: torch.rsqrt(x.abs() + 1.0)), [X4]),
    "hardswish": (lambda: Fn(F.hardswish, 4), [X4]),
    "leaky_relu": (lambda: Fn(lambda x: F.leaky_relu(x, 0.1), 4), [X4]),
    "abs": (lambda: Fn(torch.abs, 4), [X4]),
    "neg": (lambda: Fn(torch.neg, 4), [X4]),
    "prelu": (lambda: nn.Sequential(nn.Conv2d(4, 4, 1), nn.PReLU(4)), [X4]),
    "pad": (lambda: Fn(lambda x: F.pad(x, (1, 2, 0, 1)), 4), [X4]),
    "reflection_pad": (lambda: Fn(lambda x: F.pad(x, (1, 1, 2, 2), mode="reflect"), 4), [X4]),
    "permute": (lambda: Fn(lambda x: x.permute(0, 2, 3, 1), 4), [X4]),
    "view": (lambda: Fn(lambda x: x.reshape(1, 4, 36), 4), [X4]),
    "squeeze_dims": (lambda: Fn(lambda x: x.mean((2, 3), keepdim=True).squeeze((2, 3)), 4), [X4]),
    "squeeze_dim": (lambda: Fn(lambda x: x.mean(2, keepdim=True).squeeze(2), 4), [X4]),
    "unsqueeze": (lambda: Fn(lambda x: x.mean(1).unsqueeze(-1), 4), [X4]),
    "clone_channels_last": (lambda: Fn(lambda x: x.clone(memory_format=torch.channels_last), 4), [X4]),
    "slice": (lambda: Fn(lambda x: x[:, 1:3, :, ::2], 4), [X4]),
    "select_channel": (lambda: Fn(lambda x: x[:, 2], 4), [X4]),
    "select_negative_dim": (lambda: Fn(lambda x: x[:, :, -1] * x[:, :, 0], 4), [X4]),
    "upsample_nearest": (lambda: Fn(lambda x: F.interpolate(x, scale_factor=2), 4), [X4]),
    "upsample_bilinear": (lambda: Fn(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), 4), [X4]),
}


def _compile(form: str):
    factory, shapes = FORMS[form]
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    cal = [tuple(torch.randn(s, generator=generator) for s in shapes) for _ in range(4)]
    result = compile(factory().eval(), cal[0], "imxrt700", cal,
                     CompileOptions(show_progress=False, neutron_compiler="reference"))
    return result, cal


@pytest.fixture(scope="module")
def compiled():
    return {}


@pytest.mark.slow
@pytest.mark.parametrize("form", sorted(FORMS))
def test_what_the_table_accepts_lowers_and_runs_as_tflm_does(form, compiled):
    result, cal = compiled[form] = _compile(form)
    refused = [op["name"] for op in result.report["ops"] if "the LiteRT lowering refused it" in (op["reason"] or "")]
    assert refused == [], f"the capability table accepted {refused}, the LiteRT lowering refused them"
    for inputs in cal[:2]:
        check_case(result, inputs)


@pytest.mark.slow
def test_every_row_of_the_table_is_reached(compiled):
    """Runs after the forms (pytest keeps file order): each row was placed on the NPU by some form."""
    if len(compiled) < len(FORMS):
        pytest.skip("run with the whole module")
    placed = {op["op"] for result, _ in compiled.values() for op in result.report["ops"] if op["placement"] == "npu"}
    rows = {getattr(target, "__name__", str(target)) for target in support.SUPPORTED}
    missing = sorted(rows - placed - NOT_EMITTED_BY_EXPORT)
    assert missing == [], f"no form reaches {missing}"


class AddmmScaled(nn.Module):
    def forward(self, b, x, w):
        return torch.addmm(b, x, w, beta=0.5, alpha=2.0)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["imxrt700", "imxrt700-cpu"])
def test_addmm_runs_in_int8(target):
    """addmm had no int8 rule and ran in float (ExecuTorch's Cortex-M backend lowers it): with a constant
    weight it is a linear layer (FULLY_CONNECTED), otherwise mm, scaled, plus the bias."""
    generator = torch.Generator().manual_seed(0)
    for model, shapes in ((Addmm(), [(3, 6)]), (AddmmScaled(), [(3, 8), (3, 6), (6, 8)])):
        cal = [tuple(torch.randn(s, generator=generator) for s in shapes) for _ in range(4)]
        result = compile(model.eval(), cal[0], target, cal, CompileOptions(show_progress=False))
        if isinstance(model, Addmm):
            assert result.report["summary"]["ops_cpu_float"] == 0
        for inputs in cal[:2]:
            check_case(result, inputs)
