"""The open reference Neutron compiler: validate a LiteRT partition for the target, plan its NPU scratch,
and package it as a reference payload the host runner can execute.

It produces no microcode; a ``.pte`` built with it runs on the host, and on the board only once the eIQ
Neutron SDK has compiled it (``--neutron-compiler eiq``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from ai_edge_litert import schema_py_generated as tfl

from imxrt.memory import packing
from imxrt.memory.lifetimes import Buffer
from imxrt.npu import reference_payload
from imxrt.targets import NeutronConfig

if TYPE_CHECKING:
    from imxrt.npu.litert import LiteRTSubgraph

_BUILTIN_NAMES = {v: k for k, v in vars(tfl.BuiltinOperator).items() if not k.startswith("_")}
_ITEM_BYTES = {tfl.TensorType.INT8: 1, tfl.TensorType.UINT8: 1, tfl.TensorType.INT16: 2,
               tfl.TensorType.INT32: 4, tfl.TensorType.FLOAT32: 4, tfl.TensorType.INT64: 8}

# LiteRT ops the Neutron-C converter accepts (reference/neutron.md); anything else in a partition is a bug.
NEUTRON_LITERT_OPS = frozenset({
    "CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "FULLY_CONNECTED", "BATCH_MATMUL", "ADD", "SUB",
    "MUL", "MAXIMUM", "MINIMUM", "CONCATENATION", "AVERAGE_POOL_2D", "MAX_POOL_2D", "MEAN", "SUM",
    "REDUCE_MAX", "REDUCE_MIN", "SOFTMAX", "RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LOGISTIC",
    "TANH", "EXP", "LOG", "RSQRT", "HARD_SWISH", "LEAKY_RELU", "ABS", "NEG", "PAD", "PADV2", "MIRROR_PAD",
    "TRANSPOSE", "RESHAPE", "SLICE", "STRIDED_SLICE", "SPLIT", "SPLIT_V", "RESIZE_NEAREST_NEIGHBOR",
    "RESIZE_BILINEAR", "PRELU", "QUANTIZE",
})


def plan_scratch(tflite: bytes) -> int:
    """Bytes of NPU scratch for the partition's intermediate tensors, each live over [first writer, last
    reader] (inclusive): placed by the memory stage's planner (the smallest of its candidates), as the
    CPU side's arena is."""
    model = tfl.ModelT.InitFromPackedBuf(tflite, 0)
    graph = model.subgraphs[0]
    io = set(graph.inputs.tolist()) | set(graph.outputs.tolist())
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for step, op in enumerate(graph.operators):
        for t in op.outputs.tolist():
            first.setdefault(t, step)
            last[t] = max(last.get(t, step), step)
        for t in (op.inputs.tolist() if op.inputs is not None else []):
            if t in first:
                last[t] = step
    buffers = []
    for t in sorted(first):
        tensor = graph.tensors[t]
        if t in io or (tensor.buffer and model.buffers[tensor.buffer].data is not None):
            continue
        elements = int(np.prod(tensor.shape)) if tensor.shape is not None else 1
        name = tensor.name.decode() if isinstance(tensor.name, bytes) else str(tensor.name)
        buffers.append(Buffer(len(buffers), name, reference_payload.align(elements * _ITEM_BYTES.get(tensor.type, 4)),
                              first[t], last[t], memory_id=0))
    if not buffers:
        return 0
    best, _ = packing.plan(buffers)
    return best.size


def litert_ops(tflite: bytes) -> list[str]:
    model = tfl.ModelT.InitFromPackedBuf(tflite, 0)
    codes = model.operatorCodes
    return [_BUILTIN_NAMES.get(max(codes[op.opcodeIndex].builtinCode, codes[op.opcodeIndex].deprecatedBuiltinCode),
                               "CUSTOM") for op in model.subgraphs[0].operators]


def compile_partition(subgraph: LiteRTSubgraph, npu: NeutronConfig, macs: int) -> bytes:
    """Validate ``subgraph`` for ``npu`` and return its reference payload."""
    ops = litert_ops(subgraph.tflite)
    unexpected = sorted(set(ops) - NEUTRON_LITERT_OPS)
    assert not unexpected, f"LiteRT ops {unexpected} are not Neutron ops; the partitioner let them through"

    def io_entry(index: int, io) -> dict:
        return {
            "arg": index,
            "name": io.name,
            "shape": list(io.shape),
            "tflite_shape": list(io.tflite_shape),
            "format_flag": int(io.channels_last),
            "scale": io.scale,
            "zero_point": io.zero_point,
        }

    metadata = {
        "kind": "reference",
        "target": npu.name,
        "inputs": [io_entry(i, io) for i, io in enumerate(subgraph.inputs)],
        "outputs": [io_entry(i, io) for i, io in enumerate(subgraph.outputs)],
        "ops": [{"litert": op.builtin, "debug_handles": list(op.debug_handles)} for op in subgraph.ops],
        "scratch_bytes": plan_scratch(subgraph.tflite),
        "macs": macs,
    }
    return reference_payload.pack(metadata, subgraph.tflite)
