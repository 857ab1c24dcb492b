"""CPU lowering, layout: which int8 activations are stored channels_last, decided once over the whole graph.

Decision. Tensors keep the edge graph's NCHW logical shapes; the cortex_m conv and pool ops (the
non-``_nhwc`` variants) read and write them with the channels_last dim order ``[0, 2, 3, 1]`` (NHWC bytes,
what CMSIS-NN computes on). So a rank-4 tensor is channels_last exactly when its producer is one of those
ops, or a layout-agnostic elementwise op (add, mul, lookup-table activations, min/max, pad) reading a
channels_last tensor. Every other op (view/reshape, linear, softmax, transpose, the portable data-movement
kernels, dequantizes to float, the model outputs) takes contiguous tensors (a layout
copy before a dequantize moves int8 bytes, not floats, and leaves an int8 output for ``--io int8``).
One ``_to_dim_order_copy`` per value and dim order converts where producer and consumer disagree: a CNN
gets one after its input quantize and one where its spatial part ends (before the flatten or the
classifier), and none between its convolutions, pools and residual adds.

    q = cortex_m.quantize_per_tensor(x)                     # contiguous, model input
    q_cl = _to_dim_order_copy(q, dim_order=[0, 2, 3, 1])
    y = cortex_m.quantized_conv2d(q_cl, ...)                # channels_last in and out
    z = cortex_m.quantized_add(y, y2, ...)                  # follows its inputs: channels_last
    z_c = _to_dim_order_copy(z, dim_order=[0, 1, 2, 3])
    f = aten.view_copy(z_c, [1, -1])                        # contiguous

An NPU delegate call takes a contiguous tensor, except where its partition reads NHWC bytes (format flag
1): there it takes the tensor as it comes, since the stock runtime passes a channels_last tensor through and
transposes a contiguous one itself.

No copy is needed where the bytes agree already: a model input given channels_last (its example's dim
order is kept, and the input quantize follows it), an input with one channel, and a view of an
[N, C, 1, 1] tensor (after a global pool), where both orders lay out the same bytes.
"""

from __future__ import annotations

import torch
from executorch.exir import memory
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.tensor import dim_order_from_stride
from torch.fx import Graph, Node

from imxrt.cpu.lowering_graph import inherit_provenance
from imxrt.cpu.lowering_rules.common import cortex_m
from imxrt.placement import input_format_flags

CHANNELS_LAST = (0, 2, 3, 1)
CONTIGUOUS = (0, 1, 2, 3)
TO_DIM_ORDER_COPY = exir_ops.edge.dim_order_ops._to_dim_order_copy.default


def spatial_ops() -> frozenset:
    """Ops whose first input and output are channels_last (NCHW logical)."""
    return frozenset(cortex_m(name) for name in (
        "quantized_conv2d", "quantized_depthwise_conv2d", "quantized_transpose_conv2d",
        "quantized_avg_pool2d", "quantized_max_pool2d"))


def agnostic_ops() -> frozenset:
    """Elementwise ops that work on the bytes in either order, as long as all operands share it."""
    return frozenset(cortex_m(name) for name in (
        "quantized_add", "quantized_mul", "quantized_div", "quantized_activation", "minimum", "maximum", "pad",
        "quantize_per_tensor"))


_VIEW = exir_ops.edge.aten.view_copy.default


def _same_bytes(value: torch.Tensor) -> bool:
    """Both dim orders lay the tensor out identically (C = 1, or H = W = 1): reading it in either order
    reads the same bytes, so a view of it needs no layout copy."""
    _, channels, height, width = value.shape
    return channels == 1 or height * width == 1


def _serializable(node: Node, order: tuple[int, ...]) -> tuple[int, ...]:
    """The dim order a [N, 1, H, W] value is given for channels_last: contiguous, the same bytes. Its
    channels_last strides tie C with W, and ExecuTorch reads the dim order off the strides as [0, 2, 1, 3],
    an order no kernel takes; the stock Neutron runtime wants one channel contiguous as well."""
    value = _value(node)
    if order == CHANNELS_LAST and value is not None and value.dim() == 4 and value.shape[1] == 1:
        return CONTIGUOUS
    return order


def _input_order(node: Node) -> tuple[int, ...]:
    """A model input keeps the dim order its example had (a channels_last image stays channels_last)."""
    value = _value(node)
    if value is not None and value.dim() == 4 and not value.is_contiguous() and \
            value.is_contiguous(memory_format=torch.channels_last):
        return CHANNELS_LAST
    return CONTIGUOUS


def _is_delegate_call(node: Node) -> bool:
    return node.op == "call_function" and getattr(node.target, "__name__", "") == "executorch_call_delegate"


def _value(node: object) -> torch.Tensor | None:
    value = node.meta.get("val") if isinstance(node, Node) else None
    return value if isinstance(value, torch.Tensor) else None


def _rank4(node: object) -> bool:
    value = _value(node)
    return value is not None and value.dim() == 4


def _with_order(value: torch.Tensor, order: tuple[int, ...]) -> torch.Tensor:
    """``value`` with the canonical strides of ``order``. ``contiguous()`` would keep any strides torch
    deems contiguous, and a size-1 dimension's stride is free: ExecuTorch reads the dim order off the
    strides, so [4, 1, 3, 3] with strides (9, 36, 3, 1) would be serialized as dim order [1, 0, 2, 3]."""
    fmt = torch.channels_last if order == CHANNELS_LAST and value.dim() == 4 else torch.contiguous_format
    if value.stride() == torch.empty_strided(value.shape, (1,) * value.dim(), device="meta")\
            .contiguous(memory_format=fmt).stride():
        return value
    return value.clone(memory_format=fmt)


def canonicalize_strides(graph: Graph) -> None:
    """Every value (constants included) whose strides read as a dim order other than the contiguous or the
    channels_last one, only because a size-1 dimension's stride is free, gets the canonical strides of the
    order its bytes are in: ExecuTorch's kernels take those two orders, and one given [1, 0, 2, 3] for a
    [4, 1, 3, 3] weight wrote out of bounds."""
    for node in graph.nodes:
        value = _value(node)
        if value is None or value.dim() < 2:
            continue
        order = tuple(dim_order_from_stride(value.stride()))
        if order == tuple(range(value.dim())) or order == CHANNELS_LAST:
            continue
        if value.is_contiguous():
            node.meta["val"] = _with_order(value, CONTIGUOUS)
        elif value.dim() == 4 and value.is_contiguous(memory_format=torch.channels_last):
            node.meta["val"] = _with_order(value, CHANNELS_LAST)


def assign_dim_orders(graph: Graph, constants: frozenset[Node] = frozenset()) -> int:
    """Set every rank-4 value's dim order as decided above and insert the copies; returns how many.
    ``constants``: placeholders whose bytes are written at compile time; each is stored in the order its first
    reader wants (a per-channel prelu's slopes channels_last beside a conv's output), not copied at run time."""
    spatial, agnostic = spatial_ops(), agnostic_ops()
    order: dict[Node, tuple[int, ...]] = {}
    copies: dict[tuple[Node, tuple[int, ...]], Node] = {}

    def converted(arg: Node, wanted: tuple[int, ...], consumer: Node) -> Node:
        if arg in constants and arg not in order:
            order[arg] = wanted
            arg.meta["val"] = _with_order(arg.meta["val"], wanted)
        if order.get(arg, CONTIGUOUS) == wanted:
            return arg
        key = (arg, wanted)
        if key not in copies:
            with graph.inserting_after(arg):
                copy = graph.call_function(TO_DIM_ORDER_COPY, (arg,), {"dim_order": list(wanted)})
            copy.meta["val"] = _with_order(arg.meta["val"], wanted)
            inherit_provenance(copy, [consumer])
            order[copy] = wanted
            copies[key] = copy
        return copies[key]

    for node in list(graph.nodes):
        if node.op == "placeholder" and _rank4(node) and node not in constants:
            order[node] = _input_order(node)
        if node.op not in ("call_function", "output") or node.target is memory.alloc or \
                node.target is TO_DIM_ORDER_COPY:
            continue
        rank4_inputs = [a for a in node.all_input_nodes if _rank4(a)]
        if node.target in spatial:
            wanted, produced = {node.args[0]: CHANNELS_LAST}, CHANNELS_LAST
        elif node.target in agnostic:
            produced = CHANNELS_LAST if any(order.get(a) == CHANNELS_LAST for a in rank4_inputs if a not in constants) \
                else CONTIGUOUS
            wanted = {a: produced for a in rank4_inputs}
        elif _is_delegate_call(node):
            # a partition input of format flag 1 takes either order (the runtime transposes a contiguous one,
            # passes a channels_last one as it is): a copy to contiguous would be undone at run time
            flags = input_format_flags(getattr(graph.owning_module, node.args[0].target))
            wanted = {a: order.get(a, CONTIGUOUS) if flag else CONTIGUOUS
                      for a, flag in zip(node.args[1:], flags, strict=True) if _rank4(a)}
            produced = CONTIGUOUS
        elif node.target is _VIEW and rank4_inputs and _same_bytes(_value(rank4_inputs[0])):
            # a channels_last [N, C, 1, 1] (after a global pool) is already its contiguous bytes
            wanted, produced = {}, order.get(rank4_inputs[0], CONTIGUOUS) if _rank4(node) else CONTIGUOUS
        else:
            wanted, produced = {a: CONTIGUOUS for a in rank4_inputs}, CONTIGUOUS
        wanted = {a: _serializable(a, w) for a, w in wanted.items()}
        produced = _serializable(node, produced)
        if any(order.get(a, CONTIGUOUS) != w for a, w in wanted.items()):
            node.args = _map_nodes(node.args, wanted, node, converted)
        if node.target == cortex_m("pad") and produced == CHANNELS_LAST:
            x, pre, post, value = node.args
            node.args = (x, [pre[i] for i in CHANNELS_LAST], [post[i] for i in CHANNELS_LAST], value)
        if node.op == "call_function" and _rank4(node):
            order[node] = produced
            node.meta["val"] = _with_order(node.meta["val"], produced)
    return len(copies)


def _map_nodes(args, wanted: dict, consumer: Node, converted):
    """``args`` with each node in ``wanted`` replaced by its copy in the wanted dim order."""
    if isinstance(args, (list, tuple)):
        return type(args)(_map_nodes(a, wanted, consumer, converted) for a in args)
    return converted(args, wanted[args], consumer) if isinstance(args, Node) and args in wanted else args
