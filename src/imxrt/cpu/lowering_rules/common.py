"""CPU lowering, shared by every op family: the cluster being rewritten (``Rewrite``: its int8 inputs,
qparams, constants and the node-creating helpers), ``NotLowered``, and the argument readers."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from executorch.exir.dialects._ops import ops as exir_ops
from torch.fx import Node

from imxrt.cpu.isa import Isa
from imxrt.cpu.lowering_graph import Editor
from imxrt.kernels.requantize import INT8_MAX, INT8_MIN, quantize_value
from imxrt.passes.qdq import (
    DEQUANTIZE_PER_CHANNEL,
    DEQUANTIZE_PER_TENSOR,
    Cluster,
    QParams,
    is_dequantize,
    qparams_of_quantize,
)

edge = exir_ops.edge.aten


def cortex_m(name: str):
    """The edge op ``cortex_m::<name>`` (registered by ``imxrt.cortex_m.ops``)."""
    return getattr(exir_ops.edge.cortex_m, name).default


class NotLowered(Exception):
    """The cluster's op has a kernel, but not for this instance; the message says why."""


def f32(scale: float) -> float:
    """Scales as the device sees them: float32 values (TFLM and the .pte both store float32)."""
    return float(np.float32(scale))


def pair(value, default: tuple[int, int]) -> list[int]:
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        return list(default)
    if isinstance(value, int):
        return [value, value]
    return [int(value[0]), int(value[-1])]


def node_arg(node: Node, index: int, name: str, default=None):
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)


def shape_of(node: Node) -> tuple[int, ...]:
    value = node.meta["val"]
    value = value[0] if isinstance(value, (tuple, list)) else value
    return tuple(int(d) for d in value.shape)


def nhwc(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    n, c, h, w = shape
    return n, h, w, c


def clamp_bounds(node: Node) -> tuple[float | None, float | None]:
    """(low, high) of a hardtanh / clamp; None where there is no bound (left out, or infinite: the int8
    range bounds it then)."""
    if node.target == edge.hardtanh.default:
        bounds = node_arg(node, 1, "min_val", -1.0), node_arg(node, 2, "max_val", 1.0)
    else:
        bounds = node_arg(node, 1, "min"), node_arg(node, 2, "max")
    return tuple(None if b is None or not math.isfinite(float(b)) else float(b) for b in bounds)


@dataclass
class Rewrite:
    """One cluster being lowered: its int8 inputs, qparams, constants and the node-creating helpers."""

    editor: Editor
    isa: Isa
    cluster: Cluster

    @property
    def anchor(self) -> Node:
        return self.cluster.anchor

    # --- reading the cluster ------------------------------------------------------------------------------

    def int8(self, arg: object) -> Node:
        """The int8 tensor behind a per-tensor dequantize argument."""
        if not (isinstance(arg, Node) and arg.target == DEQUANTIZE_PER_TENSOR):
            raise NotLowered(f"operand {getattr(arg, 'name', arg)} is not a per-tensor int8 tensor")
        if arg.args[5] != torch.int8:
            raise NotLowered(f"operand {arg.name} is {arg.args[5]}, not int8")
        return arg.args[0]

    def qparams(self, arg: Node) -> QParams:
        return QParams(f32(arg.args[1]), int(arg.args[2]))

    def output_qparams(self) -> QParams:
        found = [qparams_of_quantize(q) for q in self.cluster.quantizes]
        if any(q.args[5] != torch.int8 for q in self.cluster.quantizes):
            raise NotLowered("the output is not quantized to int8")
        if not all(found[0].same_as(other) for other in found[1:]):
            raise NotLowered(f"the output is quantized with several qparams {found}")
        return QParams(f32(found[0].scale), found[0].zero_point)

    def shared_qparams(self, *args: Node) -> QParams:
        """The one qparams every listed input and the output share (the kernel moves bytes unscaled)."""
        out = self.output_qparams()
        for arg in args:
            found = self.qparams(arg)
            if not out.same_as(found):
                raise NotLowered(f"input and output must share quantization parameters (found: input {found}, "
                                 f"output {out})")
        return out

    def activation_range(self, out: QParams) -> tuple[int, int]:
        """The int8 clamp of a fused relu / relu6 / hardtanh / clamp on the output scale. Quantization is
        monotonic, so clamping the int8 result at quantize(bound) is exactly the float clamp."""
        activation = self.cluster.activation
        if activation is None:
            return INT8_MIN, INT8_MAX
        low, high = (0.0, None) if activation.target == edge.relu.default else clamp_bounds(activation)
        act_min = INT8_MIN if low is None else max(INT8_MIN, quantize_value(low, out.scale, out.zero_point))
        act_max = INT8_MAX if high is None else min(INT8_MAX, quantize_value(high, out.scale, out.zero_point))
        return act_min, act_max

    def no_fused_activation(self) -> None:
        if self.cluster.activation is not None:
            raise NotLowered(f"the kernel takes no fused {self.cluster.activation.target.__name__}")

    def weight(self, arg: object, axis: int) -> tuple[torch.Tensor, np.ndarray]:
        """(int8 weight, float64 scale per slice along ``axis``) of a constant symmetric int8 weight."""
        if not is_dequantize(arg):
            raise NotLowered("the weight is not a constant int8 tensor")
        data = self.editor.tensor(arg.args[0])
        if data is None or data.dtype != torch.int8:
            raise NotLowered(f"the weight {arg.args[0].name} is not a constant int8 tensor")
        if arg.target == DEQUANTIZE_PER_CHANNEL:
            scales, zero_points = self.editor.tensor(arg.args[1]), self.editor.tensor(arg.args[2])
            if int(arg.args[3]) % data.dim() != axis:
                raise NotLowered(f"the weight is quantized along axis {arg.args[3]}, not {axis}")
            if zero_points is not None and bool((zero_points != 0).any()):
                raise NotLowered("weight zero points must be 0 (symmetric int8 weights)")
            scales = scales.to(torch.float32).numpy().astype(np.float64)
        else:
            if int(arg.args[2]) != 0:
                raise NotLowered("the weight zero point must be 0 (symmetric int8 weights)")
            scales = np.full(data.shape[axis], f32(arg.args[1]), np.float64)
        return data, scales

    def bias(self, arg: object) -> Node | None:
        """The int32 bias constant behind a dequantize (None without bias)."""
        if arg is None:
            return None
        if not is_dequantize(arg) or self.editor.tensor(arg.args[0]) is None or \
                self.editor.tensor(arg.args[0]).dtype != torch.int32:
            raise NotLowered("the bias is not a constant int32 tensor")
        return arg.args[0]

    # --- building --------------------------------------------------------------------------------------------

    def constant(self, suffix: str, data: torch.Tensor) -> Node:
        return self.editor.constant(f"{self.anchor.name}_{suffix}", data)

    def scratch(self, nbytes: int) -> Node:
        return self.editor.scratch(self.anchor, nbytes)

    def emit(self, op, args, val: torch.Tensor | None = None) -> Node:
        """A node standing for the cluster (or, with ``val``, an intermediate value of it)."""
        if val is None:
            val = self.cluster.quantizes[0].meta["val"]
        return self.editor.call(op, args, val, self.cluster.ops, before=self.anchor)

    def like(self, shape) -> torch.Tensor:
        return self.cluster.quantizes[0].meta["val"].new_empty(tuple(shape), dtype=torch.int8)
