"""ConvertPoolsTo2dPass: adaptive max pools and 3-D pools become the 2-D max and average pools both devices run.

    %y, %i = adaptive_max_pool2d(%x [N, C, 20, 20], [5, 5])
  → %y, %i = max_pool2d_with_indices(%x, [4, 4], [4, 4])         (indices read; else max_pool2d)
    %y = max_pool3d(%x [N, C, D, H, W], [kd, kh, kw], [sd, sh, sw], [pd, ph, pw], [dd, dh, dw], ceil)
  → %a = max_pool2d(view(%x, [1, N·C·D, H, W]), [kh, kw], [sh, sw], [ph, pw], [dh, dw], ceil)
    %b = max_pool2d(view(%a, [1, N·C, D, Ho·Wo]), [kd, 1], [sd, 1], [pd, 0], [dd, 1], ceil)
    %y = view(%b, [N, C, Do, Ho, Wo])

Neither the NPU nor CMSIS-NN nor ExecuTorch's portable kernels have an adaptive max pool or any 3-D pool.
An adaptive max pool whose output size divides its input has fixed windows (kernel = stride = in / out), the
same windows and the same first-maximum indices as that max pool. A 3-D pool's window is a box, the product of
a depth window and an H x W window, each found from its own dim's size, kernel, stride, padding, dilation and
ceil mode alone. So the maximum over the box is the maximum over depth of the H x W maxima, and the average over
the box is the average over depth of the H x W averages: the divisor PyTorch uses (the box's volume, counted
with the padding or without it) is the product of the two windows' sizes. The pools run on views where depth
is a channel (H x W stage) or a row (depth stage, each H x W position a column); a stage whose window is 1 is
left out. An adaptive 3-D average pool splits the same way (its windows are boxes too). In int8 the H x W
average is rounded to the input's scale before the depth average: one rounding more than one 3-D kernel
would make (the quantized program, and so the reference, has the same two steps).

What does not split is refused by name (``BadModel``): an adaptive max pool whose output size does not divide
its input, the indices of a 3-D max pool, a 3-D average pool with ``divisor_override``.
"""

from __future__ import annotations

import math
import operator

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.errors import BadModel
from imxrt.passes._graph import arguments_by_name, call, finish, replace_results, result_read

aten = torch.ops.aten

_ADAPTIVE_MAX = {aten.adaptive_max_pool1d.default: 1, aten.adaptive_max_pool2d.default: 2,
                 aten.adaptive_max_pool3d.default: 3}


def _sizes(value, count: int, default: list[int] | None = None) -> list[int]:
    """An int or list argument as ``count`` ints (an empty list or None: ``default``, else zeros)."""
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        return list(default) if default is not None else [0] * count
    if isinstance(value, int):
        return [value] * count
    return [int(v) for v in value] * (count if len(value) == 1 else 1)


def _shape(node: Node) -> list[int]:
    value = node.meta["val"]
    return list((value[0] if isinstance(value, (tuple, list)) else value).shape)


def _adaptive_max_pool(gm: GraphModule, node: Node) -> None:
    """adaptive_max_poolNd with an output size dividing its input -> the max pool with those fixed windows
    (a 1-D one over a height of 1, a 3-D one as ``_max_pool_3d``)."""
    rank = _ADAPTIVE_MAX[node.target]
    x = node.args[0]
    in_sizes, out_sizes = _shape(x)[-rank:], _shape(node)[-rank:]
    name = node.target._schema.name.split("::")[-1]
    if any(i % o for i, o in zip(in_sizes, out_sizes, strict=True)):
        given, wanted = "x".join(map(str, in_sizes)), "x".join(map(str, out_sizes))
        divisors = " or ".join("x".join(map(str, d)) for d in _dividing_sizes(in_sizes, out_sizes))
        raise BadModel(f"{name} from {given} to {wanted}: no kernel of the stock runtime (NPU, CMSIS-NN or "
                       f"portable) pools adaptive windows; an output size that divides the input ({divisors}) "
                       "is a max pool with fixed windows and compiles", node=node.name)
    kernel = [i // o for i, o in zip(in_sizes, out_sizes, strict=True)]
    read = result_read(node, 1)
    if rank == 3:
        if read:
            _refuse_3d_indices(node, name)
        replace_results(gm, node, _max_pool_3d(gm, node, x, kernel, kernel, [0] * 3, [1] * 3, False))
        return
    added = []  # the dims a [C, ...] input without its batch and a 1-D pool's height of 1 add
    if len(_shape(x)) == rank + 1:
        x, added = call(gm, aten.unsqueeze.default, (x, 0), like=node), [0]
    if rank == 1:  # [N, C, L] -> [N, C, 1, L]
        x, added, kernel = call(gm, aten.unsqueeze.default, (x, 2), like=node), [*added, 2], [1, *kernel]
    if read:
        pooled = call(gm, aten.max_pool2d_with_indices.default, (x, kernel, kernel), like=node)
        values, indices = (call(gm, operator.getitem, (pooled, i), like=node) for i in (0, 1))
    else:
        values, indices = call(gm, aten.max_pool2d.default, (x, kernel, kernel), like=node), None
    if added:
        values = call(gm, aten.squeeze.dims, (values, added), like=node)
        indices = indices and call(gm, aten.squeeze.dims, (indices, added), like=node)
    replace_results(gm, node, values, indices)


def _dividing_sizes(in_sizes: list[int], out_sizes: list[int]) -> list[list[int]]:
    """The output sizes dividing the input nearest to the one asked for, below and above it."""
    def nearest(size: int, wanted: int, step: int) -> int:
        candidate = wanted
        while 1 <= candidate <= size and size % candidate:
            candidate += step
        return min(max(candidate, 1), size)
    below = [nearest(i, o, -1) for i, o in zip(in_sizes, out_sizes, strict=True)]
    above = [nearest(i, o, 1) for i, o in zip(in_sizes, out_sizes, strict=True)]
    return [below] if below == above else [below, above]


def _refuse_3d_indices(node: Node, name: str) -> None:
    raise BadModel(f"{name} with return_indices=True: no kernel of the stock runtime has a 3-D max pool, and its "
                   "indices do not follow from the 2-D pools it splits into; return the values only "
                   "(return_indices=False) and it compiles", node=node.name)


def _stages(gm: GraphModule, node: Node, x: Node, plane_pool, depth_pool) -> Node:
    """x [..., D, H, W] -> plane_pool(view [1, B·D, H, W]) -> depth_pool(view [1, B, D, Ho·Wo]) -> view
    [..., Do, Ho, Wo]; a stage given as None is left out."""
    shape = _shape(x)
    lead, (depth, height, width) = shape[:-3], shape[-3:]
    planes = math.prod(lead)
    y = x
    if plane_pool is not None:
        y = plane_pool(call(gm, aten.view.default, (y, [1, planes * depth, height, width]), like=node))
    out_h, out_w = _shape(y)[-2:]
    if depth_pool is not None:
        y = depth_pool(call(gm, aten.view.default, (y, [1, planes, depth, out_h * out_w]), like=node))
    out_d = _shape(node)[-3]
    return call(gm, aten.view.default, (y, [*lead, out_d, out_h, out_w]), like=node)


def _max_pool_3d(gm: GraphModule, node: Node, x: Node, kernel, stride, padding, dilation, ceil_mode: bool) -> Node:
    def plane(y: Node) -> Node:
        return call(gm, aten.max_pool2d.default, (y, kernel[1:], stride[1:], padding[1:], dilation[1:], ceil_mode),
                    like=node)

    def depth(y: Node) -> Node:
        return call(gm, aten.max_pool2d.default, (y, [kernel[0], 1], [stride[0], 1], [padding[0], 0],
                                                  [dilation[0], 1], ceil_mode), like=node)

    trivial = [k == 1 and s == 1 and p == 0 for k, s, p in zip(kernel, stride, padding, strict=True)]
    return _stages(gm, node, x, None if trivial[1] and trivial[2] else plane, None if trivial[0] else depth)


def _max_pool_3d_node(gm: GraphModule, node: Node) -> None:
    a = arguments_by_name(node)
    if result_read(node, 1):
        _refuse_3d_indices(node, "max_pool3d")
    kernel = _sizes(a["kernel_size"], 3)
    y = _max_pool_3d(gm, node, node.args[0], kernel, _sizes(a.get("stride"), 3, kernel), _sizes(a.get("padding"), 3),
                     _sizes(a.get("dilation"), 3, [1] * 3), bool(a.get("ceil_mode", False)))
    replace_results(gm, node, y)


def _avg_pool_3d_node(gm: GraphModule, node: Node) -> None:
    a = arguments_by_name(node)
    if a.get("divisor_override") is not None:
        raise BadModel(f"avg_pool3d with divisor_override={a['divisor_override']}: no kernel of the stock runtime "
                       "has a 3-D pool, and with a divisor of its own it does not split into 2-D average pools; "
                       "leave divisor_override unset (or scale the result) and it compiles", node=node.name)
    kernel = _sizes(a["kernel_size"], 3)
    stride, padding = _sizes(a.get("stride"), 3, kernel), _sizes(a.get("padding"), 3)
    ceil_mode, include_pad = bool(a.get("ceil_mode", False)), bool(a.get("count_include_pad", True))

    def plane(y: Node) -> Node:
        return call(gm, aten.avg_pool2d.default, (y, kernel[1:], stride[1:], padding[1:], ceil_mode, include_pad),
                    like=node)

    def depth(y: Node) -> Node:
        return call(gm, aten.avg_pool2d.default, (y, [kernel[0], 1], [stride[0], 1], [padding[0], 0], ceil_mode,
                                                  include_pad), like=node)

    trivial = [k == 1 and s == 1 and p == 0 for k, s, p in zip(kernel, stride, padding, strict=True)]
    y = _stages(gm, node, node.args[0], None if trivial[1] and trivial[2] else plane, None if trivial[0] else depth)
    replace_results(gm, node, y)


def _adaptive_avg_pool_3d_node(gm: GraphModule, node: Node) -> None:
    x = node.args[0]
    (depth_in, h_in, w_in), (depth_out, h_out, w_out) = _shape(x)[-3:], _shape(node)[-3:]

    def plane(y: Node) -> Node:
        return call(gm, aten.adaptive_avg_pool2d.default, (y, [h_out, w_out]), like=node)

    def depth(y: Node) -> Node:
        return call(gm, aten.adaptive_avg_pool2d.default, (y, [depth_out, h_out * w_out]), like=node)

    y = _stages(gm, node, x, None if (h_in, w_in) == (h_out, w_out) else plane,
                None if depth_in == depth_out else depth)
    replace_results(gm, node, y)


_REWRITES = {
    **dict.fromkeys(_ADAPTIVE_MAX, _adaptive_max_pool),
    aten.max_pool3d.default: _max_pool_3d_node,
    aten.max_pool3d_with_indices.default: _max_pool_3d_node,
    aten.avg_pool3d.default: _avg_pool_3d_node,
    aten.adaptive_avg_pool3d.default: _adaptive_avg_pool_3d_node,
}


class ConvertPoolsTo2dPass(PassBase):
    """Ensures: no adaptive max pool and no 3-D pool remains (each is 2-D pools over views, or refused)."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function":
                continue
            rewrite = _REWRITES.get(node.target)
            if rewrite is None:
                continue
            with gm.graph.inserting_before(node):
                rewrite(gm, node)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)
