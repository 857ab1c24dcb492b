"""The placement report: what runs where and why, per op and per NPU partition (``report.json``)."""

from __future__ import annotations

from executorch.exir import EdgeProgramManager
from executorch.exir.lowered_backend_module import LoweredBackendModule
from torch.fx import Node

from imxrt import macs
from imxrt.npu import payload
from imxrt.npu.backend import DELEGATE_ID
from imxrt.npu.compilers.reference import litert_ops
from imxrt.npu.partitioner import PlacementLog
from imxrt.npu.support import op_name
from imxrt.passes.qdq import is_compute, is_dequantize, is_quantize
from imxrt.targets import Target

REPORT_VERSION = 1


def _is_delegate_call(node: Node) -> bool:
    return node.op == "call_function" and getattr(node.target, "__name__", "") == "executorch_call_delegate"


def build_report(
    edge: EdgeProgramManager, log: PlacementLog, target: Target, neutron_compiler: str
) -> tuple[dict, list[bytes]]:
    """``report.json`` as a dict, and the LiteRT bytes of each partition (in partition order).

    Ops are listed in execution order; a delegate call stands for its partition's ops."""
    gm = edge.exported_program().graph_module
    ops: list[dict] = []
    partitions: list[dict] = []
    tflites: list[bytes] = []
    for node in gm.graph.nodes:
        if _is_delegate_call(node):
            delegate: LoweredBackendModule = getattr(gm, node.args[0].target)
            if delegate.backend_id != DELEGATE_ID:
                continue
            index = len(partitions)
            blob = bytes(delegate.processed_bytes)
            tflite = payload.unpack(blob).tflite if payload.is_reference(blob) else b""
            tflites.append(tflite)
            nodes = [n for n in delegate.original_module.graph.nodes if is_compute(n)]
            for inner in nodes:
                decision = log.decisions.get(inner.name)
                ops.append(_op_entry(inner, "npu", index, decision.reason if decision else "delegated", macs.of(inner)))
            partitions.append({
                "index": index,
                "tflite": f"npu/partition_{index}.tflite",
                "ops": litert_ops(tflite) if tflite else [],
                "nodes": [n.name for n in nodes],
                "macs": sum(macs.of(n) for n in nodes),
                "payload": "reference" if payload.is_reference(blob) else "microcode",
                "payload_bytes": len(blob),
            })
        elif is_quantize(node) or is_dequantize(node):
            ops.append(_op_entry(node, "cpu", None, _conversion_reason(node), 0))
        elif is_compute(node):
            decision = log.decisions.get(node.name)
            reason = decision.reason if decision else "created after partitioning"
            ops.append(_op_entry(node, "cpu", None, reason, macs.of(node)))

    macs_total = sum(op["macs"] for op in ops)
    macs_npu = sum(op["macs"] for op in ops if op["placement"] == "npu")
    transposes = sum(p["ops"].count("TRANSPOSE") for p in partitions)
    report = {
        "version": REPORT_VERSION,
        "target": target.name,
        "neutron_compiler": neutron_compiler,
        "ops": ops,
        "partitions": partitions,
        "summary": {
            "macs_total": macs_total,
            "macs_npu": macs_npu,
            # a model without MAC work is "all on the NPU" only if it has an NPU partition at all
            "npu_mac_fraction": (macs_npu / macs_total) if macs_total else float(bool(partitions)),
            "partitions": len(partitions),
            "transposes": transposes,
            "ops_npu": sum(op["placement"] == "npu" for op in ops),
            "ops_cpu": sum(op["placement"] == "cpu" for op in ops),
        },
    }
    return report, tflites


def _conversion_reason(node: Node) -> str:
    """Why a quantize / dequantize runs on the CPU: it converts at the float edge of the int8 program."""
    if is_quantize(node):
        source = node.args[0]
        what = "the float model input" if source.op == "placeholder" else f"the float output of {source.name}"
        return f"converts {what} to int8"
    if any(user.op == "output" for user in node.users):
        return "converts an int8 model output to float"
    return "converts an int8 tensor to float for a CPU op"


def _op_entry(node: Node, placement: str, partition: int | None, reason: str, node_macs: int) -> dict:
    return {
        "name": node.name,
        "debug_handle": node.meta.get("debug_handle"),  # what the delegate's profiling map refers to
        "op": op_name(node),
        "placement": placement,
        "partition": partition,
        "reason": reason,
        "macs": node_macs,
    }


def summary_lines(report: dict) -> list[str]:
    """The placement summary the CLI prints."""
    s = report["summary"]
    lines = [
        f"target {report['target']} (Neutron compiler: {report['neutron_compiler']})",
        f"NPU: {s['ops_npu']} ops in {s['partitions']} partition(s), "
        f"{s['macs_npu']:,} of {s['macs_total']:,} MACs ({100 * s['npu_mac_fraction']:.1f}%), "
        f"{s['transposes']} TRANSPOSE",
    ]
    cpu = [op for op in report["ops"] if op["placement"] == "cpu"]
    if cpu:
        lines.append(f"CPU: {len(cpu)} ops")
        for op in cpu:
            lines.append(f"  {op['name']} ({op['op']}): {op['reason']}")
    return lines
