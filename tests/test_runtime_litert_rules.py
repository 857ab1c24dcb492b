"""The host runtime refuses every LiteRT subgraph TFLM refuses (``imxrt.runtime.litert_rules``), one test per
rule: a tiny hand-built one-op model that TFLM and the runtime both prepare, edited to break exactly that
rule; the runtime's refusal names the rule, and TFLM (in a child process: some of its checks abort) refuses
the same bytes, or the case says why TFLM runs them (a debug-only check, or a value it reads another way).
Then the payload's tensor map against its subgraph and the call's tensors, and the flatbuffer's size bound.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

import flatbuffers
import numpy as np
import pytest
import torch
from ai_edge_litert import schema_py_generated as schema
from edited_programs import compile_small_conv_net, edited
from executorch.exir._serialize._program import deserialize_pte_binary
from oracles import run_reference, tflite_io

import imxrt.runtime
from imxrt.errors import BadFile, ImxrtError
from imxrt.npu import reference_payload
from imxrt.npu.litert.ir import Graph, Operator, PerChannel, PerTensor, Tensor
from imxrt.npu.litert.writer import write_model
from imxrt.runtime import neutron
from imxrt.runtime.litert import LiteRTRunner

Padding, Activation = schema.Padding, schema.ActivationFunctionType


# -- one-op models, each prepared by TFLM and the runtime alike

def int8(name: str, shape, scale: float = 0.05, zero_point: int = 0) -> Tensor:
    return Tensor(name, tuple(shape), np.dtype(np.int8), PerTensor(scale, zero_point))


def const(name: str, values, dtype=np.int32, quantization=None) -> Tensor:
    array = np.asarray(values, dtype)
    return Tensor(name, array.shape, np.dtype(dtype), quantization, array.tobytes())


def options(kind, **fields):
    made = kind()
    for field, value in fields.items():
        setattr(made, field, value)
    return made


def one_op(builtin: str, inputs, outputs, op_options=None) -> bytes:
    graph = Graph(inputs=[t for t in inputs if t is not None and not t.is_constant], outputs=list(outputs),
                  operators=[Operator(builtin, tuple(inputs), tuple(outputs), op_options, ())])
    return write_model(graph)


def conv() -> bytes:
    """3x3 CONV_2D, 2 -> 4 channels, per-channel filter, int32 bias, fused RELU6."""
    w_scales = (0.01, 0.02, 0.015, 0.012)
    filters = const("filter", np.arange(72).reshape(4, 3, 3, 2) % 7 - 3, np.int8, PerChannel(w_scales, 0))
    bias = const("bias", [10, -20, 30, 0], np.int32, PerChannel(tuple(0.05 * s for s in w_scales), 0))
    return one_op("CONV_2D", [int8("x", (1, 5, 5, 2), 0.05, 3), filters, bias], [int8("y", (1, 3, 3, 4), 0.1, -5)],
                  options(schema.Conv2DOptionsT, padding=Padding.VALID, strideH=1, strideW=1, dilationHFactor=1,
                          dilationWFactor=1, fusedActivationFunction=Activation.RELU6))


def depthwise() -> bytes:
    """3x3 DEPTHWISE_CONV_2D, 2 channels with depth multiplier 2."""
    w_scales = (0.01, 0.02, 0.015, 0.012)
    filters = const("filter", np.arange(36).reshape(1, 3, 3, 4) % 5 - 2, np.int8, PerChannel(w_scales, 3))
    bias = const("bias", [1, 2, 3, 4], np.int32, PerChannel(tuple(0.05 * s for s in w_scales), 0))
    return one_op("DEPTHWISE_CONV_2D", [int8("x", (1, 5, 5, 2)), filters, bias], [int8("y", (1, 3, 3, 4), 0.1)],
                  options(schema.DepthwiseConv2DOptionsT, padding=Padding.VALID, strideH=1, strideW=1,
                          depthMultiplier=2, dilationHFactor=1, dilationWFactor=1))


def transpose_conv() -> bytes:
    """2x2 stride-2 TRANSPOSE_CONV, 2 -> 3 channels."""
    w_scales = (0.01, 0.02, 0.015)
    filters = const("filter", np.arange(24).reshape(3, 2, 2, 2) % 5 - 2, np.int8, PerChannel(w_scales, 0))
    bias = const("bias", [5, 0, -5], np.int32, PerChannel(tuple(0.05 * s for s in w_scales), 0))
    return one_op("TRANSPOSE_CONV", [const("output_shape", [1, 6, 6, 3]), filters, int8("x", (1, 3, 3, 2)), bias],
                  [int8("y", (1, 6, 6, 3), 0.1)],
                  options(schema.TransposeConvOptionsT, padding=Padding.VALID, strideH=2, strideW=2))


def fully_connected() -> bytes:
    """8 -> 3 FULLY_CONNECTED, per-tensor filter, bias at s_in * s_w."""
    weights = const("weights", np.arange(24).reshape(3, 8) % 9 - 4, np.int8, PerTensor(0.02, 0))
    bias = const("bias", [100, -50, 7], np.int32, PerTensor(0.05 * 0.02, 0))
    return one_op("FULLY_CONNECTED", [int8("x", (1, 8), 0.05, 1), weights, bias], [int8("y", (1, 3), 0.1, 2)],
                  options(schema.FullyConnectedOptionsT))


def batch_matmul() -> bytes:
    return one_op("BATCH_MATMUL", [int8("a", (1, 2, 3)), int8("b", (1, 3, 4))], [int8("y", (1, 2, 4), 0.1)],
                  options(schema.BatchMatMulOptionsT))


def binary(builtin: str, kind=None, shared: bool = False) -> Callable[[], bytes]:
    def build() -> bytes:
        x, y = int8("x", (1, 2, 2, 3), 0.05, 1), int8("y", (1, 2, 2, 3), 0.05 if shared else 0.04, 1 if shared else -2)
        out = int8("out", (1, 2, 2, 3), 0.05 if shared else 0.1, 1 if shared else 0)
        return one_op(builtin, [x, y], [out], options(kind) if kind else None)
    return build


def prelu() -> bytes:
    alpha = const("alpha", [[[10, 20, 30]]], np.int8, PerTensor(0.01, 0))
    return one_op("PRELU", [int8("x", (1, 2, 2, 3)), alpha], [int8("y", (1, 2, 2, 3))])


def pool(builtin: str) -> Callable[[], bytes]:
    return lambda: one_op(builtin, [int8("x", (1, 4, 4, 3), 0.05, 1)], [int8("y", (1, 2, 2, 3), 0.05, 1)],
                          options(schema.Pool2DOptionsT, padding=Padding.VALID, strideH=2, strideW=2,
                                  filterHeight=2, filterWidth=2))


def reduce(builtin: str) -> Callable[[], bytes]:
    return lambda: one_op(builtin, [int8("x", (1, 4, 4, 3), 0.05, 1), const("axes", [1, 2])],
                          [int8("y", (1, 1, 1, 3), 0.05, 1)], options(schema.ReducerOptionsT, keepDims=True))


def softmax() -> bytes:
    return one_op("SOFTMAX", [int8("x", (1, 10), 0.1)], [int8("y", (1, 10), 1 / 256, -128)],
                  options(schema.SoftmaxOptionsT, beta=1.0))


def unary(builtin: str, out_scale: float = 0.05, out_zero_point: int = 0, kind=None, **fields) -> Callable[[], bytes]:
    return lambda: one_op(builtin, [int8("x", (1, 8), 0.05, 0)], [int8("y", (1, 8), out_scale, out_zero_point)],
                          options(kind, **fields) if kind else None)


PADDINGS = [[0, 0], [1, 1], [1, 1], [0, 0]]


def pad(builtin: str) -> Callable[[], bytes]:
    def build() -> bytes:
        inputs = [int8("x", (1, 3, 3, 2), 0.05, 1), const("paddings", PADDINGS)]
        if builtin == "PADV2":
            inputs.append(const("value", [1], np.int8, PerTensor(0.05, 1)))
        kind = {"MIRROR_PAD": schema.MirrorPadOptionsT}.get(builtin)
        return one_op(builtin, inputs, [int8("y", (1, 5, 5, 2), 0.05, 1)], options(kind) if kind else None)
    return build


def movement(builtin: str, constants, out_shape, kind=None, **fields) -> Callable[[], bytes]:
    return lambda: one_op(builtin, [int8("x", (1, 2, 4, 4)), *(const(f"c{i}", c) for i, c in enumerate(constants))],
                          [int8("y", out_shape)], options(kind, **fields) if kind else None)


def concatenation() -> bytes:
    return one_op("CONCATENATION", [int8("a", (1, 2, 2, 3), 0.05, 1), int8("b", (1, 2, 2, 3), 0.05, 1)],
                  [int8("y", (1, 2, 2, 6), 0.05, 1)], options(schema.ConcatenationOptionsT, axis=3))


def split() -> bytes:
    return one_op("SPLIT", [const("axis", 3), int8("x", (1, 2, 2, 4))],
                  [int8("a", (1, 2, 2, 2)), int8("b", (1, 2, 2, 2))])


def split_v() -> bytes:
    return one_op("SPLIT_V", [int8("x", (1, 2, 2, 4)), const("sizes", [1, 3]), const("axis", 3)],
                  [int8("a", (1, 2, 2, 1)), int8("b", (1, 2, 2, 3))], options(schema.SplitVOptionsT, numSplits=2))


def resize(builtin: str, kind) -> Callable[[], bytes]:
    return lambda: one_op(builtin, [int8("x", (1, 2, 2, 3)), const("size", [4, 4])], [int8("y", (1, 4, 4, 3))],
                          options(kind))


BASES: dict[str, Callable[[], bytes]] = {
    "conv": conv,
    "depthwise": depthwise,
    "transpose_conv": transpose_conv,
    "fully_connected": fully_connected,
    "batch_matmul": batch_matmul,
    "add": binary("ADD", schema.AddOptionsT),
    "sub": binary("SUB", schema.SubOptionsT),
    "mul": binary("MUL", schema.MulOptionsT),
    "maximum": binary("MAXIMUM", shared=True),
    "prelu": prelu,
    "average_pool": pool("AVERAGE_POOL_2D"),
    "max_pool": pool("MAX_POOL_2D"),
    "mean": reduce("MEAN"),
    "reduce_max": reduce("REDUCE_MAX"),
    "softmax": softmax,
    "quantize": unary("QUANTIZE", 0.1, 3),
    "relu": unary("RELU", 0.05, -128),
    "logistic": unary("LOGISTIC", 1 / 256, -128),
    "tanh": unary("TANH", 1 / 128, 0),
    "hard_swish": unary("HARD_SWISH", 0.05, 0),
    "leaky_relu": unary("LEAKY_RELU", 0.05, 0, schema.LeakyReluOptionsT, alpha=0.1),
    "exp": unary("EXP", 0.1, -128),
    "pad": pad("PAD"),
    "padv2": pad("PADV2"),
    "mirror_pad": pad("MIRROR_PAD"),
    "transpose": movement("TRANSPOSE", [[0, 3, 1, 2]], (1, 4, 2, 4)),
    "reshape": movement("RESHAPE", [[1, 32]], (1, 32), schema.ReshapeOptionsT, newShape=np.array([1, 32], np.int32)),
    "slice": movement("SLICE", [[0, 1, 1, 0], [1, 1, 2, 4]], (1, 1, 2, 4)),
    "strided_slice": movement("STRIDED_SLICE", [[0, 0, 0, 0], [1, 2, 4, 4], [1, 1, 2, 1]], (1, 2, 2, 4),
                              schema.StridedSliceOptionsT),
    "concatenation": concatenation,
    "split": split,
    "split_v": split_v,
    "resize_nearest": resize("RESIZE_NEAREST_NEIGHBOR", schema.ResizeNearestNeighborOptionsT),
    "resize_bilinear": resize("RESIZE_BILINEAR", schema.ResizeBilinearOptionsT),
}


# -- TFLM, in a child process

_TFLM_CHILD = r"""
import json, sys
import numpy as np
from tflite_micro.python.tflite_micro import runtime
data = sys.stdin.buffer.read()
try:
    interpreter = runtime.Interpreter.from_bytes(data, arena_size=1 << 22)
    for index, (shape, dtype) in enumerate(json.loads(sys.argv[1])):
        interpreter.set_input(np.zeros(shape, dtype), index)
    interpreter.invoke()
except RuntimeError:
    sys.exit(3)
"""


def tflm_verdict(tflite: bytes) -> str:
    """``runs``, ``refuses`` (an error while preparing or invoking on zeros) or ``aborts`` (the process dies:
    a TFLITE_CHECK)."""
    graph = schema.ModelT.InitFromPackedBuf(bytearray(tflite), 0).subgraphs[0]
    inputs = [(graph.tensors[i].shape.tolist(), np.dtype(_DTYPES[graph.tensors[i].type]).name) for i in graph.inputs]
    child = subprocess.run([sys.executable, "-c", _TFLM_CHILD, json.dumps(inputs)], input=tflite,
                           capture_output=True, timeout=120)
    return {0: "runs", 3: "refuses"}.get(child.returncode, "aborts")


_DTYPES = {schema.TensorType.INT8: np.int8, schema.TensorType.INT16: np.int16, schema.TensorType.INT32: np.int32}


def rebuilt(tflite: bytes, edit: Callable[[schema.ModelT], object]) -> bytes:
    """``tflite`` with ``edit`` applied to its object-API model, written again."""
    model = schema.ModelT.InitFromPackedBuf(bytearray(tflite), 0)
    edit(model)
    builder = flatbuffers.Builder(0)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def tensor(model: schema.ModelT, name: str) -> schema.TensorT:
    return next(t for t in model.subgraphs[0].tensors if t.name.decode() == name)


def op(model: schema.ModelT) -> schema.OperatorT:
    return model.subgraphs[0].operators[0]


def set_qparams(model, name: str, scale=None, zero_point=None) -> None:
    q = tensor(model, name).quantization
    if scale is not None:
        q.scale = np.array(np.atleast_1d(scale), np.float32)
    if zero_point is not None:
        q.zeroPoint = np.array(np.atleast_1d(zero_point), np.int64)


def set_shape(model, name: str, shape) -> None:
    tensor(model, name).shape = np.array(shape, np.int32)


def set_option(model, **fields) -> None:
    for field, value in fields.items():
        setattr(op(model).builtinOptions, field, value)


def set_constant(model, name: str, values, dtype=np.int32, tensor_type=schema.TensorType.INT32) -> None:
    array = np.asarray(values, dtype)
    target = tensor(model, name)
    target.shape, target.type = np.array(array.shape, np.int32), tensor_type
    model.buffers[target.buffer].data = np.frombuffer(array.tobytes(), np.uint8)


def _per_channel_bias_of_three(model) -> None:
    set_constant(model, "bias", [1, 2, 3])
    set_qparams(model, "bias", [5e-4, 1e-3, 7.5e-4], [0, 0, 0])


def _filter_scales_along_input_channels(model) -> None:
    set_qparams(model, "filter", [0.01, 0.02, 0.03], [0, 0, 0])
    tensor(model, "filter").quantization.quantizedDimension = 1  # [4, 3, 3, 2]: 3 slices along dim 1


def _bias_scale_off(model) -> None:
    set_qparams(model, "bias", 0.05 * 0.02 + 0.1 * 0.03)  # 3% of an output step off s_in * s_w


def _softmax_rows_of(model, row: int) -> None:
    set_shape(model, "x", [1, row])
    set_shape(model, "y", [1, row])


def _output_scales_along_columns(model) -> None:
    set_qparams(model, "y", [0.1] * 8, [3] * 8)
    tensor(model, "y").quantization.quantizedDimension = 1


def _eleven_inputs(model) -> None:
    op(model).inputs = np.array([op(model).inputs[0]] * 11, np.int32)
    set_shape(model, "y", [1, 2, 2, 33])


@dataclass(frozen=True)
class Case:
    base: str
    edit: Callable[[schema.ModelT], object]
    tflm_runs_because: str | None = None  # None: TFLM refuses or aborts on the same bytes


DEBUG_ONLY = "TFLITE_DCHECK only: a release TFLM runs it to other outputs"

# rule -> a model breaking exactly that rule
CASES: dict[str, Case] = {
    "zero_point_in_type_range": Case("conv", lambda m: set_qparams(m, "y", zero_point=1 << 40),
                                     "TFLM reads the zero point into an int32: 2^40 becomes 0"),
    "scales_positive_finite": Case("add", lambda m: set_qparams(m, "out", scale=0.0)),
    "quantized_dimension_has_a_scale_each": Case(
        "conv", lambda m: setattr(tensor(m, "filter").quantization, "quantizedDimension", 3)),
    "operand_counts": Case("conv", lambda m: setattr(op(m), "inputs", op(m).inputs[:1])),
    "operand_indices": Case("conv", lambda m: op(m).inputs.__setitem__(1, -1)),
    "operands_quantized": Case("add", lambda m: setattr(tensor(m, "x"), "quantization", None)),
    "filter_scales_per_output_channel": Case("conv", _filter_scales_along_input_channels),
    "filter_zero_point_zero": Case("fully_connected", lambda m: set_qparams(m, "weights", zero_point=3), DEBUG_ONLY),
    "bias_int32_per_output_channel": Case("conv", _per_channel_bias_of_three, DEBUG_ONLY),
    "depthwise_multiplier_option": Case("depthwise", lambda m: set_option(m, depthMultiplier=1), DEBUG_ONLY),
    "fully_connected_bias_scale": Case("fully_connected", _bias_scale_off),
    "activation_bounds_fit_int32": Case("conv", lambda m: set_qparams(m, "y", scale=1e-30)),
    "add_sub_output_scale": Case("add", lambda m: set_qparams(m, "out", scale=1e-9)),
    "output_multiplier_left_shift": Case("mul", lambda m: set_qparams(m, "out", scale=1e-9),
                                         "MultiplyByQuantizedMultiplier shifts past int32 (undefined; TFLM wraps)"),
    "quantize_output_per_tensor": Case("quantize", _output_scales_along_columns),
    "softmax_output_qparams": Case("softmax", lambda m: set_qparams(m, "y", zero_point=-127)),
    "softmax_row_length": Case("softmax", lambda m: _softmax_rows_of(m, 600)),
    "logistic_output_zero_point": Case("logistic", lambda m: set_qparams(m, "y", zero_point=0)),
    "q4_input_scale": Case("tanh", lambda m: set_qparams(m, "x", scale=8.0),
                           "TFLM saturates every value, a silently wrong output"),
    "hard_swish_output_scale": Case("hard_swish", lambda m: set_qparams(m, "y", scale=1e-5)),
    "pool_shares_qparams": Case("average_pool", lambda m: set_qparams(m, "y", zero_point=2)),
    "reduce_min_max_shares_qparams": Case("reduce_max", lambda m: set_qparams(m, "y", scale=0.1)),
    "reduce_axes_int32": Case("mean", lambda m: set_constant(m, "axes", [1, 2], np.int64, schema.TensorType.INT64)),
    "output_type_is_input_type": Case("reshape", lambda m: setattr(tensor(m, "y"), "type", schema.TensorType.INT16)),
    "concatenation_shares_qparams": Case("concatenation", lambda m: set_qparams(m, "b", zero_point=2)),
    "concatenation_input_count": Case("concatenation", _eleven_inputs),
    "no_fused_activation": Case("concatenation", lambda m: set_option(m, fusedActivationFunction=Activation.RELU)),
    "pad_value_qparams": Case("padv2", lambda m: set_qparams(m, "value", zero_point=0)),
    "padded_output_shape": Case("pad", lambda m: set_shape(m, "y", [1, 6, 4, 2])),
    "transpose_permutation": Case("transpose", lambda m: set_constant(m, "c0", [0, 4, 1, 2])),
    "reshape_element_count": Case("reshape", lambda m: set_shape(m, "y", [1, 30])),
    "strided_slice_strides": Case("strided_slice", lambda m: set_constant(m, "c2", [1, 0, 2, 1])),
    "strided_slice_output_shape": Case("strided_slice", lambda m: set_shape(m, "y", [1, 2, 3, 4])),
    "split_axis_in_rank": Case("split", lambda m: set_constant(m, "axis", 7)),
    "resize_operands": Case("resize_bilinear", lambda m: set_option(m, halfPixelCenters=True, alignCorners=True)),
    "batch_matmul_shapes": Case("batch_matmul", lambda m: set_shape(m, "b", [1, 4, 4])),
}


@pytest.mark.parametrize("name", list(BASES))
def test_base_model_runs_as_in_tflm(name):
    """Every case starts from a model both prepare: the runtime's outputs equal TFLM's (LiteRT's reference
    kernels where TFLM has no int8 kernel) on seeded random inputs."""
    tflite = BASES[name]()
    runner = LiteRTRunner.from_bytes(tflite)
    generator = np.random.default_rng(0)
    feeds = [generator.integers(-128, 128, shape, dtype=np.int64).astype(dtype)
             for shape, dtype, _, _ in tflite_io(tflite)[0]]
    for ours, theirs in zip(runner.run(feeds), run_reference(tflite, feeds), strict=True):
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("rule", list(CASES))
def test_a_model_breaking_a_rule_is_refused_naming_it(rule):
    case = CASES[rule]
    tflite = rebuilt(BASES[case.base](), case.edit)
    with pytest.raises(ImxrtError, match=rf"breaks rule {rule}: "):
        LiteRTRunner.from_bytes(tflite)
    assert tflm_verdict(tflite) in (("refuses", "aborts") if case.tflm_runs_because is None else ("runs",))


def test_every_rule_has_a_case():
    """A rule without a case here would be a rule no test can see break."""
    from imxrt.runtime import litert_rules

    rules = {rule.__name__ for rules in (litert_rules.TENSOR_RULES, litert_rules.OPERAND_RULES,
                                         *litert_rules.OPERATOR_RULES.values()) for rule in rules}
    assert rules == set(CASES)


def test_one_filter_scale_for_every_channel_is_tflm_s_broadcast():
    """TFLM takes one filter scale for all output channels (conv_common.cc: scale->size == 1 is allowed) and
    broadcasts it: the runtime does too, to TFLM's outputs."""
    tflite = rebuilt(conv(), lambda m: set_qparams(m, "filter", [0.02], [0]))
    feeds = [np.random.default_rng(1).integers(-128, 128, (1, 5, 5, 2)).astype(np.int8)]
    np.testing.assert_array_equal(LiteRTRunner.from_bytes(tflite).run(feeds)[0], run_reference(tflite, feeds)[0])


# -- the payload's tensor map

@pytest.fixture(scope="module")
def conv_net() -> bytes:
    """The small conv net on the NPU: one delegate, its input NCHW [1, 3, 6, 6] (format flag 0)."""
    return compile_small_conv_net("imxrt700")


def _with_metadata(pte: bytes, change: Callable[[dict], object]) -> bytes:
    def edit(program):
        parsed = reference_payload.unpack(bytes(program.backend_delegate_data[0].data))
        metadata = json.loads(json.dumps(parsed.metadata))
        change(metadata)
        program.backend_delegate_data[0].data = reference_payload.pack(metadata, parsed.tflite)
    return edited(pte, edit)


def _input(metadata: dict) -> dict:
    return metadata["inputs"][0]


PAYLOAD_CASES = {
    # flag 0 -> 1 on its own: the subgraph's [1, 3, 6, 6] input read as NHWC bytes
    "format_flag_layout": lambda m: _input(m).update(format_flag=1),
    "format_flag_known": lambda m: _input(m).update(format_flag=2),
    "subgraph_tensor_matches": lambda m: _input(m).update(zero_point=_input(m)["zero_point"] + 1),
}


@pytest.mark.parametrize("rule", list(PAYLOAD_CASES))
def test_a_payload_whose_tensor_map_disagrees_is_refused(conv_net, rule):
    pte = _with_metadata(conv_net, PAYLOAD_CASES[rule])
    with pytest.raises(BadFile, match=rf"NeutronBackend delegate 0: its input \S+ breaks rule {rule}: "):
        imxrt.runtime.load(pte)


def test_a_flag_and_shape_changed_together_must_match_the_subgraph(conv_net):
    """Flag 1 with the NHWC shape is consistent in itself; the subgraph still takes NCHW [1, 3, 6, 6]."""
    pte = _with_metadata(conv_net, lambda m: _input(m).update(format_flag=1, tflite_shape=[1, 6, 6, 3]))
    with pytest.raises(BadFile, match=r"breaks rule subgraph_tensor_matches: the payload says \(1, 6, 6, 3\)"):
        imxrt.runtime.load(pte)


def test_a_flag_0_tensor_in_channels_last_order_is_refused(conv_net):
    """The board's runtime passes a flag-0 tensor's bytes as they are: they must be contiguous."""
    blob = bytes(deserialize_pte_binary(conv_net).program.backend_delegate_data[0].data)
    delegate = neutron.NeutronDelegate(blob, "net.pte", 0)
    image = torch.zeros((1, 3, 6, 6), dtype=torch.int8).to(memory_format=torch.channels_last)
    with pytest.raises(BadFile, match=r"breaks rule format_flag_dim_order: format flag 0 on a \(1, 3, 6, 6\) tensor "
                                      r"of strides \(108, 1, 18, 3\)"):
        delegate.bind([image, torch.zeros((1, 2), dtype=torch.int8)])


def test_a_rule_broken_inside_a_program_names_the_partition(conv_net):
    def edit(program):
        parsed = reference_payload.unpack(bytes(program.backend_delegate_data[0].data))
        tflite = rebuilt(parsed.tflite, lambda m: _fc_weights(m).quantization.__setattr__(
            "zeroPoint", np.array([3], np.int64)))
        program.backend_delegate_data[0].data = reference_payload.pack(parsed.metadata, tflite)

    with pytest.raises(BadFile, match=r"NeutronBackend delegate 0: LiteRT subgraph: operator \d \(FULLY_CONNECTED\) "
                                      r"breaks rule filter_zero_point_zero: its filter has zero point 3"):
        imxrt.runtime.load(edited(conv_net, edit))


def _fc_weights(model: schema.ModelT) -> schema.TensorT:
    graph = model.subgraphs[0]
    codes = model.operatorCodes
    fc = next(o for o in graph.operators
              if max(codes[o.opcodeIndex].builtinCode, codes[o.opcodeIndex].deprecatedBuiltinCode)
              == schema.BuiltinOperator.FULLY_CONNECTED)
    return graph.tensors[fc.inputs[1]]


# -- the flatbuffer's size, bounded before it is unpacked

def _vector(builder: flatbuffers.Builder, start, offsets) -> int:
    start(builder, len(offsets))
    for offset in reversed(offsets):
        builder.PrependUOffsetTRelative(offset)
    return builder.EndVector()


def many_subgraphs(tflite: bytes, count: int) -> bytes:
    """``tflite`` with its one subgraph referred to ``count`` times by the model's subgraph vector."""
    model = schema.ModelT.InitFromPackedBuf(bytearray(tflite), 0)
    builder = flatbuffers.Builder(0)
    return _finish_model(builder, model, [model.subgraphs[0].Pack(builder)] * count)


def _finish_model(builder: flatbuffers.Builder, model: schema.ModelT, subgraph_offsets: list[int]) -> bytes:
    """The model's bytes with ``subgraph_offsets`` (already in ``builder``) as its subgraph vector."""
    codes = _vector(builder, schema.ModelStartOperatorCodesVector, [c.Pack(builder) for c in model.operatorCodes])
    subgraphs = _vector(builder, schema.ModelStartSubgraphsVector, subgraph_offsets)
    buffers = _vector(builder, schema.ModelStartBuffersVector, [b.Pack(builder) for b in model.buffers])
    schema.ModelStart(builder)
    schema.ModelAddVersion(builder, 3)
    schema.ModelAddOperatorCodes(builder, codes)
    schema.ModelAddSubgraphs(builder, subgraphs)
    schema.ModelAddBuffers(builder, buffers)
    builder.Finish(schema.ModelEnd(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _peak_bytes_while_loading(tflite: bytes) -> tuple[int, BaseException | None]:
    tracemalloc.start()
    try:
        LiteRTRunner.from_bytes(tflite)
        error = None
    except ImxrtError as e:
        error = e
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak, error


def test_twenty_thousand_subgraphs_are_refused_before_they_are_unpacked():
    """A subgraph shared by 20,000 offsets of an 80 kB file: unpacked, 1.4 GB and 35 s of objects."""
    tflite = many_subgraphs(conv(), 20_000)
    peak, error = _peak_bytes_while_loading(tflite)
    assert error is not None and "expected one subgraph, found 20000" in str(error)
    assert peak < 4 * len(tflite) + (1 << 20), f"refusing it took {peak:,} bytes"


def test_a_tensor_shared_by_many_offsets_is_refused_before_it_is_unpacked():
    """One subgraph whose tensor vector names one tensor (with a 4 kB name) 100,000 times: what unpacking
    builds is priced from the file, over 64 times its size, and refused before an object is built."""
    model = schema.ModelT.InitFromPackedBuf(bytearray(conv()), 0)
    model.subgraphs[0].tensors[0].name = "x" * 4096
    builder = flatbuffers.Builder(0)
    shared = _shared_tensor_model(model, builder, model.subgraphs[0].tensors[0].Pack(builder), 100_000)
    peak, error = _peak_bytes_while_loading(shared)
    assert error is not None and "its offsets share tables, which no model we write does" in str(error)
    assert peak < 4 * len(shared) + (1 << 20), f"refusing it took {peak:,} bytes"


def _shared_tensor_model(model: schema.ModelT, builder: flatbuffers.Builder, tensor_offset: int, count: int) -> bytes:
    graph = model.subgraphs[0]
    operators = _vector(builder, schema.SubGraphStartOperatorsVector, [o.Pack(builder) for o in graph.operators])
    tensors = _vector(builder, schema.SubGraphStartTensorsVector, [tensor_offset] * count)
    schema.SubGraphStart(builder)
    schema.SubGraphAddTensors(builder, tensors)
    schema.SubGraphAddOperators(builder, operators)
    return _finish_model(builder, model, [schema.SubGraphEnd(builder)])
