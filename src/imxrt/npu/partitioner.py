"""NPU partitioner: tag every int8 cluster the target's Neutron runs, and record why the others stay out.

A partition's inputs and outputs are int8 tensors: the model-input quantize and the model-output
dequantize run on the CPU, everything between two NPU ops (quantize -> dequantize pairs) is inside.
"""

from __future__ import annotations

import torch
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.backend.utils import tag_constant_data
from torch.export import ExportedProgram
from torch.fx import Node
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from imxrt.npu import support
from imxrt.npu.backend import ImxrtNeutronBackend
from imxrt.op_kinds import is_elementwise_map
from imxrt.passes.qdq import Cluster, find_clusters, is_compute, is_dequantize, is_quantize, tensor_args
from imxrt.passes.recurrent_loops import find_loops, marker_of
from imxrt.perf import loop_placement
from imxrt.placement import PlacementLog
from imxrt.quantization.rules import QUANTIZATION
from imxrt.targets import Target

# ExecuTorch finds a backend among BackendDetails' subclasses by class name: importing the class here is
# what makes the id resolvable wherever this partitioner is used. The .pte gets the device's id
# (backend.DELEGATE_ID) from backend.stamp_delegate_ids after lowering.
BACKEND_ID = ImxrtNeutronBackend.__name__

_aten = torch.ops.aten
# Ops kept whole through to_edge so the NPU sees one FULLY_CONNECTED / HARD_SWISH / RESIZE / PRELU, not a
# decomposition into primitives. Keeping is per op, not per node, so each must also be safe where the NPU
# does not take it: upsample and reflection pads have portable kernels; a float linear (none) becomes addmm in
# the CPU lowering; masked_fill has a portable kernel on every dtype (int8 too: decomposed into where and
# scalar_tensor it would run in float); hardswish is always int8
# (a Compute rule) and the NPU takes every int8 hardswish; prelu (no portable kernel) is kept only when
# every one is int8.
KEEP_WHOLE = (_aten.linear.default, _aten.hardswish.default, _aten.upsample_nearest2d.vec,
              _aten.upsample_bilinear2d.vec, _aten.reflection_pad1d.default, _aten.reflection_pad2d.default,
              _aten.reflection_pad3d.default, _aten.replication_pad1d.default, _aten.replication_pad2d.default,
              _aten.replication_pad3d.default, _aten.masked_fill.Scalar)
_KEEP_WHEN_ALL_INT8 = (_aten.prelu.default,)


def ops_to_keep_whole(program: ExportedProgram) -> list[torch._ops.OpOverload]:
    """The aten ops ``to_edge`` must not decompose in ``program`` (``EdgeCompileConfig.preserve_ops``)."""
    keep = list(KEEP_WHOLE)
    # an int8 pointwise op of one tensor (silu, hardsigmoid) is one table on the CPU: decomposed, its
    # primitives would run in float between a dequantize and a quantize
    pointwise = {n.target for n in program.graph.nodes if is_elementwise_map(n) and torch.Tag.core not in n.target.tags
                 and n.target not in QUANTIZATION}  # relu6 must become hardtanh
    for op in (*_KEEP_WHEN_ALL_INT8, *sorted(pointwise, key=str)):
        nodes = [n for n in program.graph.nodes if n.op == "call_function" and n.target == op]
        if nodes and all(all(is_dequantize_aten(a) for a in tensor_args(n)) for n in nodes):
            keep.append(op)
    return keep


class _InPartition(OperatorSupportBase):
    def __init__(self, nodes: set[Node]):
        self.nodes = nodes

    def is_node_supported(self, submodules, node: Node) -> bool:
        return node in self.nodes


def compile_specs_for(target: Target, neutron_compiler: str) -> list[CompileSpec]:
    """What ``ImxrtNeutronBackend.preprocess`` needs to know: the target and which Neutron compiler to run."""
    return [
        CompileSpec("target", target.name.encode()),
        CompileSpec("neutron_compiler", neutron_compiler.encode()),
    ]


class NpuPartitioner(Partitioner):
    """Delegates every int8 op the target's Neutron NPU supports to ``NeutronBackend``."""

    def __init__(self, target: Target, neutron_compiler: str = "reference", log: PlacementLog | None = None,
                 refused: dict[str, str] | None = None):
        assert target.npu is not None, "NpuPartitioner needs a target with an NPU"
        super().__init__()
        self.target = target
        self.log = log if log is not None else PlacementLog()
        # node name -> why the LiteRT lowering refused it on an earlier try: left on the CPU
        self.refused = dict(refused or {})
        self.delegation_spec = DelegationSpec(BACKEND_ID, compile_specs_for(target, neutron_compiler))

    def ops_to_not_decompose(self, ep: ExportedProgram):
        """For ``to_edge_transform_and_lower`` users; the pipeline passes the same list to ``to_edge``."""
        return ops_to_keep_whole(ep), None

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        graph = exported_program.graph_module.graph
        clusters = find_clusters(graph)
        on_cpu = self._steps_faster_on_cpu(graph)
        accepted: list[Cluster] = []
        for node in graph.nodes:
            if not is_compute(node):
                continue
            cluster = clusters.get(node)
            ok, reason = support.check(node, cluster, self.target.npu)
            if ok and node.name in self.refused:
                ok, reason = False, f"the LiteRT lowering refused it: {self.refused[node.name]}"
            if ok and node in on_cpu:
                ok, reason = False, on_cpu[node]
            self.log.record(node, ok, reason)
            if ok and cluster is not None and node is cluster.anchor:
                accepted.append(cluster)

        members = self._members(accepted)
        partitions = CapabilityBasedPartitioner(
            exported_program.graph_module, _InPartition(members), allows_single_node_partition=True
        ).propose_partitions()

        order = {n: i for i, n in enumerate(graph.nodes)}
        tags: dict[str, DelegationSpec] = {}
        for partition in sorted(partitions, key=lambda p: min(order[n] for n in p.nodes)):
            computes = [n for n in partition.nodes if is_compute(n)]
            if computes and all(_is_data_movement(n) for n in computes):
                for n in computes:
                    self.log.record(n, False, "a partition of data-movement ops alone would only add NPU "
                                              "call overhead; kept on the CPU")
                continue
            tag = f"neutron_{len(tags)}"
            for n in partition.nodes:
                n.meta["delegation_tag"] = tag
            tags[tag] = self.delegation_spec
        tag_constant_data(exported_program)
        return PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)

    def _steps_faster_on_cpu(self, graph) -> dict[Node, str]:
        """The compute nodes of each recurrent loop's step to keep on the Cortex-M, with the reason: the
        cheapest placement of the step by the cost model (``perf.loop_placement``)."""
        on_cpu: dict[Node, str] = {}
        for loop in find_loops(graph):
            nodes = [n for n in loop.body if is_compute(n) and marker_of(n) is None]
            kept, reason = loop_placement.step_placement(nodes, self.target.npu, self.target.cpu.isa,
                                                         self.target.cpu.clock_hz / self.target.npu.clock_hz)
            on_cpu.update(dict.fromkeys(kept, reason))
        return on_cpu

    @staticmethod
    def _members(accepted: list[Cluster]) -> set[Node]:
        """Cluster ops, the dequantizes they read and the quantizes they feed; the int8 tensors at the
        edges (model-input quantize, model-output dequantize) stay outside."""
        members: set[Node] = set()
        for cluster in accepted:
            members.update(cluster.ops)
            members.update(cluster.quantizes)
            members.update(cluster.dequantizes)
            for n in cluster.anchor.users:  # getitem of a multi-output op
                if not is_quantize(n) and n not in cluster.ops:
                    members.add(n)
        # A dequantize shared with a CPU op cannot sit in the partition.
        return {n for n in members if not is_dequantize(n) or all(u in members for u in n.users)}


def _is_data_movement(node: Node) -> bool:
    row = support.SUPPORTED.get(node.target)
    return row is not None and row.data_movement


_ATEN_DQ = {
    torch.ops.quantized_decomposed.dequantize_per_tensor.default,
    torch.ops.quantized_decomposed.dequantize_per_channel.default,
}


def is_dequantize_aten(node: Node) -> bool:
    return node.op == "call_function" and (node.target in _ATEN_DQ or is_dequantize(node))


__all__ = ["BACKEND_ID", "NpuPartitioner", "compile_specs_for"]
