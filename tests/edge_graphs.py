"""Build the aten and int8 edge graphs of a small model the way the pipeline does, without lowering them."""

from __future__ import annotations

import torch
from executorch.exir import EdgeCompileConfig, to_edge

from imxrt.npu.partitioner import ops_to_keep_whole
from imxrt.passes import EDGE_PASSES, run_aten_passes
from imxrt.pipeline import CompileOptions, export, quantize
from imxrt.quantization.rules import CPU_ONLY, NPU_AND_CPU, qparam_flow


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


def aten_passes(gm: torch.fx.GraphModule, qat: bool = False, npu: bool = True, rolled: bool = False
                ) -> torch.fx.GraphModule:
    """The pipeline's aten passes for the i.MX RT700 (``npu``) or its CPU alone, with that target's qparams;
    ``rolled``: recurrent layers as loops, as ``imxrt.compile`` runs them."""
    return run_aten_passes(gm, qat=qat, npu=npu, qparam_flow=qparam_flow(NPU_AND_CPU if npu else CPU_ONLY),
                           rolled=rolled)
