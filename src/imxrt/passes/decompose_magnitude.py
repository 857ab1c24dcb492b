"""DecomposeMagnitudePass: the magnitude of a 2-vector, ``sqrt(a² + b²)`` (a spectrum's |re + i·im|), as the
largest of its projections on a few directions, so no int8 tensor holds the squares.

In int8 the power a² + b² is the loss: its 255 steps cover 48 dB of power, 24 dB of magnitude, so a spectrum
20 dB below the loudest one calibration saw rounds to a handful of levels, most of its bins to 0 (ExecuTorch's
Silero VAD example, with its official weights: quantizing that one tensor alone flipped 9% of the decisions on
quiet speech). A magnitude made of ``|a|``, ``|b|`` and linear combinations keeps the range of a and b::

    big, small = maximum(|a|, |b|), minimum(|a|, |b|)
    sqrt(a² + b²)  →  maximum over k of (big · cos θk + small · sin θk) / g,  θk = (2k + 1) π / (8 K)

For the vector's angle φ folded into [0, π/4], the projection on θk is |v| cos(φ - θk), and the nearest θk is
within π / (8 K): the largest projection lies in [|v| cos(π / 8K), |v|], and dividing by g, the middle of that
interval, leaves an error within ±(1 - cos(π / 8K)) / (1 + cos(π / 8K)): ±0.12 % for K = 4, below half an int8
step. Every op is int8 on the NPU (ABS, MAXIMUM, MINIMUM, MUL, ADD) and on the Cortex-M.
"""

from __future__ import annotations

import math

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import call, finish

aten = torch.ops.aten
DIRECTIONS = 4  # K: error within ±(1 - cos(π/32)) / (1 + cos(π/32)) = ±0.12 %


def _squared(node: object) -> Node | None:
    """x when ``node`` is x², x * x, pow(x, 2) or square(x), else None."""
    if not isinstance(node, Node) or node.op != "call_function":
        return None
    if node.target == aten.mul.Tensor and node.args[0] is node.args[1] and isinstance(node.args[0], Node):
        return node.args[0]
    if node.target == aten.square.default or (node.target == aten.pow.Tensor_Scalar and node.args[1] == 2):
        return node.args[0]
    return None


def _magnitude_operands(sqrt: Node) -> tuple[Node, Node] | None:
    """(a, b) of ``sqrt(a² + b²)`` over float tensors of one shape whose sum and squares nothing else reads."""
    total = sqrt.args[0]
    if not isinstance(total, Node) or total.op != "call_function" or total.target != aten.add.Tensor or \
            len(total.args) != 2 or total.kwargs.get("alpha", 1) != 1 or len(total.users) != 1:
        return None
    squares = total.args
    operands = tuple(_squared(square) for square in squares)
    if any(x is None for x in operands) or any(len(square.users) != 1 for square in squares):
        return None
    shapes = {tuple(x.meta["val"].shape) for x in operands if isinstance(x.meta.get("val"), torch.Tensor)}
    if len(shapes) != 1 or tuple(sqrt.meta["val"].shape) not in shapes:
        return None  # a broadcast magnitude keeps its squares
    return operands


def _largest_projection(gm: GraphModule, a: Node, b: Node, like: Node) -> Node:
    absolute = [call(gm, aten.abs.default, (x,), like=like) for x in (a, b)]
    big = call(gm, aten.maximum.default, tuple(absolute), like=like)
    small = call(gm, aten.minimum.default, tuple(absolute), like=like)
    middle = (1 + math.cos(math.pi / (8 * DIRECTIONS))) / 2
    largest = None
    for k in range(DIRECTIONS):
        angle = (2 * k + 1) * math.pi / (8 * DIRECTIONS)
        projection = call(gm, aten.add.Tensor, (
            call(gm, aten.mul.Tensor, (big, math.cos(angle) / middle), like=like),
            call(gm, aten.mul.Tensor, (small, math.sin(angle) / middle), like=like)), like=like)
        largest = projection if largest is None else call(gm, aten.maximum.default, (largest, projection), like=like)
    return largest


class DecomposeMagnitudePass(PassBase):
    """Requires: an aten graph with ``val`` metadata. Ensures: no ``sqrt(a² + b²)`` of equal shapes remains."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or node.target != aten.sqrt.default:
                continue
            operands = _magnitude_operands(node)
            if operands is None:
                continue
            total = node.args[0]
            squares = list(total.args)
            with gm.graph.inserting_before(node):
                magnitude = _largest_projection(gm, *operands, like=node)
            node.replace_all_uses_with(magnitude)
            for dead in [node, total, *squares]:
                gm.graph.erase_node(dead)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)
