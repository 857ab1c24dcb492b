"""SRAM budget checks that need no plan: a tensor larger than the target's SRAM can never be placed.

Run on the lowered edge program, before memory planning, so the error names the node that made the
tensor rather than a planner failure.
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram

from imxrt.errors import BadModel
from imxrt.targets import Target


def _nbytes(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return max((_nbytes(v) for v in value), default=0)
    return 0


def check_tensors_fit(program: ExportedProgram, target: Target) -> None:
    """Every activation tensor (a model input or an op's output; constants live in flash) must fit in the
    target's SRAM on its own. A target without a known SRAM size checks nothing."""
    if target.sram_bytes is None:
        return
    constants = set(program.graph_signature.inputs_to_parameters) | set(program.graph_signature.inputs_to_buffers) \
        | set(program.graph_signature.inputs_to_lifted_tensor_constants)
    for node in program.graph.nodes:
        if node.op not in ("placeholder", "call_function") or node.name in constants:
            continue
        size = _nbytes(node.meta.get("val"))
        if size > target.sram_bytes:
            raise BadModel(f"its output needs {size:,} bytes, more than the {target.sram_bytes:,} bytes of "
                           f"SRAM on {target.name}; make the tensor smaller (input size, channels) or split "
                           "the model", node=node.name)
