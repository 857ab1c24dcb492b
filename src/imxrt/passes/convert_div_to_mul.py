"""ConvertDivToMulPass: division by a constant becomes multiplication by its reciprocal.

    %y = div(%x, 4.0)  →  %y = mul(%x, 0.25)
The NPU and CMSIS-NN have an int8 MUL; a quantized DIV would need a float scale on the CPU.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import calls_to, constant_value, finish

aten = torch.ops.aten


class ConvertDivToMulPass(PassBase):
    """Ensures: no ``aten.div.Tensor`` by a non-zero Python scalar or scalar constant remains."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in calls_to(gm, aten.div.Tensor):
            if node.kwargs:
                continue
            divisor = node.args[1]
            tensor = constant_value(gm, divisor)
            if tensor is not None and tensor.numel() == 1:
                divisor = tensor.item()
            if not isinstance(divisor, (int, float)) or divisor == 0:
                continue
            node.target = aten.mul.Tensor
            node.args = (node.args[0], 1.0 / float(divisor))
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)
