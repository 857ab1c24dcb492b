"""The placement report: what runs where and why, per op and per NPU partition (``report.json``).

Each compute node says where it runs (``execution``): ``npu``; ``cpu int8`` with the kernel (a cortex_m
CMSIS-NN op, or a portable data-movement op on int8 values); or ``cpu float`` with why it has no int8 kernel.
A node the CPU lowering replaced is listed under the edge op it came from (``op``), with the op that now runs
it (``kernel``).
"""

from __future__ import annotations

import torch
from ai_edge_litert import schema_py_generated as tfl
from executorch.exir import EdgeProgramManager, memory
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.lowered_backend_module import LoweredBackendModule
from torch.fx import Node

from imxrt import macs
from imxrt.npu import reference_payload
from imxrt.npu.backend import DELEGATE_ID, delegate_info, payload_description
from imxrt.npu.compilers.reference import litert_ops
from imxrt.passes.int8_io import io_metadata
from imxrt.passes.qdq import is_compute, is_dequantize, is_quantize
from imxrt.passes.recurrent_loops import is_scan, walk
from imxrt.perf import estimate_latency, latency_line
from imxrt.perf.estimate import kernel_owners
from imxrt.placement import PlacementLog, op_name
from imxrt.report.names import label, module_of
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
    user_inputs = set(edge.exported_program().graph_signature.user_inputs)
    for node in gm.graph.nodes:  # a constant (a loop's zero initial state) is no model input
        if node.op == "placeholder" and node.name not in user_inputs:
            node.meta[_CONSTANT] = True
    ops: list[dict] = []
    partitions: list[dict] = []
    tflites: list[bytes] = []
    for node, owner, calls in walk(gm):  # a loop's step body in place of its scan
        if is_scan(node) or node.op != "call_function":
            continue
        if _is_delegate_call(node):
            delegate: LoweredBackendModule = getattr(owner, node.args[0].target)
            if delegate.backend_id != DELEGATE_ID:
                continue
            index = len(partitions)
            blob = bytes(delegate.processed_bytes)
            info = delegate_info(delegate)  # the LiteRT subgraph survives only here for a microcode payload
            tflite = info.tflite if info else \
                reference_payload.unpack(blob).tflite if reference_payload.is_reference(blob) else b""
            tflites.append(tflite)
            nodes = [n for n in delegate.original_module.graph.nodes if is_compute(n)]
            fused = _fused_into(info.op_debug_handles if info else (), nodes)
            for inner in nodes:
                decision = log.decisions.get(inner.name)
                entry = _op_entry(inner, "npu", index, decision.reason if decision else "delegated", macs.of(inner))
                ops.append(entry | {"execution": "npu", "kernel": DELEGATE_ID}
                           | ({"fused_into": fused[inner.name]} if inner.name in fused else {}))
            partitions.append({
                "index": index,
                "tflite": f"npu/partition_{index}.tflite",
                "ops": litert_ops(tflite) if tflite else [],
                "input_transposes": _input_transposes(node, tflite) if tflite else [],
                "nodes": [n.name for n in nodes],
                "macs": sum(macs.of(n) for n in nodes),
                **payload_description(blob),
                "payload_bytes": len(blob),
                "calls": calls,  # per inference: a partition in a recurrent layer's loop runs once per step
            })
        elif _is_conversion(node):
            ops.append(_op_entry(node, "cpu", None, _conversion_reason(node), 0) | _cpu_execution(node)
                       | _model_io(node))
        elif is_compute(node) and node.target is not memory.alloc and node.target is not _TO_DIM_ORDER_COPY:
            edge_name = node.meta.get("edge_nodes", (node.name,))[0]
            decision = log.decisions.get(edge_name)
            reason = decision.reason if decision else "created after partitioning"
            ops.append(_op_entry(node, "cpu", None, reason, _macs(node)) | _cpu_execution(node))

    latency = estimate_latency(edge, target)
    cycles = {(op["partition"], op["name"]): op["cycles"] for op in latency["ops"]}
    ops = [op | {"estimated_cycles": cycles.get((op["partition"], op["name"]), 0)} for op in ops]
    macs_total = sum(op["macs"] for op in ops)
    macs_npu = sum(op["macs"] for op in ops if op["placement"] == "npu")
    transposes = sum(p["ops"].count("TRANSPOSE") for p in partitions)
    report = {
        "version": REPORT_VERSION,
        "target": target.name,
        "neutron_compiler": neutron_compiler,
        "ops": ops,
        "partitions": partitions,
        "io": io_metadata(edge.exported_program()),
        "summary": {
            "macs_total": macs_total,
            "macs_npu": macs_npu,
            # a model without MAC work is "all on the NPU" only if it has an NPU partition at all
            "npu_mac_fraction": (macs_npu / macs_total) if macs_total else float(bool(partitions)),
            "partitions": len(partitions),
            "transposes": transposes,
            "ops_npu": sum(op["placement"] == "npu" for op in ops),
            "ops_cpu": sum(op["placement"] == "cpu" for op in ops),
            "ops_cpu_int8": sum(op["execution"] == "cpu int8" for op in ops),
            "ops_cpu_float": sum(op["execution"] == "cpu float" for op in ops),
            "layout_copies": sum(n.target is _TO_DIM_ORDER_COPY for n in gm.graph.nodes),
        },
    }
    report["latency"] = latency
    return report, tflites


_TO_DIM_ORDER_COPY = exir_ops.edge.dim_order_ops._to_dim_order_copy.default


_CONSTANT = "imxrt_constant_placeholder"  # node meta: a placeholder that holds a constant, not a model input


def _model_input(value: object) -> str | None:
    """The model input a delegate argument is (int8 I/O) or the quantize of (float I/O), else None."""
    if isinstance(value, Node) and (is_quantize(value) or _is_quantize_kernel(value)) and value.args:
        value = value.args[0]
    return value.name if isinstance(value, Node) and value.op == "placeholder" and not value.meta.get(_CONSTANT) \
        else None


def _input_transposes(call: Node, tflite: bytes) -> list[dict]:
    """The partition's TRANSPOSEs of a model input (an NCHW image the NPU turns NHWC first): per one, the
    input's name and the LiteRT op's index (the latency estimate's kernel index)."""
    model = tfl.ModelT.InitFromPackedBuf(tflite, 0)
    graph = model.subgraphs[0]
    inputs = {int(tensor): position for position, tensor in enumerate(graph.inputs)}
    found = []
    for index, op in enumerate(graph.operators):
        code = model.operatorCodes[op.opcodeIndex]
        if max(code.builtinCode, code.deprecatedBuiltinCode) != tfl.BuiltinOperator.TRANSPOSE:
            continue
        position = inputs.get(int(op.inputs[0]))
        name = _model_input(call.args[1 + position]) if position is not None else None
        if name is not None:
            found.append({"input": name, "kernel": index})
    return found


def _fused_into(op_handles: tuple[tuple[int, ...], ...], nodes: list[Node]) -> dict[str, str]:
    """Edge node -> the node whose NPU kernel runs it, for the nodes that have no kernel of their own: every
    LiteRT op they are part of belongs to another node (a ReLU6 in its conv's CONV_2D)."""
    owners: dict[str, set[str]] = {}
    for owner, sources in kernel_owners(list(op_handles), nodes):
        for source in sources:
            owners.setdefault(source.name, set()).add(owner.name)
    return {name: next(iter(found)) for name, found in owners.items() if len(found) == 1 and name not in found}


def _is_conversion(node: Node) -> bool:
    """A quantize / dequantize: the edge graph's, or the cortex_m one the CPU lowering made of it."""
    if is_quantize(node) or is_dequantize(node):
        return True
    return node.op == "call_function" and node.meta.get("edge_op", "").startswith("quantized_decomposed.") and \
        _namespace(node) == "cortex_m"


def _namespace(node: Node) -> str:
    return getattr(node.target, "namespace", None) or getattr(getattr(node.target, "_op", None), "namespace", "")


def _macs(node: Node) -> int:
    """MACs of the edge op a node stands for (a cortex_m node is counted like the op it replaced)."""
    return node.meta["edge_macs"] if "edge_macs" in node.meta else macs.of(node)


def _cpu_execution(node: Node) -> dict:
    """How the CPU runs a node: int8 (cortex_m, or a portable kernel on int8 values) or float, and why."""
    kernel = op_name(node)
    value = node.meta.get("val")
    value = value[0] if isinstance(value, (tuple, list)) and value else value
    dtype = getattr(value, "dtype", None)
    if _namespace(node) == "cortex_m":
        return {"execution": "cpu int8", "kernel": kernel}
    # a comparison of int8 values writes a mask: an int8 op whose output is not int8 (nor float)
    mask_of_int8 = dtype is not None and not dtype.is_floating_point and any(
        getattr(a.meta.get("val"), "dtype", None) == torch.int8 for a in node.all_input_nodes)
    if (dtype == torch.int8 or mask_of_int8) and not _is_conversion(node):
        return {"execution": "cpu int8", "kernel": f"{kernel} (portable kernel on int8 values)"}
    if is_quantize(node) or is_dequantize(node):
        return {"execution": "cpu int8", "kernel": kernel}
    return {"execution": "cpu float", "kernel": kernel,
            "cpu_reason": node.meta.get("cpu_reason", "the op has no int8 kernel on the Cortex-M")}


def _model_io(node: Node) -> dict:
    """``{"model_io": "input"}`` for the quantize of a float model input, ``"output"`` for the dequantize of a
    model output (what ``--io int8`` removes), else ``{}``."""
    if node.op == "call_function" and _model_input(node) is not None:
        return {"model_io": "input"}
    if any(user.op == "output" for user in node.users) and not (is_quantize(node) or _is_quantize_kernel(node)):
        return {"model_io": "output"}
    return {}


def _is_quantize_kernel(node: Node) -> bool:
    return node.meta.get("edge_op", "").startswith("quantized_decomposed.quantize_")


def _conversion_reason(node: Node) -> str:
    """Why a quantize / dequantize runs on the CPU: it converts at the float edge of the int8 program."""
    if is_quantize(node) or _is_quantize_kernel(node):
        source = node.args[0]
        what = "the float model input" if _model_input(node) is not None else \
            "a constant (a recurrent layer's initial state, once per inference)" if source.op == "placeholder" else \
            f"the float output of {source.name}"
        return f"converts {what} to int8"
    if any(user.op == "output" for user in node.users):
        return "converts an int8 model output to float"
    return "converts an int8 tensor to float for a CPU op"


def _op_entry(node: Node, placement: str, partition: int | None, reason: str, node_macs: int) -> dict:
    return {
        "name": node.name,
        **module_of(node),  # the user's name for it: module path and class
        "debug_handle": node.meta.get("debug_handle"),  # what the delegate's profiling map refers to
        # the edge op a CPU-lowered node came from; a quantize / dequantize is named by the kernel it runs
        "op": op_name(node) if _is_conversion(node) else node.meta.get("edge_op", op_name(node)),
        "placement": placement,
        "partition": partition,
        "reason": reason,
        "macs": node_macs,
    }


def _payloads(report: dict) -> str:
    """What the delegates hold, said plainly: device microcode, or reference payloads the board cannot run."""
    kinds = sorted({p["payload"] for p in report["partitions"]})
    words = {"microcode": "device microcode", "reference": "reference payloads for the host, no device code"}
    return f"; delegates hold {' and '.join(words.get(kind, kind) for kind in kinds)}" if kinds else ""


def summary_lines(report: dict) -> list[str]:
    """The placement summary the CLI prints."""
    s = report["summary"]
    lines = [
        f"target {report['target']} (Neutron compiler: {report['neutron_compiler']}{_payloads(report)})",
        f"NPU: {s['ops_npu']} ops in {s['partitions']} partition(s), "
        f"{s['macs_npu']:,} of {s['macs_total']:,} MACs ({100 * s['npu_mac_fraction']:.1f}%), "
        f"{s['transposes']} TRANSPOSE",
    ]
    if "latency" in report:
        lines.append(latency_line(report["latency"]))
    cpu = [op for op in report["ops"] if op["placement"] == "cpu"]
    if cpu:
        lines.append(f"CPU: {len(cpu)} ops ({s['ops_cpu_int8']} int8, {s['ops_cpu_float']} float), "
                     f"{s['layout_copies']} layout copies")
        for op in cpu:
            how = f"{op['execution']}: {op['kernel']}"
            if op["execution"] == "cpu float" and op["cpu_reason"] not in op["reason"]:
                how += f" ({op['cpu_reason']})"
            lines.append(f"  {label(op)} {op['op']}: {how}; {op['reason']}")
    return lines
