"""DecomposeSquarePass: ``x ** 2`` (``pow(x, 2)``, ``square(x)``) -> ``x * x`` on targets with an NPU.

Neutron has MUL but no POW kernel; left whole, a square (a power spectrum's real² + imag², a variance) ran
as a CPU table between NPU partitions. MUL of a tensor by itself is one int8 rounding of the exact product,
as the table is. A CPU-only target keeps the square whole: one 256-entry table.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import call, finish

aten = torch.ops.aten


def _is_square(node) -> bool:
    if node.op != "call_function":
        return False
    if node.target == aten.square.default:
        return True
    return node.target == aten.pow.Tensor_Scalar and node.args[1] == 2


class DecomposeSquarePass(PassBase):
    """Requires: an aten graph. Ensures: no ``pow(x, 2)`` or ``square`` remains."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in list(gm.graph.nodes):
            if not _is_square(node):
                continue
            x = node.args[0]
            with gm.graph.inserting_before(node):
                product = call(gm, aten.mul.Tensor, (x, x), like=node)
            node.replace_all_uses_with(product)
            gm.graph.erase_node(node)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)
