"""DecomposeHardsigmoidPass: ``hardsigmoid(x)`` -> ``hardtanh(x + 3, 0, 6) * (1/6)`` on targets with an NPU.

Neutron has no hardsigmoid kernel. After a conv or linear layer a hardsigmoid folds into the layer
(``FoldHardsigmoidPass``); one that does not (after an add, a batch norm kept for QAT) becomes an ADD with a
fused RELU6 and a MUL, both Neutron ops, decomposed before quantization so the quantized program is the one
the NPU runs. A CPU-only target keeps it whole: one 256-entry table there.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import call, finish

aten = torch.ops.aten
_HARDSIGMOID = (aten.hardsigmoid.default, aten.hardsigmoid_.default)


class DecomposeHardsigmoidPass(PassBase):
    """Requires: an aten graph, before scalar operands become constants. Ensures: no ``hardsigmoid``."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or node.target not in _HARDSIGMOID:
                continue
            with gm.graph.inserting_before(node):
                shifted = call(gm, aten.add.Tensor, (node.args[0], 3.0), like=node)
                clamped = call(gm, aten.hardtanh.default, (shifted, 0.0, 6.0), like=node)
                scaled = call(gm, aten.mul.Tensor, (clamped, 1.0 / 6.0), like=node)
            node.replace_all_uses_with(scaled)
            gm.graph.erase_node(node)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)
