"""ConvertPadToCoreOpPass: ``F.pad`` becomes the core op that names its mode.

    %y = pad(%x, [1, 1, 2, 2], "reflect")  →  %y = reflection_pad2d(%x, [1, 1, 2, 2])
    %y = pad(%x, [1, 1], "constant", 0.0)  →  %y = constant_pad_nd(%x, [1, 1], 0.0)
Left as ``pad``, to_edge decomposes a reflect pad into index arithmetic no int8 kernel runs; the core ops
have NPU rules (PAD, MIRROR_PAD) and portable CPU kernels.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import calls_to, finish

aten = torch.ops.aten

# (mode, number of padded dims) -> core op; the pad list pairs (before, after) from the last dim back
_CORE_PAD = {
    ("reflect", 1): aten.reflection_pad1d.default,
    ("reflect", 2): aten.reflection_pad2d.default,
    ("reflect", 3): aten.reflection_pad3d.default,
    ("replicate", 1): aten.replication_pad1d.default,
    ("replicate", 2): aten.replication_pad2d.default,
    ("replicate", 3): aten.replication_pad3d.default,
}


class ConvertPadToCoreOpPass(PassBase):
    """Ensures: no ``aten.pad.default`` whose mode has a core op remains."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in calls_to(gm, aten.pad.default):
            x, pads = node.args[0], list(node.args[1])
            mode = node.args[2] if len(node.args) > 2 else node.kwargs.get("mode", "constant")
            value = node.args[3] if len(node.args) > 3 else node.kwargs.get("value")
            if mode == "constant":
                node.target, node.args, node.kwargs = aten.constant_pad_nd.default, (x, pads, value or 0.0), {}
            elif (mode, len(pads) // 2) in _CORE_PAD:
                node.target, node.args, node.kwargs = _CORE_PAD[(mode, len(pads) // 2)], (x, pads), {}
            else:
                continue
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)
