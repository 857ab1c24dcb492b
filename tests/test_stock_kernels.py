"""The stock portable kernels' own argument checks (``imxrt.runtime.stock_rules``), held at compile time and at load.

A program may call only operators the stock ExecuTorch runtime has kernels for, and only with arguments those
kernels accept: torch runs a 3-D convolution, the stock ``convolution.out`` refuses a 5-D input at run time
(error 0x12). Each rule is checked at its boundary against the stock kernels themselves (ExecuTorch's pybindings,
the stock runtime with the portable kernels) and against the host runtime, and the host runtime must agree with
the stock runtime bit-exactly on programs whose CPU part is portable kernels only.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from executorch.exir import schema
from executorch.exir._serialize._program import deserialize_pte_binary
from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from _argument_sweep import OneCallProgram  # noqa: E402
from edited_programs import edited  # noqa: E402

import imxrt  # noqa: E402
import imxrt.runtime  # noqa: E402
from imxrt.errors import BadFile, BadModel  # noqa: E402
from imxrt.runtime import stock_rules  # noqa: E402

_OPTIONS = imxrt.CompileOptions(show_progress=False)


def _compile(model: torch.nn.Module, shape: tuple[int, ...], target: str, **options) -> bytes:
    torch.manual_seed(0)
    inputs = (torch.randn(shape, generator=torch.Generator().manual_seed(1)),)
    options = imxrt.CompileOptions(show_progress=False, **options)
    return imxrt.compile(model.eval(), inputs, target, [inputs], options).pte


def _operators(pte: bytes) -> list[str]:
    return [f"{op.name}.{op.overload}" for op in deserialize_pte_binary(pte).program.execution_plan[0].operators]


# ExecuTorch's backend suite, backends/test/suite/operators/test_conv3d.py: its default Conv3d and a transposed one.
@pytest.mark.slow
@pytest.mark.parametrize("target", ["imxrt700", "imxrt700-cpu"])
@pytest.mark.parametrize("layer, shape", [
    (lambda: torch.nn.Conv3d(2, 3, 3), (1, 2, 5, 5, 5)),
    (lambda: torch.nn.Conv3d(2, 3, 3, stride=2, padding=1, groups=1, bias=False), (1, 2, 6, 6, 6)),
    (lambda: torch.nn.ConvTranspose3d(2, 3, 3), (1, 2, 4, 4, 4)),
], ids=["conv3d", "conv3d_strided", "conv_transpose3d"])
def test_3d_convolution_is_refused_at_compile_time(target, layer, shape):
    with pytest.raises(BadModel) as refused:
        _compile(torch.nn.Sequential(layer()), shape, target)
    message = str(refused.value)
    assert "\n" not in message
    assert "convolution" in message and "rule convolution_rank" in message and "5-D" in message
    assert "use Conv2d" in message


@pytest.mark.slow
def test_serialization_refuses_a_program_the_lowering_did_not_make():
    """``check_stock_kernels`` holds the rules on the serialized program itself (loop bodies included), whatever
    made it: here ExecuTorch's own lowering of a 3-D convolution."""
    from executorch.exir import to_edge

    from imxrt.serialization import check_stock_kernels

    program = to_edge(torch.export.export(torch.nn.Conv3d(2, 3, 3).eval(), (torch.randn(1, 2, 4, 4, 4),)))
    with pytest.raises(BadModel) as refused:
        check_stock_kernels(program.to_executorch())
    assert "aten::convolution.out" in str(refused.value) and "(rule convolution_rank)" in str(refused.value)
    assert refused.value.node is not None


@pytest.mark.slow
def test_serialization_refuses_a_3d_pool_the_lowering_did_not_make():
    """ExecuTorch's own lowering of a 3-D pool calls a kernel the stock runtime lacks; imxrt's splits it into 2-D
    pools first (``ConvertPoolsTo2dPass``, tests/test_suite_gaps.py)."""
    from executorch.exir import to_edge

    from imxrt.serialization import check_stock_kernels

    program = to_edge(torch.export.export(torch.nn.MaxPool3d(2).eval(), (torch.randn(1, 2, 4, 4, 4),)))
    with pytest.raises(BadModel, match=r"aten::max_pool3d_with_indices\.out .* no kernel"):
        check_stock_kernels(program.to_executorch())


class _Upsample(torch.nn.Module):
    def __init__(self, align_corners: bool):
        super().__init__()
        self.align_corners = align_corners

    def forward(self, x):
        return torch.nn.functional.interpolate(x, scale_factor=2, mode="bilinear", align_corners=self.align_corners)


class _CumulativeSum(torch.nn.Module):
    def forward(self, x):
        return torch.cumsum(x, 2)


class _UpsampledSum(torch.nn.Module):
    """A cumulative sum upsampled: two ops with no int8 kernel on the CPU, one float chain."""

    def forward(self, x):
        return torch.nn.functional.interpolate(torch.cumsum(x, 1), size=(7, 9), mode="bilinear")


# Models imxrt leaves in float on the CPU (the report places each op "runs in float on the CPU"); compiled with
# float I/O, their programs call portable kernels only. A model with int8 parts (a per-channel PReLU, an int8
# convolution with float I/O) calls cortex_m kernels, its quantize / dequantize included, which the pybindings
# lack: those are compared with TFLM by the tests of their ops.
@pytest.mark.slow
@pytest.mark.parametrize("model, shape", [
    (lambda: _Upsample(align_corners=False), (1, 2, 4, 5)),
    (lambda: _Upsample(align_corners=True), (1, 3, 3, 4)),
    (_CumulativeSum, (1, 3, 4, 5)),
    (_UpsampledSum, (1, 3, 4, 5)),
], ids=["upsample_bilinear", "upsample_bilinear_align_corners", "cumsum", "cumsum_upsample_to_size"])
def test_portable_only_program_agrees_with_the_stock_runtime(model, shape):
    pte = _compile(model(), shape, "imxrt700-cpu", io="float")
    assert not any(name.startswith("cortex_m::") for name in _operators(pte)), _operators(pte)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(7))
    (stock,) = _load_for_executorch_from_buffer(pte).forward([x])
    (host,) = imxrt.runtime.load(pte).forward(x)
    np.testing.assert_array_equal(host, stock.numpy())


# One call of a portable kernel, at a rule's boundary: (operator, arguments builder, the rule refusing it or None).
def _tensor(program: OneCallProgram, shape, dtype=torch.float32, constant: bool = True) -> int:
    if not constant:
        return program.tensor(list(shape), dtype)
    values = torch.arange(int(np.prod(shape)), dtype=torch.float64).remainder(7).sub(3).to(dtype)
    return program.tensor(list(shape), dtype, values.numpy().tobytes())


def _ints(program: OneCallProgram, values) -> int:
    """An int list: a program's lists of ints hold the indices of Int values."""
    return program.add(schema.IntList(items=[program.add(schema.Int(value)) for value in values]))


def _convolution(input_shape, weight_shape, stride=(1, 1), padding=(0, 0), transposed=False, output_padding=(0, 0),
                 groups=1, out_shape=None):
    def build(program: OneCallProgram) -> list[int]:
        spatial = len(input_shape) - 2
        out = _tensor(program, out_shape or (1, weight_shape[0], *[1] * spatial), constant=False)
        return [_tensor(program, input_shape), _tensor(program, weight_shape), program.add(schema.Null()),
                _ints(program, stride), _ints(program, padding), _ints(program, [1] * spatial),
                program.add(schema.Bool(transposed)), _ints(program, output_padding), program.add(schema.Int(groups)),
                out, out]
    return build


def _avg_pool(input_shape, kernel, padding, out_shape, divisor=None):
    def build(program: OneCallProgram) -> list[int]:
        out = _tensor(program, out_shape, constant=False)
        divisor_value = program.add(schema.Null() if divisor is None else schema.Int(divisor))
        return [_tensor(program, input_shape), _ints(program, kernel), _ints(program, kernel),
                _ints(program, padding), program.add(schema.Bool(False)), program.add(schema.Bool(True)),
                divisor_value, out, out]
    return build


def _channels_last(program: OneCallProgram, index: int) -> int:
    program.values[index].val.dim_order = [0, 2, 3, 1]
    return index


def _avg_pool_channels_last(channels_last: bool):
    """A 2 x 2 average pool of a [1, 2, 4, 4] input, input and output both contiguous or both channels last."""
    def build(program: OneCallProgram) -> list[int]:
        input, out = _tensor(program, (1, 2, 4, 4)), _tensor(program, (1, 2, 2, 2), constant=False)
        if channels_last:
            input, out = _channels_last(program, input), _channels_last(program, out)
        return [input, _ints(program, (2, 2)), _ints(program, (2, 2)), _ints(program, (0, 0)),
                program.add(schema.Bool(False)), program.add(schema.Bool(True)), program.add(schema.Null()), out, out]
    return build


def _adaptive_pool(output_size):
    def build(program: OneCallProgram) -> list[int]:
        out = _tensor(program, (1, 1, *[max(size, 1) for size in output_size]), constant=False)
        return [_tensor(program, (1, 1, 4, 4)), _ints(program, output_size), out, out]
    return build


def _embedding(weight_shape):
    def build(program: OneCallProgram) -> list[int]:
        indices = program.tensor([3], torch.int64, np.array([0, 1, 0], np.int64).tobytes())
        out = _tensor(program, (3, weight_shape[-1]), constant=False)
        return [_tensor(program, weight_shape), indices, program.add(schema.Int(-1)), program.add(schema.Bool(False)),
                program.add(schema.Bool(False)), out, out]
    return build


def _max_pool(indices_dtype):
    def build(program: OneCallProgram) -> list[int]:
        out = _tensor(program, (1, 1, 2, 2), constant=False)
        indices = _tensor(program, (1, 1, 2, 2), indices_dtype, constant=False)
        results = program.add(schema.TensorList(items=[out, indices]))  # several returns: one list value
        return [_tensor(program, (1, 1, 4, 4)), _ints(program, (2, 2)), _ints(program, (2, 2)),
                _ints(program, (0, 0)), _ints(program, (1, 1)), program.add(schema.Bool(False)), out, indices,
                results]
    return build


def _upsample(input_shape, out_shape, scales):
    def build(program: OneCallProgram) -> list[int]:
        out = _tensor(program, out_shape, constant=False)
        scale_factors = program.add(schema.Null() if scales is None else schema.DoubleList(items=list(scales)))
        return [_tensor(program, input_shape), program.add(schema.Null()), scale_factors, out, out]
    return build


def _softmax(dim, half_to_float=False):
    def build(program: OneCallProgram) -> list[int]:
        out = _tensor(program, (2, 3), constant=False)
        return [_tensor(program, (2, 3)), program.add(schema.Int(dim)), program.add(schema.Bool(half_to_float)),
                out, out]
    return build


def _product(shape, mat2_shape, out_shape):
    def build(program: OneCallProgram) -> list[int]:
        out = _tensor(program, out_shape, constant=False)
        return [_tensor(program, shape), _tensor(program, mat2_shape), out, out]
    return build


_CONVOLUTION = "aten::convolution.out"
_AVG_POOL = "aten::avg_pool2d.out"
BOUNDARIES = {
    "conv2d_accepted": (_CONVOLUTION, _convolution((1, 1, 3, 3), (1, 1, 3, 3)), None),
    "conv3d_refused": (_CONVOLUTION, _convolution((1, 1, 1, 3, 3), (1, 1, 1, 3, 3), (1, 1, 1), (0, 0, 0)),
                       "convolution_rank"),
    "conv_stride_1_accepted": (_CONVOLUTION, _convolution((1, 1, 3, 3), (1, 1, 3, 3), stride=(1, 1)), None),
    "conv_stride_0_refused": (_CONVOLUTION, _convolution((1, 1, 3, 3), (1, 1, 3, 3), stride=(1, 0)),
                              "convolution_window"),
    "conv_transpose_output_padding_below_stride_accepted": (
        _CONVOLUTION, _convolution((1, 1, 1, 1), (1, 1, 1, 1), stride=(2, 2), transposed=True,
                                   output_padding=(1, 1), out_shape=(1, 1, 2, 2)), None),
    "conv_transpose_output_padding_at_stride_refused": (
        _CONVOLUTION, _convolution((1, 1, 1, 1), (1, 1, 1, 1), stride=(1, 1), transposed=True,
                                   output_padding=(1, 1), out_shape=(1, 1, 2, 2)), "convolution_window"),
    "conv_groups_dividing_accepted": (_CONVOLUTION, _convolution((1, 2, 3, 3), (2, 1, 3, 3), groups=2,
                                                                 out_shape=(1, 2, 1, 1)), None),
    "conv_groups_beyond_weight_refused": (_CONVOLUTION, _convolution((1, 2, 3, 3), (1, 1, 3, 3), groups=2),
                                          "convolution_groups"),
    "avg_pool_half_kernel_padding_accepted": (_AVG_POOL, _avg_pool((1, 1, 4, 4), (3, 3), (1, 1), (1, 1, 2, 2)),
                                              None),
    "avg_pool_padding_past_half_kernel_refused": (_AVG_POOL, _avg_pool((1, 1, 4, 4), (3, 3), (2, 2), (1, 1, 3, 3)),
                                                  "pool_window"),
    "avg_pool_divisor_1_accepted": (_AVG_POOL, _avg_pool((1, 1, 4, 4), (2, 2), (0, 0), (1, 1, 2, 2), divisor=1),
                                    None),
    "avg_pool_divisor_0_refused": (_AVG_POOL, _avg_pool((1, 1, 4, 4), (2, 2), (0, 0), (1, 1, 2, 2), divisor=0),
                                   "avg_pool_divisor"),
    "avg_pool_contiguous_accepted": (_AVG_POOL, _avg_pool_channels_last(False), None),
    "avg_pool_channels_last_refused": (_AVG_POOL, _avg_pool_channels_last(True), "pool_input_contiguous"),
    "adaptive_pool_size_1_accepted": ("aten::_adaptive_avg_pool2d.out", _adaptive_pool((1, 1)), None),
    "adaptive_pool_size_0_refused": ("aten::_adaptive_avg_pool2d.out", _adaptive_pool((0, 1)),
                                     "adaptive_pool_output_size"),
    "embedding_2d_weight_accepted": ("aten::embedding.out", _embedding((2, 3)), None),
    "embedding_3d_weight_refused": ("aten::embedding.out", _embedding((2, 1, 3)), "embedding_arguments"),
    "max_pool_int64_indices_accepted": ("aten::max_pool2d_with_indices.out", _max_pool(torch.int64), None),
    "max_pool_int32_indices_refused": ("aten::max_pool2d_with_indices.out", _max_pool(torch.int32),
                                       "max_pool_dtype"),
    "upsample_4d_accepted": ("aten::upsample_nearest2d.vec_out", _upsample((1, 1, 2, 2), (1, 1, 4, 4), (2.0, 2.0)),
                             None),
    "upsample_3d_refused": ("aten::upsample_nearest2d.vec_out", _upsample((1, 2, 2), (1, 4, 4), (2.0, 2.0)),
                            "upsample_rank"),
    "upsample_without_size_refused": ("aten::upsample_nearest2d.vec_out", _upsample((1, 1, 2, 2), (1, 1, 4, 4), None),
                                      "upsample_size"),
    "softmax_last_dim_accepted": ("aten::_softmax.out", _softmax(1), None),
    "softmax_dim_past_rank_refused": ("aten::_softmax.out", _softmax(2), "softmax_arguments"),
    "softmax_half_to_float_refused": ("aten::_softmax.out", _softmax(1, half_to_float=True), "softmax_arguments"),
    "mm_2d_accepted": ("aten::mm.out", _product((2, 3), (3, 2), (2, 2)), None),
    "mm_3d_refused": ("aten::mm.out", _product((1, 2, 3), (1, 3, 2), (1, 2, 2)), "mm_arguments"),
    "bmm_3d_accepted": ("aten::bmm.out", _product((1, 2, 3), (1, 3, 2), (1, 2, 2)), None),
    "bmm_2d_refused": ("aten::bmm.out", _product((2, 3), (3, 2), (2, 2)), "bmm_arguments"),
}


def _one_call(name: str, build) -> bytes:
    program = OneCallProgram()
    args = build(program)
    result = program.values[args[-1]].val
    output = result.items[0] if isinstance(result, schema.TensorList) else args[-1]
    return program.sealed(name, args, outputs=[output])


@pytest.mark.parametrize("case", sorted(BOUNDARIES))
def test_rule_boundary(case):
    """The host runtime refuses exactly what the stock kernel refuses, naming the rule; the last accepted value
    runs on both, with the same result."""
    name, build, rule = BOUNDARIES[case]
    pte = _one_call(name, build)
    if rule is None:
        (stock,) = _load_for_executorch_from_buffer(pte).forward([])
        (host,) = imxrt.runtime.load(pte).forward()
        np.testing.assert_array_equal(host, stock.numpy())
        return
    with pytest.raises(RuntimeError):  # the stock kernel's check fails the call (InvalidArgument)
        _load_for_executorch_from_buffer(pte).forward([])
    with pytest.raises(BadFile) as refused:
        imxrt.runtime.load(pte).forward()
    message = str(refused.value)
    assert "\n" not in message and f"(rule {rule})" in message and name in message


def test_every_rule_is_named_and_documented():
    """Each rule's docstring is the text a user reads; each names a table row once."""
    seen = set()
    for rules in stock_rules.STOCK_RULES.values():
        for rule in rules:
            assert rule.text and rule.text[0].islower(), rule.name
            seen.add(rule.check)
    tested = {rule for _name, _build, rule in BOUNDARIES.values() if rule is not None}
    assert tested <= {rule.name for rule in (r for rules in stock_rules.STOCK_RULES.values() for r in rules)}


@pytest.mark.slow
def test_edited_program_breaking_a_rule_is_a_one_line_bad_file():
    """A compiled float upsampling whose scale factors are edited to one value: the stock kernel would refuse
    the call, so the host runtime refuses the file at load."""
    pte = _compile(_Upsample(align_corners=False), (1, 2, 4, 5), "imxrt700-cpu", io="float")

    def one_scale(program: schema.Program) -> None:
        for value in program.execution_plan[0].values:
            if isinstance(value.val, schema.DoubleList):
                value.val.items = value.val.items[:1]

    with pytest.raises(BadFile) as refused:
        imxrt.runtime.load(edited(pte, one_scale))
    message = str(refused.value)
    assert "\n" not in message and "(rule upsample_size)" in message and "scale_factors [2.0]" in message
