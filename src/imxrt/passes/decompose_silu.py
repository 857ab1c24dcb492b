"""DecomposeSiluPass: ``silu(x)`` -> ``x * sigmoid(x)`` on targets with an NPU.

Neutron has LOGISTIC and MUL but no SiLU kernel; left whole, every SiLU of an EfficientNet ran on the CPU
and split the NPU graph around it (51 partitions). Decomposed before quantization, the sigmoid gets its
fixed int8 range (scale 1/256, the LOGISTIC output) and the product its calibrated one, so the quantized
program is the program the NPU runs. A CPU-only target keeps SiLU whole: there it is one 256-entry table,
one rounding instead of two.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import call, finish

aten = torch.ops.aten
_SILU = (aten.silu.default, aten.silu_.default)


class DecomposeSiluPass(PassBase):
    """Requires: an aten graph. Ensures: no ``silu`` remains."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or node.target not in _SILU:
                continue
            x = node.args[0]
            with gm.graph.inserting_before(node):
                gate = call(gm, aten.sigmoid.default, (x,), like=node)
                product = call(gm, aten.mul.Tensor, (x, gate), like=node)
            node.replace_all_uses_with(product)
            gm.graph.erase_node(node)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)
