"""DecomposeMedianPass: ``median`` as the last of the k smallest values, a ``topk`` the portable kernels run.

    %m = median(%x [n elements])             → %m = select(topk(view(%x, [n]), k, 0, largest=False)[0], 0, k - 1)
    %m, %i = median(%x, dim=d)               → %m = select(topk(%x, k, d, largest=False)[0], d, k - 1)
    %m, %i = median(%x, dim=d, keepdim=True) → %m = slice(topk(%x, k, d, largest=False)[0], d, k - 1, k)
with k = (n - 1) // 2 + 1 for n values along the reduced dims: PyTorch's median is the lower of the two middle
values, the k-th smallest, which ``topk`` (sorted ascending) puts last. No kernel of the stock runtime (NPU,
CMSIS-NN or portable) computes a median; ``topk`` has a portable kernel. The values are the same whatever the
order of equal values; the index of a value several elements share is not (PyTorch's median and the
portable ``topk`` pick among them differently), so a median whose indices are read is refused by name.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.errors import BadModel
from imxrt.passes._graph import call, finish, replace_results, result_read

aten = torch.ops.aten


def _lowest_values(gm: GraphModule, node: Node, x: Node, dim: int, k: int) -> Node:
    topk = call(gm, aten.topk.default, (x, k, dim, False, True), like=node)
    return call(gm, operator.getitem, (topk, 0), like=node)


def _median(gm: GraphModule, node: Node) -> Node:
    x = node.args[0]
    numel = x.meta["val"].numel()
    k = (numel - 1) // 2 + 1
    flat = call(gm, aten.view.default, (x, [numel]), like=node)
    return call(gm, aten.select.int, (_lowest_values(gm, node, flat, 0, k), 0, k - 1), like=node)


def _median_dim(gm: GraphModule, node: Node) -> Node:
    x = node.args[0]
    shape = list(x.meta["val"].shape)
    dim = int(node.args[1]) % max(len(shape), 1)
    keepdim = bool(node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False))
    if result_read(node, 1):
        raise BadModel("median with its indices: no kernel of the stock runtime (NPU, CMSIS-NN or portable) "
                       "computes a median, and the topk that gives its values picks another index among equal "
                       "values; use the values only (torch.median(x, dim).values) and it compiles", node=node.name)
    size = shape[dim] if shape else 1
    k = (size - 1) // 2 + 1
    lowest = _lowest_values(gm, node, x, dim, k)
    if keepdim:
        return call(gm, aten.slice.Tensor, (lowest, dim, k - 1, k), like=node)
    return call(gm, aten.select.int, (lowest, dim, k - 1), like=node)


class DecomposeMedianPass(PassBase):
    """Ensures: no ``median`` remains (the values of one become a ``topk``; one whose indices are read is
    refused)."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or node.target not in (aten.median.default, aten.median.dim):
                continue
            with gm.graph.inserting_before(node):
                replace_results(gm, node, (_median if node.target == aten.median.default else _median_dim)(gm, node))
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)
