"""Per-op quantization rules: which aten op gets which int8 treatment, and which devices run it in int8.

The rule kinds are types, not strings. ``QUANTIZATION`` has one row per op: its rule and the devices with an
int8 kernel for it. An op has one rule whatever device runs it, so a tensor crossing the NPU/CPU boundary
never needs requantizing. ``rules_for(target)`` gives the rules of the ops any of the target's devices runs,
and ``quantizer.ImxrtQuantizer`` applies the rule of each node's op. An op without a rule there is left
float (and runs as a float op on the CPU, with that reason in the report).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch

from imxrt.op_kinds import is_elementwise_map
from imxrt.passes.recurrent_loops import LOOP_CARRY, LOOP_INPUT, LOOP_RESULT, LOOP_STACK
from imxrt.passes.rescale_bmm_operands import QparamFlow

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


@dataclass(frozen=True)
class Lookup:
    """An op that picks or places values of a table by integer indices or a boolean mask it reads as they
    are (an embedding's rows, ``index_select``, ``masked_fill``, ``index_put``): the table, its first
    argument, is quantized per tensor (a constant table observed like an activation, so its own range sets
    its qparams); the output and any values written into the table share its qparams, so the int8 kernel
    moves bytes and the lookup is exact. The index or mask stays an integer or boolean tensor.

    ``writes_constant``: the op also writes a constant of the model (masked_fill's value); the output takes
    the table's qparams without being observed, so a fill far outside the data (an attention mask's -1e4)
    saturates to the int8 bound instead of widening the range every other value is stored in."""

    writes_constant: bool = False


@dataclass(frozen=True)
class Compare:
    """An op that compares a tensor with a constant and writes a boolean mask (``x > 0.3``, a masked fill's
    mask): its input is int8, its output is no int8 tensor. The int8 kernel compares the int8 values with
    the integer threshold that gives the float comparison's answer for every one of them."""


Rule = Weighted | Compute | SharedWithInput | FixedOutput | MatMul | Lookup | Compare


class Device(enum.Enum):
    """A processor that runs int8 ops."""

    NPU = "npu"  # the eIQ Neutron NPU: its int8 kernels (reference/neutron.md)
    CPU = "cpu"  # the Cortex-M: CMSIS-NN's cortex_m kernels (reference/cortex_m.md), portable kernels for data movement


@dataclass(frozen=True)
class OpQuantization:
    """One op's row: how it is quantized, and the devices that run it in int8 (on a target with none of
    them it stays float)."""

    rule: Rule
    devices: frozenset[Device]


NPU_AND_CPU = frozenset({Device.NPU, Device.CPU})
NPU_ONLY = frozenset({Device.NPU})
CPU_ONLY = frozenset({Device.CPU})

_SOFTMAX_OUT = FixedOutput(scale=1.0 / 256.0, zero_point=-128)
_TANH_OUT = FixedOutput(scale=1.0 / 128.0, zero_point=0)
_LINEAR = Weighted(per_channel=False)
_ADD = Compute(fuses_activation=True)  # TFLite ADD / SUB and cortex_m quantized_add clamp their output
# Neutron's BATCH_MATMUL takes zero-point-0 operands; the Cortex-M's takes any, but both devices quantize an op
# alike (a bmm the NPU refuses for another reason runs on the CPU with the same tensors).
_BATCH_MATMUL = Compute(symmetric_inputs=True)

# Ops that move or select values: int8 on every device, output sharing the input's qparams.
DATA_MOVEMENT = (
    aten.cat.default, aten.concat.default, aten.view.default, aten.reshape.default, aten.flatten.using_ints,
    aten.unflatten.int,
    aten.permute.default, aten.transpose.int, aten.t.default, aten.squeeze.dim, aten.squeeze.dims,
    aten.unsqueeze.default, aten.slice.Tensor, aten.select.int, aten.expand.default, aten.pad.default,
    aten.constant_pad_nd.default,
    aten.reflection_pad1d.default, aten.reflection_pad2d.default, aten.reflection_pad3d.default,
    aten.replication_pad1d.default, aten.replication_pad2d.default, aten.replication_pad3d.default,
    aten.upsample_nearest2d.vec, aten.contiguous.default, aten.clone.default, aten.flip.default,
)

# The key under which the table quantizes every other elementwise map of one tensor (silu, hardsigmoid, sqrt,
# log2, erf, x ** 2, ...; ``op_kinds.is_elementwise_map``): the Cortex-M runs each as one 256-entry table
# (cortex_m::quantized_activation).
POINTWISE_UNARY = "pointwise unary op"

OpKey = torch._ops.OpOverload | str  # an aten op, or ``POINTWISE_UNARY``
RuleTable = dict[OpKey, Rule]


def _row(rule: Rule, devices: frozenset[Device] = NPU_AND_CPU) -> OpQuantization:
    """A row of ``QUANTIZATION``: both devices run the op in int8 unless ``devices`` says otherwise."""
    return OpQuantization(rule, devices)


# The NPU's ops are those Neutron has int8 kernels for, quantized as its converter needs; the CPU's those the
# Cortex-M runs in int8, where every elementwise unary op is one 256-entry table lookup (so gelu is int8
# too, and prelu with one slope; one per channel is two tables, a mul and an add). Bilinear upsampling has no
# CMSIS-NN kernel: on a CPU-only target it stays float rather than carry Q/DQ pairs around a float op.
QUANTIZATION: dict[OpKey, OpQuantization] = {
    # weighted
    aten.conv2d.default: _row(Weighted()),
    aten.conv2d.padding: _row(Weighted()),
    aten.linear.default: _row(_LINEAR),
    aten.conv_transpose2d.input: _row(Weighted(weight_axis=1)),
    # elementwise and matrix compute
    aten.add.Tensor: _row(_ADD),
    aten.sub.Tensor: _row(_ADD),  # cortex_m::quantized_add with the second operand's multiplier negated
    aten.mul.Tensor: _row(Compute()),  # calibrated inputs: no clipping of either operand to a fixed range
    # cortex_m::quantized_div (a division by a constant became a mul earlier)
    aten.div.Tensor: _row(Compute(), CPU_ONLY),
    aten.bmm.default: _row(_BATCH_MATMUL),
    aten.matmul.default: _row(MatMul()),
    aten.mm.default: _row(MatMul()),
    aten.relu.default: _row(Compute()),
    aten.relu6.default: _row(Compute()),
    aten.hardtanh.default: _row(Compute()),
    aten.clamp.default: _row(Compute()),
    aten.hardswish.default: _row(Compute()),
    aten.leaky_relu.default: _row(Compute()),
    aten.prelu.default: _row(Compute()),
    aten.exp.default: _row(Compute()),
    aten.log.default: _row(Compute()),
    aten.rsqrt.default: _row(Compute()),
    aten.abs.default: _row(Compute()),
    aten.neg.default: _row(Compute()),
    aten.gelu.default: _row(Compute(), CPU_ONLY),
    aten.upsample_bilinear2d.vec: _row(Compute(), NPU_ONLY),
    # fixed output ranges: TFLM's, which CMSIS-NN's softmax takes too, so both sides of an NPU/CPU boundary
    # read the same qparams
    aten.softmax.int: _row(_SOFTMAX_OUT),
    aten._softmax.default: _row(_SOFTMAX_OUT),
    aten.sigmoid.default: _row(_SOFTMAX_OUT),  # TFLite LOGISTIC: scale 1/256, zero point -128
    aten.tanh.default: _row(_TANH_OUT),
    # data movement and selection: output shares the input's qparams
    aten.max_pool2d.default: _row(SharedWithInput()),
    aten.avg_pool2d.default: _row(SharedWithInput()),
    aten.adaptive_avg_pool2d.default: _row(SharedWithInput()),
    aten.mean.dim: _row(SharedWithInput()),  # a mean over H and W is an average pool
    # a sum is a fully connected layer by a weight of ones on the CPU; shared qparams, as the NPU's SUM needs
    aten.sum.dim_IntList: _row(SharedWithInput()),
    aten.sum.default: _row(SharedWithInput()),  # x.sum(): to_edge makes it a sum.dim_IntList over every dim
    # amax / amin pick values (shared qparams): portable kernels on int8 on the CPU
    aten.amax.default: _row(SharedWithInput()),
    aten.amin.default: _row(SharedWithInput()),
    aten.maximum.default: _row(SharedWithInput()),
    aten.minimum.default: _row(SharedWithInput()),
    **{op: _row(SharedWithInput()) for op in DATA_MOVEMENT},
    # lookups by an integer index or a boolean mask: the CPU's portable kernels on the int8 table (Neutron
    # has no GATHER or SELECT, reference/neutron.md)
    aten.embedding.default: _row(Lookup(), CPU_ONLY),
    aten.index_select.default: _row(Lookup(), CPU_ONLY),
    aten.masked_fill.Scalar: _row(Lookup(writes_constant=True), CPU_ONLY),
    aten.index_put.default: _row(Lookup(), CPU_ONLY),
    **{op: _row(Compare(), CPU_ONLY) for op in (aten.gt.Scalar, aten.ge.Scalar, aten.lt.Scalar, aten.le.Scalar)},
    # a recurrent loop's markers (``passes.recurrent_loops``): where a step's values enter and leave it
    **{op: _row(SharedWithInput()) for op in (LOOP_INPUT, LOOP_CARRY, LOOP_RESULT, LOOP_STACK)},
    POINTWISE_UNARY: _row(Compute(), CPU_ONLY),
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
QUANTIZATION.update({in_place: QUANTIZATION[functional] for in_place, functional in _IN_PLACE.items()})


def runs_in_int8(op: object, device: Device) -> bool:
    """Whether ``device`` has an int8 kernel for aten ``op`` (its row lists the device)."""
    row = QUANTIZATION.get(op)
    return row is not None and device in row.devices


def devices_of(target) -> frozenset[Device]:
    """The devices of a target that run int8 ops: its NPU (if it has one) and its CPU; None is the default
    target, the i.MX RT700 (NPU and CPU)."""
    return NPU_AND_CPU if target is None or target.npu is not None else CPU_ONLY


def rules_on(devices: frozenset[Device]) -> RuleTable:
    """The rules of the ops any of ``devices`` runs in int8."""
    return {op: row.rule for op, row in QUANTIZATION.items() if row.devices & devices}


def rules_for(target) -> RuleTable:
    """The rules of a target: those of the ops any of its devices runs in int8."""
    return rules_on(devices_of(target))


def qparam_flow(devices: frozenset[Device]) -> QparamFlow:
    """The fixed and shared qparams of the ops ``devices`` run in int8, for ``RescaleBatchMatmulOperandsPass``."""
    table = {op: rule for op, rule in rules_on(devices).items() if not isinstance(op, str)}
    return QparamFlow(
        fixed_zero_points={op: rule.zero_point for op, rule in table.items() if isinstance(rule, FixedOutput)},
        shared_with_input=frozenset(op for op, rule in table.items()
                                    if isinstance(rule, (SharedWithInput, Lookup))))


def rule_for(table: RuleTable, node: torch.fx.Node) -> Rule | None:
    """``node``'s rule in ``table``: its op's row, or the pointwise row for an elementwise map of one tensor."""
    rule = table.get(node.target)
    if rule is None and POINTWISE_UNARY in table and is_elementwise_map(node):
        return table[POINTWISE_UNARY]
    return rule


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
