"""Lowering stage: one delegated int8 edge partition -> one LiteRT (TFLite) int8 NHWC subgraph.

Generic LiteRT: nothing here knows about Neutron; the NPU layer checks constraints on the result.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind
from torch.fx import Node

from imxrt.npu.litert import layout, qdq
from imxrt.npu.litert.context import LoweringContext, edge_shape
from imxrt.npu.litert.converters import CONVERTERS
from imxrt.npu.litert.errors import UnsupportedForLiteRT
from imxrt.npu.litert.fold import fold_data_movement, sink_transposes_into_concatenations
from imxrt.npu.litert.ir import PerTensor
from imxrt.npu.litert.join_slices import join_slices_into_splits
from imxrt.npu.litert.writer import write_model

__all__ = ["LiteRTOp", "LiteRTSubgraph", "PartitionIO", "UnsupportedForLiteRT", "lower_partition"]

_CHANNELS_LAST = (0, 2, 3, 1)


@dataclass(frozen=True)
class PartitionIO:
    name: str  # placeholder / output node name in the partition program
    shape: tuple[int, ...]  # the edge (PyTorch logical, e.g. NCHW) shape
    tflite_shape: tuple[int, ...]  # the LiteRT subgraph I/O tensor: NHWC if channels_last, else `shape`
    channels_last: bool  # the edge tensor is channels_last, so LiteRT takes its bytes as they are
    scale: float
    zero_point: int


@dataclass(frozen=True)
class LiteRTOp:
    builtin: str  # e.g. "CONV_2D"
    debug_handles: tuple[int, ...]  # sorted edge-node debug handles this op came from


@dataclass(frozen=True)
class LiteRTSubgraph:
    tflite: bytes  # a TFLite schema v3 model, one subgraph, file identifier "TFL3"
    inputs: tuple[PartitionIO, ...]  # in the order of program.graph_signature.user_inputs
    outputs: tuple[PartitionIO, ...]  # in the order of program.graph_signature.user_outputs
    ops: tuple[LiteRTOp, ...]  # in subgraph operator order


def lower_partition(program: ExportedProgram) -> LiteRTSubgraph:
    """Convert every node of ``program`` (one delegated partition) to LiteRT operators.

    Rank-4 partition inputs and outputs keep their edge dim order at the subgraph boundary: an NCHW one
    gets one TRANSPOSE (or RESHAPE) inside the subgraph, a channels_last one none.
    """
    ctx = LoweringContext(program)
    placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    inputs = tuple(_add_input(ctx, placeholders[name]) for name in program.graph_signature.user_inputs)
    for node in program.graph.nodes:
        if node.op != "call_function" or node in ctx.consumed or _is_qdq(node):
            continue
        if ctx.is_constant_expression(node):  # weight preparation: read by the op that uses it
            continue
        converter = CONVERTERS.get(node.target)
        if converter is None:
            raise UnsupportedForLiteRT(node, "no LiteRT converter for this op")
        converter(ctx, node)
    outputs = tuple(_add_output(ctx, node) for node in _user_output_nodes(program))
    fold_data_movement(ctx)
    sink_transposes_into_concatenations(ctx)
    join_slices_into_splits(ctx)
    ops = tuple(LiteRTOp(op.builtin, op.debug_handles) for op in ctx.graph.operators)
    return LiteRTSubgraph(write_model(ctx.graph), inputs, outputs, ops)


def _is_qdq(node: Node) -> bool:
    return qdq.is_quantize(node) or qdq.is_dequantize(node) or qdq.is_dequantize_per_channel(node)


def _add_input(ctx: LoweringContext, node: Node) -> PartitionIO:
    value = node.meta["val"]
    readers = [user for user in node.users if qdq.is_dequantize(user)]
    if str(value.dtype) != "torch.int8" or not readers:
        raise UnsupportedForLiteRT(node, "partition input must be int8 and read through dequantize nodes")
    quant = qdq.per_tensor_qparams(readers[0])
    if any(qdq.per_tensor_qparams(r) != quant for r in readers):
        raise UnsupportedForLiteRT(node, "partition input is dequantized with different qparams")
    shape = edge_shape(node)
    channels_last = _is_channels_last(node)
    io_shape = layout.stored_shape(shape) if channels_last else shape
    tensor = ctx.activation_tensor(node.name, io_shape, quant)
    ctx.graph.inputs.append(tensor)
    if layout.is_nhwc(len(shape)) and not channels_last:
        steps = layout.permute_steps(io_shape, layout.NHWC_FROM_NCHW)
        tensor = ctx.apply_steps(tensor, steps, sources=[node, *readers])
    ctx.values[node] = tensor
    return PartitionIO(node.name, shape, io_shape, channels_last, quant.scale, quant.zero_point)


def _add_output(ctx: LoweringContext, node: Node) -> PartitionIO:
    if node not in ctx.values:
        raise UnsupportedForLiteRT(node, "partition output is not an int8 tensor produced in the partition")
    tensor = ctx.values[node]
    shape = edge_shape(node)
    channels_last = _is_channels_last(node)
    io_shape = layout.stored_shape(shape) if channels_last else shape
    steps: list[layout.Step] = []
    if layout.is_nhwc(len(shape)) and not channels_last:
        steps = layout.permute_steps(tensor.shape, layout.NCHW_FROM_NHWC)
    tensor = ctx.apply_steps(tensor, steps, sources=[node])
    if tensor in ctx.graph.inputs or tensor in ctx.graph.outputs:
        # A subgraph output must be written by an operator of its own.
        tensor = ctx.apply_steps(tensor, [layout.Reshape(tensor.shape)], sources=[node])
    assert tensor.shape == io_shape
    ctx.graph.outputs.append(tensor)
    quant = tensor.quantization
    assert isinstance(quant, PerTensor)
    return PartitionIO(node.name, shape, io_shape, channels_last, quant.scale, quant.zero_point)


def _user_output_nodes(program: ExportedProgram) -> list[Node]:
    output_node = next(node for node in program.graph.nodes if node.op == "output")
    specs = program.graph_signature.output_specs
    pairs = zip(output_node.args[0], specs, strict=True)
    return [arg for arg, spec in pairs if spec.kind == OutputKind.USER_OUTPUT]


def _is_channels_last(node: Node) -> bool:
    value = node.meta["val"]
    if value.dim() != 4:
        return False
    order = tuple(value.dim_order())
    if order not in {tuple(range(4)), _CHANNELS_LAST}:
        raise UnsupportedForLiteRT(node, f"dim order {order} is neither contiguous nor channels_last")
    return order == _CHANNELS_LAST
