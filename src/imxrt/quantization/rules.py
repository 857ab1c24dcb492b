"""Per-op quantization rules: which aten op gets which int8 treatment, one table per device.

The rule kinds are types, not strings. ``NPU_RULES`` holds what the Neutron NPU runs in int8,
``CPU_RULES`` what the Cortex-M runs in int8; ``rules_for(target)`` composes the target's devices once, and
``quantizer.ImxrtQuantizer`` applies the row of each node's op. An op without a row is left float (and
runs as a float op on the CPU, with that reason in the report).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

aten = torch.ops.aten


@dataclass(frozen=True)
class Weighted:
    """Conv / linear: activation input, symmetric int8 weight, derived int32 bias.

    Conv weights are per output channel (axis ``weight_axis``). Linear weights are per tensor: the stock
    Cortex-M ``quantized_linear`` kernel takes one multiplier, and per-tensor FULLY_CONNECTED is what
    TFLite and NXP's own quantizer give the NPU. A following fusable activation (relu, relu6) takes over
    the output observer: no Q/DQ between them.
    """

    weight_axis: int = 0
    per_channel: bool = True


@dataclass(frozen=True)
class Compute:
    """An op that computes new values: its tensor inputs and its output each get their own observer.

    ``fuses_activation``: the int8 kernel clamps its own output (TFLite's fused activation, CMSIS-NN's
    activation range), so a following relu / relu6 takes over the output observer, as for ``Weighted``.
    ``symmetric_inputs``: the op reads its tensor inputs at zero point 0, so whatever produces them (through
    ops that share qparams) is quantized symmetric.
    """

    fuses_activation: bool = False
    symmetric_inputs: bool = False


@dataclass(frozen=True)
class SharedWithInput:
    """An op that moves or selects values: its output (and every other tensor input) shares the qparams
    of its first input, so the int8 kernel copies bytes without requantizing."""


@dataclass(frozen=True)
class FixedOutput:
    """An op whose int8 kernel dictates the output qparams (TFLM's softmax, logistic and tanh)."""

    scale: float
    zero_point: int


@dataclass(frozen=True)
class MatMul:
    """x @ W: a constant right operand is a weight (per-tensor symmetric, so the op lowers to
    FULLY_CONNECTED like a linear); two activations are a ``Compute``."""


Rule = Weighted | Compute | SharedWithInput | FixedOutput | MatMul

_SOFTMAX_OUT = FixedOutput(scale=1.0 / 256.0, zero_point=-128)
_TANH_OUT = FixedOutput(scale=1.0 / 128.0, zero_point=0)
_LINEAR = Weighted(per_channel=False)
_ADD = Compute(fuses_activation=True)  # TFLite ADD / SUB and cortex_m quantized_add clamp their output
# Neutron's BATCH_MATMUL takes zero-point-0 operands; the Cortex-M's takes any, but both devices quantize an op
# alike (a bmm the NPU refuses for another reason runs on the CPU with the same tensors).
_BATCH_MATMUL = Compute(symmetric_inputs=True)

# Ops that move or select values: int8 on every device, output sharing the input's qparams.
_DATA_MOVEMENT = (
    aten.cat.default, aten.concat.default, aten.view.default, aten.reshape.default, aten.flatten.using_ints,
    aten.unflatten.int,
    aten.permute.default, aten.transpose.int, aten.t.default, aten.squeeze.dim, aten.squeeze.dims,
    aten.unsqueeze.default, aten.slice.Tensor, aten.select.int, aten.expand.default, aten.pad.default,
    aten.constant_pad_nd.default,
    aten.reflection_pad1d.default, aten.reflection_pad2d.default, aten.reflection_pad3d.default,
    aten.replication_pad1d.default, aten.replication_pad2d.default, aten.replication_pad3d.default,
    aten.upsample_nearest2d.vec, aten.contiguous.default, aten.clone.default,
)

RuleTable = dict[torch._ops.OpOverload, Rule]

# The ops the Neutron NPU has int8 kernels for (reference/neutron.md), quantized as its converter needs.
NPU_RULES: RuleTable = {
    # weighted
    aten.conv2d.default: Weighted(),
    aten.conv2d.padding: Weighted(),
    aten.linear.default: _LINEAR,
    aten.conv_transpose2d.input: Weighted(weight_axis=1),
    # elementwise and matrix compute
    aten.add.Tensor: _ADD,
    aten.sub.Tensor: _ADD,
    aten.mul.Tensor: Compute(),  # calibrated inputs: no clipping of either operand to a fixed range
    aten.bmm.default: _BATCH_MATMUL,
    aten.matmul.default: MatMul(),
    aten.mm.default: MatMul(),
    aten.relu.default: Compute(),
    aten.relu6.default: Compute(),
    aten.hardtanh.default: Compute(),
    aten.clamp.default: Compute(),
    aten.hardswish.default: Compute(),
    aten.leaky_relu.default: Compute(),
    aten.prelu.default: Compute(),
    aten.exp.default: Compute(),
    aten.log.default: Compute(),
    aten.rsqrt.default: Compute(),
    aten.abs.default: Compute(),
    aten.neg.default: Compute(),
    aten.upsample_bilinear2d.vec: Compute(),
    # fixed output ranges
    aten.softmax.int: _SOFTMAX_OUT,
    aten._softmax.default: _SOFTMAX_OUT,
    aten.sigmoid.default: _SOFTMAX_OUT,  # TFLite LOGISTIC: scale 1/256, zero point -128
    aten.tanh.default: _TANH_OUT,
    # data movement and selection: output shares the input's qparams
    aten.max_pool2d.default: SharedWithInput(),
    aten.avg_pool2d.default: SharedWithInput(),
    aten.adaptive_avg_pool2d.default: SharedWithInput(),
    aten.mean.dim: SharedWithInput(),
    aten.sum.dim_IntList: SharedWithInput(),
    aten.sum.default: SharedWithInput(),  # x.sum(): to_edge makes it a sum.dim_IntList over every dim
    aten.amax.default: SharedWithInput(),
    aten.amin.default: SharedWithInput(),
    aten.maximum.default: SharedWithInput(),
    aten.minimum.default: SharedWithInput(),
    **{op: SharedWithInput() for op in _DATA_MOVEMENT},
}

# The ops the Cortex-M runs in int8 (the cortex_m kernels of reference/cortex_m.md, and data movement on
# portable kernels): every elementwise unary op is one 256-entry table lookup there, so gelu is int8 too.
# prelu and bilinear upsampling have no CMSIS-NN kernel: on a CPU-only target they stay float rather
# than carry Q/DQ pairs around a float op. amax / amin pick values (shared qparams): portable kernels on int8.
CPU_RULES: RuleTable = {
    aten.conv2d.default: Weighted(),
    aten.conv2d.padding: Weighted(),
    aten.linear.default: _LINEAR,
    aten.conv_transpose2d.input: Weighted(weight_axis=1),
    aten.add.Tensor: _ADD,
    aten.sub.Tensor: _ADD,  # cortex_m::quantized_add with the second operand's multiplier negated
    aten.mul.Tensor: Compute(),
    aten.div.Tensor: Compute(),  # cortex_m::quantized_div (a division by a constant became a mul earlier)
    aten.bmm.default: _BATCH_MATMUL,
    aten.matmul.default: MatMul(),
    aten.mm.default: MatMul(),
    aten.relu.default: Compute(),
    aten.relu6.default: Compute(),
    aten.hardtanh.default: Compute(),
    aten.clamp.default: Compute(),
    aten.hardswish.default: Compute(),
    aten.leaky_relu.default: Compute(),
    aten.exp.default: Compute(),
    aten.log.default: Compute(),
    aten.rsqrt.default: Compute(),
    aten.abs.default: Compute(),
    aten.neg.default: Compute(),
    aten.gelu.default: Compute(),
    # CMSIS-NN's softmax takes the same fixed output as TFLM's; sigmoid and tanh keep the NPU's fixed
    # ranges too, so both sides of an NPU/CPU boundary read the same qparams.
    aten.softmax.int: _SOFTMAX_OUT,
    aten._softmax.default: _SOFTMAX_OUT,
    aten.sigmoid.default: _SOFTMAX_OUT,
    aten.tanh.default: _TANH_OUT,
    aten.max_pool2d.default: SharedWithInput(),
    aten.avg_pool2d.default: SharedWithInput(),
    aten.adaptive_avg_pool2d.default: SharedWithInput(),
    aten.mean.dim: SharedWithInput(),  # a mean over H and W is an average pool
    # a sum is a fully connected layer by a weight of ones; shared qparams, as the NPU's SUM needs
    aten.sum.dim_IntList: SharedWithInput(),
    aten.sum.default: SharedWithInput(),
    aten.maximum.default: SharedWithInput(),
    aten.minimum.default: SharedWithInput(),
    aten.amax.default: SharedWithInput(),
    aten.amin.default: SharedWithInput(),
    **{op: SharedWithInput() for op in _DATA_MOVEMENT},
}

# In-place variants (``nn.ReLU(inplace=True)``, ``out += identity``) quantize like their functional form.
_IN_PLACE = {
    aten.relu_.default: aten.relu.default,
    aten.hardtanh_.default: aten.hardtanh.default,
    aten.clamp_.default: aten.clamp.default,
    aten.leaky_relu_.default: aten.leaky_relu.default,
    aten.hardswish_.default: aten.hardswish.default,
    aten.sigmoid_.default: aten.sigmoid.default,
    aten.tanh_.default: aten.tanh.default,
    aten.add_.Tensor: aten.add.Tensor,
    aten.sub_.Tensor: aten.sub.Tensor,
    aten.mul_.Tensor: aten.mul.Tensor,
}
for _table in (NPU_RULES, CPU_RULES):
    _table.update({in_place: _table[functional] for in_place, functional in _IN_PLACE.items()
                   if functional in _table})


# The key under which a table quantizes every other pointwise op of one tensor (silu, hardsigmoid, sqrt,
# log2, erf, x ** 2, ...): the Cortex-M runs each as one 256-entry table (cortex_m::quantized_activation).
POINTWISE_UNARY = "pointwise unary op"
CPU_RULES[POINTWISE_UNARY] = Compute()


def is_pointwise_unary(node: torch.fx.Node) -> bool:
    """A deterministic elementwise aten op (torch's pointwise tag) of exactly one float tensor, its first
    argument, whose result has that tensor's shape and dtype."""
    op = node.target
    if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload):
        return False
    if torch.Tag.pointwise not in op.tags or torch.Tag.nondeterministic_seeded in op.tags:
        return False
    tensors = [a for a in (*node.args, *node.kwargs.values()) if isinstance(a, torch.fx.Node)]
    if len(tensors) != 1 or not node.args or node.args[0] is not tensors[0]:
        return False
    before, after = tensors[0].meta.get("val"), node.meta.get("val")
    return (isinstance(before, torch.Tensor) and isinstance(after, torch.Tensor)
            and before.dtype.is_floating_point and after.dtype == before.dtype and after.shape == before.shape)


def rule_for(table: RuleTable, node: torch.fx.Node) -> Rule | None:
    """``node``'s rule in ``table``: its op's row, or the pointwise row for a pointwise op of one tensor."""
    rule = table.get(node.target)
    if rule is None and POINTWISE_UNARY in table and is_pointwise_unary(node):
        return table[POINTWISE_UNARY]
    return rule


def compose(*tables: RuleTable) -> RuleTable:
    """One rule set from several devices' tables. An op both devices quantize must get the same rule on
    both, or a tensor crossing the NPU/CPU boundary would need requantizing: that is our bug, so it raises."""
    composed: RuleTable = {}
    for table in tables:
        for op, rule in table.items():
            if composed.setdefault(op, rule) != rule:
                raise ValueError(f"{op}: devices disagree on its quantization ({composed[op]} vs {rule})")
    return composed


def rules_for(target) -> RuleTable:
    """The rules of a target: its NPU's composed with its CPU's, or the CPU's alone."""
    return compose(NPU_RULES, CPU_RULES) if target.npu is not None else dict(CPU_RULES)


# Activations that fold into the preceding conv / linear's output clamp: no Q/DQ between them. Both
# lowerings apply any clamp exactly in int8 (a fused RELU / RELU6, the kernel's activation_min/max, or
# MINIMUM / MAXIMUM), so every constant range fuses.
FUSABLE_ACTIVATIONS = frozenset({aten.relu.default, aten.relu_.default, aten.relu6.default,
                                 aten.hardtanh.default, aten.hardtanh_.default})


def is_fusable_activation(node: torch.fx.Node) -> bool:
    """relu, relu6 and hardtanh with scalar bounds (relu6's export form, hardsigmoid folded into a conv)."""
    if node.op != "call_function" or node.target not in FUSABLE_ACTIVATIONS:
        return False
    if node.target in (aten.hardtanh.default, aten.hardtanh_.default):
        low, high = (list(node.args[1:3]) + [-1.0, 1.0][len(node.args[1:3]):])[:2]
        return isinstance(low, (int, float)) and isinstance(high, (int, float)) and low < high
    return True
