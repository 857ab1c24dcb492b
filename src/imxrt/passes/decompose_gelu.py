"""DecomposeGeluPass: ``gelu(x)`` -> ``x * sigmoid(x * (c1 + c2 * x²))`` on targets with an NPU.

    %y = gelu(%x)                         %square = mul(%x, %x)                 MUL
                                          %scaled = mul(%square, c2)            MUL
                                    →     %inner = add(%scaled, c1)             ADD
                                          %logit = mul(%x, %inner)              MUL
                                          %gate = sigmoid(%logit)               LOGISTIC
                                          %y = mul(%x, %gate)                   MUL

with c1 = 2·√(2/π) and c2 = 0.044715·c1. This is GELU's tanh form, since (1 + tanh(t)) / 2 = sigmoid(2t).
Neutron has no GELU (nor erf) kernel: left whole, each GELU of a transformer's MLP ran on the Cortex-M
and split the NPU graph. ``approximate='tanh'`` is this function exactly; the exact (erf) GELU differs
from it by at most 4.8e-4 (at |x| ≈ 2.7, measured in float64 over [-20, 20]), a fraction of an int8 step
at any scale the calibration of a real layer gives (its output range over 255 steps).

A CPU-only target keeps GELU whole: there it is one 256-entry table of the exact function, one rounding
instead of six.
"""

from __future__ import annotations

import math

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import call, finish

aten = torch.ops.aten

LOGIT_LINEAR = 2.0 * math.sqrt(2.0 / math.pi)  # c1: sigmoid(2t) = (1 + tanh(t)) / 2
LOGIT_CUBIC = 0.044715 * LOGIT_LINEAR  # c2


def gelu_as_sigmoid_gate(gm: GraphModule, node: Node, x: Node) -> Node:
    """Insert ``x * sigmoid(x * (c1 + c2 * x²))`` before ``node``; returns its output node."""
    with gm.graph.inserting_before(node):
        square = call(gm, aten.mul.Tensor, (x, x), like=node)
        scaled = call(gm, aten.mul.Tensor, (square, LOGIT_CUBIC), like=node)
        inner = call(gm, aten.add.Tensor, (scaled, LOGIT_LINEAR), like=node)
        logit = call(gm, aten.mul.Tensor, (x, inner), like=node)
        gate = call(gm, aten.sigmoid.default, (logit,), like=node)
        return call(gm, aten.mul.Tensor, (x, gate), like=node)


class DecomposeGeluPass(PassBase):
    """Requires: an aten graph, before scalar operands become constants. Ensures: no ``gelu`` remains."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or node.target not in (aten.gelu.default, aten.gelu_.default):
                continue
            node.replace_all_uses_with(gelu_as_sigmoid_gate(gm, node, node.args[0]))
            gm.graph.erase_node(node)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)
