"""The cortex_m op library: schemas equal to ExecuTorch's, coexistence with ExecuTorch's own op module in
either import order, fake implementations under torch.export, and every reference implementation bit for
bit against TFLM running the equivalent single TFLite op (numpy for pure data movement, a derived
expectation for the ops TFLM computes differently from the device).

The cortex_m arguments are computed here from the same scales and zero points the TFLite tensors carry,
the way reference/cortex_m.md describes; scales are float32 values, as a .tflite stores them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from ai_edge_litert import schema_py_generated as schema
from oracles import run_tflm

from imxrt.cortex_m import ops
from imxrt.cortex_m.reference import BadKernelArguments
from imxrt.kernels.requantize import (
    ACT_NONE,
    ACT_RELU,
    ACT_RELU6,
    activation_range,
    quantize_multiplier,
    quantize_multiplier_scalar,
)
from imxrt.npu.litert import ir
from imxrt.npu.litert.writer import write_model

cortex_m = torch.ops.cortex_m


def f32(value: float) -> float:
    return float(np.float32(value))


def rand_int8(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-128, 128, shape, dtype=np.int64).astype(np.int8)


def t(array) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array))


def nchw(nhwc: np.ndarray) -> torch.Tensor:
    """An NHWC array as the NCHW-logical, channels_last tensor the non-_nhwc ops take."""
    return t(nhwc).permute(0, 3, 1, 2)


# --- single-op TFLite models


def activation(name: str, shape, scale: float, zero_point: int) -> ir.Tensor:
    return ir.Tensor(name, tuple(shape), np.dtype(np.int8), ir.PerTensor(scale, zero_point))


def constant(name: str, array: np.ndarray, quantization=None) -> ir.Tensor:
    return ir.Tensor(name, tuple(array.shape), array.dtype, quantization, array.tobytes())


def op(builtin: str, inputs, outputs, options=None) -> ir.Operator:
    return ir.Operator(builtin, tuple(inputs), tuple(outputs), options, ())


def tflm(feeds: list[tuple[ir.Tensor, np.ndarray]], operators: list[ir.Operator], output: ir.Tensor) -> np.ndarray:
    graph = ir.Graph(inputs=[tensor for tensor, _ in feeds], outputs=[output], operators=operators)
    return run_tflm(write_model(graph), [array for _, array in feeds])[0]


def options(cls, **fields):
    obj = cls()
    for name, value in fields.items():
        setattr(obj, name, value)
    return obj


def pad_op(x: ir.Tensor, pad: tuple[int, int]) -> tuple[ir.Operator, ir.Tensor]:
    """PAD of H and W by ``pad`` on both sides, with the input zero point: PyTorch's symmetric padding."""
    n, h, w, c = x.shape
    padded = activation(x.name + "_padded", (n, h + 2 * pad[0], w + 2 * pad[1], c), x.quantization.scale,
                        x.quantization.zero_point)
    paddings = constant(x.name + "_paddings", np.array([[0, 0], [pad[0]] * 2, [pad[1]] * 2, [0, 0]], np.int32))
    return op("PAD", [x, paddings], [padded]), padded


# --- schemas and import order


EXECUTORCH_YAML = Path(importlib.util.find_spec("executorch").submodule_search_locations[0],
                       "backends/cortex_m/ops/operators.yaml")
_ET_PASSES = "executorch.backends.cortex_m.passes"  # loads ExecuTorch's op module (importing it alone cycles)
_TOSA = "tosa_serializer"  # from the tosa-tools package, which ExecuTorch's cortex_m passes import


def _has_tosa() -> bool:
    return importlib.util.find_spec(_TOSA) is not None


needs_tosa = pytest.mark.skipif(not _has_tosa(), reason="ExecuTorch's cortex_m op module needs tosa-tools "
                                                        "(pip install tosa-tools)")


def test_out_schemas_equal_the_device_kernel_librarys():
    """operators.yaml is what ExecuTorch's Cortex-M kernel library registers on the board."""
    yaml_schemas = {}
    for line in EXECUTORCH_YAML.read_text().splitlines():
        if line.startswith("- func: "):
            parsed = torch._C.parse_schema(line.removeprefix("- func: "))
            yaml_schemas[parsed.name.partition("::")[2]] = str(parsed)
    ours = {o.name: str(torch._C.parse_schema(f"cortex_m::{o.out_schema}")) for o in ops.OPS}
    assert ours == yaml_schemas


# Both imports done: the functional quantized_div is ExecuTorch's (torch.round: 2.5 -> 2), the .out one ours
# (op_quantized_div.cpp's std::round: 2.5 -> 3); every schema is recorded.
_BOTH_IMPORTED_PROBE = """
a, b = torch.tensor([2], dtype=torch.int8), torch.tensor([3], dtype=torch.int8)
functional = torch.ops.cortex_m.quantized_div(a, 1, b, 1, 0, 5.0)
out = torch.ops.cortex_m.quantized_div.out(a, 1, b, 1, 0, 5.0, out=torch.empty(1, dtype=torch.int8))
schemas = {name: [str(torch._C._get_schema("cortex_m::" + name, overload)) for overload in ("", "out")]
           for name in names}
print(json.dumps({"schemas": schemas, "functional": functional.tolist(), "out": out.tolist(), **extra}))
"""


def _order_probe(first: str, second: str, record_first: bool) -> str:
    names = [o.name for o in ops.OPS]
    record = ("extra = {'alone': {name: [str(torch._C._get_schema('cortex_m::' + name, o)) for o in ('', 'out')] "
              "for name in names}}" if record_first else "extra = {}")
    return f"import json, torch\nnames = {names!r}\nimport {first}\n{record}\nimport {second}\n" + _BOTH_IMPORTED_PROBE


_MISMATCH_PROBE = """
import json, torch
lib = torch.library.Library('cortex_m', 'DEF')
lib.define('transpose(Tensor input, int[] dims) -> Tensor')
try:
    import imxrt.cortex_m.ops
except Exception as e:
    print(json.dumps({'type': type(e).__name__, 'message': str(e)}))
"""


@pytest.fixture(scope="module")
def subprocesses():
    """The import-order programs, started together (each spends its time importing ExecuTorch)."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    codes = {"executorch_first": _order_probe(_ET_PASSES, "imxrt.cortex_m.ops", record_first=True),
             "imxrt_first": _order_probe("imxrt.cortex_m.ops", _ET_PASSES, record_first=False),
             "mismatch": _MISMATCH_PROBE}
    if not _has_tosa():
        del codes["executorch_first"], codes["imxrt_first"]
    running = {name: subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env) for name, code in codes.items()}

    def result(name: str) -> dict:
        stdout, stderr = running[name].communicate(timeout=300)
        assert running[name].returncode == 0, stderr[-3000:]
        return json.loads(stdout.strip().splitlines()[-1])

    yield result
    for process in running.values():
        if process.poll() is None:
            process.kill()
            process.communicate()


def _our_schemas() -> dict[str, list[str]]:
    return {o.name: [str(torch._C.parse_schema(f"cortex_m::{s}")) for s in (o.schema, o.out_schema)]
            for o in ops.OPS}


@pytest.mark.slow
@needs_tosa
def test_executorch_first_then_imxrt(subprocesses):
    """ExecuTorch's definitions stay and equal ours (functional and .out, as ExecuTorch defines them
    alone); .out runs our kernel, the functional op ExecuTorch's."""
    result = subprocesses("executorch_first")
    assert result["alone"] == _our_schemas()
    assert result["schemas"] == _our_schemas()
    assert (result["functional"], result["out"]) == ([2], [3])


@pytest.mark.slow
@needs_tosa
def test_imxrt_first_then_executorch(subprocesses):
    """Our definitions step aside for ExecuTorch's module, which then imports; our .out kernels stay."""
    result = subprocesses("imxrt_first")
    assert result["schemas"] == _our_schemas()
    assert (result["functional"], result["out"]) == ([2], [3])


@pytest.mark.slow
def test_a_different_existing_schema_is_refused(subprocesses):
    result = subprocesses("mismatch")
    assert result["type"] == "SchemaMismatch"
    assert "cortex_m::transpose" in result["message"] and "int[] dims" in result["message"]


# --- fake implementations


class _ConvThenAdd(torch.nn.Module):
    def forward(self, x):
        weight = torch.ones(4, 3, 3, 2, dtype=torch.int8)
        multipliers = torch.full((4,), 1 << 30, dtype=torch.int32)
        shifts = torch.full((4,), -6, dtype=torch.int32)
        y = cortex_m.quantized_conv2d(x, weight, None, [2, 2], [1, 1], [1, 1], 3, -1, multipliers, shifts, -128, 127,
                                      torch.empty(0, dtype=torch.uint8))
        z = cortex_m.quantized_add(y, -1, 1 << 30, 0, y, -1, 1 << 30, 0, 2, 1 << 30, -19, -128, 127)
        pooled = cortex_m.quantized_max_pool2d(z, [2, 2], [2, 2], [0, 0], [1, 1], True, 2, 2, -128, 127)
        return cortex_m.transpose(pooled.contiguous(), [0, 2, 3, 1])


def test_torch_export_traces_the_ops_with_their_fakes():
    x = torch.zeros(1, 2, 9, 9, dtype=torch.int8).to(memory_format=torch.channels_last)
    program = torch.export.export(_ConvThenAdd(), (x,))
    shapes = {str(node.target): tuple(node.meta["val"].shape) for node in program.graph.nodes
              if node.op == "call_function" and "cortex_m" in str(node.target)}
    assert shapes == {"cortex_m.quantized_conv2d.default": (1, 4, 5, 5), "cortex_m.quantized_add.default": (1, 4, 5, 5),
                      "cortex_m.quantized_max_pool2d.default": (1, 4, 3, 3),
                      "cortex_m.transpose.default": (1, 3, 3, 4)}
    conv_value = next(n.meta["val"] for n in program.graph.nodes if "quantized_conv2d" in str(n.target))
    assert conv_value.is_contiguous(memory_format=torch.channels_last) and not conv_value.is_contiguous()
    assert torch.equal(program.module()(x), _ConvThenAdd()(x))


def test_out_variant_writes_a_strided_arena_view():
    """An arena slot with channels_last strides at an offset: the logical result lands in it, nothing else."""
    x = nchw(rand_int8((1, 3, 3, 4), 0))
    arena = torch.zeros(64, dtype=torch.int8)
    view = arena[8:44].as_strided((1, 4, 3, 3), (36, 1, 12, 4), 8)
    args = (x, 1, 1 << 30, 0, x, 1, 1 << 30, 0, -3, 1 << 30, -19, -128, 127)
    returned = cortex_m.quantized_add.out(*args, out=view)
    assert returned is view
    assert torch.equal(view, cortex_m.quantized_add(*args))
    assert not arena[:8].any() and not arena[44:].any()
    with pytest.raises(BadKernelArguments, match=r"cortex_m::quantized_add.out: out is \(1, 4, 3, 2\)"):
        cortex_m.quantized_add.out(*args, out=torch.empty(1, 4, 3, 2, dtype=torch.int8))


def _arena_slot(shape, layout: str) -> torch.Tensor:
    """A zeroed int8 tensor of ``shape`` (NCHW) laid out as the arena may hold it: contiguous, channels_last, or
    channels_last at an offset with a gap between rows (not dense)."""
    if layout == "contiguous":
        return torch.zeros(shape, dtype=torch.int8)
    if layout == "channels_last":
        return torch.zeros(shape, dtype=torch.int8).to(memory_format=torch.channels_last)
    n, c, h, w = shape
    arena = torch.zeros(8 + n * h * (w + 1) * c, dtype=torch.int8)
    return arena.as_strided(shape, (h * (w + 1) * c, 1, (w + 1) * c, c), 8)


@pytest.mark.parametrize("out_layout", ["contiguous", "channels_last", "gapped"])
@pytest.mark.parametrize("input_layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("name", ["quantized_add", "quantized_activation", "quantized_conv2d",
                                  "quantized_avg_pool2d"])
def test_prepared_call_writes_any_arena_layout(name, input_layout, out_layout):
    """The runtime's prepared call on arena views: an elementwise op reads and writes data laid out alike in
    memory order, a C kernel writes a dense NHWC slot itself; every other layout takes the copying path. Each
    gives the kernel's own result."""
    x = _arena_slot((1, 4, 5, 6), input_layout).copy_(nchw(rand_int8((1, 5, 6, 4), 40)))
    other = _arena_slot((1, 4, 5, 6), input_layout).copy_(nchw(rand_int8((1, 5, 6, 4), 41)))
    lut = t(rand_int8((256,), 42))
    args = {
        "quantized_add": (x, 1, 1 << 30, 0, other, -3, 1 << 30, 0, -3, 1 << 30, -19, -128, 127),
        "quantized_activation": (x, lut),
        "quantized_conv2d": (x, t(rand_int8((6, 3, 3, 4), 43)), None, [1, 1], [1, 1], [1, 1], 3, -5,
                             t(np.full(6, 1 << 30, np.int32)), t(np.full(6, -9, np.int32)), -128, 127, SCRATCH),
        "quantized_avg_pool2d": (x, [2, 2], [1, 1], [0, 0], False, 0, 1 << 30, 0, SCRATCH),
    }[name]
    (op,) = [op for op in ops.OPS if op.name == name]
    want = op.reference(*args)
    out = _arena_slot(tuple(want.shape), out_layout)
    assert op.prepare(*args, out=out)() is out
    assert torch.equal(out, want)


def test_out_variant_and_functional_op_compute_alike():
    """The .out kernel (the reference, then a strided copy: the runtime's path for arguments that change
    between calls) and the functional op (the prepared call) on a conv, a depthwise conv and a linear."""
    x = nchw(rand_int8((1, 6, 5, 4), 1))
    weight = t(rand_int8((6, 3, 3, 4), 2))  # OHWI
    multipliers, shifts = t(np.full(6, 1 << 30, np.int32)), t(np.full(6, -9, np.int32))
    cases = {
        "quantized_conv2d": (x, weight, None, [1, 1], [1, 1], [1, 1], 3, -5, multipliers, shifts, -128, 127,
                             SCRATCH),
        "quantized_depthwise_conv2d": (x, t(rand_int8((1, 3, 3, 4), 3)), None, [2, 2], [1, 1], [1, 1], 1, 3, -5,
                                       t(np.full(4, 1 << 30, np.int32)), t(np.full(4, -7, np.int32)), -128, 127,
                                       SCRATCH),
        "quantized_linear": (t(rand_int8((3, 8), 4)), t(rand_int8((5, 8), 5)), None, None, 7, 0, -2, [1 << 30],
                             [-6], 127, -128),
    }
    for name, args in cases.items():
        functional = getattr(cortex_m, name)(*args)
        out = torch.empty_like(functional)
        assert torch.equal(getattr(cortex_m, name).out(*args, out=out), functional), name


def test_a_program_calling_cortex_m_ops_runs_on_the_host_runtime():
    """to_executorch serializes the .out variants (memory-planned, channels_last where the fakes say so);
    imxrt's runtime resolves them to the reference kernels and writes its arena views, plan checks on."""
    from executorch.exir import EdgeCompileConfig, to_edge

    import imxrt.runtime

    x = nchw(rand_int8((1, 9, 9, 2), 30))
    program = to_edge(torch.export.export(_ConvThenAdd(), (x,)),
                      compile_config=EdgeCompileConfig(_check_ir_validity=False)).to_executorch()
    operators = {f"{o.name}.{o.overload}" for o in program.executorch_program.execution_plan[0].operators}
    assert {"cortex_m::quantized_conv2d.out", "cortex_m::quantized_add.out", "cortex_m::quantized_max_pool2d.out",
            "cortex_m::transpose.out"} <= operators
    (got,) = imxrt.runtime.load(program.buffer, check_plan=True).forward(x)
    np.testing.assert_array_equal(got, _ConvThenAdd()(x).numpy())


# --- elementwise


@pytest.mark.parametrize("fused", [ACT_NONE, ACT_RELU])
def test_quantized_add_equals_tflm(fused):
    """TFLite ADD's parameters: twice the larger input scale, 20 bits of headroom."""
    s1, z1, s2, z2, so, zo = f32(0.05), -3, f32(0.031), 7, f32(0.07), 5
    a, b = rand_int8((1, 4, 5, 6), 1), rand_int8((1, 4, 5, 6), 2)
    ta, tb = activation("a", a.shape, s1, z1), activation("b", b.shape, s2, z2)
    out = activation("out", a.shape, so, zo)
    want = tflm([(ta, a), (tb, b)], [op("ADD", [ta, tb], [out], options(schema.AddOptionsT,
                                                                        fusedActivationFunction=fused))], out)
    twice_max = 2 * max(s1, s2)
    m1, m2 = quantize_multiplier_scalar(s1 / twice_max), quantize_multiplier_scalar(s2 / twice_max)
    mo = quantize_multiplier_scalar(twice_max / ((1 << 20) * so))
    act_min, act_max = activation_range(fused, so, zo)
    got = cortex_m.quantized_add(t(a), z1, *m1, t(b), z2, *m2, zo, *mo, act_min, act_max)
    np.testing.assert_array_equal(got.numpy(), want)


def test_quantized_mul_equals_tflm():
    s1, z1, s2, z2, so, zo = f32(0.05), -3, f32(0.031), 7, f32(0.02), -9
    a, b = rand_int8((2, 3, 7), 3), rand_int8((2, 3, 7), 4)
    ta, tb, out = activation("a", a.shape, s1, z1), activation("b", b.shape, s2, z2), activation("o", a.shape, so, zo)
    want = tflm([(ta, a), (tb, b)], [op("MUL", [ta, tb], [out], options(schema.MulOptionsT))], out)
    got = cortex_m.quantized_mul(t(a), z1, t(b), z2, zo, *quantize_multiplier_scalar(s1 * s2 / so))
    np.testing.assert_array_equal(got.numpy(), want)


def test_quantized_div_rounds_the_float_quotient_half_away_and_maps_zero_divisors_to_the_zero_point():
    """op_quantized_div.cpp: q = round_half_away(float(a - za) / float(b - zb) * scale) + zo; b = zb gives zo.
    (2 - 1) / (3 - 1) * 5 = 2.5 -> 3; (-2 - 1) / 2 * 5 = -7.5 -> -8; 0 divisor -> zo; 100 / 1 * 5 saturates."""
    a = torch.tensor([2, -2, 7, 101], dtype=torch.int8)
    b = torch.tensor([3, 3, 1, 2], dtype=torch.int8)
    got = cortex_m.quantized_div(a, 1, b, 1, 4, 5.0)
    assert got.tolist() == [3 + 4, -8 + 4, 4, 127]


def test_quantized_activation_looks_up_q_plus_128():
    lut = t(rand_int8(256, 5))
    x = t(rand_int8((2, 3, 4), 6))
    assert torch.equal(cortex_m.quantized_activation(x, lut), lut[x.long() + 128])


@pytest.mark.parametrize("name", ["minimum", "maximum"])
def test_minimum_maximum_broadcast_like_numpy(name):
    a, b = rand_int8((2, 3, 4), 7), rand_int8((1, 3, 1), 8)
    got = getattr(cortex_m, name)(t(a), t(b))
    np.testing.assert_array_equal(got.numpy(), getattr(np, name)(a, b))


# --- matrix products


@pytest.mark.parametrize("isa_form", ["bias", "kernel_sum"])
def test_quantized_linear_equals_tflm(isa_form):
    """DSP / scalar programs pass ``bias``; MVE programs pass kernel_sum = -zp_in * sum_i w[o, i] + bias."""
    s_in, z_in, s_w, s_out, z_out = f32(0.04), -5, f32(0.01), f32(0.09), 3
    x, w = rand_int8((3, 20), 9), rand_int8((6, 20), 10)
    w[w == -128] = -127
    bias = np.random.default_rng(11).integers(-2000, 2000, 6).astype(np.int32)
    tx, out = activation("x", x.shape, s_in, z_in), activation("out", (3, 6), s_out, z_out)
    tw = constant("w", w, ir.PerTensor(s_w, 0))
    tb = constant("b", bias, ir.PerTensor(f32(s_in * s_w), 0))
    fc = op("FULLY_CONNECTED", [tx, tw, tb], [out], options(schema.FullyConnectedOptionsT,
                                                            fusedActivationFunction=ACT_RELU6))
    want = tflm([(tx, x)], [fc], out)
    # TFLite's per-tensor multiplier: the float32 product of the two scales, over s_out in double
    multiplier, shift = quantize_multiplier_scalar(f32(s_in * s_w) / s_out)
    act_min, act_max = activation_range(ACT_RELU6, s_out, z_out)
    if isa_form == "bias":
        bias_arg, kernel_sum = t(bias), None
    else:
        bias_arg, kernel_sum = None, t((-z_in * w.astype(np.int32).sum(axis=1) + bias).astype(np.int32))
    got = cortex_m.quantized_linear(t(x), t(w), bias_arg, kernel_sum, -z_in, 0, z_out, [multiplier], [shift],
                                    act_max, act_min)
    np.testing.assert_array_equal(got.numpy(), want)


def test_per_channel_quantized_linear_equals_tflm():
    """One multiplier per output feature: arm_fully_connected_per_channel_s8, M[o] = s_in s_w[o] / s_out."""
    s_in, z_in, s_out, z_out = f32(0.04), -5, f32(0.09), 3
    x, w = rand_int8((3, 20), 31), rand_int8((6, 20), 32)
    w[w == -128] = -127
    scales = np.array([f32(0.01 * (o + 1)) for o in range(6)], np.float32)
    bias = np.random.default_rng(33).integers(-2000, 2000, 6).astype(np.int32)
    tx, out = activation("x", x.shape, s_in, z_in), activation("out", (3, 6), s_out, z_out)
    fc = op("FULLY_CONNECTED", [tx, constant("w", w, ir.PerChannel(tuple(scales), 0)),
                                constant("b", bias, ir.PerChannel(tuple(f32(s_in * s) for s in scales), 0))], [out],
            options(schema.FullyConnectedOptionsT))
    want = tflm([(tx, x)], [fc], out)
    multipliers, shifts = quantize_multiplier(s_in * scales.astype(np.float64) / s_out)
    got = cortex_m.quantized_linear(t(x), t(w), t(bias), None, -z_in, 0, z_out, multipliers.tolist(), shifts.tolist(),
                                    127, -128)
    np.testing.assert_array_equal(got.numpy(), want)


def test_quantized_batch_matmul_equals_tflm():
    """BATCH_MATMUL with adj_y: the right-hand side arrives pre-transposed [B, N, K]; zero points negated."""
    sa, za, sb, zb, so, zo = f32(0.05), 4, f32(0.03), -6, f32(0.4), -2
    lhs, rhs_t = rand_int8((2, 3, 8), 12), rand_int8((2, 5, 8), 13)
    ta, tb, out = activation("a", lhs.shape, sa, za), activation("b", rhs_t.shape, sb, zb), \
        activation("o", (2, 3, 5), so, zo)
    bmm = op("BATCH_MATMUL", [ta, tb], [out], options(schema.BatchMatMulOptionsT, adjX=False, adjY=True))
    want = tflm([(ta, lhs), (tb, rhs_t)], [bmm], out)
    got = cortex_m.quantized_batch_matmul(t(lhs), -za, t(rhs_t), -zb, zo, *quantize_multiplier_scalar(sa * sb / so),
                                          torch.empty(0, dtype=torch.uint8))
    np.testing.assert_array_equal(got.numpy(), want)


# --- softmax, quantize / dequantize, data movement


def test_softmax_equals_tflm():
    """Input multiplier from min(s_in * 2**26, 2**31 - 1); diff_min = -floor(31 * 2**26 / 2**shift)."""
    s_in, z_in = f32(0.06), 11
    x = rand_int8((4, 10), 14)
    tx, out = activation("x", x.shape, s_in, z_in), activation("out", x.shape, 1 / 256, -128)
    want = tflm([(tx, x)], [op("SOFTMAX", [tx], [out], options(schema.SoftmaxOptionsT, beta=1.0))], out)
    multiplier, shift = quantize_multiplier_scalar(min(s_in * (1 << 26), (1 << 31) - 1))
    diff_min = -int(np.floor(31 * (1 << 26) / (1 << shift)))
    got = cortex_m.softmax(t(x), -1, z_in, -128, multiplier, shift, diff_min)
    np.testing.assert_array_equal(got.numpy(), want)


def test_softmax_refuses_another_dimension():
    with pytest.raises(BadKernelArguments, match="last dimension only, got dim 0"):
        cortex_m.softmax(t(rand_int8((4, 10), 0)), 0, 0, -128, 1 << 30, 5, -248)


def test_dequantize_equals_tflm():
    scale, zero_point = f32(0.037), -7
    q = rand_int8((3, 11), 15)
    tq = activation("q", q.shape, scale, zero_point)
    out = ir.Tensor("x", q.shape, np.dtype(np.float32))
    want = tflm([(tq, q)], [op("DEQUANTIZE", [tq], [out])], out)
    got = cortex_m.dequantize_per_tensor(t(q), scale, zero_point, -128, 127, torch.int8)
    np.testing.assert_array_equal(got.numpy(), want)


def test_quantize_multiplies_by_the_float32_inverse_scale_and_rounds_ties_to_even():
    """op_quantize_per_tensor.cpp: zp + nearbyint(x * (1.0f / scale)). Scale 0.5: 0.25 -> 0.5 -> 0 and
    0.75 -> 1.5 -> 2 (TFLM's QUANTIZE rounds half away: 1 and 2); -0.25 -> -0 -> 0; clamped to quant_max."""
    x = torch.tensor([0.25, 0.75, -0.25, 100.0])
    got = cortex_m.quantize_per_tensor(x, 0.5, 3, -128, 127, torch.int8)
    assert got.tolist() == [3, 5, 3, 127]


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_prepared_quantize_and_dequantize_equal_the_functional_ops(layout):
    """The host runtime prepares both once on its arena views (any strides) and calls them again: every call
    writes what the functional op returns, into the out tensor's own layout."""
    from imxrt.cortex_m import reference

    memory_format = torch.contiguous_format if layout == "contiguous" else torch.channels_last
    scale, zero_point = f32(0.043), -9
    x = torch.randn(2, 3, 4, 5).to(memory_format=memory_format) * 3
    q = torch.empty(2, 3, 4, 5, dtype=torch.int8).to(memory_format=memory_format)
    back = torch.empty(2, 3, 4, 5).to(memory_format=memory_format)
    quantize = reference.prepare_quantize_per_tensor(x, scale, zero_point, -128, 127, torch.int8, out=q)
    dequantize = reference.prepare_dequantize_per_tensor(q, scale, zero_point, -128, 127, torch.int8, out=back)
    for _ in range(2):
        x.copy_(torch.randn(2, 3, 4, 5) * 3)
        quantize(), dequantize()
        want = cortex_m.quantize_per_tensor(x, scale, zero_point, -128, 127, torch.int8)
        assert torch.equal(q, want) and q.stride() == x.stride()
        assert torch.equal(back, cortex_m.dequantize_per_tensor(want, scale, zero_point, -128, 127, torch.int8))
    with pytest.raises(BadKernelArguments, match=r"quantize_per_tensor.out: out is \(2, 3\) torch.int8"):
        reference.prepare_quantize_per_tensor(x, scale, zero_point, -128, 127, torch.int8,
                                            out=torch.empty(2, 3, dtype=torch.int8))


def test_transpose_is_a_logical_permutation():
    x = rand_int8((2, 3, 4, 5), 16)
    np.testing.assert_array_equal(cortex_m.transpose(t(x), [0, 3, 1, 2]).numpy(), x.transpose(0, 3, 1, 2))


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_pad_takes_its_pads_in_memory_order(layout):
    """Four pads, memory order: (N, C, H, W) for a contiguous tensor, (N, H, W, C) for a channels_last one."""
    x = rand_int8((1, 2, 3, 4), 17)
    pads = {"contiguous": ([0, 1, 2, 0], [0, 0, 1, 3]), "channels_last": ([0, 2, 0, 1], [0, 1, 3, 0])}[layout]
    tensor = t(x) if layout == "contiguous" else t(x).to(memory_format=torch.channels_last)
    got = cortex_m.pad(tensor, *pads, -7)
    want = np.pad(x, [(0, 0), (1, 0), (2, 1), (0, 3)], constant_values=-7)
    np.testing.assert_array_equal(got.numpy(), want)
    assert got.is_contiguous(memory_format=torch.channels_last) == (layout == "channels_last")


# --- convolutions and pooling: TFLM on NHWC; the NCHW op on the same values as channels_last NCHW


LAYOUTS = ["nchw", "nhwc"]


def _call(layout: str, name: str, x: np.ndarray, *args) -> np.ndarray:
    if layout == "nhwc":
        return getattr(cortex_m, f"{name}_nhwc")(t(x), *args).numpy()
    result = getattr(cortex_m, name)(nchw(x), *args)
    assert result.is_contiguous(memory_format=torch.channels_last)
    return result.permute(0, 2, 3, 1).numpy()


def _per_channel(s_in: float, weight_scales: np.ndarray, s_out: float) -> tuple[torch.Tensor, torch.Tensor]:
    multipliers, shifts = quantize_multiplier(s_in * weight_scales.astype(np.float64) / s_out)
    return t(multipliers.astype(np.int32)), t(shifts.astype(np.int32))


S_IN, Z_IN, S_OUT, Z_OUT = f32(0.05), -4, f32(0.08), 6
SCRATCH = torch.empty(0, dtype=torch.uint8)


def _weights(shape, channel_axis: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Symmetric int8 weights, a float32 scale per output channel, an int32 bias."""
    w = rand_int8(shape, seed)
    w[w == -128] = -127
    channels = shape[channel_axis]
    scales = np.array([f32(0.002 * (c + 1)) for c in range(channels)], np.float32)
    bias = np.random.default_rng(seed + 1).integers(-3000, 3000, channels).astype(np.int32)
    return w, scales, bias


@pytest.mark.parametrize("layout", LAYOUTS)
def test_quantized_conv2d_equals_tflm(layout):
    """PAD (input zero point) + CONV_2D VALID is PyTorch's symmetric padding; stride 2, dilation 2, relu6."""
    x = rand_int8((1, 9, 10, 3), 20)
    w, scales, bias = _weights((5, 3, 3, 3), 0, 21)
    stride, padding, dilation = (2, 2), (1, 2), (2, 1)
    tx = activation("x", x.shape, S_IN, Z_IN)
    pad, padded = pad_op(tx, padding)
    out_h = (9 + 2 - 2 * 2 - 1) // 2 + 1
    out_w = (10 + 4 - 2 - 1) // 2 + 1
    out = activation("out", (1, out_h, out_w, 5), S_OUT, Z_OUT)
    conv_op = op("CONV_2D", [padded, constant("w", w, ir.PerChannel(tuple(scales), 0)),
                             constant("b", bias, ir.PerChannel(tuple(f32(S_IN * s) for s in scales), 0))], [out],
                 options(schema.Conv2DOptionsT, padding=schema.Padding.VALID, strideH=2, strideW=2,
                         dilationHFactor=2, dilationWFactor=1, fusedActivationFunction=ACT_RELU6))
    want = tflm([(tx, x)], [pad, conv_op], out)
    act_min, act_max = activation_range(ACT_RELU6, S_OUT, Z_OUT)
    got = _call(layout, "quantized_conv2d", x, t(w), t(bias), list(stride), list(padding), list(dilation), -Z_IN,
                Z_OUT, *_per_channel(S_IN, scales, S_OUT), act_min, act_max, SCRATCH)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_grouped_quantized_conv2d_equals_tflm(layout):
    """Weights OHWI with I = C_in / 2: two groups, each its half of the output channels (TFLM's CONV_2D too)."""
    x = rand_int8((1, 6, 5, 4), 34)
    w, scales, bias = _weights((6, 3, 3, 2), 0, 35)
    tx, out = activation("x", x.shape, S_IN, Z_IN), activation("out", (1, 4, 3, 6), S_OUT, Z_OUT)
    conv_op = op("CONV_2D", [tx, constant("w", w, ir.PerChannel(tuple(scales), 0)),
                             constant("b", bias, ir.PerChannel(tuple(f32(S_IN * s) for s in scales), 0))], [out],
                 options(schema.Conv2DOptionsT, padding=schema.Padding.VALID, strideH=1, strideW=1, dilationHFactor=1,
                         dilationWFactor=1))
    want = tflm([(tx, x)], [conv_op], out)
    got = _call(layout, "quantized_conv2d", x, t(w), t(bias), [1, 1], [0, 0], [1, 1], -Z_IN, Z_OUT,
                *_per_channel(S_IN, scales, S_OUT), -128, 127, SCRATCH)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_quantized_depthwise_conv2d_equals_tflm(layout):
    """Depth multiplier 2: weights [1, kh, kw, C_out], output channel c reads input channel c // 2."""
    x = rand_int8((1, 7, 6, 3), 22)
    w, scales, bias = _weights((1, 3, 3, 6), 3, 23)
    tx = activation("x", x.shape, S_IN, Z_IN)
    pad, padded = pad_op(tx, (1, 1))
    out = activation("out", (1, 7, 6, 6), S_OUT, Z_OUT)
    depthwise = op("DEPTHWISE_CONV_2D", [padded, constant("w", w, ir.PerChannel(tuple(scales), 3)),
                                         constant("b", bias, ir.PerChannel(tuple(f32(S_IN * s) for s in scales), 0))],
                   [out], options(schema.DepthwiseConv2DOptionsT, padding=schema.Padding.VALID, strideH=1, strideW=1,
                                  depthMultiplier=2, dilationHFactor=1, dilationWFactor=1))
    want = tflm([(tx, x)], [pad, depthwise], out)
    got = _call(layout, "quantized_depthwise_conv2d", x, t(w), t(bias), [1, 1], [1, 1], [1, 1], 2, -Z_IN, Z_OUT,
                *_per_channel(S_IN, scales, S_OUT), -128, 127, SCRATCH)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_quantized_transpose_conv2d_equals_tflm(layout):
    """TRANSPOSE_CONV VALID gives the full (in - 1) s + k output; PyTorch's padding 1 and output_padding 1
    keep rows and columns [1, 1 + (in - 1) s - 2 + k - 1 + 1 + 1): a STRIDED_SLICE of it."""
    x = rand_int8((1, 4, 3, 5), 24)
    torch_weight = rand_int8((5, 4, 3, 3), 25)  # PyTorch [C_in, C_out, kh, kw]
    torch_weight[torch_weight == -128] = -127
    w = np.ascontiguousarray(torch_weight.transpose(1, 2, 3, 0))  # permuted (1, 2, 3, 0): [C_out, kh, kw, C_in]
    scales = np.array([f32(0.003 * (c + 1)) for c in range(4)], np.float32)
    bias = np.random.default_rng(26).integers(-3000, 3000, 4).astype(np.int32)
    tx = activation("x", x.shape, S_IN, Z_IN)
    full_h, full_w = (4 - 1) * 2 + 3, (3 - 1) * 2 + 3
    full = activation("full", (1, full_h, full_w, 4), S_OUT, Z_OUT)
    transpose_conv = op("TRANSPOSE_CONV", [constant("shape", np.array(full.shape, np.int32)),
                                           constant("w", w, ir.PerChannel(tuple(scales), 0)), tx,
                                           constant("b", bias, ir.PerChannel(tuple(f32(S_IN * s) for s in scales), 0))],
                        [full], options(schema.TransposeConvOptionsT, padding=schema.Padding.VALID, strideH=2,
                                        strideW=2))
    out_h, out_w = full_h - 2 + 1, full_w - 2 + 1
    out = activation("out", (1, out_h, out_w, 4), S_OUT, Z_OUT)
    crop = op("STRIDED_SLICE", [full, constant("begin", np.array([0, 1, 1, 0], np.int32)),
                                constant("end", np.array([1, 1 + out_h, 1 + out_w, 4], np.int32)),
                                constant("strides", np.ones(4, np.int32))], [out],
              options(schema.StridedSliceOptionsT))
    want = tflm([(tx, x)], [transpose_conv, crop], out)
    got = _call(layout, "quantized_transpose_conv2d", x, t(w), t(bias), [2, 2], [1, 1], [1, 1], [1, 1], -Z_IN, Z_OUT,
                *_per_channel(S_IN, scales, S_OUT), -128, 127, SCRATCH, SCRATCH)
    np.testing.assert_array_equal(got, want)


def _pool(builtin: str, x: np.ndarray, kernel: int, stride: int, out_hw, fused=ACT_NONE) -> np.ndarray:
    """TFLite SAME pooling leaves padded taps out of the window, like PyTorch's count_include_pad=False."""
    tx = activation("x", x.shape, S_IN, Z_IN)
    out = activation("out", (1, *out_hw, x.shape[3]), S_IN, Z_IN)
    pool = op(builtin, [tx], [out], options(schema.Pool2DOptionsT, padding=schema.Padding.SAME, strideH=stride,
                                            strideW=stride, filterHeight=kernel, filterWidth=kernel,
                                            fusedActivationFunction=fused))
    return tflm([(tx, x)], [pool], out)


# (kernel, stride, PyTorch padding, ceil_mode, input H x W): SAME padding of the same windows
POOL_CASES = {"pad1": (3, 1, 1, False, (6, 7)), "ceil_mode": (2, 2, 0, True, (5, 7))}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", list(POOL_CASES))
def test_quantized_avg_pool2d_equals_tflm(layout, case):
    kernel, stride, padding, ceil_mode, hw = POOL_CASES[case]
    x = rand_int8((1, *hw, 4), 27)
    out_hw = tuple(-(-size // stride) for size in hw)
    want = _pool("AVERAGE_POOL_2D", x, kernel, stride, out_hw)
    multiplier, shift = quantize_multiplier_scalar(1.0)
    got = _call(layout, "quantized_avg_pool2d", x, [kernel] * 2, [stride] * 2, [padding] * 2, ceil_mode, Z_IN,
                multiplier, shift, SCRATCH)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", list(POOL_CASES))
def test_quantized_max_pool2d_equals_tflm(layout, case):
    kernel, stride, padding, ceil_mode, hw = POOL_CASES[case]
    x = rand_int8((1, *hw, 4), 28)
    out_hw = tuple(-(-size // stride) for size in hw)
    want = _pool("MAX_POOL_2D", x, kernel, stride, out_hw, ACT_RELU)
    act_min, act_max = activation_range(ACT_RELU, S_IN, Z_IN)
    got = _call(layout, "quantized_max_pool2d", x, [kernel] * 2, [stride] * 2, [padding] * 2, [1, 1], ceil_mode, Z_IN,
                Z_IN, act_min, act_max)
    np.testing.assert_array_equal(got, want)
