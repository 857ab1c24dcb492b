"""ConvertScalarOperandsToFloatPass: integer scalar operands of float arithmetic become floats.

    %y = mul(%x, 2)  →  %y = mul(%x, 2.0)
    %y = rsub(%x, 1.0)  →  %y = sub(%c, %x)   (%c a float scalar constant: ``1.0 - x``)
Re-export turns an int scalar into an int64 constant plus a dtype conversion, which leaves the op
outside any int8 cluster; a float scalar becomes one float constant the int8 lowering quantizes exactly.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import add_constant, finish

aten = torch.ops.aten

_ARITHMETIC = frozenset({aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor, aten.add_.Tensor,
                         aten.sub_.Tensor, aten.mul_.Tensor, aten.maximum.default, aten.minimum.default})


def _is_float_tensor(arg: object) -> bool:
    value = arg.meta.get("val") if isinstance(arg, Node) else None
    return isinstance(value, torch.Tensor) and value.dtype.is_floating_point


class ConvertScalarOperandsToFloatPass(PassBase):
    """Ensures: add / sub / mul / div of a float tensor take no Python int or bool operand."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in list(gm.graph.nodes):
            if node.op == "call_function" and node.target in (aten.rsub.Scalar, aten.rsub.Tensor):
                modified |= _rsub_as_sub(gm, node)
            if node.op != "call_function" or node.target not in _ARITHMETIC:
                continue
            if not any(_is_float_tensor(a) for a in node.args):
                continue
            if any(isinstance(a, int) for a in node.args):  # bool is an int too
                node.args = tuple(float(a) if isinstance(a, int) else a for a in node.args)
                modified = True
        return PassResult(finish(gm) if modified else gm, modified)


def _rsub_as_sub(gm: GraphModule, node: Node) -> bool:
    """rsub(x, c) is c - x: a sub the int8 rules know (rsub has none), c a float scalar constant."""
    x, other = node.args[:2]
    alpha = node.kwargs.get("alpha", node.args[2] if len(node.args) > 2 else 1)
    if not _is_float_tensor(x) or alpha != 1:
        return False
    if not isinstance(other, Node):
        other = add_constant(gm, node, "rsub_scalar", torch.tensor(float(other)))
    node.target, node.args, node.kwargs = aten.sub.Tensor, (other, x), {}
    return True
