"""Build the int8 edge graph of a small model the way the pipeline does, without lowering it."""

from __future__ import annotations

import torch
from executorch.exir import EdgeCompileConfig, to_edge

from imxrt.npu.partitioner import ops_to_keep_whole
from imxrt.passes import EDGE_PASSES
from imxrt.pipeline import CompileOptions, export, quantize


def int8_edge_program(model: torch.nn.Module, inputs: tuple, calibration=None, target=None):
    """export -> passes -> pt2e int8 (``target``'s rules) -> to_edge, keeping whole the ops the pipeline
    keeps."""
    quantized = quantize(export(model, inputs), inputs, calibration, CompileOptions(show_progress=False), target)
    keep = ops_to_keep_whole(quantized)
    edge = to_edge(quantized, compile_config=EdgeCompileConfig(_check_ir_validity=False, preserve_ops=keep,
                                                               _core_aten_ops_exception_list=keep))
    return edge.transform([p() for p in EDGE_PASSES]).exported_program()


def nodes_named(program, op_name: str):
    return [n for n in program.graph.nodes if n.op == "call_function"
            and getattr(n.target, "__name__", "") == op_name]
