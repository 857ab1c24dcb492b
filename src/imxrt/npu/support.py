"""Neutron capability table: which int8 edge ops the eIQ Neutron NPU runs, and under which constraints.

Each constraint is a named function whose docstring is the rule a user reads (filled from the target's
limits); it returns ``(ok, what was found)``. ``check(cluster, npu)`` gives the first failed rule as the
reason a node stays on the CPU. The same text feeds the report and ``docs/supported_ops.md``.

Every limit of the NPU path is a rule here: Neutron's, what the LiteRT lowering can express (functions on
plain numbers in ``npu.litert.expressible``, which the converters assert) and what TFLM's prepare needs
(``kernels.limits``, through ``npu.litert.tflm_limits``). A TFLM rule whose numbers only the lowering sees
(a folded constant operand) passes here and is checked again where the lowering writes the operator, under
the rule's name. Each row lists the LiteRT builtins its converter may write (``emits``); a static test
checks every other table has them (``tests/test_op_tables.py``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from executorch.exir.dialects._ops import ops as exir_ops
from torch.fx import Node

from imxrt.kernels import activations, limits
from imxrt.npu.litert import expressible, qdq, tflm_limits
from imxrt.npu.litert.context import clamp_range
from imxrt.npu.litert.converters.common import ceil_mode_windows
from imxrt.npu.litert.converters.reduce import SOFTMAX_OUTPUT
from imxrt.passes.qdq import (
    Cluster,
    QParams,
    is_dequantize,
    qparams_of_dequantize,
    tensor_args,
)
from imxrt.placement import not_quantized_reason, op_name
from imxrt.targets import NeutronConfig

edge = exir_ops.edge.aten

MAX_KERNEL_STRIDE_DILATION = 4096
MAX_MAC_BOUND = 65535  # kH * kW * roundup(C_in, num_macs): the weight block one pipe streams
SOFTMAX_MAX_CHANNELS = 2040
SOFTMAX_MAX_ROWS = 4096  # N*H*W
SOFTMAX_MAX_ELEMENTS = 524288
RESIZE_SCALES = (1, 2, 4, 8)


def _shape(node: object) -> tuple[int, ...]:
    value = node.meta.get("val") if isinstance(node, Node) else None
    return tuple(int(d) for d in value.shape) if value is not None else ()


def _ints(value: object, count: int, default: int) -> tuple[int, ...]:
    if value is None or value == []:
        return (default,) * count
    values = tuple(int(v) for v in (value if isinstance(value, (list, tuple)) else [value]))
    return values * count if len(values) == 1 else values


def _arg(node: Node, index: int, name: str, default: object = None) -> object:
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


Constraint = Callable[[Cluster, NeutronConfig], tuple[bool, str]]


# --- shared constraints ---------------------------------------------------------------------------------

def output_shares_input_qparams(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """Input and output must share quantization parameters (the NPU moves bytes without requantizing)."""
    found = cluster.input_qparams(0)
    out = cluster.output_qparams()
    return out.same_as(found), f"input {found}, output {out}"


def all_inputs_share_output_qparams(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """All inputs must share the output's quantization parameters."""
    out = cluster.output_qparams()
    ins = [qparams_of_dequantize(a) for a in tensor_args(cluster.anchor) if is_dequantize(a)]
    return all(out.same_as(q) for q in ins), f"inputs {ins}, output {out}"


def static_weights(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """Weights and bias must be constant int8 / int32 tensors."""
    tensors = tensor_args(cluster.anchor)[1:3]
    dynamic = [t.name for t in tensors if is_dequantize(t) and t.args[0].op != "placeholder"]
    return not dynamic, f"computed weights: {dynamic}" if dynamic else "constant weights"


# --- convolution ------------------------------------------------------------------------------------------

def _conv_params(node: Node):
    weight_shape = _shape(node.args[1])
    stride = _ints(node.args[3], 2, 1)
    padding = _ints(node.args[4], 2, 0)
    dilation = _ints(node.args[5], 2, 1)
    groups = int(node.args[8])
    return weight_shape, stride, padding, dilation, groups


def conv_is_2d(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """Convolution must be 2-D (1-D is rewritten to 2-D; 3-D has no Neutron kernel)."""
    rank = len(_shape(cluster.anchor.args[1]))
    strides = len(cluster.anchor.args[3])
    ok = rank == 2 + expressible.SPATIAL_DIMS and strides == expressible.SPATIAL_DIMS
    return ok, f"{rank - 2}-D convolution with {strides} strides"


def conv_weight_per_output_channel(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """Convolution weights must be quantized per tensor or per output channel (axis 0; a transposed
    convolution's weight per output channel, its axis 1)."""
    weight, transposed = cluster.anchor.args[1], bool(cluster.anchor.args[6])
    if qdq.is_dequantize_per_channel(weight):
        axis = int(weight.args[3]) % max(len(_shape(weight.args[0])), 1)
    elif is_dequantize(weight):
        axis = 0  # per tensor: the lowering repeats the one scale along axis 0
    else:
        return True, "no int8 weight"  # static_weights' to refuse
    found = f"weight quantized along axis {axis}" if qdq.is_dequantize_per_channel(weight) else "per-tensor weight"
    return expressible.conv_weight_axis_ok(axis, transposed), f"{found}{' (transposed)' if transposed else ''}"


def conv_window_limits(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """Kernel size, stride and dilation must each be at most 4096."""
    weight_shape, stride, _, dilation, _ = _conv_params(cluster.anchor)
    values = (*weight_shape[2:], *stride, *dilation)
    return max(values) <= MAX_KERNEL_STRIDE_DILATION, f"kernel {weight_shape[2:]}, stride {stride}, " \
        f"dilation {dilation}"


def conv_mac_bound(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """kH * kW * roundup(C_in, num_macs) must be at most 65535."""
    weight_shape = _shape(cluster.anchor.args[1])
    transposed = bool(cluster.anchor.args[6])
    kh, kw = weight_shape[2:]
    c_in = weight_shape[0] if transposed else weight_shape[1]  # input channels one output channel reads
    bound = kh * kw * math.ceil(c_in / npu.num_macs) * npu.num_macs
    return bound <= MAX_MAC_BOUND, f"kH*kW*roundup(C_in, {npu.num_macs}) = {bound}"


def transpose_conv_shape(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """Transposed convolution: groups 1, dilation 1, stride <= kernel and <= 2, padding < kernel,
    output_padding <= padding, or no padding at all (the output_padding rows then hold the bias alone, as
    TRANSPOSE_CONV's VALID output of that size does)."""
    node = cluster.anchor
    if not node.args[6]:
        return True, "not transposed"
    weight_shape, stride, padding, dilation, groups = _conv_params(node)
    output_padding = _ints(node.args[7], 2, 0)
    kernel = weight_shape[2:]
    ok = (
        groups == 1
        and dilation == (1, 1)
        and all(s <= min(k, 2) for s, k in zip(stride, kernel, strict=True))
        and all(p < k for p, k in zip(padding, kernel, strict=True))
        and (all(o <= p for o, p in zip(output_padding, padding, strict=True)) or padding == (0, 0))
    )
    return ok, (f"groups {groups}, dilation {dilation}, stride {stride}, padding {padding}, "
                f"output_padding {output_padding}, kernel {kernel}")


# --- matrix ops -------------------------------------------------------------------------------------------

_TRANSPOSE_2D = (edge.permute_copy.default, edge.t_copy.default)


def _fully_connected_operands(node: Node) -> tuple[object, object, bool]:
    """(input, weight behind any transpose, whether the op reads that weight transposed) of a linear / addmm /
    mm, as the LiteRT lowering reads them."""
    if node.target == edge.linear.default:
        return node.args[0], node.args[1], False
    x, weight = (node.args[1], node.args[2]) if node.target == edge.addmm.default else node.args[:2]
    if isinstance(weight, Node) and weight.target in _TRANSPOSE_2D:
        return x, weight.args[0], False
    return x, weight, True


def _mm_is_fully_connected(weight: object) -> bool:
    """mm lowers to FULLY_CONNECTED when its constant weight is symmetric int8 (else to BATCH_MATMUL)."""
    if is_dequantize(weight) and not qdq.is_dequantize_per_channel(weight):
        return qparams_of_dequantize(weight).zero_point == 0
    return qdq.is_dequantize_per_channel(weight)


def fully_connected_weight_per_output_channel(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """Fully connected weights must be quantized per tensor or per output feature (a weight quantized per
    input feature is refused whatever its scales)."""
    _, weight, transposed = _fully_connected_operands(cluster.anchor)
    if not qdq.is_dequantize_per_channel(weight):
        return True, "per-tensor weight"
    axis = int(weight.args[3]) % max(len(_shape(weight.args[0])), 1)
    axis = 1 - axis if transposed else axis  # the axis of the [out, in] filter
    return expressible.fully_connected_weight_axis_ok(False, axis), f"weight quantized along filter axis {axis}"


def fully_connected_bias_scale(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """Fully connected with a per-tensor weight: the float32 bias scale s_in * s_w must be within 0.02 of an
    output step of the exact product (TFLM's FULLY_CONNECTED prepare): an output scale about 3e5 times finer
    than s_in * s_w, which calibration gives an output it saw as nearly constant (inputs that cancel), fails."""
    x, weight, _ = _fully_connected_operands(cluster.anchor)
    if cluster.anchor.target == edge.mm.default and not _mm_is_fully_connected(weight):
        return True, "BATCH_MATMUL"
    q_in = qparams_of_dequantize(x) if is_dequantize(x) else None
    q_w = qparams_of_dequantize(weight) if is_dequantize(weight) else None
    if q_in is None or q_w is None:
        return True, "a per-channel weight or a constant input: checked when lowering"
    bias_scale = float(np.float32(q_in.scale) * np.float32(q_w.scale))  # the lowering's bias scale
    problem = limits.fully_connected_bias_scale_problem(q_in.scale, q_w.scale, bias_scale,
                                                        cluster.output_qparams().scale)
    return problem is None, problem or "bias scale within 0.02 of an output step"


def linear_weight_rank2(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """Fully connected weight must be a rank-2 constant int8 tensor."""
    node = cluster.anchor
    weight = node.args[1] if node.target == edge.linear.default else node.args[-1]
    if node.target == edge.addmm.default:
        weight = node.args[2]
    source = weight.args[0] if isinstance(weight, Node) and weight.target == edge.permute_copy.default else weight
    constant = is_dequantize(source) and source.args[0].op == "placeholder"
    rank = len(_shape(weight))
    return constant and rank == 2, f"rank {rank}, {'constant' if constant else 'computed'} weight"


def addmm_unit_scaling(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """addmm must have alpha = beta = 1."""
    alpha = cluster.anchor.kwargs.get("alpha", 1)
    beta = cluster.anchor.kwargs.get("beta", 1)
    return alpha == 1 and beta == 1, f"alpha {alpha}, beta {beta}"


def bmm_rank3_zero_points(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """Batch matmul inputs must be rank 3 with zero points 0."""
    ranks = [len(_shape(a)) for a in cluster.anchor.args[:2]]
    zps = [cluster.input_qparams(i).zero_point if cluster.input_qparams(i) else None for i in range(2)]
    return ranks == [3, 3] and zps == [0, 0], f"ranks {ranks}, zero points {zps}"


# --- elementwise ------------------------------------------------------------------------------------------

def binary_broadcast(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """Two inputs; broadcasting is allowed only when one input has the output's element count."""
    node = cluster.anchor
    out = math.prod(_shape(node))
    counts = [math.prod(_shape(a)) if isinstance(a, Node) else 1 for a in node.args[:2]]
    return len(node.args) >= 2 and out in counts, f"input elements {counts}, output {out}"


def add_sub_unit_alpha(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """add / sub must have alpha = 1."""
    alpha = cluster.anchor.kwargs.get("alpha", 1)
    return alpha == 1, f"alpha {alpha}"


def _operand_scales(node: Node) -> list[float | None]:
    """The int8 scale of each operand of a binary op as the LiteRT lowering writes it: a dequantize's, or a
    Python scalar's (quantized symmetric, ``LoweringContext.float_constant``); None for a constant tensor
    the lowering folds (only the lowering sees its value)."""
    scales: list[float | None] = []
    for arg in node.args[:2]:
        if isinstance(arg, (int, float)) and not isinstance(arg, bool):
            scales.append(qdq.symmetric_qparams(np.full([1], float(arg), np.float32)).scale)
        elif is_dequantize(arg) and not qdq.is_dequantize_per_channel(arg):
            scales.append(qparams_of_dequantize(arg).scale)
        else:
            scales.append(None)
    return scales


def add_sub_output_scale(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """add / sub / neg (a SUB from 0): the output scale must exceed the larger input scale / 2^19 (TFLM's ADD /
    SUB take only output multipliers below 1: an output calibration saw as nearly constant, from wide inputs,
    fails)."""
    node = cluster.anchor
    if node.target == edge.neg.default:
        q_in = cluster.input_qparams(0)
        scales = [q_in.scale, q_in.scale] if q_in is not None else [None]  # SUB(0, x): 0 at x's scale
    else:
        scales = _operand_scales(node)
    if None in scales:
        return True, "a constant tensor operand: checked when lowering"
    multiplier = tflm_limits.add_sub_multiplier(scales, cluster.output_qparams().scale)
    return multiplier < 1, f"output multiplier {multiplier:.3g}"


def mul_output_scale(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """mul: s1 * s2 / s_out must stay below 2^15 (TFLM's MUL shifts the product of two centred int8 values left
    by its multiplier's exponent in int32: a finer output scale wraps)."""
    scales = _operand_scales(cluster.anchor)
    if None in scales:
        return True, "a constant tensor operand: checked when lowering"
    problem = limits.requantize_left_shift_problem("MUL", scales, cluster.output_qparams().scale)
    return problem is None, problem or "output multiplier below 2^15"


def requantize_left_shift(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """Where the op's result is requantized to the output's qparams (a QUANTIZE after a clamp, a bilinear
    resize or a softmax, from the input's qparams or softmax's 1/256), s_in / s_out must stay below 2^23 (TFLM
    shifts the centred value left by the multiplier's exponent in int32: a finer output scale wraps)."""
    node = cluster.anchor
    out = cluster.output_qparams()
    if node.target == edge._softmax.default:
        written = QParams(SOFTMAX_OUTPUT.scale, SOFTMAX_OUTPUT.zero_point)
    elif clamp_range(node) == (0.0, math.inf):
        return True, "RELU requantizes itself"
    else:
        written = cluster.input_qparams(0)
        if written is None:
            return True, "no per-tensor input"
    if (written.scale, written.zero_point) == (out.scale, out.zero_point):
        return True, "no requantize"
    problem = limits.requantize_left_shift_problem("QUANTIZE", [written.scale], out.scale)
    return problem is None, problem or f"requantize multiplier {written.scale / out.scale:.3g}"


def hardswish_output_scale(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """hardswish: the output scale must exceed the input scale / 128 (TFLM's HARD_SWISH prepares only an output
    multiplier below 1: an output calibration saw as nearly 0, from wide inputs below -3, fails)."""
    q_in = cluster.input_qparams(0)
    if q_in is None:
        return True, "no per-tensor input"
    multiplier = activations.hard_swish_output_multiplier(q_in.scale, cluster.output_qparams().scale)
    return multiplier < 1, f"output multiplier {multiplier:.3g}"


def q4_input_scale(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """sigmoid / tanh: an input scale below 8 (from 8 on TFLM's LOGISTIC / TANH saturate every value, the zero
    point to the low end: an input of 0 gave tanh -1 and sigmoid 0)."""
    q_in = cluster.input_qparams(0)
    if q_in is None:
        return True, "no per-tensor input"
    return activations.q4_input_radius(q_in.scale) > 0, f"input scale {q_in.scale:.3g}"


def leaky_relu_slope_is_a_number(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """leaky_relu: the negative slope must be a number (NaN has no int8 value)."""
    slope = float(_arg(cluster.anchor, 1, "negative_slope", 0.01))
    return expressible.slope_is_a_number(slope), f"negative_slope {slope}"


def prelu_constant_weight(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """prelu: the weight must be a constant."""
    weight = cluster.anchor.args[1]
    computed = is_dequantize(weight) and weight.args[0].op != "placeholder"
    return not computed, f"weight computed by {weight.args[0].name}" if computed else "constant weight"


def rsqrt_input_never_negative(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """RSQRT fails on an int8 input below its zero point ("only defined for positive values" in TFLM and
    LiteRT): only an input whose zero point is -128 holds no negative value."""
    q = cluster.input_qparams(0)
    zero_point = q.zero_point if q else None
    return zero_point == -128, f"input zero point {zero_point} (values below it are negative)"


# --- pooling and reductions -------------------------------------------------------------------------------

def _pool_window(node: Node) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(kernel, stride) of a pooling node; PyTorch's stride defaults to the kernel."""
    kernel = _ints(_arg(node, 1, "kernel_size"), 2, 1)
    return kernel, _ints(_arg(node, 2, "stride") or kernel, 2, 1)


def avg_pool_options(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """Average pooling: no divisor_override, padding counted; kernel and stride <= 4096. A ceil-mode pool
    without padding is a SAME pool where TFLite's SAME windows are PyTorch's (it counts only real inputs,
    as PyTorch does past the padding)."""
    node = cluster.anchor
    kernel, stride = _pool_window(node)
    padding = _ints(_arg(node, 3, "padding", 0), 2, 0)
    ceil_mode = bool(_arg(node, 4, "ceil_mode", False))
    include_pad = bool(_arg(node, 5, "count_include_pad", True))
    divisor = _arg(node, 6, "divisor_override", None)
    overhang, same = ceil_mode_windows(_shape(node.args[0])[-2:], kernel, stride, padding) if ceil_mode else \
        (False, None)
    ceil_ok = not overhang or (same is not None and padding == (0, 0))
    ok = (ceil_ok and divisor is None and (include_pad or padding == (0, 0))
          and max(*kernel, *stride) <= MAX_KERNEL_STRIDE_DILATION)
    return ok, f"kernel {kernel}, stride {stride}, ceil_mode {ceil_mode}, count_include_pad {include_pad}, " \
        f"divisor_override {divisor}"


def adaptive_pool_divisible(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """Adaptive average pooling: H_in % H_out == 0 and W_in % W_out == 0."""
    h_in, w_in = _shape(cluster.anchor.args[0])[-2:]
    h_out, w_out = _shape(cluster.anchor)[-2:]
    return h_in % h_out == 0 and w_in % w_out == 0, f"{h_in}x{w_in} -> {h_out}x{w_out}"


def max_pool_options(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """Max pooling: dilation 1, indices unused; stride <= 4096, any kernel (padding TFLite's SAME does not
    match, ceil_mode, and any padding at a stride above 32, where Neutron's pool cannot pad itself, are a -128
    PAD in front)."""
    node = cluster.anchor
    _, stride = _pool_window(node)
    dilation = _ints(_arg(node, 4, "dilation", 1), 2, 1)
    indices_used = any(u.target is operator.getitem and u.args[1] == 1 and u.users for u in node.users)
    ok = dilation == (1, 1) and not indices_used and max(stride) <= MAX_KERNEL_STRIDE_DILATION
    return ok, f"dilation {dilation}, stride {stride}, indices used {indices_used}"


# --- softmax, resize, slice, pad --------------------------------------------------------------------------

def reduction_without_dtype(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """mean / sum must not convert to another dtype (``dtype=``)."""
    dtype = cluster.anchor.kwargs.get("dtype")
    return dtype is None, f"dtype {dtype}"


def softmax_size(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """Softmax: C <= 2040 values per row, at most 4096 rows and 524288 values (over a dim other than the
    channels of an image or the last dim of another tensor, a TRANSPOSE moves that dim last first)."""
    shape = _shape(cluster.anchor.args[0])
    channels = shape[int(cluster.anchor.args[1]) % len(shape)]
    rows = math.prod(shape) // channels
    ok = channels <= SOFTMAX_MAX_CHANNELS and rows <= SOFTMAX_MAX_ROWS and rows * channels <= SOFTMAX_MAX_ELEMENTS
    return ok, f"C {channels}, rows {rows}"


def softmax_row_tflm_can_sum(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """Softmax: at most 511 values per row as well: TFLM's int8 SOFTMAX aborts on a row whose exponentials sum
    to 512 or more (512 equal values do)."""
    shape = _shape(cluster.anchor.args[0])
    row = shape[int(cluster.anchor.args[1]) % len(shape)] if shape else 1
    return row <= tflm_limits.SOFTMAX_MAX_ROW, f"{row} values per row"


def resize_scale(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """Resize: 4-D input, integer scale factor in {1, 2, 4, 8} on H and W: out / in, or (out - 1) / (in - 1)
    for a bilinear resize with align_corners (its corner pixels map onto each other)."""
    node = cluster.anchor
    shape_in, shape_out = _shape(node.args[0]), _shape(node)
    if len(shape_in) != 4:
        return False, f"rank-{len(shape_in)} input"
    if node.target == edge.upsample_bilinear2d.vec and _arg(node, 2, "align_corners", False):
        if min(shape_in[2:]) == 1:
            return False, f"align_corners with input {shape_in[2:]} (a size 1 has no corners to align)"
        scales = [(o - 1) / (i - 1) for o, i in zip(shape_out[2:], shape_in[2:], strict=True)]
    else:
        scales = [o / i for o, i in zip(shape_out[2:], shape_in[2:], strict=True)]
    return all(s in RESIZE_SCALES for s in scales), f"scale {scales}"


def slice_unit_step(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """Slice must have step 1."""
    step = int(_arg(cluster.anchor, 4, "step", 1))
    return step == 1, f"step {step}"


def pad_with_zero(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """Constant padding must pad with 0 (the int8 zero point)."""
    value = float(_arg(cluster.anchor, 2, "value", 0.0) or 0.0)
    return value == 0.0, f"pad value {value}"


def pad_pairs_non_negative(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """Padding must be whole (before, after) pairs, at most one per dim, none negative (a negative pad crops)."""
    flat = list(cluster.anchor.args[1])
    rank = len(_shape(cluster.anchor.args[0]))
    return expressible.padding_pairs_ok(flat, rank), f"padding {flat} for rank {rank}"


def reflection_pad_smaller_than_dim(cluster: Cluster, npu: NeutronConfig) -> tuple[bool, str]:
    """Reflection padding must be smaller than the dim it pads."""
    shape, flat = _shape(cluster.anchor.args[0]), list(cluster.anchor.args[1])
    return expressible.reflection_fits(shape, flat), f"padding {flat} of shape {list(shape)}"


@dataclass(frozen=True)
class NeutronOp:
    """One row of the capability table: the LiteRT builtins its converter writes (``BuiltinOperator`` names,
    helpers included: a PAD in front, a requantize after) and the rules a node must meet.

    Not listed: the QUANTIZE the lowering adds where two qparams a rule takes as shared differ in their last
    bits (``QParams.same_as``); its multiplier is 1, which no TFLM limit refuses."""

    emits: tuple[str, ...]
    constraints: tuple[Constraint, ...] = ()
    data_movement: bool = False  # moves bytes only: a partition of nothing but these is not worth forming
    note: str = ""  # which builtin when, for the docs

    @property
    def litert(self) -> str:
        """The builtins in one line, as a placement reason says them."""
        return " / ".join(self.emits) or "no operator"


_MOVE = (output_shares_input_qparams,)
# A fused activation TFLite has no fused form of (any but relu and relu6) is a clamp after the op.
_CLAMP_AFTER = ("MAXIMUM", "MINIMUM")
# A view, or a dim moved last, in the stored (NHWC for rank 4) layout.
_LAYOUT = ("RESHAPE", "TRANSPOSE")
_FULLY_CONNECTED_RULES = (linear_weight_rank2, fully_connected_weight_per_output_channel, fully_connected_bias_scale)
_CLAMP_RULES = (requantize_left_shift,)
_CLAMP_EMITS = ("RELU", "RELU6", "QUANTIZE", "MAXIMUM", "MINIMUM")
_CLAMP_NOTE = ("RELU for (0, inf); else a requantize to the output's qparams, then RELU6 for (0, 6), or MAXIMUM / "
               "MINIMUM with int8 bounds (TFLM has no RELU_N1_TO_1 or RELU_0_TO_1 kernel)")

SUPPORTED: dict[object, NeutronOp] = {
    edge.convolution.default: NeutronOp(
        ("CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "PAD", "SLICE", "SPLIT_V", "CONCATENATION",
         *_CLAMP_AFTER),
        (conv_is_2d, static_weights, conv_window_limits, conv_mac_bound, transpose_conv_shape,
         conv_weight_per_output_channel),
        note="grouped: a SLICE per group (joined into one SPLIT_V), a CONV_2D each, a CONCATENATION; padding "
             "TFLite's SAME does not match: a PAD in front; a transposed conv's output rows past its padding: "
             "a SLICE after",
    ),
    edge.linear.default: NeutronOp(("FULLY_CONNECTED", *_LAYOUT, *_CLAMP_AFTER), _FULLY_CONNECTED_RULES,
                                   note="an image input: in NCHW order between TRANSPOSEs"),
    edge.addmm.default: NeutronOp(("FULLY_CONNECTED", *_LAYOUT, *_CLAMP_AFTER),
                                  (*_FULLY_CONNECTED_RULES, addmm_unit_scaling)),
    edge.mm.default: NeutronOp(("FULLY_CONNECTED", "BATCH_MATMUL", *_CLAMP_AFTER), _FULLY_CONNECTED_RULES,
                               note="BATCH_MATMUL when the weight's zero point is not 0"),
    edge.bmm.default: NeutronOp(("BATCH_MATMUL",), (bmm_rank3_zero_points,)),
    edge.add.Tensor: NeutronOp(("ADD", *_LAYOUT, *_CLAMP_AFTER),
                               (binary_broadcast, add_sub_unit_alpha, add_sub_output_scale),
                               note="an operand of lower rank: a RESHAPE to the output's"),
    edge.sub.Tensor: NeutronOp(("SUB", *_LAYOUT, *_CLAMP_AFTER),
                               (binary_broadcast, add_sub_unit_alpha, add_sub_output_scale)),
    edge.mul.Tensor: NeutronOp(("MUL", *_LAYOUT), (binary_broadcast, mul_output_scale)),
    edge.maximum.default: NeutronOp(("MAXIMUM", *_LAYOUT), (all_inputs_share_output_qparams,)),
    edge.minimum.default: NeutronOp(("MINIMUM", *_LAYOUT), (all_inputs_share_output_qparams,)),
    edge.cat.default: NeutronOp(("CONCATENATION",), (all_inputs_share_output_qparams,), data_movement=True,
                                note="more than 10 inputs: a tree of them"),
    edge.avg_pool2d.default: NeutronOp(("AVERAGE_POOL_2D", "PAD"), (*_MOVE, avg_pool_options),
                                       note="padding TFLite's SAME does not match: a PAD in front"),
    edge._adaptive_avg_pool2d.default: NeutronOp(("AVERAGE_POOL_2D",), (*_MOVE, adaptive_pool_divisible)),
    edge.max_pool2d_with_indices.default: NeutronOp(
        ("MAX_POOL_2D", "PAD", "PADV2"), (*_MOVE, max_pool_options),
        note="ceil mode, a stride above 32, or padding TFLite's SAME does not match: a PADV2 of -128 in front"),
    edge.max_pool2d.default: NeutronOp(("MAX_POOL_2D", "PAD", "PADV2"), (*_MOVE, max_pool_options)),
    edge.mean.dim: NeutronOp(("AVERAGE_POOL_2D", "MEAN", *_LAYOUT), (*_MOVE, reduction_without_dtype),
                             note="AVERAGE_POOL_2D over H and W, else MEAN"),
    edge.sum.dim_IntList: NeutronOp(("SUM", *_LAYOUT), (*_MOVE, reduction_without_dtype)),
    edge.amax.default: NeutronOp(("REDUCE_MAX", *_LAYOUT), _MOVE),
    edge.amin.default: NeutronOp(("REDUCE_MIN", *_LAYOUT), _MOVE),
    edge._softmax.default: NeutronOp(("SOFTMAX", *_LAYOUT, "QUANTIZE"),
                                     (softmax_size, softmax_row_tflm_can_sum, requantize_left_shift),
                                     note="over another dim than the last stored one: TRANSPOSEs around it"),
    edge.relu.default: NeutronOp(("RELU",)),
    edge.hardtanh.default: NeutronOp(_CLAMP_EMITS, _CLAMP_RULES, note=_CLAMP_NOTE),
    edge.clamp.default: NeutronOp(_CLAMP_EMITS, _CLAMP_RULES, note=_CLAMP_NOTE),
    edge.sigmoid.default: NeutronOp(("LOGISTIC",), (q4_input_scale,)),
    edge.tanh.default: NeutronOp(("TANH",), (q4_input_scale,)),
    edge.exp.default: NeutronOp(("EXP",)),
    edge.log.default: NeutronOp(("LOG",)),
    edge.rsqrt.default: NeutronOp(("RSQRT",), (rsqrt_input_never_negative,)),
    edge.hardswish.default: NeutronOp(("HARD_SWISH",), (hardswish_output_scale,)),
    edge.leaky_relu.default: NeutronOp(("LEAKY_RELU",), (leaky_relu_slope_is_a_number,)),
    edge.abs.default: NeutronOp(("ABS",)),
    edge.neg.default: NeutronOp(("SUB",), (add_sub_output_scale,), note="SUB(0, x)"),
    edge.prelu.default: NeutronOp(("PRELU",), (binary_broadcast, prelu_constant_weight)),
    edge.constant_pad_nd.default: NeutronOp(("PAD",), (*_MOVE, pad_with_zero, pad_pairs_non_negative),
                                            data_movement=True),
    edge.reflection_pad2d.default: NeutronOp(
        ("MIRROR_PAD",), (*_MOVE, pad_pairs_non_negative, reflection_pad_smaller_than_dim), data_movement=True),
    edge.permute_copy.default: NeutronOp(("TRANSPOSE", "RESHAPE"), _MOVE, data_movement=True,
                                         note="nothing where the stored order does not change"),
    edge.view_copy.default: NeutronOp(_LAYOUT, _MOVE, data_movement=True),
    edge.squeeze_copy.dims: NeutronOp(_LAYOUT, _MOVE, data_movement=True),
    edge.squeeze_copy.dim: NeutronOp(_LAYOUT, _MOVE, data_movement=True),
    edge.unsqueeze_copy.default: NeutronOp(_LAYOUT, _MOVE, data_movement=True),
    edge.clone.default: NeutronOp((), _MOVE, data_movement=True, note="no operator: the same bytes"),
    edge.slice_copy.Tensor: NeutronOp(("SLICE", "SPLIT_V"), (*_MOVE, slice_unit_step), data_movement=True,
                                      note="the SLICEs of one tensor join into one SPLIT_V"),
    edge.select_copy.int: NeutronOp(("SLICE", "SPLIT_V", *_LAYOUT), _MOVE, data_movement=True,
                                    note="a SLICE, then a view that drops the dim"),
    edge.upsample_nearest2d.vec: NeutronOp(("RESIZE_NEAREST_NEIGHBOR",), (*_MOVE, resize_scale)),
    edge.upsample_bilinear2d.vec: NeutronOp(("RESIZE_BILINEAR", "QUANTIZE"), (resize_scale, requantize_left_shift)),
}


def check(node: Node, cluster: Cluster | None, npu: NeutronConfig) -> tuple[bool, str]:
    """Whether the NPU runs ``node``; the reason is the user-facing rule that failed, with what was found."""
    if cluster is None:
        return False, not_quantized_reason(node)
    if node is cluster.activation:
        return check(cluster.anchor, cluster, npu)
    row = SUPPORTED.get(node.target)
    if row is None:
        return False, f"{op_name(node)} has no eIQ Neutron kernel"
    for constraint in row.constraints:
        ok, found = constraint(cluster, npu)
        if not ok:
            return False, f"{rule_text(constraint)} (found: {found})"
    if cluster.activation is not None:
        return True, f"{row.litert} with fused {op_name(cluster.activation)}"
    return True, row.litert


def rule_text(constraint: Constraint) -> str:
    """A constraint's docstring on one line: the rule as the user reads it."""
    return " ".join(line.strip() for line in constraint.__doc__.strip().splitlines())


def supported_ops_markdown() -> str:
    """The NPU's section of ``docs/supported_ops.md`` (``imxrt.supported_ops``), generated from the rows."""
    lines = [
        "## On the eIQ Neutron NPU",
        "",
        "Every op must also sit in an int8 QDQ cluster. Limits are those of the imxrt700 target's Neutron N3-64",
        "(`num_macs` = 8). The LiteRT builtins are all those the lowering may write for the op, helpers included.",
        "",
        "| edge op | LiteRT builtins | rules |",
        "|---|---|---|",
    ]
    for op, row in SUPPORTED.items():
        rules = " ".join(rule_text(c) for c in row.constraints) or "int8"
        builtins = ", ".join(row.emits) or "none"
        if row.note:
            builtins += f" ({row.note})"
        lines.append(f"| `{getattr(op, '__name__', op)}` | {builtins} | {rules} |")
    return "\n".join(lines) + "\n"
