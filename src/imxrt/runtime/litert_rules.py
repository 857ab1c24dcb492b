"""What TFLM refuses in an int8 LiteRT subgraph, checked when the host runtime loads one.

A ``.pte`` is untrusted and its checksum can be recomputed by anyone: a reference payload whose LiteRT
subgraph TFLM's prepare refuses, or whose numbers TFLM's kernels cannot compute, is refused here as well,
never run to other outputs. Each rule is a function named after it; its docstring states the rule and where
tflite-micro checks it (``tensorflow/lite/micro/kernels/`` unless a path says otherwise); it returns what
it found wrong, or None.

``TENSOR_RULES`` hold for every tensor of the subgraph, ``OPERAND_RULES`` for every operator, before any
rule reads an operand; ``OPERATOR_RULES`` lists, per builtin, the rules its operators keep. Limits the
compiler keeps too are functions on plain numbers in ``imxrt.kernels.limits``. ``check_tensor`` and
``check_operator`` raise ``RuleBroken``, one line naming the tensor or operator and the rule.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from imxrt.kernels import limits, movement
from imxrt.kernels.requantize import ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1
from imxrt.runtime.litert_model import (
    BINARY_LHS,
    BINARY_RHS,
    BUILTIN_NAMES,
    CONV_BIAS,
    CONV_FILTER,
    CONV_INPUT,
    DEPTHWISE_CHANNELS,
    FC_BIAS,
    FC_INPUT,
    FC_WEIGHTS,
    OUTPUT,
    PAD_INPUT,
    PAD_PADDINGS,
    PAD_VALUE,
    REDUCE_AXES,
    REDUCE_INPUT,
    RESIZE_INPUT,
    RESIZE_SIZE,
    SPLIT_AXIS,
    SPLIT_INPUT,
    SPLIT_V_AXIS,
    SPLIT_V_INPUT,
    STRIDED_SLICE_BEGIN,
    STRIDED_SLICE_END,
    STRIDED_SLICE_INPUT,
    STRIDED_SLICE_STRIDES,
    TRANSPOSE_CONV_BIAS,
    TRANSPOSE_CONV_FILTER,
    TRANSPOSE_INPUT,
    TRANSPOSE_PERM,
    UNARY_INPUT,
    Op,
    OperatorView,
    RuleBroken,
    constant_data,
    is_quantized,
    tensor_shape,
    type_name,
)

TensorType = schema.TensorType
TensorRule = Callable[[schema.TensorT], str | None]
OperatorRule = Callable[[OperatorView], str | None]

# What TFLM reads a zero point into: the type's own range for the narrow types, an int32 for the rest.
_ZERO_POINT_RANGE = {TensorType.INT8: (-128, 127), TensorType.UINT8: (0, 255), TensorType.INT16: (-32768, 32767)}
_INT32_RANGE = (-(1 << 31), (1 << 31) - 1)


# -- every tensor

def zero_point_in_type_range(tensor: schema.TensorT) -> str | None:
    """A quantized tensor's zero points are values of its type (an int32 for int32 and wider tensors): TFLM
    reads each into an int32 (micro_allocator.cc, InitializeTfLiteTensorFromFlatbuffer), which 2^40 is not,
    and its int8 kernels take q - zp as an int8 difference."""
    q = tensor.quantization
    if q is None or q.zeroPoint is None or len(q.zeroPoint) == 0:
        return None
    low, high = _ZERO_POINT_RANGE.get(tensor.type, _INT32_RANGE)
    zero_points = np.asarray(q.zeroPoint, np.int64)
    outside = zero_points[(zero_points < low) | (zero_points > high)]
    if not len(outside):
        return None
    return f"zero point {int(outside[0])} is outside {type_name(tensor.type)}'s {low}..{high}"


def scales_positive_finite(tensor: schema.TensorT) -> str | None:
    """A quantized tensor's scales are finite and above 0: TFLM makes every multiplier a ratio of scales
    (kernel_util.cc, PopulateConvolutionQuantizationParams; QuantizeMultiplier in
    tensorflow/lite/kernels/internal/quantization_util.cc, whose frexp of an infinite or NaN ratio is
    undefined) and aborts on a multiplier that is not above 0 (QuantizeMultiplierSmallerThanOneExp: ADD, SUB)."""
    q = tensor.quantization
    if q is None or q.scale is None or len(q.scale) == 0:
        return None
    scales = np.asarray(q.scale, np.float32)
    bad = scales[~(np.isfinite(scales) & (scales > 0))]
    return None if not len(bad) else f"scale {float(bad[0])!r} is not a finite number above 0"


def quantized_dimension_has_a_scale_each(tensor: schema.TensorT) -> str | None:
    """A tensor with several scales has one per slice along its quantized dimension, a dimension of its
    shape: TFLM indexes the shape with it (kernel_util.cc, PopulateConvolutionQuantizationParams:
    num_channels == filter->dims->data[quantized_dimension]; fully_connected_common.cc,
    CalculateOpDataFullyConnected, likewise)."""
    q = tensor.quantization
    if q is None or q.scale is None or len(q.scale) <= 1:
        return None
    shape, axis = tensor_shape(tensor), int(q.quantizedDimension)
    if not 0 <= axis < len(shape):
        return f"{len(q.scale)} scales along dimension {axis} of a {len(shape)}-D tensor"
    if shape[axis] != len(q.scale):
        return f"{len(q.scale)} scales along dimension {axis}, which has {shape[axis]} slices"
    return None


TENSOR_RULES: tuple[TensorRule, ...] = (zero_point_in_type_range, scales_positive_finite,
                                        quantized_dimension_has_a_scale_each)


# -- every operator: its operands

# (fewest inputs, most inputs, outputs) per builtin: what each kernel's Prepare ensures (TF_LITE_ENSURE on
# NumInputs / NumOutputs, e.g. conv_common.cc CalculateOpDataConv, pad_common.cc PadPrepare, reduce_common.cc
# PrepareSimple) or reads (GetInput of each operand). None: as many as the schema holds.
OPERAND_COUNTS: dict[int, tuple[int, int | None, int | None]] = {
    Op.CONV_2D: (2, 3, 1), Op.DEPTHWISE_CONV_2D: (2, 3, 1), Op.TRANSPOSE_CONV: (3, 4, 1),
    Op.FULLY_CONNECTED: (2, 3, 1), Op.BATCH_MATMUL: (2, 2, 1),
    Op.ADD: (2, 2, 1), Op.SUB: (2, 2, 1), Op.MUL: (2, 2, 1), Op.MAXIMUM: (2, 2, 1), Op.MINIMUM: (2, 2, 1),
    Op.PRELU: (2, 2, 1), Op.AVERAGE_POOL_2D: (1, 1, 1), Op.MAX_POOL_2D: (1, 1, 1),
    Op.MEAN: (2, 2, 1), Op.SUM: (2, 2, 1), Op.REDUCE_MAX: (2, 2, 1), Op.REDUCE_MIN: (2, 2, 1),
    Op.SOFTMAX: (1, 1, 1), Op.QUANTIZE: (1, 1, 1), Op.RELU: (1, 1, 1), Op.RELU6: (1, 1, 1),
    Op.RELU_N1_TO_1: (1, 1, 1), Op.RELU_0_TO_1: (1, 1, 1), Op.LEAKY_RELU: (1, 1, 1), Op.LOGISTIC: (1, 1, 1),
    Op.TANH: (1, 1, 1), Op.HARD_SWISH: (1, 1, 1), Op.ABS: (1, 1, 1), Op.RSQRT: (1, 1, 1), Op.EXP: (1, 1, 1),
    Op.LOG: (1, 1, 1), Op.PAD: (2, 3, 1), Op.PADV2: (2, 3, 1), Op.MIRROR_PAD: (2, 2, 1),
    Op.TRANSPOSE: (2, 2, 1), Op.RESHAPE: (1, 2, 1), Op.SLICE: (3, 3, 1), Op.STRIDED_SLICE: (4, 4, 1),
    Op.CONCATENATION: (1, None, 1), Op.SPLIT: (2, 2, None), Op.SPLIT_V: (3, 3, None),
    Op.RESIZE_NEAREST_NEIGHBOR: (2, 2, 1), Op.RESIZE_BILINEAR: (2, 2, 1),
}


def operand_counts(op: OperatorView) -> str | None:
    """An operator has the inputs and outputs its kernel takes (``OPERAND_COUNTS``)."""
    fewest, most, outputs = OPERAND_COUNTS[op.builtin]
    if len(op.inputs) < fewest or (most is not None and len(op.inputs) > most):
        wanted = f"{fewest}" if fewest == most else f"{fewest} to {most}" if most else f"at least {fewest}"
        return f"{len(op.inputs)} inputs; its kernel takes {wanted}"
    if (outputs is None and not op.outputs) or (outputs is not None and len(op.outputs) != outputs):
        return f"{len(op.outputs)} outputs; its kernel writes {outputs or 'at least 1'}"
    return None


def operand_indices(op: OperatorView) -> str | None:
    """Every operand is a tensor of the subgraph; only an optional input (past the fewest the kernel takes)
    may be omitted as -1 (TFLM's GetOptionalInputTensor; kernel_util.h)."""
    tensors = len(op.graph.tensors or [])
    fewest = OPERAND_COUNTS[op.builtin][0]
    for kind, indices in (("input", op.inputs), ("output", op.outputs)):
        for position, index in enumerate(indices):
            optional = kind == "input" and position >= fewest and index == -1
            if not optional and not 0 <= index < tensors:
                return f"{kind} {position} is tensor {index} of the subgraph's {tensors}"
    return None


OPERAND_RULES: tuple[OperatorRule, ...] = (operand_counts, operand_indices)


# -- per builtin: quantization

def _present(op: OperatorView) -> list[tuple[str, schema.TensorT]]:
    tensors = [(f"input {i}", op.tensor(i)) for i in range(len(op.inputs)) if op.has_input(i)]
    return tensors + [(f"output {i}", op.tensor(i, True)) for i in range(len(op.outputs))]


def operands_quantized(op: OperatorView) -> str | None:
    """The int8 inputs and output of a kernel that computes with qparams each have a scale and a zero
    point: without both TFLM reads none (micro_allocator.cc, InitializeTfLiteTensorFromFlatbuffer) and
    refuses the operator (kernel_util.cc PopulateConvolutionQuantizationParams, quantize_common.cc
    PrepareQuantizeReference, elementwise.cc PrepareAbsRsqrt: TF_LITE_ENSURE_EQ on kTfLiteAffineQuantization),
    or divides by its scale of 0."""
    for where, tensor in _present(op):
        if tensor.type in (TensorType.INT8, TensorType.INT16) and not is_quantized(tensor):
            return f"{where} is {type_name(tensor.type)} without a scale and a zero point"
    return None


# Per builtin with a filter: its operand, and the filter dimension that counts output channels.
_FILTERS = {Op.CONV_2D: (CONV_FILTER, 0), Op.DEPTHWISE_CONV_2D: (CONV_FILTER, DEPTHWISE_CHANNELS),
            Op.TRANSPOSE_CONV: (TRANSPOSE_CONV_FILTER, 0), Op.FULLY_CONNECTED: (FC_WEIGHTS, 0)}
_BIASES = {Op.CONV_2D: CONV_BIAS, Op.DEPTHWISE_CONV_2D: CONV_BIAS, Op.TRANSPOSE_CONV: TRANSPOSE_CONV_BIAS,
           Op.FULLY_CONNECTED: FC_BIAS}


def _output_channels(op: OperatorView) -> int | None:
    operand, dimension = _FILTERS[op.builtin]
    shape = op.shape(operand)
    return shape[dimension] if dimension < len(shape) else None


def filter_scales_per_output_channel(op: OperatorView) -> str | None:
    """A filter has one scale, or one per output channel (conv_common.cc ConvPrepare, depthwise_conv_common.cc
    DepthwiseConvPrepare, transpose_conv.cc TransposeConvPrepare: scale->size == 1 || == channels;
    fully_connected_common.cc CalculateOpDataFullyConnected indexes its per-channel multipliers by output
    channel)."""
    q = op.tensor(_FILTERS[op.builtin][0]).quantization
    count, channels = (len(q.scale) if q is not None and q.scale is not None else 0), _output_channels(op)
    if count == 1 or count == channels:
        return None
    return f"its filter has {count} scales for {channels} output channels; TFLM takes 1 or one per output channel"


def filter_zero_point_zero(op: OperatorView) -> str | None:
    """A FULLY_CONNECTED filter is symmetric: zero point 0 (fully_connected_common.cc,
    CalculateOpDataFullyConnected: TFLITE_DCHECK(filter->params.zero_point == 0); a release build of TFLM
    adds the zero point to every weight instead)."""
    q = op.tensor(FC_WEIGHTS).quantization
    zero_points = np.asarray(q.zeroPoint if q is not None and q.zeroPoint is not None else [], np.int64)
    nonzero = zero_points[zero_points != 0]
    return None if not len(nonzero) else f"its filter has zero point {int(nonzero[0])}"


def bias_int32_per_output_channel(op: OperatorView) -> str | None:
    """A bias, where there is one, is int32 with one value per output channel: TFLM's int8 kernels read it as
    int32 (conv.cc ConvEval) and take one per channel (reference integer_ops conv.h, depthwise_conv.h,
    transpose_conv.h: TFLITE_DCHECK_EQ(bias_shape.FlatSize(), output_depth))."""
    operand = _BIASES[op.builtin]
    if not op.has_input(operand):
        return None
    bias = op.tensor(operand)
    elements = int(np.prod(tensor_shape(bias)))
    channels = _output_channels(op)
    if bias.type != TensorType.INT32:
        return f"its bias is {type_name(bias.type)}, not INT32"
    return None if elements == channels else f"its bias has {elements} values for {channels} output channels"


def depthwise_multiplier_option(op: OperatorView) -> str | None:
    """A DEPTHWISE_CONV_2D's depth_multiplier option times its input channels is its output channels: TFLM
    loops over the option's multiplier (reference integer_ops depthwise_conv.h, DepthwiseConvPerChannel:
    TFLITE_DCHECK_EQ(output_depth, input_depth * depth_multiplier))."""
    multiplier = getattr(op.options, "depthMultiplier", 0) if op.options is not None else 0
    input_shape, channels = op.shape(CONV_INPUT), _output_channels(op)
    input_channels = input_shape[-1] if input_shape else 0
    if multiplier * input_channels == channels:
        return None
    return f"depth_multiplier {multiplier} x {input_channels} input channels is not its {channels} output channels"


def fully_connected_bias_scale(op: OperatorView) -> str | None:
    """A per-tensor FULLY_CONNECTED's bias scale is s_in * s_w to within 0.02 of an output step
    (tensorflow/lite/kernels/kernel_util.cc, GetQuantizedConvolutionMultipler: TF_LITE_ENSURE)."""
    weights_q = op.tensor(FC_WEIGHTS).quantization
    if not op.has_input(FC_BIAS) or weights_q is None or weights_q.scale is None or len(weights_q.scale) != 1:
        return None
    return limits.fully_connected_bias_scale_problem(op.scale(FC_INPUT), op.scale(FC_WEIGHTS), op.scale(FC_BIAS),
                                                     op.scale(OUTPUT, True))


_ACTIVATION_BOUNDS = {ACT_RELU: (0.0,), ACT_RELU6: (0.0, 6.0), ACT_RELU_N1_TO_1: (-1.0, 1.0)}


def activation_bounds_fit_int32(op: OperatorView) -> str | None:
    """A fused RELU, RELU6 or RELU_N1_TO_1's bounds quantize into an int32 on the output scale
    (tensorflow/lite/kernels/kernel_util.cc, CalculateActivationRangeQuantized: Quantize's TF_LITE_ENSURE)."""
    bounds = _ACTIVATION_BOUNDS.get(op.fused_activation(), ())
    scale = np.float32(op.scale(OUTPUT, True))
    for bound in bounds:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            quantized = np.round(np.float32(bound) / scale)
        if not (np.isfinite(quantized) and _INT32_RANGE[0] <= quantized <= _INT32_RANGE[1]):
            return f"its fused activation's bound {bound:g} is {quantized} steps of the output scale {scale:g}"
    return None


def add_sub_output_scale(op: OperatorView) -> str | None:
    """ADD / SUB: the output scale exceeds the larger input scale / 2^19 (add_common.cc CalculateOpDataAdd,
    sub_common.cc CalculateOpDataSub; quantization_util.cc QuantizeMultiplierSmallerThanOneExp:
    TFLITE_CHECK_LT(multiplier, 1) aborts)."""
    return limits.add_sub_output_scale_problem(op.name, [op.scale(BINARY_LHS), op.scale(BINARY_RHS)],
                                               op.scale(OUTPUT, True))


def output_multiplier_left_shift(op: OperatorView) -> str | None:
    """MUL / QUANTIZE: the output multiplier s1 * s2 / s_out (s_in / s_out) stays below 2^15 (2^23), so that
    MultiplyByQuantizedMultiplier's left shift stays inside int32 (reference integer_ops mul.h,
    requantize.h: undefined past it, TFLM's result wraps)."""
    inputs = [BINARY_LHS, BINARY_RHS] if op.builtin == Op.MUL else [UNARY_INPUT]
    return limits.requantize_left_shift_problem(op.name, [op.scale(i) for i in inputs], op.scale(OUTPUT, True))


def quantize_output_per_tensor(op: OperatorView) -> str | None:
    """QUANTIZE's output has one scale (quantize_common.cc, PrepareQuantizeReference:
    TF_LITE_ENSURE(affine_quantization->scale->size == 1))."""
    q = op.tensor(OUTPUT, True).quantization
    count = len(q.scale) if q is not None and q.scale is not None else 0
    return None if count == 1 else f"its output has {count} scales"


def softmax_output_qparams(op: OperatorView) -> str | None:
    """An int8 SOFTMAX's output has zero point -128 and scale 1/256 exactly (softmax_common.cc,
    CalculateSoftmaxParams: TF_LITE_ENSURE_EQ(zero_point, -128), TF_LITE_ENSURE(scale == 1.f / 256))."""
    scale, zero_point = op.scale(OUTPUT, True), op.zero_point(OUTPUT, True)
    if zero_point == -128 and np.float32(scale) == np.float32(1 / 256):
        return None
    return f"its output has scale {scale:g}, zero point {zero_point}; TFLM takes 1/256 and -128"


def softmax_row_length(op: OperatorView) -> str | None:
    """SOFTMAX: at most 511 values per row (reference softmax.h: TFLITE_CHECK on the row's sum)."""
    shape = op.shape(OUTPUT, True)
    return limits.softmax_row_problem(shape[-1] if shape else 1)


def logistic_output_zero_point(op: OperatorView) -> str | None:
    """An int8 LOGISTIC's output zero point is -128 (logistic_common.cc, CalculateArithmeticOpDataLogistic:
    TF_LITE_ENSURE_EQ(output->params.zero_point, -128)); its kernel writes on scale 1/256, zero point -128."""
    zero_point = op.zero_point(OUTPUT, True)
    return None if zero_point == -128 else f"its output zero point is {zero_point}; TFLM takes -128"


def q4_input_scale(op: OperatorView) -> str | None:
    """LOGISTIC / TANH: an input scale below 8 (reference integer_ops logistic.h, tanh.h: from 8 on every
    value saturates to the low end, a silently wrong output)."""
    return limits.q4_input_scale_problem(op.name, op.scale(UNARY_INPUT))


def hard_swish_output_scale(op: OperatorView) -> str | None:
    """HARD_SWISH: the output scale exceeds the input scale / 128 (hard_swish_common.cc, HardSwishPrepare:
    TF_LITE_ENSURE(output_multiplier_exponent <= 0))."""
    return limits.hard_swish_output_scale_problem(op.scale(UNARY_INPUT), op.scale(OUTPUT, True))


def pool_shares_qparams(op: OperatorView) -> str | None:
    """A pool's input and output scales differ by at most 1e-6 and their zero points are equal
    (pooling_common.cc, PoolingPrepare: TF_LITE_ENSURE)."""
    s_in, s_out = np.float32(op.scale(UNARY_INPUT)), np.float32(op.scale(OUTPUT, True))
    z_in, z_out = op.zero_point(UNARY_INPUT), op.zero_point(OUTPUT, True)
    if abs(float(s_in - s_out)) <= 1e-6 and z_in == z_out:
        return None
    return f"input scale {s_in:g}, zero point {z_in}; output scale {s_out:g}, zero point {z_out}"


def reduce_min_max_shares_qparams(op: OperatorView) -> str | None:
    """An int8 REDUCE_MAX / REDUCE_MIN's input and output share scale and zero point (reduce_common.cc,
    EvalMinMaxHelper: TF_LITE_ENSURE_EQ on both)."""
    s_in, s_out = np.float32(op.scale(REDUCE_INPUT)), np.float32(op.scale(OUTPUT, True))
    z_in, z_out = op.zero_point(REDUCE_INPUT), op.zero_point(OUTPUT, True)
    if s_in == s_out and z_in == z_out:
        return None
    return f"input scale {s_in:g}, zero point {z_in}; output scale {s_out:g}, zero point {z_out}"


def reduce_axes_int32(op: OperatorView) -> str | None:
    """A reduction's axes are an int32 tensor (reduce_common.cc, PrepareSimple:
    TF_LITE_ENSURE_TYPES_EQ(axis->type, kTfLiteInt32))."""
    axes = op.tensor(REDUCE_AXES)
    return None if axes.type == TensorType.INT32 else f"its axes are {type_name(axes.type)}"


# -- per builtin: data movement

def output_type_is_input_type(op: OperatorView) -> str | None:
    """A data-movement operator's inputs and outputs share one type (pad_common.cc PadPrepare,
    transpose_common.cc TransposePrepare, reshape_common.cc ReshapeOutput, concatenation.cc
    ConcatenationPrepare: TF_LITE_ENSURE_EQ; slice.cc, split.cc, maximum_minimum.cc read every operand as
    the output's type)."""
    data = {Op.SPLIT: SPLIT_INPUT, Op.SPLIT_V: SPLIT_V_INPUT}.get(op.builtin, 0)
    operands = range(len(op.inputs)) if op.builtin in (Op.CONCATENATION, Op.MAXIMUM, Op.MINIMUM) else [data]
    types = {op.tensor(i).type for i in operands} | {op.tensor(i, True).type for i in range(len(op.outputs))}
    return None if len(types) == 1 else f"its operands are {', '.join(sorted(type_name(t) for t in types))}"


def concatenation_shares_qparams(op: OperatorView) -> str | None:
    """An int8 CONCATENATION's inputs each have its output's scale and zero point (concatenation.cc,
    ConcatenationPrepare: TF_LITE_ENSURE_EQ on both: its kernel copies bytes)."""
    if op.tensor(OUTPUT, True).type != TensorType.INT8:
        return None
    s_out, z_out = np.float32(op.scale(OUTPUT, True)), op.zero_point(OUTPUT, True)
    for operand in range(len(op.inputs)):
        s_in, z_in = np.float32(op.scale(operand)), op.zero_point(operand)
        if s_in != s_out or z_in != z_out:
            return f"input {operand} has scale {s_in:g}, zero point {z_in}; the output {s_out:g}, {z_out}"
    return None


def concatenation_input_count(op: OperatorView) -> str | None:
    """CONCATENATION: at most 10 inputs (concatenation.cc, ConcatenationPrepare: num_inputs <= kMaxInputNum)."""
    return limits.concatenation_inputs_problem(len(op.inputs))


def no_fused_activation(op: OperatorView) -> str | None:
    """CONCATENATION fuses no activation (concatenation.cc, ConcatenationPrepare:
    TF_LITE_ENSURE_EQ(params->activation, kTfLiteActNone))."""
    fused = op.fused_activation()
    return None if fused == ACT_NONE else f"it fuses activation {fused}"


def pad_value_qparams(op: OperatorView) -> str | None:
    """A pad value is one element of the input's type, and for int8 on the output's scale and zero point
    (pad_common.cc, PadPrepare: TF_LITE_ENSURE_EQ on type, element count, zero point and scale)."""
    if not op.has_input(PAD_VALUE):
        return None
    value, data = op.tensor(PAD_VALUE), op.tensor(PAD_INPUT)
    if value.type != data.type:
        return f"its pad value is {type_name(value.type)}, its input {type_name(data.type)}"
    elements = int(np.prod(tensor_shape(value)))
    if elements != 1:
        return f"its pad value has {elements} elements"
    if data.type == TensorType.INT8 and (
            op.zero_point(PAD_VALUE) != op.zero_point(OUTPUT, True)
            or np.float32(op.scale(PAD_VALUE)) != np.float32(op.scale(OUTPUT, True))):
        return (f"its pad value has scale {op.scale(PAD_VALUE):g}, zero point {op.zero_point(PAD_VALUE)}; the "
                f"output {op.scale(OUTPUT, True):g}, {op.zero_point(OUTPUT, True)}")
    return None


_PAD_MAX_RANK = 5  # tensorflow/lite/kernels/internal/reference/pad.h, PadKernelMaxDimensionCount


def padded_output_shape(op: OperatorView) -> str | None:
    """A pad's paddings are a constant int32 [rank, 2] (rank at most 5) and its output is its input grown by
    them (pad_common.cc PadPrepare: TF_LITE_ENSURE_EQ(output_dim, input_dim + before + after); mirror_pad.cc
    MirrorPadPrepare: the padding matrix is [rank, 2])."""
    paddings = op.tensor(PAD_PADDINGS)
    data = constant_data(op.model, paddings)
    input_shape, output_shape = op.shape(PAD_INPUT), op.shape(OUTPUT, True)
    if paddings.type != TensorType.INT32 or data is None:
        kind = "constant" if data is not None else "computed"
        return f"its paddings are a {kind} {type_name(paddings.type)} tensor; TFLM reads a constant INT32 one"
    if len(input_shape) > _PAD_MAX_RANK or data.shape != (len(input_shape), 2):
        return f"its paddings are {list(data.shape)} for a {len(input_shape)}-D input"
    expected = tuple(int(size + before + after) for size, (before, after) in zip(input_shape, data, strict=True))
    return None if output_shape == expected else f"declares output {output_shape}; its paddings give {expected}"


_TRANSPOSE_MAX_RANK = 5


def transpose_permutation(op: OperatorView) -> str | None:
    """A TRANSPOSE's permutation is a constant int32 vector of each input dimension once, the input has at
    most 5 dimensions, and the output is the input permuted (transpose_common.cc, TransposePrepare:
    TF_LITE_ENSURE on rank, constness, length and range)."""
    perm_tensor = op.tensor(TRANSPOSE_PERM)
    perm = constant_data(op.model, perm_tensor)
    input_shape = op.shape(TRANSPOSE_INPUT)
    if perm_tensor.type != TensorType.INT32 or perm is None:
        return f"its permutation is not a constant int32 tensor ({type_name(perm_tensor.type)})"
    if len(input_shape) > _TRANSPOSE_MAX_RANK or sorted(perm.reshape(-1).tolist()) != list(range(len(input_shape))):
        return f"permutation {perm.reshape(-1).tolist()} for a {len(input_shape)}-D input"
    expected = tuple(input_shape[int(p)] for p in perm.reshape(-1))
    output_shape = op.shape(OUTPUT, True)
    return None if output_shape == expected else f"declares output {output_shape}; the permutation gives {expected}"


def reshape_element_count(op: OperatorView) -> str | None:
    """A RESHAPE keeps its element count (reshape_common.cc, ReshapeOutput:
    TF_LITE_ENSURE_EQ(num_input_elements, num_output_elements))."""
    count_in, count_out = int(np.prod(op.shape(UNARY_INPUT))), int(np.prod(op.shape(OUTPUT, True)))
    return None if count_in == count_out else f"reshapes {count_in} elements into {count_out}"


_STRIDED_SLICE_MAX_RANK = 4  # strided_slice_common.cc, kMaxDim


def strided_slice_strides(op: OperatorView) -> str | None:
    """A STRIDED_SLICE's input has at most 4 dimensions, its begin, end and strides are constant int32 vectors
    of one value per dimension, and no stride is 0 (strided_slice_common.cc, StridedSlicePrepare and
    CheckOutputSize: TF_LITE_ENSURE_MSG)."""
    rank = len(op.shape(STRIDED_SLICE_INPUT))
    if rank > _STRIDED_SLICE_MAX_RANK:
        return f"its input has {rank} dimensions"
    for operand in (STRIDED_SLICE_BEGIN, STRIDED_SLICE_END, STRIDED_SLICE_STRIDES):
        vector = op.tensor(operand)
        data = constant_data(op.model, vector)
        if vector.type != TensorType.INT32 or data is None or data.shape != (rank,):
            return f"operand {operand} is not a constant int32 vector of {rank} ({type_name(vector.type)} " \
                   f"{tensor_shape(vector)})"
    strides = constant_data(op.model, op.tensor(STRIDED_SLICE_STRIDES))
    return None if np.all(strides) else f"strides {strides.tolist()} hold a 0"


def strided_slice_output_shape(op: OperatorView) -> str | None:
    """A STRIDED_SLICE declares the output its begin, end, strides and masks cut (strided_slice_common.cc,
    CheckOutputSize: TF_LITE_ENSURE_EQ per dimension). Ellipsis and new-axis masks are left to the kernel,
    which does not take them."""
    options, shape = op.options, op.shape(STRIDED_SLICE_INPUT)
    if getattr(options, "ellipsisMask", 0) or getattr(options, "newAxisMask", 0):
        return None
    index, shrink = movement.strided_slice_index(
        shape, *(constant_data(op.model, op.tensor(i)) for i in (STRIDED_SLICE_BEGIN, STRIDED_SLICE_END,
                                                                 STRIDED_SLICE_STRIDES)),
        getattr(options, "beginMask", 0), getattr(options, "endMask", 0), getattr(options, "shrinkAxisMask", 0),
        bool(getattr(options, "offset", False)))
    cut = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), shape=shape, strides=(0,) * len(shape))[index]
    expected = tuple(size for axis, size in enumerate(cut.shape) if axis not in shrink)
    output_shape = op.shape(OUTPUT, True)
    return None if output_shape == expected else f"declares output {output_shape}; its slice gives {expected}"


def _axis_in_rank(op: OperatorView, axis_operand: int, input_operand: int) -> str | None:
    axis = constant_data(op.model, op.tensor(axis_operand))
    rank = len(op.shape(input_operand))
    if axis is None or axis.size != 1:
        return "its axis is not one constant"
    value = int(axis.reshape(-1)[0])
    resolved = value + rank if value < 0 else value
    return None if 0 <= resolved < rank else f"axis {value} of a {rank}-D input"


def split_axis_in_rank(op: OperatorView) -> str | None:
    """A SPLIT / SPLIT_V's axis is one constant, a dimension of its input (negative from the end) (split.cc,
    SplitPrepare; split_v.cc, SplitVPrepare: TF_LITE_ENSURE on constness and 0 <= axis < rank)."""
    if op.builtin == Op.SPLIT:
        return _axis_in_rank(op, SPLIT_AXIS, SPLIT_INPUT)
    return _axis_in_rank(op, SPLIT_V_AXIS, SPLIT_V_INPUT)


def resize_operands(op: OperatorView) -> str | None:
    """A resize's input is 4-D and its size a constant int32 vector of 2; a bilinear one does not take both
    half-pixel centers and aligned corners (resize_nearest_neighbor.cc ResizeNearestNeighborPrepare,
    resize_bilinear.cc ResizeBilinearPrepare: TF_LITE_ENSURE_EQ)."""
    size = op.tensor(RESIZE_SIZE)
    data = constant_data(op.model, size)
    if len(op.shape(RESIZE_INPUT)) != 4:
        return f"its input is {len(op.shape(RESIZE_INPUT))}-D"
    if size.type != TensorType.INT32 or data is None or data.shape != (2,):
        return f"its size is not a constant int32 vector of 2 ({type_name(size.type)} {tensor_shape(size)})"
    half_pixel, align = (bool(getattr(op.options, field, False)) for field in ("halfPixelCenters", "alignCorners"))
    if op.builtin == Op.RESIZE_BILINEAR and half_pixel and align:
        return "it takes both half-pixel centers and aligned corners"
    return None


def batch_matmul_shapes(op: OperatorView) -> str | None:
    """A BATCH_MATMUL's operands have 2 to 5 dimensions, batch dimensions that broadcast, one accumulation
    depth, and an output of their product's elements (batch_matmul.cc BatchMatMulPrepare,
    batch_matmul_common.cc ReshapeOutputTensor: TF_LITE_ENSURE)."""
    lhs, rhs = op.shape(BINARY_LHS), op.shape(BINARY_RHS)
    if not (2 <= len(lhs) <= 5 and 2 <= len(rhs) <= 5):
        return f"multiplies {lhs} by {rhs}; each must have 2 to 5 dimensions"
    adj_x = bool(getattr(op.options, "adjX", False))
    adj_y = bool(getattr(op.options, "adjY", False))
    rank = max(len(lhs), len(rhs))
    lhs_full, rhs_full = (1,) * (rank - len(lhs)) + lhs, (1,) * (rank - len(rhs)) + rhs
    batch = []
    for a, b in zip(lhs_full[:-2], rhs_full[:-2], strict=True):
        if a != b and 1 not in (a, b):
            return f"batch dimensions of {lhs} and {rhs} do not broadcast"
        batch.append(max(a, b))
    depth_lhs = lhs_full[-2] if adj_x else lhs_full[-1]
    depth_rhs = rhs_full[-1] if adj_y else rhs_full[-2]
    if depth_lhs != depth_rhs:
        return f"accumulates {depth_lhs} values of {lhs} with {depth_rhs} of {rhs}"
    rows, cols = lhs_full[-1] if adj_x else lhs_full[-2], rhs_full[-2] if adj_y else rhs_full[-1]
    elements = int(np.prod(batch)) * rows * cols
    output = op.shape(OUTPUT, True)
    if len(output) < rank or int(np.prod(output)) != elements:
        return f"declares output {output} for a product of {elements} elements in {rank} dimensions"
    return None


# -- the table

_CONV = (operands_quantized, filter_scales_per_output_channel, bias_int32_per_output_channel,
         activation_bounds_fit_int32)
_REQUANTIZING_UNARY = (operands_quantized,)
_REDUCE = (operands_quantized, reduce_axes_int32)
_POOL = (operands_quantized, pool_shares_qparams, activation_bounds_fit_int32)
_PAD = (output_type_is_input_type, padded_output_shape, pad_value_qparams)


def _register(entries) -> dict[int, tuple[OperatorRule, ...]]:
    table: dict[int, tuple[OperatorRule, ...]] = {}
    for builtin, rules in entries:
        if builtin in table:
            raise ValueError(f"two rows of rules for {BUILTIN_NAMES[builtin]}")
        table[builtin] = rules
    return table


# The rules each builtin's operators keep, in order, after ``OPERAND_RULES``.
OPERATOR_RULES = _register([
    (Op.CONV_2D, _CONV),
    (Op.DEPTHWISE_CONV_2D, (*_CONV, depthwise_multiplier_option)),
    (Op.TRANSPOSE_CONV, _CONV),
    (Op.FULLY_CONNECTED, (*_CONV, filter_zero_point_zero, fully_connected_bias_scale)),
    (Op.BATCH_MATMUL, (operands_quantized, batch_matmul_shapes)),
    (Op.ADD, (operands_quantized, add_sub_output_scale, activation_bounds_fit_int32)),
    (Op.SUB, (operands_quantized, add_sub_output_scale, activation_bounds_fit_int32)),
    (Op.MUL, (operands_quantized, output_multiplier_left_shift, activation_bounds_fit_int32)),
    (Op.MAXIMUM, (output_type_is_input_type,)),
    (Op.MINIMUM, (output_type_is_input_type,)),
    (Op.PRELU, (operands_quantized,)),
    (Op.AVERAGE_POOL_2D, _POOL),
    (Op.MAX_POOL_2D, _POOL),
    (Op.MEAN, _REDUCE),
    (Op.SUM, _REDUCE),
    (Op.REDUCE_MAX, (*_REDUCE, reduce_min_max_shares_qparams)),
    (Op.REDUCE_MIN, (*_REDUCE, reduce_min_max_shares_qparams)),
    (Op.SOFTMAX, (operands_quantized, softmax_output_qparams, softmax_row_length)),
    (Op.QUANTIZE, (operands_quantized, quantize_output_per_tensor, output_multiplier_left_shift)),
    (Op.RELU, _REQUANTIZING_UNARY),
    (Op.RELU6, _REQUANTIZING_UNARY),
    (Op.RELU_N1_TO_1, _REQUANTIZING_UNARY),
    (Op.RELU_0_TO_1, _REQUANTIZING_UNARY),
    (Op.LEAKY_RELU, _REQUANTIZING_UNARY),
    (Op.LOGISTIC, (operands_quantized, logistic_output_zero_point, q4_input_scale)),
    (Op.TANH, (operands_quantized, q4_input_scale)),
    (Op.HARD_SWISH, (operands_quantized, hard_swish_output_scale)),
    (Op.ABS, _REQUANTIZING_UNARY),
    (Op.RSQRT, _REQUANTIZING_UNARY),
    (Op.EXP, _REQUANTIZING_UNARY),
    (Op.LOG, _REQUANTIZING_UNARY),
    (Op.PAD, _PAD),
    (Op.PADV2, _PAD),
    (Op.MIRROR_PAD, (output_type_is_input_type, padded_output_shape)),
    (Op.TRANSPOSE, (output_type_is_input_type, transpose_permutation)),
    (Op.RESHAPE, (output_type_is_input_type, reshape_element_count)),
    (Op.SLICE, (output_type_is_input_type,)),
    (Op.STRIDED_SLICE, (output_type_is_input_type, strided_slice_strides, strided_slice_output_shape)),
    (Op.CONCATENATION, (output_type_is_input_type, concatenation_input_count, no_fused_activation,
                        concatenation_shares_qparams)),
    (Op.SPLIT, (output_type_is_input_type, split_axis_in_rank)),
    (Op.SPLIT_V, (output_type_is_input_type, split_axis_in_rank)),
    (Op.RESIZE_NEAREST_NEIGHBOR, (output_type_is_input_type, resize_operands)),
    (Op.RESIZE_BILINEAR, (output_type_is_input_type, resize_operands)),
])


def check_tensor(tensor: schema.TensorT, index: int) -> None:
    """Raise ``RuleBroken`` for the first of ``TENSOR_RULES`` the subgraph's tensor ``index`` breaks."""
    for rule in TENSOR_RULES:
        problem = rule(tensor)
        if problem is not None:
            name = tensor.name.decode(errors="replace") if isinstance(tensor.name, bytes) else str(tensor.name)
            raise RuleBroken(f"tensor {index} ({name})", rule.__name__, problem)


def check_operator(op: OperatorView) -> None:
    """Raise ``RuleBroken`` for the first rule ``op`` breaks: ``OPERAND_RULES``, then its builtin's row."""
    for rule in (*OPERAND_RULES, *OPERATOR_RULES[op.builtin]):
        problem = rule(op)
        if problem is not None:
            raise RuleBroken(f"operator {op.index} ({op.name})", rule.__name__, problem)
