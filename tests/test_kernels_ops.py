"""The host LiteRT executor (imxrt.runtime.litert on imxrt.kernels) against TFLM, bit for bit: every per-op
model of the LiteRT lowering tests, lowered to its .tflite and run on seeded random int8 inputs.

EXP and LOG have no int8 kernel in TFLM: they are compared with LiteRT's reference kernels (BUILTIN_REF).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import test_litert_conv
import test_litert_ops
import torch
from litert_harness import lower_single, quantize_and_capture
from oracles import run_reference, tflite_io
from torch import nn

from imxrt.runtime.litert import BadSubgraphInput, LiteRTRunner, UnsupportedOperator

RANDOM_INPUTS = 20  # the host runtime promises bit-exactness over at least 20 random inputs per model


def _op_case(name):
    case = test_litert_ops.CASES[name]
    model = case.fn if isinstance(case.fn, nn.Module) else test_litert_ops.Fn(case.fn, *case.parameters)
    return model, case.inputs, case.partitioner


def _conv_case(name):
    make, inputs, _ = test_litert_conv.CASES[name]
    return test_litert_conv.Conv(make()), lambda: inputs, "npu"


def _fused_case(conv, activation):
    return lambda: (test_litert_conv.Conv(conv(), activation), test_litert_conv._x, "npu")


def _extra(fn, inputs):
    return lambda: (test_litert_ops.Fn(fn), inputs, "all")


def _x4(c=4, h=8, w=8):
    return test_litert_ops.cl(torch.randn(1, c, h, w))


# name -> () -> (model, () -> inputs, partitioner)
CASES = {
    **{f"op_{name}": functools.partial(_op_case, name) for name in test_litert_ops.CASES},
    **{f"conv_{name}": functools.partial(_conv_case, name) for name in test_litert_conv.CASES},
    "conv_relu6": _fused_case(lambda: nn.Conv2d(4, 6, 3, padding=1), nn.ReLU6()),
    "depthwise_relu": _fused_case(lambda: nn.Conv2d(4, 4, 3, padding=1, groups=4), nn.ReLU()),
    "transposed_relu6": _fused_case(lambda: nn.ConvTranspose2d(4, 6, 4, 2, 1), nn.ReLU6()),
    "exp": _extra(torch.exp, lambda: (_x4(),)),
    "log": _extra(torch.log, lambda: (_x4().abs() + 0.1,)),
    "sum_hw": _extra(lambda a: a.sum((2, 3)), lambda: (_x4(),)),
    "softmax_wide": _extra(lambda a: torch.softmax(a * 3, -1), lambda: (torch.randn(3, 37),)),
}


@functools.cache
def lowered(name: str) -> bytes:
    torch.manual_seed(0)
    model, make_inputs, partitioner = CASES[name]()
    inputs = make_inputs()
    calibration = [inputs] + [tuple(x * (0.5 + torch.rand_like(x)) for x in inputs) for _ in range(3)]
    return lower_single(quantize_and_capture(model, inputs, calibration, partitioner)).tflite


def random_inputs(tflite: bytes, seed: int) -> list[np.ndarray]:
    generator = np.random.default_rng(seed)
    return [generator.integers(-128, 128, shape, dtype=np.int64).astype(dtype)
            for shape, dtype, _, _ in tflite_io(tflite)[0]]


def assert_bit_exact(tflite: bytes, seeds: range) -> None:
    oracle = run_reference
    runner = LiteRTRunner.from_bytes(tflite)
    for seed in seeds:
        feeds = random_inputs(tflite, seed)
        got, want = runner.run(feeds), oracle(tflite, feeds)
        assert len(got) == len(want)
        for index, (ours, theirs) in enumerate(zip(got, want, strict=True)):
            assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, f"output {index}"
            differ = int(np.count_nonzero(ours != theirs))
            worst = int(np.abs(ours.astype(np.int32) - theirs.astype(np.int32)).max(initial=0))
            assert differ == 0, f"seed {seed}, output {index}: {differ} elements differ, up to {worst} LSB"


@pytest.mark.parametrize("name", list(CASES))
def test_op_is_bit_exact(name):
    assert_bit_exact(lowered(name), range(RANDOM_INPUTS))


def test_io_specs_describe_the_subgraph():
    tflite = lowered("op_add")
    runner = LiteRTRunner.from_bytes(tflite)
    inputs, outputs = tflite_io(tflite)
    assert [(s.shape, s.dtype, s.scale, s.zero_point) for s in runner.inputs] == [
        (shape, dtype, pytest.approx(scale), zp) for shape, dtype, scale, zp in inputs]
    assert [(s.shape, s.dtype) for s in runner.outputs] == [(shape, dtype) for shape, dtype, _, _ in outputs]


def test_wrong_inputs_name_the_input():
    runner = LiteRTRunner.from_bytes(lowered("op_add"))
    feeds = random_inputs(lowered("op_add"), 0)
    with pytest.raises(BadSubgraphInput, match="expected 2 arrays, got 1"):
        runner.run(feeds[:1])
    name = runner.inputs[1].name
    with pytest.raises(BadSubgraphInput, match=f"{name}: expected .* int8, got .* int16"):
        runner.run([feeds[0], feeds[1].astype(np.int16)])
    with pytest.raises(BadSubgraphInput, match=f"{name}: expected"):
        runner.run([feeds[0], feeds[1][..., :1]])


def test_unimplemented_op_fails_when_preparing_and_names_it():
    """A CUMSUM (not an op the lowering emits) in place of the ADD's builtin code."""
    from ai_edge_litert import schema_py_generated as schema
    from flatbuffers import Builder

    model = schema.ModelT.InitFromPackedBuf(bytearray(lowered("op_add")), 0)
    model.operatorCodes[0].builtinCode = schema.BuiltinOperator.CUMSUM
    model.operatorCodes[0].deprecatedBuiltinCode = min(schema.BuiltinOperator.CUMSUM, 127)
    builder = Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    with pytest.raises(UnsupportedOperator, match=r"operator 0 \(CUMSUM\)"):
        LiteRTRunner.from_bytes(bytes(builder.Output()))
