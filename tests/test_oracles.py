"""The oracles themselves, on a .tflite built by hand whose outputs are derived below."""

import flatbuffers
import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as schema
from oracles import run_litert, run_tflm, tflite_io, tflite_ops, tflm_arena_bytes

X = np.array([[0, 4, -6, 10]], np.int8)
EXPECTED = np.array([[-2, 1]], np.int8)


def _tensor(name, shape, dtype, scale, zero_point, buffer=0):
    tensor = schema.TensorT()
    tensor.name, tensor.shape, tensor.type, tensor.buffer = name, np.array(shape, np.int32), dtype, buffer
    tensor.quantization = schema.QuantizationParametersT()
    tensor.quantization.scale = [scale]
    tensor.quantization.zeroPoint = [zero_point]
    return tensor


def _operator(opcode_index, inputs, outputs, options_type=0, options=None):
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = opcode_index, inputs, outputs
    op.builtinOptionsType, op.builtinOptions = options_type, options
    return op


def _opcode(builtin, custom=None):
    code = schema.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = builtin
    code.version = 1
    code.customCode = custom
    return code


def fc_add_model(custom_tail: bool = False) -> bytes:
    """y = FULLY_CONNECTED(x, W, b); z = ADD(y, y). Expected z for x = [0, 4, -6, 10] is [-2, 1].

    x: int8 [1, 4], scale 0.5, zp -2       → x - zp = [2, 6, -4, 12]
    W: int8 [2, 4], scale 0.25, zp 0       = [[1, 2, 3, -1], [-2, 0, 1, 1]]
    b: int32 [2],   scale 0.5 * 0.25       = [3, -1]
    acc = W·(x - zp) + b                   = [2 + 12 - 12 - 12 + 3, -4 + 0 - 4 + 12 - 1] = [-7, 3]
    y: int8, scale 0.5, zp 5; M = 0.125 / 0.5 = 0.25
       y = round(acc · M) + 5               = round([-1.75, 0.75]) + 5 = [-2, 1] + 5 = [3, 6]
       (no rounding ties, so TFLM and LiteRT's reference kernels must agree.)
    z: int8, scale 1.0, zp 0; real y = 0.5 · ([3, 6] - 5) = [-1, 0.5], so real z = 2y = [-2, 1],
       exactly representable: z = [-2, 1].
    `custom_tail` appends a custom op "NeutronGraph" (for parsing only: no interpreter has it).
    """
    buffers = [schema.BufferT() for _ in range(3)]  # buffer 0 is the empty sentinel
    buffers[1].data = np.array([[1, 2, 3, -1], [-2, 0, 1, 1]], np.int8).view(np.uint8).ravel()
    buffers[2].data = np.array([3, -1], np.int32).view(np.uint8)
    tensors = [
        _tensor("x", [1, 4], schema.TensorType.INT8, 0.5, -2),
        _tensor("W", [2, 4], schema.TensorType.INT8, 0.25, 0, buffer=1),
        _tensor("b", [2], schema.TensorType.INT32, 0.125, 0, buffer=2),
        _tensor("y", [1, 2], schema.TensorType.INT8, 0.5, 5),
        _tensor("z", [1, 2], schema.TensorType.INT8, 1.0, 0),
    ]
    opcodes = [_opcode(schema.BuiltinOperator.FULLY_CONNECTED), _opcode(schema.BuiltinOperator.ADD)]
    operators = [
        _operator(
            0, [0, 1, 2], [3], schema.BuiltinOptions.FullyConnectedOptions, schema.FullyConnectedOptionsT()
        ),
        _operator(1, [3, 3], [4], schema.BuiltinOptions.AddOptions, schema.AddOptionsT()),
    ]
    outputs = [4]
    if custom_tail:
        opcodes.append(_opcode(schema.BuiltinOperator.CUSTOM, custom="NeutronGraph"))
        tensors.append(_tensor("npu_out", [1, 2], schema.TensorType.INT8, 1.0, 0))
        operators.append(_operator(2, [4], [5]))
        outputs = [5]
    graph = schema.SubGraphT()
    graph.tensors, graph.operators, graph.inputs, graph.outputs = tensors, operators, [0], outputs
    model = schema.ModelT()
    model.version, model.operatorCodes, model.subgraphs, model.buffers = 3, opcodes, [graph], buffers
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


@pytest.mark.parametrize("run", [run_tflm, run_litert], ids=["tflm", "litert"])
def test_runs_hand_derived_output(run):
    (z,) = run(fc_add_model(), [X])
    assert z.dtype == np.int8
    np.testing.assert_array_equal(z, EXPECTED)


def test_ops_in_order_with_custom_code():
    assert tflite_ops(fc_add_model()) == ["FULLY_CONNECTED", "ADD"]
    assert tflite_ops(fc_add_model(custom_tail=True)) == ["FULLY_CONNECTED", "ADD", "NeutronGraph"]


def test_io_shapes_dtypes_qparams():
    inputs, outputs = tflite_io(fc_add_model())
    assert inputs == [((1, 4), np.dtype(np.int8), 0.5, -2)]
    assert outputs == [((1, 2), np.dtype(np.int8), 1.0, 0)]


def test_arena_total_is_what_the_model_needs():
    """The recorded total covers every tensor, struct and kernel buffer; the arena also needs a little
    unrecorded room (the allocator's own objects, Prepare's temporaries): a few hundred bytes at most."""
    model = fc_add_model()
    total = tflm_arena_bytes(model)
    np.testing.assert_array_equal(run_tflm(model, [X], arena_size=total + 512)[0], EXPECTED)
    with pytest.raises(RuntimeError, match="allocate"):
        run_tflm(model, [X], arena_size=total // 2)


def test_rejects_wrong_input_dtype():
    with pytest.raises(ValueError, match="input 0"):
        run_tflm(fc_add_model(), [X.astype(np.float32)])
