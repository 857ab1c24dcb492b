"""QDQ cluster analysis of an edge graph: which compute ops run in int8, and with which qparams.

After pt2e conversion every int8 op looks like ``dequantize -> op [-> fused activation] -> quantize``.
A *cluster* is such an op (plus its fused activation); it is quantized when every tensor it reads comes
from a dequantize (or is a float scalar constant, or an integer index or boolean mask beside an int8 tensor)
and every value it writes goes only to quantize nodes (or is a boolean mask computed from int8 values, read
as it is).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from executorch.exir.dialects._ops import ops as exir_ops
from torch.fx import Graph, Node

_qd = exir_ops.edge.quantized_decomposed
QUANTIZE_PER_TENSOR = _qd.quantize_per_tensor.default
DEQUANTIZE_PER_TENSOR = _qd.dequantize_per_tensor.default
DEQUANTIZE_PER_CHANNEL = _qd.dequantize_per_channel.default
DEQUANTIZE_OPS = frozenset({DEQUANTIZE_PER_TENSOR, DEQUANTIZE_PER_CHANNEL})
QUANTIZE_OPS = frozenset({QUANTIZE_PER_TENSOR})
QDQ_OPS = DEQUANTIZE_OPS | QUANTIZE_OPS

_edge = exir_ops.edge.aten
# Activations a producer's output clamp absorbs (the quantizer put no Q/DQ between them).
FUSED_ACTIVATIONS = frozenset({_edge.relu.default, _edge.hardtanh.default, _edge.clamp.default})


@dataclass(frozen=True)
class QParams:
    """Per-tensor int8 quantization: real = scale * (q - zero_point)."""

    scale: float
    zero_point: int

    def same_as(self, other: QParams | None) -> bool:
        return other is not None and self.zero_point == other.zero_point and abs(
            self.scale - other.scale) <= 1e-6 * max(self.scale, other.scale)


def is_dequantize(node: object) -> bool:
    return isinstance(node, Node) and node.op == "call_function" and node.target in DEQUANTIZE_OPS


def is_quantize(node: object) -> bool:
    return isinstance(node, Node) and node.op == "call_function" and node.target in QUANTIZE_OPS


def is_compute(node: Node) -> bool:
    """A call_function that is neither a Q/DQ op nor a tuple ``getitem``."""
    import operator

    return node.op == "call_function" and node.target not in QDQ_OPS and node.target is not operator.getitem


def qparams_of_dequantize(node: Node) -> QParams | None:
    """Per-tensor qparams of a ``dequantize_per_tensor`` node (None for per-channel)."""
    if node.target != DEQUANTIZE_PER_TENSOR:
        return None
    return QParams(float(node.args[1]), int(node.args[2]))


def qparams_of_quantize(node: Node) -> QParams:
    return QParams(float(node.args[1]), int(node.args[2]))


@dataclass(frozen=True)
class Cluster:
    """One int8 op of the edge graph: ``anchor`` [-> ``activation``], between dequantizes and quantizes."""

    anchor: Node
    activation: Node | None
    dequantizes: tuple[Node, ...]  # DQ nodes the anchor reads (activations, weights, biases)
    quantizes: tuple[Node, ...]  # Q nodes reading the cluster's output (none when it is a boolean mask)

    @property
    def ops(self) -> tuple[Node, ...]:
        return (self.anchor,) if self.activation is None else (self.anchor, self.activation)

    @property
    def output(self) -> Node:
        return self.activation or self.anchor

    def input_qparams(self, index: int = 0) -> QParams | None:
        """Per-tensor qparams of the anchor's ``index``-th tensor argument (None if not a per-tensor DQ)."""
        tensors = tensor_args(self.anchor)
        if index >= len(tensors) or not is_dequantize(tensors[index]):
            return None
        return qparams_of_dequantize(tensors[index])

    def output_qparams(self) -> QParams:
        return qparams_of_quantize(self.quantizes[0])


def tensor_args(node: Node) -> list[Node]:
    """Node arguments in order, with list arguments (cat's inputs) flattened."""
    found: list[Node] = []
    for arg in node.args:
        for item in arg if isinstance(arg, (list, tuple)) else (arg,):
            if isinstance(item, Node):
                found.append(item)
    return found


def _output_users(node: Node) -> list[Node]:
    """Users of ``node``'s value; for a multi-output op (max_pool2d_with_indices), users of item 0."""
    import operator

    users = list(node.users)
    if users and all(u.target is operator.getitem for u in users):
        data = [u for u in users if u.args[1] == 0]
        if len(data) == 1 and all(not other.users for other in users if other is not data[0]):
            return list(data[0].users)
    return users


def _is_float_constant(node: Node) -> bool:
    """A lifted float scalar constant (``x * 0.5`` after re-export): the lowering quantizes it exactly."""
    value = node.meta.get("val")
    return node.op == "placeholder" and isinstance(value, torch.Tensor) and value.numel() == 1 and \
        value.dtype.is_floating_point


def is_index_tensor(node: Node) -> bool:
    """An integer or boolean tensor (an embedding's indices, a mask): read as it is by an int8 lookup."""
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and not value.dtype.is_floating_point and not value.dtype.is_complex


def find_clusters(graph: Graph) -> dict[Node, Cluster | None]:
    """Map every compute node to its cluster, or to None when it does not run in int8.

    Both ops of a fused pair map to the same cluster.
    """
    result: dict[Node, Cluster | None] = {}
    for node in graph.nodes:
        if not is_compute(node) or node in result:
            continue
        inputs = tensor_args(node)
        # an index or mask tensor rides along, beside at least one int8 tensor (the table it selects from)
        reads_int8 = not all(map(is_index_tensor, inputs)) and \
            all(is_dequantize(a) or _is_float_constant(a) or is_index_tensor(a) for a in inputs)
        users = _output_users(node)
        activation = None
        if len(users) == 1 and users[0].op == "call_function" and users[0].target in FUSED_ACTIVATIONS \
                and not is_quantize(users[0]):
            activation = users[0]
            users = list(activation.users)
        # a comparison's mask is read as it is: its cluster has no quantize
        writes_mask = activation is None and is_index_tensor(node) and any(is_dequantize(a) for a in inputs)
        writes_int8 = bool(users) and all(is_quantize(u) for u in users)
        if reads_int8 and (writes_int8 or writes_mask):
            cluster = Cluster(
                anchor=node,
                activation=activation,
                dequantizes=tuple(a for a in inputs if is_dequantize(a)),
                quantizes=tuple(users) if writes_int8 else (),
            )
            result[node] = cluster
            if activation is not None:
                result[activation] = cluster
        else:
            result[node] = None
    return result
