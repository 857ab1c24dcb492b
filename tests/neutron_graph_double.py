"""Test double of what NXP's Neutron converter returns: a TFLite model of one ``NeutronGraph`` custom op.

Built from the facts of reference/neutron.md only (no SDK): the op's data inputs and outputs are the model's,
its last three inputs are uint8 constant buffers (microcode, weights, kernels), and its outputs end with a
scratch tensor (payload version 0) or scratch, profile and debug tensors (version 1). The microcode is not
device code: it is a header with the words the stock runtime reads, then filler bytes.

Used by the payload tests directly and by the ``eiq_neutron_sdk`` test double's ``convertModel``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as tfl

MAGIC = 0x64434D6E
HEADER_WORDS = 16


def microcode(n_in: int, n_out: int, version: int, body: bytes = b"", weights_bytes: int = 0, scratch: int = 4096,
              sram_scratch: int = 0, profile: int = 0, debug: int = 0, word8: int = 0) -> bytes:
    """Microcode bytes: the header words the runtime reads (magic, sizes, scratch, I/O counts), then ``body``.
    Word 6 is the whole length, so a ``body`` of odd length makes microcode that needs padding."""
    words = [0] * HEADER_WORDS
    words[0] = MAGIC
    words[6] = HEADER_WORDS * 4 + len(body)
    words[7] = weights_bytes
    words[8] = word8  # unread by the runtime: the test double records the converter options here
    words[9] = scratch
    if version == 0:
        words[10], words[11], words[12] = sram_scratch, n_in, n_out
    else:
        words[10], words[11], words[12], words[13], words[14] = profile, debug, sram_scratch, n_in, n_out
    return struct.pack(f"<{HEADER_WORDS}I", *words) + body


@dataclass(frozen=True)
class Io:
    """A data tensor of the NeutronGraph model."""

    name: str
    shape: tuple[int, ...]
    scale: float = 0.05
    zero_point: int = 0


@dataclass(frozen=True)
class LeftOut:
    """A builtin op the converter did not take, left beside the NeutronGraph (reads the first output)."""

    builtin: str
    output: str


def neutron_graph_model(inputs: Sequence[Io], outputs: Sequence[Io], microcode_bytes: bytes, weights: bytes,
                        kernels: bytes, version: int = 0, op_inputs: Sequence[int] | None = None,
                        op_outputs: Sequence[int] | None = None, left_out: Sequence[LeftOut] = ()) -> bytes:
    """A converted model. ``op_inputs`` / ``op_outputs`` order the op's data tensors by model input / output
    position (default: the model's order)."""
    tensors: list[tfl.TensorT] = []
    buffers = [tfl.BufferT()]

    def tensor(name: str, shape, dtype, data: bytes | None = None, quant: Io | None = None) -> int:
        t = tfl.TensorT()
        t.name, t.shape, t.type = name, np.array(shape, np.int32), dtype
        t.buffer = 0
        if data is not None:
            buffer = tfl.BufferT()
            buffer.data = np.frombuffer(data, np.uint8)
            t.buffer = len(buffers)
            buffers.append(buffer)
        if quant is not None:
            q = tfl.QuantizationParametersT()
            q.scale = np.array([quant.scale], np.float32)
            q.zeroPoint = np.array([quant.zero_point], np.int64)
            t.quantization = q
        tensors.append(t)
        return len(tensors) - 1

    graph_inputs = [tensor(io.name, io.shape, tfl.TensorType.INT8, quant=io) for io in inputs]
    graph_outputs = [tensor(io.name, io.shape, tfl.TensorType.INT8, quant=io) for io in outputs]
    blobs = [tensor(name, [len(data)], tfl.TensorType.UINT8, data)
             for name, data in (("microcode", microcode_bytes), ("weights", weights), ("kernels", kernels))]
    extras = ["scratch"] + (["profile", "debug"] if version == 1 else [])
    extra_tensors = [tensor(name, [16], tfl.TensorType.UINT8) for name in extras]

    codes = []
    neutron = tfl.OperatorCodeT()
    neutron.builtinCode = neutron.deprecatedBuiltinCode = tfl.BuiltinOperator.CUSTOM
    neutron.customCode = "NeutronGraph"
    codes.append(neutron)
    op = tfl.OperatorT()
    op.opcodeIndex = 0
    order_in = list(op_inputs) if op_inputs is not None else list(range(len(inputs)))
    order_out = list(op_outputs) if op_outputs is not None else list(range(len(outputs)))
    op.inputs = np.array([graph_inputs[i] for i in order_in] + blobs, np.int32)
    op.outputs = np.array([graph_outputs[j] for j in order_out] + extra_tensors, np.int32)
    operators = [op]
    for extra in left_out:
        code = tfl.OperatorCodeT()
        code.builtinCode = code.deprecatedBuiltinCode = getattr(tfl.BuiltinOperator, extra.builtin)
        codes.append(code)
        other = tfl.OperatorT()
        other.opcodeIndex = len(codes) - 1
        other.inputs = np.array([graph_outputs[0]], np.int32)
        other.outputs = np.array([tensor(extra.output, outputs[0].shape, tfl.TensorType.INT8, quant=outputs[0])],
                                 np.int32)
        operators.append(other)

    subgraph = tfl.SubGraphT()
    subgraph.tensors, subgraph.operators = tensors, operators
    subgraph.inputs, subgraph.outputs = np.array(graph_inputs, np.int32), np.array(graph_outputs, np.int32)
    model = tfl.ModelT()
    model.version, model.operatorCodes, model.subgraphs, model.buffers = 3, codes, [subgraph], buffers
    model.description = "NeutronGraph test double"
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())
