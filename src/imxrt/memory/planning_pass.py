"""Memory stage, the planning pass: our packing plugged into ExecuTorch's ``MemoryPlanningPass``.

``ImxrtMemoryPlanner`` is the ``memory_planning_algo`` of ExecuTorch's pass (``to_executorch`` calls it
with the TensorSpecs to place, their lifetimes already set). Per memory id it runs ExecuTorch's own
``greedy`` (its default) as one candidate beside ours (``packing.plan``) and keeps the smallest; on a tie
ExecuTorch's placement stays, so a program no candidate improves is the one ExecuTorch would have
written. The winner is verified against lifetimes recomputed from the graph, written onto the specs, and
recorded as a ``MemoryPlan`` value for the memory report.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch
from executorch.exir.memory_planning import greedy
from executorch.exir.passes import MemoryPlanningPass
from executorch.exir.tensor import ALIGNMENT

from imxrt.memory import packing
from imxrt.memory.lifetimes import Buffer, Peak, graph_lifetimes, peak, spec_labels

EXECUTORCH_GREEDY = "executorch greedy"


@dataclass(frozen=True)
class MemoryPlan:
    """The plan of one memory id (one arena)."""

    memory_id: int
    buffers: tuple[Buffer, ...]
    chosen: packing.Placement
    tried: tuple[tuple[str, int], ...]  # (label, arena bytes) of every candidate, in the order tried
    bound: Peak  # the lower bound for this operator order (its bytes include ``start``)
    start: int  # bytes reserved below the plan (control-flow submodules' arenas)
    executorch_bytes: int  # ExecuTorch's default plan for the same buffers

    @property
    def arena_bytes(self) -> int:
        return self.chosen.size


class ImxrtMemoryPlanner:
    """``memory_planning_algo`` for ``MemoryPlanningPass``; ``plans`` collects what it chose."""

    def __init__(self) -> None:
        self.plans: list[MemoryPlan] = []

    def __call__(self, alignment: int, specs, graph_module: torch.fx.GraphModule, graph_signature,
                 extra_padding: int = 0) -> list[int]:
        specs = list(specs)
        labels = spec_labels(graph_module)
        for spec in specs:
            spec.realign(alignment)
        executorch = greedy(alignment, specs, graph_module, graph_signature, extra_padding)
        reserved = getattr(graph_module, "input_mem_buffer_sizes", None) or []
        by_memory: dict[int, list[Buffer]] = defaultdict(list)
        for index, spec in enumerate(specs):
            memory_id = spec.mem_id if spec.mem_id is not None else 1
            name, role = labels.get(id(spec), (f"tensor_{index}", "activation"))
            base = spec.storage_base
            by_memory[memory_id].append(Buffer(
                index=index, name=name, nbytes=spec.allocated_memory, first=spec.lifetime[0],
                last=spec.lifetime[1], memory_id=memory_id,
                base=next(i for i, s in enumerate(specs) if s is base) if base is not None else None,
                base_offset=spec.storage_base_offset if base is not None else 0,
                role=role, dtype=str(spec.dtype).removeprefix("torch.")))
        bufsizes = [0] * (max(by_memory, default=1) + 1)
        independent = graph_lifetimes(graph_module)
        for memory_id in sorted(by_memory):
            buffers = by_memory[memory_id]
            start = reserved[memory_id] if memory_id < len(reserved) else 0
            theirs = packing.Placement(
                EXECUTORCH_GREEDY, {b.index: executorch.spec_dict[specs[b.index]].mem_offset for b in buffers},
                executorch.bufsizes[memory_id] - extra_padding)
            chosen, tried = packing.plan(buffers, start, extra=[theirs])
            packing.verify(_relived(buffers, specs, independent), chosen.offsets)
            bound = peak(buffers)
            self.plans.append(MemoryPlan(
                memory_id=memory_id, buffers=tuple(buffers), chosen=chosen,
                tried=tuple((p.label, p.size) for p in tried),
                bound=Peak(bound.nbytes + start, bound.step, bound.live), start=start,
                executorch_bytes=theirs.size))
            if chosen.label == EXECUTORCH_GREEDY:
                for b in buffers:
                    result = executorch.spec_dict[specs[b.index]]
                    specs[b.index].mem_id, specs[b.index].mem_offset = result.mem_id, result.mem_offset
                    specs[b.index].mem_obj_id = result.mem_obj_id
            else:
                objects = _storage_objects(buffers, chosen.offsets)
                for b in buffers:
                    spec = specs[b.index]
                    spec.mem_id, spec.mem_offset, spec.mem_obj_id = memory_id, chosen.offsets[b.index], objects[b.index]
            bufsizes[memory_id] = chosen.size + extra_padding
        return bufsizes


def _relived(buffers: list[Buffer], specs: list, lifetimes: dict[int, tuple[int, int]]) -> list[Buffer]:
    """The buffers with the lifetimes the graph gives them (not the ones the planner read)."""
    result = []
    for b in buffers:
        first, last = lifetimes.get(id(specs[b.index]), (b.first, b.last))
        result.append(Buffer(b.index, b.name, b.nbytes, first, last, b.memory_id, b.base, b.base_offset,
                             b.role, b.dtype))
    return result


def _storage_objects(buffers: list[Buffer], offsets: dict[int, int]) -> dict[int, int]:
    """``mem_obj_id`` per buffer: buffers whose byte ranges overlap (at any time) share one id, as
    ExecuTorch's verifier expects of tensors that reuse storage."""
    spans = sorted((offsets[b.index], offsets[b.index] + max(b.nbytes, 1), b.index) for b in buffers)
    objects: dict[int, int] = {}
    current, end = -1, -1
    for low, high, index in spans:
        if low >= end:
            current += 1
        objects[index] = current
        end = max(end, high)
    return objects


def memory_planning_pass(memory_planner: ImxrtMemoryPlanner) -> MemoryPlanningPass:
    """ExecuTorch's pass with our placement; inputs and outputs planned, ExecuTorch's tensor alignment."""
    return MemoryPlanningPass(memory_planning_algo=memory_planner, alloc_graph_input=True,
                              alloc_graph_output=True, alignment=ALIGNMENT)
