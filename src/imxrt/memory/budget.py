"""SRAM budget checks: before planning, a tensor larger than the target's SRAM can never be placed
(``check_tensors_fit``, run on the lowered edge program so the error names the node that made it); after
planning, the program's whole SRAM need must fit the budget (``check_sram_budget``, on the memory report).
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram

from imxrt.errors import BadModel, ImxrtError
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


class OverBudget(ImxrtError):
    """The planned program needs more SRAM than the budget (the target's, or ``--sram-budget``)."""

    def __init__(self, total: int, budget: int, source: str, peak: list[dict]):
        largest = ", ".join(f"{t['name']} ({t['bytes']:,} B)" for t in peak) or "none"
        where = "--sram-budget" if source == "--sram-budget" else "the target's SRAM"
        super().__init__(f"model: needs {total:,} bytes of SRAM, more than the {budget:,} bytes of {where}; "
                         f"largest tensors live at the peak: {largest}; make those tensors smaller (input "
                         "size, channels) or raise --sram-budget")
        self.total, self.budget = total, budget


def check_sram_budget(memory: dict) -> None:
    """Raise ``OverBudget`` if the memory report's SRAM total exceeds its budget (no budget: no check)."""
    sram = memory["sram"]
    if sram["budget_bytes"] is None or sram["total_bytes"] <= sram["budget_bytes"]:
        return
    peak = max(memory["arenas"], key=lambda a: a["arena_bytes"])["peak_tensors"] if memory["arenas"] else []
    raise OverBudget(sram["total_bytes"], sram["budget_bytes"], sram["budget_from"], peak[:3])
