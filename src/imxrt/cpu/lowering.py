"""CPU lowering stage: every int8 cluster the NPU left becomes a cortex_m op (CMSIS-NN) or an int8 portable op.

Runs after ``to_backend(NpuPartitioner)`` (on a CPU-only target, on the whole quantized edge graph):

    dq(x) -> convolution(dq(w), dq(b)) -> relu -> q     =>  cortex_m.quantized_conv2d(x, w_ohwi, ...)
    dq(x) -> view_copy -> q   (same qparams)             =>  aten.view_copy(x)            (int8, portable)
    x -> quantize_per_tensor                             =>  cortex_m.quantize_per_tensor(x)
    dq(x) -> lstm ... -> q                               =>  unchanged: float, with the reason in the log

Steps, in order: (1) rewrite each cluster through its row in ``lowering_rules.CPU_KERNELS``; (2) a float op
kept whole for the NPU that the stock runtime's portable kernels lack (``linear``) becomes ops they have, and every
op left to those kernels must pass their own argument checks (``runtime.stock_rules``: a 3-D convolution is a
``BadModel``); (3) the remaining quantize/dequantize (model boundary, float islands) become cortex_m's; (4) decide
the dim order of every activation once (``lowering_layout``); (5) drop the constants nothing reads any more, so the
float-era weights are not serialized. Each CPU compute node's verdict goes into the ``PlacementLog``.
"""

from __future__ import annotations

import copy
import operator

import torch
from executorch.exir import EdgeProgramManager
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
from torch.export import ExportedProgram
from torch.fx import Node

from imxrt import macs
from imxrt.cpu.isa import Isa
from imxrt.cpu.lowering_graph import Editor
from imxrt.cpu.lowering_layout import assign_dim_orders, canonicalize_strides
from imxrt.cpu.lowering_rules import POINTWISE, row_for
from imxrt.cpu.lowering_rules.common import NotLowered, Rewrite, cortex_m
from imxrt.errors import BadModel
from imxrt.passes.qdq import DEQUANTIZE_PER_TENSOR, QUANTIZE_PER_TENSOR, find_clusters, is_compute
from imxrt.placement import PlacementLog, not_quantized_reason, op_name
from imxrt.runtime.stock_rules import node_refusal

_BOUNDARY = {QUANTIZE_PER_TENSOR: "quantize_per_tensor", DEQUANTIZE_PER_TENSOR: "dequantize_per_tensor"}


def lower_to_cortex_m(edge: EdgeProgramManager, isa: Isa | str, placement_log: PlacementLog) -> EdgeProgramManager:
    """A new program where every int8 cluster outside the NPU delegates runs a cortex_m kernel for ``isa``
    (or, for data movement, the portable kernel in int8); ``edge`` is left as it was."""
    program = lower_program(edge.exported_program(), isa, placement_log)
    return EdgeProgramManager({"forward": program}, edge._config_methods, compile_config=edge.compile_config)


class LowerToCortexMPass(ExportedProgramPassBase):
    """``lower_program`` as a pass over an ExportedProgram, for ``EdgeProgramManager.transform`` (the
    Cortex-M export recipe's lowering step)."""

    def __init__(self, isa: Isa | str, placement_log: PlacementLog | None = None):
        super().__init__()
        self.isa = isa
        self.placement_log = placement_log if placement_log is not None else PlacementLog()

    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        return ExportedProgramPassResult(lower_program(exported_program, self.isa, self.placement_log), True)


def lower_program(exported_program: ExportedProgram, isa: Isa | str, placement_log: PlacementLog) -> ExportedProgram:
    """The lowered copy of ``exported_program`` (which is left as it was)."""
    import imxrt.cortex_m.ops  # noqa: F401  (registers the cortex_m ops)

    isa = isa if isinstance(isa, Isa) else Isa(isa)
    program = copy.deepcopy(exported_program)
    editor = Editor(program)
    graph = editor.graph
    clusters = find_clusters(graph)
    for node in list(graph.nodes):
        if node.graph is not graph or not _is_edge_compute(node):
            continue  # erased as part of an earlier cluster, or not an op of the edge graph
        cluster = clusters.get(node)
        if cluster is None:
            _record(placement_log, node, "runs in float on the CPU", not_quantized_reason(node))
            continue
        if node is not cluster.anchor:
            continue
        row = row_for(node)
        if row is None:
            _record_cluster(placement_log, cluster.ops, "runs in float on the CPU",
                            f"{op_name(node)} has no int8 Cortex-M kernel")
            continue
        first_created = len(editor.created_calls)
        try:
            replacement = row.lower(Rewrite(editor, isa, cluster))
        except NotLowered as e:
            _record_cluster(placement_log, cluster.ops, "runs in float on the CPU", f"{row.kernel} cannot take it: {e}")
            continue
        kernel = " + ".join(op_name(n) for n in editor.created_calls[first_created:])
        replacement.meta["cpu_kernel"] = kernel
        replacement.meta["edge_macs"] = macs.of(node)  # the report counts the work of the op it replaced
        _record_cluster(placement_log, cluster.ops, f"runs in int8 on the CPU as {kernel}"
                        + (" (lookup table)" if row is POINTWISE else ""))
        _replace_cluster(cluster, replacement)

    _decompose_for_portable_kernels(editor)
    _check_stock_kernels(graph)
    _convert_boundary_qdq(editor)
    graph.eliminate_dead_code()
    assign_dim_orders(graph, frozenset(n for n in graph.nodes if editor.tensor(n) is not None))
    canonicalize_strides(graph)
    editor.remove_dead_constants()
    editor.restride_constants()
    editor.sync_output_names()
    program.graph_module.recompile()
    return program


def _check_stock_kernels(graph: torch.fx.Graph) -> None:
    """Every op left to the portable kernels is called with arguments their own checks accept
    (``stock_rules``): a 3-D convolution left in float is refused here, naming its node, not written into a
    program the board refuses."""
    for node in graph.nodes:
        refused = node_refusal(node)
        if refused is not None:
            raise BadModel(refused, node=node.name)


def _is_edge_compute(node: Node) -> bool:
    """A compute op of the edge graph (not a Q/DQ, getitem, delegate call or scratch alloc)."""
    return is_compute(node) and getattr(node.target, "__name__", "") != "executorch_call_delegate" and \
        hasattr(node.target, "_op")


def _replace_cluster(cluster, replacement: Node) -> None:
    """Point the cluster's readers at ``replacement`` and erase the cluster (its dequantizes only when
    nothing else reads them)."""
    for q in cluster.quantizes:
        q.replace_all_uses_with(replacement)
    if not cluster.quantizes:  # a mask, read as it is
        cluster.anchor.replace_all_uses_with(replacement)
    graph = replacement.graph
    for q in cluster.quantizes:
        graph.erase_node(q)
    if cluster.activation is not None:
        graph.erase_node(cluster.activation)
    for user in list(cluster.anchor.users):  # getitems of a multi-output anchor
        if user.target is operator.getitem and not user.users:
            graph.erase_node(user)
    if not cluster.anchor.users:
        graph.erase_node(cluster.anchor)
    for dq in cluster.dequantizes:
        if not dq.users and dq.graph is graph:
            graph.erase_node(dq)


def _linear_as_addmm(editor: Editor, node: Node) -> Node:
    """A float ``linear`` as ``addmm`` (or ``mm``) over the input flattened to 2-D, with the weight
    transposed once at compile time when it is a constant."""
    edge = exir_ops.edge.aten
    x, weight = node.args[0], node.args[1]
    bias = node.args[2] if len(node.args) > 2 else None
    x_val, weight_val, out_val = x.meta["val"], weight.meta["val"], node.meta["val"]
    data = editor.tensor(weight)
    if data is not None:
        transposed = editor.constant(f"{weight.name}_transposed", data.t())
        transposed.meta["val"] = weight_val.t().contiguous()
    else:
        transposed = editor.call(edge.permute_copy.default, (weight, [1, 0]), weight_val.t().contiguous(), [node],
                                 before=node)
    rows = x_val.numel() // x_val.shape[-1]
    flat = x
    if x_val.dim() != 2:
        flat = editor.call(edge.view_copy.default, (x, [rows, x_val.shape[-1]]),
                           x_val.reshape(rows, x_val.shape[-1]).contiguous(), [node], before=node)
    product_val = out_val.reshape(rows, out_val.shape[-1]).contiguous()
    if bias is None:
        product = editor.call(edge.mm.default, (flat, transposed), product_val, [node], before=node)
    else:
        product = editor.call(edge.addmm.default, (bias, flat, transposed), product_val, [node], before=node)
    if out_val.dim() == 2:
        return product
    return editor.call(edge.view_copy.default, (product, list(out_val.shape)), out_val, [node], before=node)


def _prelu_as_clamps(editor: Editor, node: Node) -> Node:
    """prelu(x, w) = clamp(x, min=0) + w * clamp(x, max=0), w along dim 1 (aten has no prelu.out)."""
    edge = exir_ops.edge.aten
    x, weight = node.args[0], node.args[1]
    x_val, weight_val, out_val = x.meta["val"], weight.meta["val"], node.meta["val"]
    channels = weight_val.numel()
    shape = [channels] + [1] * (x_val.dim() - 2) if x_val.dim() >= 2 else [channels]
    slopes = editor.call(edge.view_copy.default, (weight, shape), weight_val.reshape(shape), [node], before=node)
    positive = editor.call(edge.clamp.default, (x, 0.0, None), x_val.clamp(min=0), [node], before=node)
    negative = editor.call(edge.clamp.default, (x, None, 0.0), x_val.clamp(max=0), [node], before=node)
    scaled = editor.call(edge.mul.Tensor, (slopes, negative), out_val, [node], before=node)
    return editor.call(edge.add.Tensor, (positive, scaled), out_val, [node], before=node)


# Float ops kept whole through to_edge (for the NPU's sake, or as one int8 table on the CPU) that the stock
# runtime has no portable kernel for.
_PORTABLE_DECOMPOSITIONS = {exir_ops.edge.aten.linear.default: _linear_as_addmm,
                            exir_ops.edge.aten.prelu.default: _prelu_as_clamps}


def _decompose_for_portable_kernels(editor: Editor) -> None:
    for node in list(editor.graph.nodes):
        decompose = _PORTABLE_DECOMPOSITIONS.get(node.target) if node.op == "call_function" else None
        if decompose is None:
            continue
        first_created = len(editor.created_calls)
        replacement = decompose(editor, node)
        created = editor.created_calls[first_created:]
        for part in created:  # each part is reported as the float op it stands for
            part.meta["cpu_reason"] = node.meta.get("cpu_reason")
        replacement.meta["cpu_kernel"] = " + ".join(op_name(n) for n in created)
        node.replace_all_uses_with(replacement)
        editor.graph.erase_node(node)


def _convert_boundary_qdq(editor: Editor) -> None:
    """Remaining int8 quantize/dequantize (model I/O, edges of float islands) -> cortex_m's, same args."""
    for node in list(editor.graph.nodes):
        name = _BOUNDARY.get(node.target) if node.op == "call_function" else None
        if name is None or node.args[5] != torch.int8:
            continue
        replacement = editor.call(cortex_m(name), node.args, node.meta["val"], [node], before=node)
        replacement.meta["cpu_kernel"] = op_name(replacement)
        node.replace_all_uses_with(replacement)
        editor.graph.erase_node(node)


def _record(log: PlacementLog, node: Node, cpu: str, cause: str | None = None) -> None:
    """Keep the NPU's verdict (why not there) and add where the op runs on the CPU and, for a float op, why;
    each said once (a node the NPU found not quantized has that as its verdict already)."""
    previous = log.decisions.get(node.name)
    if previous is not None and previous.npu:
        return  # delegated after all: not in this graph
    said = previous.reason if previous is not None else ""
    text = cpu if cause is None or cause in said else f"{cpu}: {cause}"
    log.record(node, False, f"{said}; {text}" if said else text)
    node.meta["cpu_reason"] = cause or cpu


def _record_cluster(log: PlacementLog, nodes, cpu: str, cause: str | None = None) -> None:
    for node in nodes:
        _record(log, node, cpu, cause)
