"""Cost model: the estimated latency of a lowered program, per op, per NPU partition and in total.

Latency is the sum, in execution order, of every kernel's fixed overhead plus its work (MAC work at the
device's effective rate for its kind and channel utilisation, other work per element or per byte, the NPU
taking the larger of compute and bus time), plus one per-inference overhead per program run and per NPU
partition call.

The NPU terms are in ``perf/npu.py``, the CPU terms in ``perf/cpu.py``; formulas, constants and the
published latencies that calibrated them are in docs/cost_model.md. It is an estimate: the report says so.
"""

from __future__ import annotations

import math

from executorch.exir import EdgeProgramManager, memory
from executorch.exir.lowered_backend_module import LoweredBackendModule
from torch.fx import Node

from imxrt import macs
from imxrt.npu import reference_payload
from imxrt.npu.backend import DELEGATE_ID
from imxrt.passes.qdq import is_compute, is_dequantize, is_quantize
from imxrt.passes.recurrent_loops import is_scan, scan_steps, walk
from imxrt.perf import cpu, npu
from imxrt.targets import Target

MODEL = "imxrt cost model 1: an estimate (docs/cost_model.md)"


def _us(cycles: int, clock_hz: int) -> float:
    return round(cycles * 1e6 / clock_hz, 3)


def _is_neutron_call(gm, node: Node) -> bool:
    if node.op != "call_function" or getattr(node.target, "__name__", "") != "executorch_call_delegate":
        return False
    return getattr(gm, node.args[0].target).backend_id == DELEGATE_ID


def _costs_cpu(node: Node) -> bool:
    """Whether a top-level node is a CPU kernel call: scratch allocations and tuple reads are not."""
    return (is_compute(node) and node.target is not memory.alloc) or is_quantize(node) or is_dequantize(node)


def kernel_owners(op_handles: list[tuple[int, ...]], nodes: list[Node]) -> list[tuple[Node | None, list[Node]]]:
    """Per LiteRT op: (the edge node that owns it, every edge node it came from). The owner is the node of
    its provenance that does the most MAC work (a conv, not the ReLU fused into it); None without provenance."""
    by_handle: dict[int, Node] = {}
    for node in nodes:
        by_handle.setdefault(node.meta.get("debug_handle"), node)
    result = []
    for handles in op_handles:
        sources = [by_handle[h] for h in handles if h in by_handle]
        owner = max(sources, key=lambda n: (macs.of(n), -sources.index(n))) if sources else None
        result.append((owner, sources))
    return result


def _attribute(kernels: list[tuple[npu.KernelCost, tuple[int, ...]]], nodes: list[Node]) -> dict[str, int]:
    """Cycles per edge node: each LiteRT op's cycles go to its owner (``kernel_owners``); ops without
    provenance stay with the partition."""
    cycles = {node.name: 0 for node in nodes}
    for (kernel, _), (owner, _) in zip(kernels, kernel_owners([h for _, h in kernels], nodes), strict=True):
        if owner is not None:
            cycles[owner.name] += kernel.cycles
    return cycles


def _partition(delegate: LoweredBackendModule, index: int, target: Target) -> tuple[dict, list[dict]]:
    """(the partition's latency entry, its op entries) for one Neutron delegate."""
    config = target.npu
    nodes = [n for n in delegate.original_module.graph.nodes if is_compute(n)]
    blob = bytes(delegate.processed_bytes)
    if reference_payload.is_reference(blob):
        reference = reference_payload.unpack(blob)
        handles = [tuple(op["debug_handles"]) for op in reference.metadata["ops"]]
        costs = [npu.kernel_cost(op, config) for op in npu.read_ops(reference.tflite)]
        kernels = list(zip(costs, handles, strict=True))
        basis = "LiteRT ops"
    else:  # device microcode holds no LiteRT graph: each MAC-bearing edge node as one kernel at full array use
        kernels = [(npu.KernelCost(n.name, macs.of(n), 1.0, math.ceil(macs.of(n) / config.macs_per_cycle), 0,
                                   npu.KERNEL_OVERHEAD,
                                   npu.KERNEL_OVERHEAD + math.ceil(macs.of(n) / config.macs_per_cycle)),
                    (n.meta.get("debug_handle"),)) for n in nodes if macs.of(n)]
        basis = "edge MACs (microcode payload)"
    per_node = _attribute(kernels, nodes)
    total = npu.partition_cycles([k for k, _ in kernels])
    entry = {
        "index": index,
        "basis": basis,
        "cycles": total,
        "us": _us(total, config.clock_hz),
        "overhead_cycles": npu.INFERENCE_OVERHEAD,
        "unattributed_cycles": total - npu.INFERENCE_OVERHEAD - sum(per_node.values()),
        "kernels": [{"litert": k.litert, "macs": k.macs, "utilisation": round(k.utilisation, 4),
                     "compute_cycles": k.compute_cycles, "bus_cycles": k.bus_cycles, "cycles": k.cycles}
                    for k, _ in kernels],
    }
    ops = [{"name": n.name, "partition": index, "device": "npu", "cycles": per_node[n.name],
            "us": _us(per_node[n.name], config.clock_hz)} for n in nodes]
    return entry, ops


def _repeated(entry: dict, calls: int, clock_hz: int) -> dict:
    """An entry of a partition (or of one of its ops) that runs ``calls`` times per inference: its cycles are
    the total, ``cycles_per_call`` one call's."""
    total = entry["cycles"] * calls
    return entry | {"calls": calls, "cycles_per_call": entry["cycles"], "cycles": total, "us": _us(total, clock_hz)}


def estimate_latency(edge: EdgeProgramManager, target: Target) -> dict:
    """The latency estimate of a lowered program on ``target``: ``ops`` (execution order, each with its
    device, cycles at that device's clock and microseconds), ``partitions``, ``cpu`` and ``total``."""
    gm = edge.exported_program().graph_module
    clock = target.cpu.clock_hz
    ops: list[dict] = []
    partitions: list[dict] = []
    cpu_cycles = cpu.RATES[target.cpu.isa].inference_overhead
    for node, owner, calls in walk(gm):
        if node.op != "call_function":
            continue
        if _is_neutron_call(owner, node):
            entry, inner = _partition(getattr(owner, node.args[0].target), len(partitions), target)
            if calls > 1:  # a partition in a recurrent layer's loop runs once per step
                entry = _repeated(entry, calls, target.npu.clock_hz)
                inner = [_repeated(op, calls, target.npu.clock_hz) for op in inner]
            partitions.append(entry)
            ops.extend(inner)
            continue
        if is_scan(node):  # its body's nodes follow, each counted for every step
            cost = cpu.loop_step_cost(node, target.cpu.isa)
            calls *= scan_steps(node)
        elif _costs_cpu(node) and getattr(node.target, "__name__", "") != "executorch_call_delegate":
            cost = cpu.kernel_cost(node, target.cpu.isa)
        else:
            continue
        cycles = cost.cycles * calls
        cpu_cycles += cycles
        ops.append({"name": node.name, "partition": None, "device": "cpu", "cycles": cycles,
                    "us": _us(cycles, clock), "work": cost.work.value} | ({"calls": calls} if calls > 1 else {}))
    cpu_us = cpu_cycles * 1e6 / clock
    npu_us = sum(p["cycles"] * 1e6 / target.npu.clock_hz for p in partitions) if partitions else 0.0
    total_us = cpu_us + npu_us
    return {
        "estimate": True,
        "model": MODEL,
        "clock_hz": {"cpu": clock, **({"npu": target.npu.clock_hz} if target.npu else {})},
        "ops": ops,
        "partitions": partitions,
        "cpu": {"cycles": cpu_cycles, "us": round(cpu_us, 3),
                "overhead_cycles": cpu.RATES[target.cpu.isa].inference_overhead},
        # cycles of the CPU clock: the Cortex-M waits for each NPU partition call
        "total": {"cycles": round(total_us * clock / 1e6), "us": round(total_us, 3)},
    }


def latency_line(latency: dict) -> str:
    """The one summary line the CLI prints."""
    clock = latency["clock_hz"]["cpu"] / 1e6
    parts = [f"CPU {latency['cpu']['us']:,.0f} us"]
    if latency["partitions"]:
        npu_us = sum(p["us"] for p in latency["partitions"])
        parts.insert(0, f"NPU {npu_us:,.0f} us in {len(latency['partitions'])} partition(s)")
    return (f"estimated latency {latency['total']['us']:,.0f} us at {clock:g} MHz ({' + '.join(parts)}); "
            "an estimate from the cost model, not a measurement")
