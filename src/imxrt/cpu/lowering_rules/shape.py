"""CPU lowering, data movement: permute_copy -> cortex_m transpose at the lowest rank that moves the same
bytes; every other data-movement op (views, slices, concatenations, nearest upsampling, expands, pads by
reflection or replication, amax / amin) and every lookup by an index or a mask (embedding, index_select,
index_put, masked_fill) stays on its portable kernel, on the int8 values."""

from __future__ import annotations

import numpy as np
import torch
from torch.fx import Node

from imxrt.cpu.lowering_rules.common import NotLowered, Rewrite, cortex_m, edge, node_arg, shape_of
from imxrt.kernels.requantize import INT8_MAX, INT8_MIN
from imxrt.passes.qdq import is_dequantize, is_index_tensor


def collapsed_permutation(shape, perm) -> tuple[list[int], list[int]]:
    """The same byte movement at the lowest rank: size-1 dimensions dropped, and input dimensions that stay
    neighbours in the output merged (ShuffleNet's [1, g, c/g, H, W] by [0, 2, 1, 3, 4] is [g, c/g, H*W]
    by [1, 0, 2]). Returns (shape, perm); an identity perm moves nothing."""
    kept = [d for d in perm if shape[d] != 1]
    groups: list[list[int]] = []
    for d in kept:
        if groups and d == groups[-1][-1] + 1:
            groups[-1].append(d)
        else:
            groups.append([d])
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])
    sizes = [int(np.prod([shape[d] for d in groups[g]])) for g in order]
    return sizes, [order.index(g) for g in range(len(groups))]


def lower_permute(rw: Rewrite) -> Node:
    """permute_copy -> cortex_m transpose (rank <= 4), at the lowest rank that moves the same bytes (views
    of the int8 tensor around it), or a view alone where no bytes move."""
    x_dq, dims = rw.anchor.args[:2]
    rw.shared_qparams(x_dq)
    in_shape = shape_of(x_dq)
    perm = [int(d) % len(in_shape) for d in dims]
    if len(in_shape) <= 4:
        return rw.emit(cortex_m("transpose"), (rw.int8(x_dq), perm))
    return moved(rw, rw.int8(x_dq), in_shape, perm, val=rw.cluster.quantizes[0].meta["val"])


def moved(rw: Rewrite, x: Node, in_shape: tuple, perm: list[int], val: torch.Tensor | None = None) -> Node:
    """The int8 node ``x`` permuted by ``perm``: a view where no bytes move, else a transpose at the lowest
    rank that moves the same bytes (views around it)."""
    out_shape = [in_shape[p] for p in perm]
    val = val if val is not None else rw.like(out_shape)
    shape, small_perm = collapsed_permutation(in_shape, perm)
    if small_perm == sorted(small_perm):
        return rw.emit(edge.view_copy.default, (x, out_shape), val=val)
    if len(shape) > 4:
        raise NotLowered(f"transpose of a rank-{len(in_shape)} tensor that is rank {len(shape)} at its lowest "
                         "(the kernel takes rank <= 4)")
    x = rw.emit(edge.view_copy.default, (x, shape), val=rw.like(shape))
    moved = rw.emit(cortex_m("transpose"), (x, small_perm), val=rw.like([shape[p] for p in small_perm]))
    return rw.emit(edge.view_copy.default, (moved, out_shape), val=val)


def lower_portable(rw: Rewrite) -> Node:
    """A data-movement op stays on its portable kernel, now on the int8 values (no requantization: input
    and output share qparams)."""
    rw.no_fused_activation()
    inputs = [a for arg in rw.anchor.args for a in (arg if isinstance(arg, (list, tuple)) else [arg])
              if isinstance(a, Node)]
    if not all(is_dequantize(a) for a in inputs):
        raise NotLowered("an operand is a float constant")
    rw.shared_qparams(*inputs)

    def swap(arg):
        if isinstance(arg, (list, tuple)):
            return type(arg)(swap(a) for a in arg)
        return rw.int8(arg) if isinstance(arg, Node) else arg

    return rw.emit(rw.anchor.target, tuple(swap(a) for a in rw.anchor.args))


def lower_lookup(rw: Rewrite) -> Node:
    """The portable kernel on the int8 table (an embedding's weights, index_select's or index_put's input),
    the integer indices read as they are; the output and any values put into the table share its qparams:
    the kernel moves bytes."""
    rw.no_fused_activation()
    table = rw.anchor.args[0]
    if not is_dequantize(table):
        raise NotLowered("the table is a float constant")
    if rw.anchor.target == edge.index_put.default and node_arg(rw.anchor, 3, "accumulate", False):
        raise NotLowered("index_put with accumulate=True adds values, which an int8 copy cannot; it runs in float")
    values = [a for a in rw.anchor.args[1:] if is_dequantize(a)]
    rw.shared_qparams(table, *values)

    def swap(arg):
        if isinstance(arg, (list, tuple)):  # index_put's indices, one tensor (or None) per dimension
            return type(arg)(swap(a) for a in arg)
        if isinstance(arg, Node) and not is_index_tensor(arg):
            return rw.int8(arg)
        return arg

    return rw.emit(rw.anchor.target, (rw.int8(table), *(swap(a) for a in rw.anchor.args[1:])))


def lower_masked_fill(rw: Rewrite) -> Node:
    """masked_fill.Scalar on the int8 input, the fill value quantized with the input's qparams (clamped to
    int8, as quantizing the float result would)."""
    rw.no_fused_activation()
    x, mask, value = rw.anchor.args[:3]
    if not is_index_tensor(mask):
        raise NotLowered(f"the mask {mask.name} is not a boolean tensor")
    rw.shared_qparams(x)
    # the quantize the int8 program applies to the float result, applied to the fill value alone (an infinite
    # fill becomes the int8 bound)
    scale, zero_point = rw.cluster.quantizes[0].args[1:3]
    fill = torch.ops.quantized_decomposed.quantize_per_tensor(
        torch.tensor([float(value)], dtype=torch.float32), scale, zero_point, INT8_MIN, INT8_MAX, torch.int8)
    return rw.emit(rw.anchor.target, (rw.int8(x), mask, int(fill[0])))


def lower_loop_marker(rw: Rewrite) -> Node:
    """A recurrent loop's marker (where a step's values enter or leave it, ``passes.recurrent_loops``), on
    the int8 values; rolling the loop turns it into the scan's own slicing and copies."""
    return lower_portable(rw)
