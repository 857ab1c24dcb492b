"""ConvertSplitToSlicesPass: each piece of a split is a slice of its input.

    %a, %b = split_with_sizes(%x, [3, 5], 1)  →  %a = slice(%x, 1, 0, 3); %b = slice(%x, 1, 3, 8)
    %r = unbind(%x, 0)[i]                      →  %r = select(%x, 0, i)
``split``, ``split_with_sizes``, ``chunk`` and ``unbind`` return a list, which the quantizer cannot give
qparams (they stayed float); a slice or select is one int8 data-movement op with its input's qparams on every
device (a portable kernel on the CPU, SLICE / STRIDED_SLICE on the NPU). The sizes are read off the pieces'
values, so every split form (uneven chunks included) is the same rewrite.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import call, finish

aten = torch.ops.aten

# op -> the position of its dim argument and its default
_SPLITS = {aten.split.Tensor: (2, 0), aten.split_with_sizes.default: (2, 0), aten.chunk.default: (2, 0),
           aten.unbind.int: (1, 0)}


class ConvertSplitToSlicesPass(PassBase):
    """Ensures: no split / chunk / unbind whose pieces are all read by index remains."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or node.target not in _SPLITS:
                continue
            pieces = node.meta.get("val")
            users = list(node.users)
            if not isinstance(pieces, (list, tuple)) or not users or \
                    any(u.target is not operator.getitem for u in users):
                continue
            x = node.args[0]
            position, default = _SPLITS[node.target]
            dim = node.args[position] if len(node.args) > position else node.kwargs.get("dim", default)
            dim %= x.meta["val"].dim()
            starts = [0]
            for piece in pieces:
                starts.append(starts[-1] + (1 if node.target == aten.unbind.int else piece.shape[dim]))
            for user in users:
                index = user.args[1]
                with gm.graph.inserting_before(user):
                    if node.target == aten.unbind.int:
                        piece = call(gm, aten.select.int, (x, dim, index), like=user)
                    else:
                        piece = call(gm, aten.slice.Tensor, (x, dim, starts[index], starts[index + 1]), like=user)
                user.replace_all_uses_with(piece)
                gm.graph.erase_node(user)
            gm.graph.erase_node(node)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)
