"""Serialize a LiteRT ``Graph`` to TFLite schema v3 flatbuffer bytes through the schema's object API.

Indices are assigned here, once: tensors in order of first use (subgraph inputs, then each operator's
inputs and outputs, then subgraph outputs), operator codes in order of first use, one buffer per
constant after the empty sentinel buffer 0. Tensors no operator touches are not written (TFLM would plan
them for the whole graph). Same graph, same bytes.
"""

from __future__ import annotations

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as schema

from imxrt.npu.litert.ir import Graph, PerChannel, PerTensor, Tensor

SCHEMA_VERSION = 3
FILE_IDENTIFIER = b"TFL3"

_TENSOR_TYPES = {
    np.dtype(np.int8): schema.TensorType.INT8,
    np.dtype(np.int16): schema.TensorType.INT16,
    np.dtype(np.int32): schema.TensorType.INT32,
    np.dtype(np.int64): schema.TensorType.INT64,
    np.dtype(np.float32): schema.TensorType.FLOAT32,
}

# Options object type -> the union tag the schema stores next to it.
_OPTIONS_TYPES = {
    schema.Conv2DOptionsT: schema.BuiltinOptions.Conv2DOptions,
    schema.DepthwiseConv2DOptionsT: schema.BuiltinOptions.DepthwiseConv2DOptions,
    schema.TransposeConvOptionsT: schema.BuiltinOptions.TransposeConvOptions,
    schema.FullyConnectedOptionsT: schema.BuiltinOptions.FullyConnectedOptions,
    schema.BatchMatMulOptionsT: schema.BuiltinOptions.BatchMatMulOptions,
    schema.Pool2DOptionsT: schema.BuiltinOptions.Pool2DOptions,
    schema.AddOptionsT: schema.BuiltinOptions.AddOptions,
    schema.SubOptionsT: schema.BuiltinOptions.SubOptions,
    schema.MulOptionsT: schema.BuiltinOptions.MulOptions,
    schema.ConcatenationOptionsT: schema.BuiltinOptions.ConcatenationOptions,
    schema.ReshapeOptionsT: schema.BuiltinOptions.ReshapeOptions,
    schema.SoftmaxOptionsT: schema.BuiltinOptions.SoftmaxOptions,
    schema.ReducerOptionsT: schema.BuiltinOptions.ReducerOptions,
    schema.LeakyReluOptionsT: schema.BuiltinOptions.LeakyReluOptions,
    schema.MirrorPadOptionsT: schema.BuiltinOptions.MirrorPadOptions,
    schema.StridedSliceOptionsT: schema.BuiltinOptions.StridedSliceOptions,
    schema.SplitVOptionsT: schema.BuiltinOptions.SplitVOptions,
    schema.ResizeBilinearOptionsT: schema.BuiltinOptions.ResizeBilinearOptions,
    schema.ResizeNearestNeighborOptionsT: schema.BuiltinOptions.ResizeNearestNeighborOptions,
}


def write_model(graph: Graph, description: str = "imxrt") -> bytes:
    """The graph as a one-subgraph ``.tflite`` model."""
    tensors = _used_tensors(graph)
    tensor_index = {id(t): i for i, t in enumerate(tensors)}
    buffers = [schema.BufferT()]  # buffer 0: the empty sentinel every non-constant tensor points at
    tensor_objects = []
    for tensor in tensors:
        buffer_index = 0
        if tensor.is_constant:
            buffer = schema.BufferT()
            buffer.data = np.frombuffer(tensor.data, np.uint8)
            buffer_index = len(buffers)
            buffers.append(buffer)
        tensor_objects.append(_tensor_object(tensor, buffer_index))

    opcode_index: dict[str, int] = {}
    operator_objects = []
    for op in graph.operators:
        if op.builtin not in opcode_index:
            opcode_index[op.builtin] = len(opcode_index)
        operator = schema.OperatorT()
        operator.opcodeIndex = opcode_index[op.builtin]
        operator.inputs = np.array([-1 if t is None else tensor_index[id(t)] for t in op.inputs], np.int32)
        operator.outputs = np.array([tensor_index[id(t)] for t in op.outputs], np.int32)
        if op.options is not None:
            operator.builtinOptionsType = _OPTIONS_TYPES[type(op.options)]
            operator.builtinOptions = op.options
        operator_objects.append(operator)

    subgraph = schema.SubGraphT()
    subgraph.tensors = tensor_objects
    subgraph.inputs = np.array([tensor_index[id(t)] for t in graph.inputs], np.int32)
    subgraph.outputs = np.array([tensor_index[id(t)] for t in graph.outputs], np.int32)
    subgraph.operators = operator_objects
    subgraph.name = "main"

    model = schema.ModelT()
    model.version = SCHEMA_VERSION
    model.description = description
    model.operatorCodes = [_operator_code(name) for name in opcode_index]
    model.subgraphs = [subgraph]
    model.buffers = buffers
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=FILE_IDENTIFIER)
    return bytes(builder.Output())


def _used_tensors(graph: Graph) -> list[Tensor]:
    ordered: dict[int, Tensor] = {}
    for tensor in graph.inputs:
        ordered.setdefault(id(tensor), tensor)
    for op in graph.operators:
        for tensor in (*op.inputs, *op.outputs):
            if tensor is not None:
                ordered.setdefault(id(tensor), tensor)
    for tensor in graph.outputs:
        ordered.setdefault(id(tensor), tensor)
    return list(ordered.values())


def _tensor_object(tensor: Tensor, buffer_index: int) -> schema.TensorT:
    obj = schema.TensorT()
    obj.shape = np.array(tensor.shape, np.int32)
    obj.type = _TENSOR_TYPES[np.dtype(tensor.dtype)]
    obj.buffer = buffer_index
    obj.name = tensor.name
    quant = tensor.quantization
    if quant is not None:
        q = schema.QuantizationParametersT()
        if isinstance(quant, PerTensor):
            q.scale = np.array([quant.scale], np.float32)
            q.zeroPoint = np.array([quant.zero_point], np.int64)
            q.quantizedDimension = 0
        else:
            assert isinstance(quant, PerChannel)
            q.scale = np.array(quant.scales, np.float32)
            q.zeroPoint = np.zeros(len(quant.scales), np.int64)
            q.quantizedDimension = quant.axis
        obj.quantization = q
    return obj


def _operator_code(name: str) -> schema.OperatorCodeT:
    code = getattr(schema.BuiltinOperator, name)
    obj = schema.OperatorCodeT()
    obj.builtinCode = code
    # Readers older than schema 3a look only at the int8 field: codes above 127 go in the new field.
    obj.deprecatedBuiltinCode = min(code, schema.BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES)
    obj.version = 1
    return obj
