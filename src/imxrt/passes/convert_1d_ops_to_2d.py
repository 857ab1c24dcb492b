"""Convert1dOpsTo2dPass: a 1-D transposed convolution, pool or reflection pad is its 2-D form over a height of 1.

    %y = max_pool1d(%x, [k], [s], [p], [d], ceil)
  → %y = squeeze(max_pool2d(unsqueeze(%x, 2), [1, k], [1, s], [0, p], [1, d], ceil), [2])
The NPU and CMSIS-NN have 2-D kernels only (``ConvertConv1dToConv2dPass`` does the same for conv1d). An
unbatched [C, L] input is a batch of one (unsqueezed at 0 as well): an audio front end's ``F.pad(x, (0, 64),
mode="reflect")`` of a [1, samples] waveform.
Arguments are read by name from the op's schema, whatever torch.export kept or left to defaults.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import add_constant, arguments_by_name, call, constant_value, finish

aten = torch.ops.aten


def _one(value, default: int) -> int:
    """A 1-D argument (int, one-element list or empty list for the default) as an int."""
    if isinstance(value, (list, tuple)):
        return int(value[0]) if value else default
    return default if value is None else int(value)


def _max_pool(a: dict, x: Node, gm: GraphModule, node: Node) -> tuple:
    k = _one(a["kernel_size"], 1)
    return aten.max_pool2d.default, (x, [1, k], [1, _one(a.get("stride"), k)], [0, _one(a.get("padding"), 0)],
                                     [1, _one(a.get("dilation"), 1)], bool(a.get("ceil_mode", False)))


def _avg_pool(a: dict, x: Node, gm: GraphModule, node: Node) -> tuple:
    k = _one(a["kernel_size"], 1)
    return aten.avg_pool2d.default, (x, [1, k], [1, _one(a.get("stride"), k)], [0, _one(a.get("padding"), 0)],
                                     bool(a.get("ceil_mode", False)), bool(a.get("count_include_pad", True)))


def _adaptive_avg_pool(a: dict, x: Node, gm: GraphModule, node: Node) -> tuple:
    return aten.adaptive_avg_pool2d.default, (x, [1, _one(a["output_size"], 1)])


def _conv_transpose(a: dict, x: Node, gm: GraphModule, node: Node) -> tuple | None:
    weight = constant_value(gm, a["weight"])
    if weight is None:
        return None
    weight4 = add_constant(gm, node, "conv_transpose2d_weight", weight.unsqueeze(2))
    return aten.conv_transpose2d.input, (
        x, weight4, a.get("bias"), [1, _one(a.get("stride"), 1)], [0, _one(a.get("padding"), 0)],
        [0, _one(a.get("output_padding"), 0)], int(a.get("groups", 1)), [1, _one(a.get("dilation"), 1)])


def _reflection_pad(a: dict, x: Node, gm: GraphModule, node: Node) -> tuple:
    left, right = a["padding"]
    return aten.reflection_pad2d.default, (x, [left, right, 0, 0])


# 1-D op -> (normalized arguments, its input viewed [N, C, 1, L], graph, node) -> (2-D op, its arguments)
_TO_2D: dict[object, Callable] = {
    aten.max_pool1d.default: _max_pool,
    aten.avg_pool1d.default: _avg_pool,
    aten.adaptive_avg_pool1d.default: _adaptive_avg_pool,
    aten.conv_transpose1d.default: _conv_transpose,
    aten.reflection_pad1d.default: _reflection_pad,
}


class Convert1dOpsTo2dPass(PassBase):
    """Ensures: no 1-D pool or reflection pad, and no 1-D transposed convolution with a constant weight,
    remains (of a rank-3 or an unbatched rank-2 input)."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or node.target not in _TO_2D or node.args[0].meta["val"].dim() not in (2, 3):
                continue
            arguments = arguments_by_name(node)
            unbatched = node.args[0].meta["val"].dim() == 2
            with gm.graph.inserting_before(node):
                source = arguments.pop("input") if "input" in arguments else arguments.pop("self")
                if unbatched:
                    source = call(gm, aten.unsqueeze.default, (source, 0), like=node)
                x = call(gm, aten.unsqueeze.default, (source, 2), like=node)
                found = _TO_2D[node.target](arguments, x, gm, node)
                if found is None:
                    gm.graph.erase_node(x)
                    if unbatched:
                        gm.graph.erase_node(source)
                    continue
                target, args = found
                y = call(gm, aten.squeeze.dims, (call(gm, target, args, like=node), [0, 2] if unbatched else [2]),
                         like=node)
            node.replace_all_uses_with(y)
            gm.graph.erase_node(node)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)
