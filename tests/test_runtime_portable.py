"""The host runtime on programs plain ExecuTorch lowered (no delegate) equals ExecuTorch's own runtime.

Oracle: ExecuTorch's pybind runtime (`portable_lib`) on the same `.pte` bytes and inputs. Ours runs the
portable ops through torch's out-variants and quantize/dequantize through ExecuTorch's own quantized
kernels, so int8 programs and float programs of exact ops (data movement, elementwise add/mul/max,
pools) match bit for bit. Float ops whose result depends on summation order or on a transcendental's
implementation (convolution, mm/addmm, softmax, sigmoid, mean) differ from ExecuTorch's
C++ loops by a few ULP; they are checked to that tolerance, and in the int8 program they are followed
by a quantize that absorbs the difference.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from executorch.exir import schema, to_edge
from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

import imxrt.runtime


class DataMovement(torch.nn.Module):
    """Ops torch and ExecuTorch compute identically (no reordered sums, no transcendental functions)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(1, 32, generator=torch.Generator().manual_seed(0)))

    def forward(self, x, y):
        z = torch.relu(x + 2 * y)
        z = torch.nn.functional.max_pool2d(z, 2) + torch.nn.functional.avg_pool2d(z, 2)
        z = torch.cat([z, z.permute(0, 1, 3, 2)], dim=1)
        flat = z.reshape(1, -1)[:, :32]
        return flat * self.weight - 1, torch.maximum(z, -z).permute(0, 2, 3, 1)


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.depthwise = torch.nn.Conv2d(8, 8, 3, groups=8, padding=1)
        self.linear = torch.nn.Linear(8 * 3 * 3, 5)

    def forward(self, x):
        z = torch.relu(self.conv(x))
        z = z * torch.sigmoid(z.mean((2, 3), keepdim=True))  # a squeeze-and-excite style gate
        z = torch.nn.functional.max_pool2d(torch.relu(self.depthwise(z)) + z, 2)
        return self.linear(z.reshape(1, -1)).softmax(-1)


class ChannelsLast(torch.nn.Module):
    """Every tensor in the channels_last dim order: the arena holds NHWC bytes, kernels must honour it."""

    def forward(self, x, y):
        z = torch.relu(x + y)
        return torch.maximum(z, x), torch.nn.functional.max_pool2d(z, 2)


def _inputs(seed: int, *shapes, channels_last: bool = False):
    generator = torch.Generator().manual_seed(seed)
    inputs = tuple(torch.randn(*shape, generator=generator) for shape in shapes)
    if channels_last:
        inputs = tuple(x.contiguous(memory_format=torch.channels_last) for x in inputs)
    return inputs


def _float_pte(model, inputs) -> bytes:
    return to_edge(torch.export.export(model.eval(), inputs)).to_executorch().buffer


def _quantized_pte(model, inputs) -> bytes:
    import executorch.kernels.quantized  # noqa: F401  (quantize/dequantize .out kernels for the oracle)
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from imxrt.quantization import ImxrtQuantizer

    exported = torch.export.export(model.eval(), inputs).module(check_guards=False)
    prepared = prepare_pt2e(exported, ImxrtQuantizer())
    for seed in range(4):
        prepared(*_inputs(100 + seed, *[x.shape for x in inputs]))
    converted = convert_pt2e(prepared)
    return to_edge(torch.export.export(converted, inputs)).to_executorch().buffer


def _executorch(pte: bytes, inputs) -> list[np.ndarray]:
    return [t.numpy() for t in _load_for_executorch_from_buffer(pte).forward(list(inputs))]


# name -> (model, input shapes, lowering, channels_last inputs)
CASES = {
    "float_data_movement": lambda: (DataMovement(), ((1, 4, 6, 6), (1, 4, 6, 6)), _float_pte, False),
    "float_convnet": lambda: (ConvNet(), ((1, 3, 8, 8),), _float_pte, False),
    "float_channels_last": lambda: (ChannelsLast(), ((1, 4, 6, 6), (1, 4, 6, 6)), _float_pte, True),
    "int8_convnet": lambda: (ConvNet(), ((1, 3, 8, 8),), _quantized_pte, False),
    "int8_channels_last": lambda: (ChannelsLast(), ((1, 4, 6, 6), (1, 4, 6, 6)), _quantized_pte, True),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    model, shapes, build, channels_last = CASES[request.param]()
    inputs = functools.partial(_inputs, channels_last=channels_last)
    return request.param, build(model, inputs(0, *shapes)), shapes, inputs


@pytest.mark.parametrize("check_plan", [False, True], ids=["plain", "check_plan"])
def test_equals_executorch_runtime_bit_for_bit(case, check_plan):
    name, pte, shapes, make_inputs = case
    program = imxrt.runtime.load(pte, check_plan=check_plan)
    for seed in range(3):
        inputs = make_inputs(seed, *shapes)
        got, expected = program.forward(*inputs), _executorch(pte, inputs)
        assert len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            assert g.shape == e.shape and g.dtype == e.dtype
            assert np.array_equal(g, e), f"{name} seed {seed}: max |diff| {np.abs(g - e).max()}"


def test_programs_are_what_the_cases_claim(case):
    """No delegate; int8 programs really quantize; channels_last programs plan every tensor NHWC."""
    name, pte, _, _ = case
    plan = imxrt.runtime.load(pte).file.plan
    operators = {op.name for op in plan.operators}
    if name.startswith("int8"):
        assert {"quantized_decomposed::quantize_per_tensor", "quantized_decomposed::dequantize_per_tensor"} <= operators
    if name.endswith("convnet"):
        assert {"aten::convolution", "aten::addmm", "aten::mean", "aten::sigmoid", "aten::_softmax"} <= operators
    if name.endswith("channels_last"):
        tensors = [v.val for v in plan.values if isinstance(v.val, schema.Tensor) and len(v.val.sizes) == 4]
        assert tensors and all(t.dim_order == [0, 2, 3, 1] for t in tensors)
    assert not plan.delegates


def test_torch_tensors_and_numpy_arrays_give_the_same_outputs(case):
    _, pte, shapes, make_inputs = case
    program = imxrt.runtime.load(pte)
    inputs = make_inputs(7, *shapes)
    from_torch = program.forward(*inputs)
    from_numpy = program.forward(*[x.numpy() for x in inputs])
    assert all(np.array_equal(a, b) for a, b in zip(from_torch, from_numpy, strict=True))


class Mean(torch.nn.Module):
    def forward(self, x):
        return x.mean((2, 3), keepdim=True)


# One float op per case, each a kernel the runtime computes in ExecuTorch's order.
FLOAT_OPS = {
    "conv_padded": lambda: (torch.nn.Conv2d(3, 8, 3, padding=1), (1, 3, 9, 9)),
    "conv_strided_no_bias": lambda: (torch.nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), (1, 8, 9, 9)),
    "conv_depthwise": lambda: (torch.nn.Conv2d(8, 8, 3, groups=8, padding=1), (1, 8, 9, 9)),
    "conv_grouped_dilated": lambda: (torch.nn.Conv2d(4, 6, 3, groups=2, dilation=2), (1, 4, 9, 9)),
    "linear": lambda: (torch.nn.Linear(64, 10), (3, 64)),
    "softmax": lambda: (torch.nn.Softmax(-1), (8, 30)),  # long rows: see the note in runtime/portable.py
    "sigmoid": lambda: (torch.nn.Sigmoid(), (4, 300)),
    "mean": lambda: (Mean(), (1, 8, 7, 9)),
}


@pytest.mark.parametrize("op", sorted(FLOAT_OPS))
def test_float_op_matches_executorch_bit_for_bit(op):
    torch.manual_seed(0)
    model, shape = FLOAT_OPS[op]()
    inputs = _inputs(3, shape)
    pte = _float_pte(model, inputs)
    (got,), (expected,) = imxrt.runtime.load(pte).forward(*inputs), _executorch(pte, inputs)
    assert np.array_equal(got, expected), f"max |diff| {np.abs(got - expected).max()}"


class Branch(torch.nn.Module):
    """torch.cond compiles to JumpFalseCall and MoveCall instructions."""

    def forward(self, x, y):
        return torch.cond(x.sum() > 0, lambda x, y: x + y, lambda x, y: x - y, (x, y)) * 2


@pytest.mark.parametrize("check_plan", [False, True], ids=["plain", "check_plan"])
def test_control_flow_takes_the_branch_executorch_takes(check_plan):
    pte = _float_pte(Branch(), _inputs(0, (2, 3), (2, 3)))
    instructions = {type(i.instr_args).__name__ for i in imxrt.runtime.load(pte).file.plan.chains[0].instructions}
    assert {"JumpFalseCall", "MoveCall"} <= instructions
    program = imxrt.runtime.load(pte, check_plan=check_plan)
    for sign in (1.0, -1.0):
        x, y = torch.full((2, 3), sign), torch.randn(2, 3, generator=torch.Generator().manual_seed(4))
        (got,), (expected,) = program.forward(x, y), _executorch(pte, (x, y))
        assert np.array_equal(got, expected) and np.array_equal(got, ((x + y if sign > 0 else x - y) * 2).numpy())
