"""ConvertConv1dToConv2dPass: express a 1-D convolution as a 2-D one with a height of 1, and a convolution
with string padding ("same" / "valid") with explicit padding.

    %y = conv1d(%x, %w, %b, [s], [p], [d], g)
  → %x4 = unsqueeze(%x, 2); %y4 = conv2d(%x4, %w4, %b, [1, s], [0, p], [1, d], g); %y = squeeze(%y4, [2])
with %w4 = %w[:, :, None, :]. The NPU and CMSIS-NN have 2-D kernels only.

    %y = conv2d.padding(%x, %w, %b, s, "same", d, g)
  → %y = conv2d(constant_pad_nd(%x, [0, 1, 0, 1]), %w, %b, s, [p_h, p_w], d, g)
"same" pads d·(k − 1) in all, the odd element after (PyTorch's rule); the symmetric part stays the conv's
own padding, only an odd remainder becomes a pad op (zero, so the input zero point once quantized).
Arguments are read by name from the op's schema, whatever torch.export kept or left to defaults.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import add_constant, arguments_by_name, constant_value, finish

aten = torch.ops.aten

_CONVOLUTIONS = (aten.conv1d.default, aten.conv1d.padding, aten.conv2d.default, aten.conv2d.padding)


def _ints(value, rank: int) -> list[int]:
    """A conv argument (int or list) as ``rank`` ints."""
    values = [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]
    return values * rank if len(values) == 1 else values


def _explicit_padding(padding, kernel: list[int], dilation: list[int]) -> list[tuple[int, int]]:
    """(before, after) per spatial dim for an int/list or a "same"/"valid" padding."""
    if padding == "valid":
        return [(0, 0)] * len(kernel)
    if padding == "same":
        totals = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
        return [(total // 2, total - total // 2) for total in totals]
    return [(p, p) for p in _ints(padding, len(kernel))]


class ConvertConv1dToConv2dPass(PassBase):
    """Ensures: no ``aten.conv1d`` with a constant weight and no string-padded ``aten.conv2d`` remains."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or node.target not in _CONVOLUTIONS:
                continue
            if node.target == aten.conv2d.default:
                continue
            weight = constant_value(gm, node.args[1])
            if weight is None:
                continue
            self._rewrite(gm, node, weight)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)

    @staticmethod
    def _rewrite(gm: GraphModule, node: Node, weight: torch.Tensor) -> None:
        arguments = arguments_by_name(node)
        one_d = node.target in (aten.conv1d.default, aten.conv1d.padding)
        rank = weight.dim() - 2
        kernel = list(weight.shape[2:])
        stride, dilation = _ints(arguments.get("stride", 1), rank), _ints(arguments.get("dilation", 1), rank)
        pads = _explicit_padding(arguments.get("padding", 0), kernel, dilation)
        x, bias, groups = arguments["input"], arguments.get("bias"), int(arguments.get("groups", 1))
        if one_d:
            stride, dilation, pads = [1] + stride, [1] + dilation, [(0, 0)] + pads
        created = []
        with gm.graph.inserting_before(node):
            if one_d:
                weight_node = add_constant(gm, node, "conv2d_weight", weight.unsqueeze(2))
                x = gm.graph.call_function(aten.unsqueeze.default, (x, 2))
                x.meta["val"] = node.args[0].meta["val"].unsqueeze(2)
                created.append(x)
            else:
                weight_node = node.args[1]
            if any(after != before for before, after in pads):
                # constant_pad_nd lists (before, after) from the last dim backwards
                extra = [v for before, after in reversed(pads) for v in (0, after - before)]
                source = x
                x = gm.graph.call_function(aten.constant_pad_nd.default, (source, extra, 0.0))
                x.meta["val"] = torch.nn.functional.pad(source.meta["val"], extra)
                created.append(x)
            y = gm.graph.call_function(
                aten.conv2d.default,
                (x, weight_node, bias, stride, [before for before, _ in pads], dilation, groups))
            y.meta["val"] = node.meta["val"].unsqueeze(2) if one_d else node.meta["val"]
            created.append(y)
            if one_d:
                y = gm.graph.call_function(aten.squeeze.dims, (y, [2]))
                y.meta["val"] = node.meta["val"]
                created.append(y)
        for new in created:
            new.meta.update({k: v for k, v in node.meta.items() if k in ("stack_trace", "nn_module_stack")})
        node.replace_all_uses_with(y)
        gm.graph.erase_node(node)
