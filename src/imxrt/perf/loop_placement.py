"""Where a recurrent layer's step runs: the placement the cost model expects to take fewer cycles per step.

A step runs once per time step, so its fixed costs repeat: on the NPU a partition call and a kernel per op
(``npu.INFERENCE_OVERHEAD``, ``npu.KERNEL_OVERHEAD``), on the Cortex-M a kernel call per op
(``Rates.kernel_overhead``) but MAC work at the CPU's rate. Three placements are weighed: the whole step on
the NPU (a wide step: 256 hidden units), the whole step on the CPU, or its matrix products on the NPU (one
partition call) and its elementwise ops on the CPU (a keyword spotter's 64 hidden units: the NPU's fixed cost
per kernel is larger than the CPU's, its MAC rate far higher). The estimate reads the edge graph before
partitioning, one kernel per compute op, as both lowerings mostly emit.
"""

from __future__ import annotations

import math

from torch.fx import Node

from imxrt import macs
from imxrt.cpu.isa import Isa
from imxrt.op_kinds import is_view_copy
from imxrt.perf import cpu, npu
from imxrt.targets import NeutronConfig

# How a step's placement decision starts (the report and its advice know a chosen placement by it).
CHOSEN = "a recurrent layer's step runs once per time step"

# Edge ops by the work their kernel does; an op not listed is elementwise work.
_LOOKUPS = ("sigmoid", "tanh", "relu", "hardtanh", "clamp")
_COPIES = ("slice_copy", "select_copy", "cat", "split", "permute_copy", "expand_copy")


def _name(node: Node) -> str:
    return str(getattr(node.target, "__name__", node.target))


def _numel(node: Node) -> int:
    value = node.meta.get("val")
    return math.prod(value.shape) if hasattr(value, "shape") else 0


def _node_cycles(node: Node, config: NeutronConfig, isa: Isa, npu_to_cpu: float) -> tuple[int, int]:
    """(NPU, CPU) cycles of one op of a step, both in CPU clock cycles; (0, 0) for a view."""
    if is_view_copy(node):
        return 0, 0
    name = _name(node)
    rates = cpu.RATES[isa]
    work = macs.of(node)
    on_npu = round((npu.KERNEL_OVERHEAD + math.ceil(work / config.macs_per_cycle)) * npu_to_cpu)
    if work:
        cycles = work / rates.matmul_macs_per_cycle
    else:
        kind = cpu.Work.LOOKUP if any(k in name for k in _LOOKUPS) else \
            cpu.Work.COPY if any(k in name for k in _COPIES) else cpu.Work.ELEMENTWISE
        cycles = _numel(node) * rates.cycles_per_element[kind]
    return on_npu, rates.kernel_overhead + math.ceil(cycles)


def step_placement(nodes: list[Node], config: NeutronConfig, isa: Isa, npu_to_cpu: float
                   ) -> tuple[set[Node], str]:
    """The compute ``nodes`` of one step to keep on the CPU, and why: the cheapest of the three placements
    (module docstring). ``npu_to_cpu``: CPU clock cycles per NPU clock cycle."""
    costs = {node: _node_cycles(node, config, isa, npu_to_cpu) for node in nodes}
    call = round(npu.INFERENCE_OVERHEAD * npu_to_cpu)
    matrix = {node for node in nodes if macs.of(node)}
    options = {
        "the whole step on the NPU": (call + sum(n for n, _ in costs.values()), set()),
        "the whole step on the CPU": (sum(c for _, c in costs.values()), set(nodes)),
    }
    if matrix and len(matrix) < len(nodes):
        options["its matrix products on the NPU and the rest on the CPU"] = (
            call + sum(costs[n][0] for n in matrix) + sum(costs[n][1] for n in nodes if n not in matrix),
            set(nodes) - matrix)
    best = min(options, key=lambda name: options[name][0])
    weighed = ", ".join(f"{name}: {cycles:,}" for name, (cycles, _) in options.items())
    reason = (f"{CHOSEN}; {best} is the cheapest placement (estimated "
              f"CPU cycles per step, {weighed})")
    return options[best][1], reason
