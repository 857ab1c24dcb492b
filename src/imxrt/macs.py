"""Multiply-accumulate counts of edge ops: the work figure the placement report and coverage use."""

from __future__ import annotations

import math

from executorch.exir.dialects._ops import ops as exir_ops
from torch.fx import Node

edge = exir_ops.edge.aten


def _shape(node: object) -> tuple[int, ...]:
    value = node.meta.get("val") if isinstance(node, Node) else None
    return tuple(value.shape) if value is not None and hasattr(value, "shape") else ()


def _conv(node: Node) -> int:
    weight = _shape(node.args[1])
    if node.args[6]:  # transposed: every input pixel scatters a C_out/groups x kh x kw block
        return math.prod(_shape(node.args[0])) * math.prod(weight[1:])
    return math.prod(_shape(node)) * math.prod(weight[1:])  # out pixels x (C_in/groups x kh x kw)


def _inner(dim_of_input: int, arg: int = 0):
    return lambda node: math.prod(_shape(node)) * _shape(node.args[arg])[dim_of_input]


# op -> MACs; every other op counts 0 (elementwise, pooling and data movement are not MAC work).
_MACS = {
    edge.convolution.default: _conv,
    edge.linear.default: _inner(-1),
    edge.addmm.default: _inner(-1, arg=1),
    edge.mm.default: _inner(-1),
    edge.bmm.default: _inner(-1),
}


def of(node: Node) -> int:
    """MACs of one edge node (0 for ops that are not matrix work)."""
    count = _MACS.get(node.target) if node.op == "call_function" else None
    return int(count(node)) if count else 0
