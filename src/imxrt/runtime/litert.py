"""LiteRT (.tflite) subgraph executor on the int8 kernel library: what a NeutronBackend reference payload runs.

``LiteRTRunner.from_bytes(tflite)`` parses the flatbuffer once (``litert_model.read_model``: its size bounded
before it is unpacked), refuses whatever TFLM refuses (``litert_rules``) and prepares every operator
(multipliers, shifts, lookup tables, windows, constant weights in matmul layout); ``run(inputs)`` then only
evaluates.
Numerics are TFLM's reference kernels (LiteRT's where TFLM has no int8 kernel: EXP, LOG).
Operators map to kernels through ``PREPARERS``, one explicit table keyed by ``BuiltinOperator``.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import threadpoolctl
from ai_edge_litert import schema_py_generated as schema

from imxrt.errors import ImxrtError
from imxrt.kernels import activations, conv, elementwise, fully_connected, movement, pooling, reduce, softmax
from imxrt.kernels.requantize import (
    fully_connected_multiplier,
    prepare_requantize,
    quantize_multiplier,
    requantize,
)
from imxrt.pte.reader import HOST_MEMORY_CAP  # the cap the .pte's own memory counts against
from imxrt.runtime import litert_rules
from imxrt.runtime.litert_model import (  # also this module's names for what it reads
    BINARY_LHS,
    BINARY_RHS,
    BUILTIN_NAMES,
    CHANNELS,
    CONV_BIAS,
    CONV_FILTER,
    CONV_INPUT,
    DEPTHWISE_CHANNELS,
    FC_BIAS,
    FC_INPUT,
    FC_WEIGHTS,
    HEIGHT,
    NUMPY_DTYPES,
    OUTPUT,
    PAD_INPUT,
    PAD_PADDINGS,
    PAD_VALUE,
    PRELU_ALPHA,
    PRELU_INPUT,
    REDUCE_AXES,
    REDUCE_INPUT,
    RESIZE_INPUT,
    SLICE_BEGIN,
    SLICE_INPUT,
    SLICE_SIZE,
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
    TRANSPOSE_CONV_INPUT,
    TRANSPOSE_INPUT,
    TRANSPOSE_PERM,
    UNARY_INPUT,
    BadTflite,
    Op,
    OperatorView,
    UnsupportedOperator,
    constant_data,
    qparams,
    read_model,
    tensor_shape,
)


class BadSubgraphInput(ImxrtError):
    """An input array does not match the subgraph's input (count, shape or dtype)."""

    def __init__(self, name: str, problem: str):
        super().__init__(f"LiteRT subgraph input {name}: {problem}")
        self.name = name


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    scale: float  # 0.0 when the tensor is not quantized
    zero_point: int


Evaluate = Callable[[list], list]  # operand arrays in operator order (None for an omitted operand) -> outputs


@dataclass(frozen=True)
class BlasFree:
    """What a preparer returns for an evaluation that calls no BLAS (a C kernel): a subgraph made only of
    such steps runs without switching BLAS to one thread and back, which costs more than a small layer."""

    evaluate: Evaluate


@dataclass(frozen=True)
class Step:
    op: str
    evaluate: Evaluate
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    uses_blas: bool = True


def _spec(tensor: schema.TensorT) -> TensorSpec:
    name = tensor.name.decode() if isinstance(tensor.name, bytes) else str(tensor.name)
    scale, zero_point = qparams(tensor)
    return TensorSpec(name, tensor_shape(tensor), np.dtype(NUMPY_DTYPES[tensor.type]), scale, zero_point)


def _requantize_multipliers(op: OperatorView, input_operand: int, weight_operand: int, channels: int):
    """Per-channel M[c] = s_in * s_w[c] / s_out in double (TFLM PopulateConvolutionQuantizationParams)."""
    weight_scales = op.scales(weight_operand)
    if len(weight_scales) == 1:
        weight_scales = np.repeat(weight_scales, channels)
    real = np.float64(op.scale(input_operand)) * weight_scales / np.float64(op.scale(OUTPUT, True))
    return quantize_multiplier(real)


def _optional_bias(op: OperatorView, operand: int) -> np.ndarray | None:
    return op.constant(operand) if op.has_input(operand) else None


# ---- convolution and matmul ----

def _window(op: OperatorView, filter_hw, stride, dilation) -> conv.Window:
    """The op's window over its NHWC input (operand 0), checked against what the kernels take
    (``conv.check_window``) before anything is sized from it."""
    input_shape = op.shape(CONV_INPUT)
    if len(input_shape) != 4:
        raise op.invalid(f"its input is {input_shape}; it must be 4-D (NHWC)")
    same = op.options.padding == schema.Padding.SAME
    try:
        conv.check_steps(filter_hw, stride, dilation)
        window = conv.make_window(input_shape[HEIGHT:CHANNELS], filter_hw, stride, dilation, same)
        padding = window.padding(input_shape[HEIGHT:CHANNELS]) if same else ((0, 0), (0, 0))
        conv.check_window(input_shape, filter_hw, stride, dilation, padding)
    except ValueError as e:
        raise op.invalid(str(e)) from None
    return window


def _check_output(op: OperatorView, window: conv.Window, channels: int) -> None:
    """The output the subgraph declares is the one the window gives (the result is written into it)."""
    expected = (op.shape(CONV_INPUT)[0], *window.output_size, channels)
    if op.shape(OUTPUT, True) != expected:
        raise op.invalid(f"declares output {op.shape(OUTPUT, True)}, its input and window give {expected}")


def _prepare_conv2d(op: OperatorView) -> Evaluate:
    op.require_int8(CONV_INPUT, CONV_FILTER)
    options = op.options
    filters = op.constant(CONV_FILTER)  # OHWI
    input_shape = op.shape(CONV_INPUT)
    if input_shape[CHANNELS] != filters.shape[3]:
        raise op.unsupported(f"is a grouped convolution ({input_shape[CHANNELS]} input channels, filters take "
                             f"{filters.shape[3]})")
    window = _window(op, filters.shape[1:3], (options.strideH, options.strideW),
                     (options.dilationHFactor, options.dilationWFactor))
    _check_output(op, window, filters.shape[0])
    multipliers, shifts = _requantize_multipliers(op, CONV_INPUT, CONV_FILTER, filters.shape[0])
    params = conv.prepare_conv(filters, _optional_bias(op, CONV_BIAS), window, op.zero_point(CONV_INPUT),
                               multipliers, shifts, op.zero_point(OUTPUT, True), *op.fused())
    return lambda args: [conv.conv2d(args[CONV_INPUT], params)]


def _prepare_depthwise_conv2d(op: OperatorView) -> Evaluate:
    op.require_int8(CONV_INPUT, CONV_FILTER)
    options = op.options
    filters = op.constant(CONV_FILTER)  # [1, kh, kw, C_out]
    input_shape = op.shape(CONV_INPUT)
    out_channels = filters.shape[DEPTHWISE_CHANNELS]
    window = _window(op, filters.shape[1:3], (options.strideH, options.strideW),
                     (options.dilationHFactor, options.dilationWFactor))
    if out_channels % input_shape[CHANNELS]:
        raise op.invalid(f"has {out_channels} output channels for {input_shape[CHANNELS]} input channels; they "
                         "must be a multiple")
    depth_multiplier = out_channels // input_shape[CHANNELS]
    _check_output(op, window, out_channels)
    multipliers, shifts = _requantize_multipliers(op, CONV_INPUT, CONV_FILTER, out_channels)
    bias = _optional_bias(op, CONV_BIAS)
    params = conv.DepthwiseParams(
        window, depth_multiplier, filters[0].astype(np.int32),
        np.zeros(out_channels, np.int64) if bias is None else bias.astype(np.int64), op.zero_point(CONV_INPUT),
        multipliers, shifts, op.zero_point(OUTPUT, True), *op.fused())
    return lambda args: [conv.depthwise_conv2d(args[CONV_INPUT], params)]


def _prepare_transpose_conv(op: OperatorView) -> Evaluate:
    op.require_int8(TRANSPOSE_CONV_INPUT, TRANSPOSE_CONV_FILTER)
    options = op.options
    filters = op.constant(TRANSPOSE_CONV_FILTER)  # [C_out, kh, kw, C_in]
    input_shape, output_shape = op.shape(TRANSPOSE_CONV_INPUT), op.shape(OUTPUT, True)
    if len(input_shape) != 4 or len(output_shape) != 4:
        raise op.invalid(f"maps {input_shape} to {output_shape}; both must be 4-D (NHWC)")
    try:  # the padding before is SAME's on the output, less than the filter: bounded by it here
        conv.check_transpose_window(input_shape, filters.shape[1:3], (options.strideH, options.strideW),
                                    filters.shape[1:3], output_shape)
    except ValueError as e:
        raise op.invalid(str(e)) from None
    multipliers, shifts = _requantize_multipliers(op, TRANSPOSE_CONV_INPUT, TRANSPOSE_CONV_FILTER, filters.shape[0])
    params = conv.prepare_transpose_conv(
        filters, _optional_bias(op, TRANSPOSE_CONV_BIAS), (options.strideH, options.strideW),
        options.padding == schema.Padding.SAME, op.shape(OUTPUT, True), op.zero_point(TRANSPOSE_CONV_INPUT),
        multipliers, shifts, op.zero_point(OUTPUT, True), *op.fused())
    return lambda args: [conv.transpose_conv2d(args[TRANSPOSE_CONV_INPUT], params)]


def _prepare_fully_connected(op: OperatorView) -> Evaluate | BlasFree:
    op.require_int8(FC_INPUT, FC_WEIGHTS)
    weights = op.constant(FC_WEIGHTS)  # [out, in]
    weight_scales = op.scales(FC_WEIGHTS)
    if len(weight_scales) > 1:
        multipliers, shifts = _requantize_multipliers(op, FC_INPUT, FC_WEIGHTS, weights.shape[0])
    else:
        multipliers, shifts = quantize_multiplier(fully_connected_multiplier(
            op.scale(FC_INPUT), weight_scales[0], op.scale(OUTPUT, True)))
    params = fully_connected.prepare_fully_connected(
        weights, _optional_bias(op, FC_BIAS), op.zero_point(FC_INPUT), multipliers, shifts,
        op.zero_point(OUTPUT, True), *op.fused(), op.shape(OUTPUT, True))
    run = fully_connected.bind_fully_connected(params)
    evaluate = lambda args: [run(args[FC_INPUT])]  # noqa: E731
    return BlasFree(evaluate) if params.native is not None else evaluate


def _prepare_batch_matmul(op: OperatorView) -> Evaluate:
    op.require_int8(BINARY_LHS, BINARY_RHS)
    options = op.options
    adjoint_lhs = bool(options.adjX) if options is not None else False
    adjoint_rhs = bool(options.adjY) if options is not None else False
    lhs_shape = op.shape(BINARY_LHS)
    depth = lhs_shape[-2] if adjoint_lhs else lhs_shape[-1]
    real = np.float64(op.scale(BINARY_LHS)) * np.float64(op.scale(BINARY_RHS)) / np.float64(op.scale(OUTPUT, True))
    multiplier, shift = (int(v[0]) for v in quantize_multiplier(real))
    params = fully_connected.prepare_batch_matmul(depth, op.zero_point(BINARY_LHS), op.zero_point(BINARY_RHS),
                                                  adjoint_lhs, adjoint_rhs, multiplier, shift,
                                                  op.zero_point(OUTPUT, True))
    output_shape = op.shape(OUTPUT, True)
    return lambda args: [fully_connected.batch_matmul(args[BINARY_LHS], args[BINARY_RHS], params)
                         .reshape(output_shape)]


# ---- elementwise ----

def _prepare_add_or_sub(op: OperatorView, subtract: bool) -> Evaluate:
    op.require_int8(BINARY_LHS, BINARY_RHS)
    params = elementwise.prepare_add(op.scale(BINARY_LHS), op.zero_point(BINARY_LHS), op.scale(BINARY_RHS),
                                     op.zero_point(BINARY_RHS), op.scale(OUTPUT, True), op.zero_point(OUTPUT, True),
                                     *op.fused(), subtract=subtract)
    table = elementwise.pair_table(elementwise.add, params)
    return lambda args: [elementwise.lookup_pair(args[BINARY_LHS], args[BINARY_RHS], table)]


def _prepare_mul(op: OperatorView) -> Evaluate:
    op.require_int8(BINARY_LHS, BINARY_RHS)
    params = elementwise.prepare_mul(op.scale(BINARY_LHS), op.zero_point(BINARY_LHS), op.scale(BINARY_RHS),
                                     op.zero_point(BINARY_RHS), op.scale(OUTPUT, True), op.zero_point(OUTPUT, True),
                                     *op.fused())
    table = elementwise.pair_table(elementwise.mul, params)
    return lambda args: [elementwise.lookup_pair(args[BINARY_LHS], args[BINARY_RHS], table)]


def _prepare_raw_binary(kernel) -> Callable[[OperatorView], Evaluate]:
    def prepare(op: OperatorView) -> Evaluate:
        return lambda args: [kernel(args[BINARY_LHS], args[BINARY_RHS])]
    return prepare


def _prepare_prelu(op: OperatorView) -> Evaluate:
    op.require_int8(PRELU_INPUT, PRELU_ALPHA)
    params = elementwise.prepare_prelu(op.scale(PRELU_INPUT), op.zero_point(PRELU_INPUT), op.scale(PRELU_ALPHA),
                                       op.zero_point(PRELU_ALPHA), op.scale(OUTPUT, True), op.zero_point(OUTPUT, True))
    return lambda args: [elementwise.prelu(args[PRELU_INPUT], args[PRELU_ALPHA], params)]


def _lut_op(build: Callable[[OperatorView], activations.Lut]) -> Callable[[OperatorView], Evaluate]:
    """A unary int8 op evaluated through the 256-entry table ``build`` prepares."""
    def prepare(op: OperatorView) -> Evaluate:
        op.require_int8(UNARY_INPUT)
        params = build(op)
        return lambda args: [activations.apply_lut(args[UNARY_INPUT], params)]
    return prepare


def _in_out(op: OperatorView) -> tuple[float, int, float, int]:
    return op.scale(UNARY_INPUT), op.zero_point(UNARY_INPUT), op.scale(OUTPUT, True), op.zero_point(OUTPUT, True)


def _prepare_quantize(op: OperatorView) -> Evaluate:
    op.require_int8(UNARY_INPUT)
    params = prepare_requantize(*_in_out(op))
    return lambda args: [requantize(args[UNARY_INPUT], params)]


# ---- pooling and reductions ----

def _prepare_pool(kernel) -> Callable[[OperatorView], Evaluate]:
    def prepare(op: OperatorView) -> Evaluate:
        op.require_int8(UNARY_INPUT)
        options = op.options
        input_shape = op.shape(UNARY_INPUT)
        window = _window(op, (options.filterHeight, options.filterWidth), (options.strideH, options.strideW), (1, 1))
        _check_output(op, window, input_shape[CHANNELS])
        try:
            params = pooling.prepare_pool(window, input_shape[HEIGHT:CHANNELS], *op.fused())
        except ValueError as e:
            raise op.invalid(str(e)) from None
        return lambda args: [kernel(args[UNARY_INPUT], params)]
    return prepare


def _prepare_reduce(kernel, mean: bool = False) -> Callable[[OperatorView], Evaluate]:
    def prepare(op: OperatorView) -> Evaluate:
        op.require_int8(REDUCE_INPUT)
        input_shape = op.shape(REDUCE_INPUT)
        keep_dims = bool(op.options.keepDims) if op.options is not None else False
        params = reduce.prepare_reduce(op.constant(REDUCE_AXES), len(input_shape), input_shape, keep_dims,
                                       op.scale(REDUCE_INPUT), op.zero_point(REDUCE_INPUT), op.scale(OUTPUT, True),
                                       op.zero_point(OUTPUT, True), mean)
        output_shape = op.shape(OUTPUT, True)
        return lambda args: [kernel(args[REDUCE_INPUT], params).reshape(output_shape)]
    return prepare


def _prepare_softmax(op: OperatorView) -> Evaluate:
    op.require_int8(UNARY_INPUT)
    beta = op.options.beta if op.options is not None else 1.0
    params = softmax.prepare_softmax(op.scale(UNARY_INPUT), beta)
    return lambda args: [softmax.softmax(args[UNARY_INPUT], params)]


# ---- data movement ----

def _prepare_pad(op: OperatorView) -> Evaluate:
    paddings = tuple((int(b), int(a)) for b, a in op.constant(PAD_PADDINGS).reshape(-1, 2))
    if op.has_input(PAD_VALUE):
        value = op.constant(PAD_VALUE).reshape(-1)[0]
    else:
        value = op.zero_point(OUTPUT, True) if op.tensor(OUTPUT, True).type == schema.TensorType.INT8 else 0
    return lambda args: [movement.pad(args[PAD_INPUT], paddings, value)]


def _prepare_mirror_pad(op: OperatorView) -> Evaluate:
    paddings = tuple((int(b), int(a)) for b, a in op.constant(PAD_PADDINGS).reshape(-1, 2))
    symmetric = op.options.mode == schema.MirrorPadMode.SYMMETRIC
    return lambda args: [movement.mirror_pad(args[PAD_INPUT], paddings, symmetric)]


def _prepare_transpose(op: OperatorView) -> Evaluate:
    perm = tuple(int(p) for p in op.constant(TRANSPOSE_PERM))
    return lambda args: [movement.transpose(args[TRANSPOSE_INPUT], perm)]


def _prepare_reshape(op: OperatorView) -> Evaluate:
    shape = op.shape(OUTPUT, True)
    return lambda args: [movement.reshape(args[UNARY_INPUT], shape)]


def _prepare_slice(op: OperatorView) -> Evaluate:
    begin = op.constant(SLICE_BEGIN).reshape(-1)
    size = op.constant(SLICE_SIZE).reshape(-1)
    index = tuple(slice(int(b), None if int(s) == -1 else int(b) + int(s)) for b, s in zip(begin, size, strict=True))
    return lambda args: [movement.slice_(args[SLICE_INPUT], index)]


def _prepare_strided_slice(op: OperatorView) -> Evaluate:
    options = op.options
    if options.ellipsisMask or options.newAxisMask:
        raise op.unsupported("uses an ellipsis or new-axis mask")
    index, shrink = movement.strided_slice_index(
        op.shape(STRIDED_SLICE_INPUT), op.constant(STRIDED_SLICE_BEGIN), op.constant(STRIDED_SLICE_END),
        op.constant(STRIDED_SLICE_STRIDES), options.beginMask, options.endMask, options.shrinkAxisMask,
        bool(getattr(options, "offset", False)))
    return lambda args: [movement.strided_slice(args[STRIDED_SLICE_INPUT], index, shrink)]


def _prepare_concatenation(op: OperatorView) -> Evaluate:
    axis = op.options.axis % len(op.shape(OUTPUT, True))
    return lambda args: [movement.concatenation(args, axis)]


def _prepare_split(op: OperatorView) -> Evaluate:
    rank = len(op.shape(SPLIT_INPUT))
    axis = int(op.constant(SPLIT_AXIS).reshape(-1)[0]) % rank
    sizes = tuple(op.shape(i, True)[axis] for i in range(len(op.outputs)))
    return lambda args: movement.split(args[SPLIT_INPUT], sizes, axis)


def _prepare_split_v(op: OperatorView) -> Evaluate:
    rank = len(op.shape(SPLIT_V_INPUT))
    axis = int(op.constant(SPLIT_V_AXIS).reshape(-1)[0]) % rank
    sizes = tuple(op.shape(i, True)[axis] for i in range(len(op.outputs)))
    return lambda args: movement.split(args[SPLIT_V_INPUT], sizes, axis)


def _resize_sizes(op: OperatorView) -> tuple[tuple[int, int], tuple[int, int], bool, bool]:
    input_shape, output_shape = op.shape(RESIZE_INPUT), op.shape(OUTPUT, True)
    options = op.options
    return (input_shape[HEIGHT:CHANNELS], output_shape[HEIGHT:CHANNELS], bool(options.alignCorners),
            bool(options.halfPixelCenters))


def _prepare_resize_nearest(op: OperatorView) -> Evaluate:
    (in_h, in_w), (out_h, out_w), align_corners, half_pixel = _resize_sizes(op)
    rows = movement.nearest_indices(in_h, out_h, align_corners, half_pixel)
    cols = movement.nearest_indices(in_w, out_w, align_corners, half_pixel)
    return lambda args: [movement.resize_nearest(args[RESIZE_INPUT], rows, cols)]


def _prepare_resize_bilinear(op: OperatorView) -> Evaluate:
    op.require_int8(RESIZE_INPUT)
    (in_h, in_w), (out_h, out_w), align_corners, half_pixel = _resize_sizes(op)
    rows = movement.bilinear_axis(in_h, out_h, align_corners, half_pixel)
    cols = movement.bilinear_axis(in_w, out_w, align_corners, half_pixel)
    return lambda args: [movement.resize_bilinear(args[RESIZE_INPUT], rows, cols)]


def _register(entries) -> dict[int, Callable[[OperatorView], Evaluate]]:
    table: dict[int, Callable[[OperatorView], Evaluate]] = {}
    for builtin, prepare in entries:
        if builtin in table:
            raise ValueError(f"two preparers for {BUILTIN_NAMES[builtin]}")
        table[builtin] = prepare
    return table


# The operator table: every LiteRT op the lowering can emit, each with the function that prepares it.
PREPARERS = _register([
    (Op.CONV_2D, _prepare_conv2d),
    (Op.DEPTHWISE_CONV_2D, _prepare_depthwise_conv2d),
    (Op.TRANSPOSE_CONV, _prepare_transpose_conv),
    (Op.FULLY_CONNECTED, _prepare_fully_connected),
    (Op.BATCH_MATMUL, _prepare_batch_matmul),
    (Op.ADD, lambda op: _prepare_add_or_sub(op, subtract=False)),
    (Op.SUB, lambda op: _prepare_add_or_sub(op, subtract=True)),
    (Op.MUL, _prepare_mul),
    (Op.MAXIMUM, _prepare_raw_binary(elementwise.maximum)),
    (Op.MINIMUM, _prepare_raw_binary(elementwise.minimum)),
    (Op.PRELU, _prepare_prelu),
    (Op.AVERAGE_POOL_2D, _prepare_pool(pooling.average_pool)),
    (Op.MAX_POOL_2D, _prepare_pool(pooling.max_pool)),
    (Op.MEAN, _prepare_reduce(reduce.mean_or_sum, mean=True)),
    (Op.SUM, _prepare_reduce(reduce.mean_or_sum)),
    (Op.REDUCE_MAX, _prepare_reduce(reduce.reduce_max)),
    (Op.REDUCE_MIN, _prepare_reduce(reduce.reduce_min)),
    (Op.SOFTMAX, _prepare_softmax),
    (Op.QUANTIZE, _prepare_quantize),
    (Op.RELU, _lut_op(lambda op: activations.relu_lut(*_in_out(op)))),
    (Op.RELU6, _lut_op(lambda op: activations.relu6_lut(op.scale(UNARY_INPUT), op.zero_point(UNARY_INPUT)))),
    (Op.RELU_N1_TO_1, _lut_op(lambda op: activations.relu_lut(*_in_out(op), low=-1.0, high=1.0))),
    (Op.RELU_0_TO_1, _lut_op(lambda op: activations.relu_lut(*_in_out(op), low=0.0, high=1.0))),
    (Op.LEAKY_RELU, _lut_op(lambda op: activations.leaky_relu_lut(*_in_out(op), op.options.alpha))),
    (Op.LOGISTIC, _lut_op(lambda op: activations.logistic_lut(op.scale(UNARY_INPUT), op.zero_point(UNARY_INPUT)))),
    (Op.TANH, _lut_op(lambda op: activations.tanh_lut(op.scale(UNARY_INPUT), op.zero_point(UNARY_INPUT)))),
    (Op.HARD_SWISH, _lut_op(lambda op: activations.hard_swish_lut(*_in_out(op)))),
    (Op.ABS, _lut_op(lambda op: activations.abs_lut(*_in_out(op)))),
    (Op.RSQRT, _lut_op(lambda op: activations.rsqrt_lut(*_in_out(op)))),
    (Op.EXP, _lut_op(lambda op: activations.exp_lut(*_in_out(op)))),
    (Op.LOG, _lut_op(lambda op: activations.log_lut(*_in_out(op)))),
    (Op.PAD, _prepare_pad),
    (Op.PADV2, _prepare_pad),
    (Op.MIRROR_PAD, _prepare_mirror_pad),
    (Op.TRANSPOSE, _prepare_transpose),
    (Op.RESHAPE, _prepare_reshape),
    (Op.SLICE, _prepare_slice),
    (Op.STRIDED_SLICE, _prepare_strided_slice),
    (Op.CONCATENATION, _prepare_concatenation),
    (Op.SPLIT, _prepare_split),
    (Op.SPLIT_V, _prepare_split_v),
    (Op.RESIZE_NEAREST_NEIGHBOR, _prepare_resize_nearest),
    (Op.RESIZE_BILINEAR, _prepare_resize_bilinear),
])


class SingleThreadedBlas:
    """Our matmuls are small: a multi-threaded BLAS spends more on waking threads than on the work (seen
    100-500x slower on two-core machines), so BLAS runs single-threaded while a subgraph runs. The BLAS
    libraries are found once; entering and leaving costs a few C calls (threadpoolctl's ``limit``, which
    rescans them every time, costs ~10 us, a small layer's whole runtime)."""

    def __init__(self) -> None:
        self._libraries = threadpoolctl.ThreadpoolController().select(user_api="blas").lib_controllers

    def enter(self) -> list:
        """Limit every BLAS to one thread; returns what ``leave`` restores."""
        saved = [library.get_num_threads() for library in self._libraries]
        for library, threads in zip(self._libraries, saved, strict=True):
            if threads != 1:
                library.set_num_threads(1)
        return saved

    def leave(self, saved: list) -> None:
        for library, threads in zip(self._libraries, saved, strict=True):
            if threads != 1 and threads is not None:
                library.set_num_threads(threads)


@functools.cache
def single_threaded_blas() -> SingleThreadedBlas:
    return SingleThreadedBlas()


def _gather(indices: tuple[int, ...]) -> Callable[[list], tuple]:
    """The operand arrays of a step from the value list, as one C call; an omitted operand (-1) reads the
    list's last slot, which always holds None."""
    if len(indices) == 1:
        index = indices[0]
        return lambda values: (values[index],)
    if not indices:
        return lambda values: ()
    return operator.itemgetter(*indices)


class LiteRTRunner:
    """A prepared LiteRT subgraph: ``inputs`` / ``outputs`` describe its I/O tensors in the .tflite's own
    shapes and layout; ``run`` evaluates it."""

    def __init__(self, steps: list[Step], tensor_count: int, constants: dict[int, np.ndarray],
                 input_indices: list[int], output_indices: list[int], inputs: list[TensorSpec],
                 outputs: list[TensorSpec]):
        self.steps = steps
        self.inputs, self.outputs = inputs, outputs
        self._input_indices, self._output_indices = input_indices, output_indices
        # The value list every run starts from: constants in place, and a last slot for omitted operands.
        self._initial_values: list = [None] * (tensor_count + 1)
        for index, data in constants.items():
            self._initial_values[index] = data
        self._program = [(step.evaluate, _gather(step.inputs), step.outputs[0] if len(step.outputs) == 1 else None,
                          step.outputs) for step in steps]
        self._blas = single_threaded_blas() if any(step.uses_blas for step in steps) else None

    @classmethod
    def from_bytes(cls, tflite: bytes) -> LiteRTRunner:
        model = read_model(tflite)
        graph = model.subgraphs[0]
        _check_tensor_bytes(graph)
        for index, tensor in enumerate(graph.tensors or []):
            litert_rules.check_tensor(tensor, index)
        input_indices = [int(i) for i in (graph.inputs if graph.inputs is not None else [])]
        output_indices = [int(i) for i in (graph.outputs if graph.outputs is not None else [])]
        for kind, indices in (("input", input_indices), ("output", output_indices)):
            if any(not 0 <= i < len(graph.tensors or []) for i in indices):
                raise BadTflite(f"subgraph {kind}s {indices} are not all among its {len(graph.tensors or [])} tensors")
        constants = {}
        for index, tensor in enumerate(graph.tensors or []):
            data = constant_data(model, tensor)
            if data is not None:
                constants[index] = data
        steps = []
        for index, op in enumerate(graph.operators or []):
            code = model.operatorCodes[op.opcodeIndex]
            builtin = max(code.builtinCode, code.deprecatedBuiltinCode)  # codes past 127 live in builtinCode
            name = BUILTIN_NAMES.get(builtin, str(builtin))
            if builtin == Op.CUSTOM:
                name = bytes(code.customCode).decode() if code.customCode else "CUSTOM"
            prepare = PREPARERS.get(builtin)
            if prepare is None:
                raise UnsupportedOperator(name, index)
            view = OperatorView(model, graph, op, builtin, name, index)
            litert_rules.check_operator(view)
            evaluate = prepare(view)
            blas_free = isinstance(evaluate, BlasFree)
            steps.append(Step(name, evaluate.evaluate if blas_free else evaluate, tuple(view.inputs),
                              tuple(view.outputs), uses_blas=not blas_free))
        return cls(steps, len(graph.tensors), constants, input_indices, output_indices,
                   [_spec(graph.tensors[i]) for i in input_indices], [_spec(graph.tensors[i]) for i in output_indices])

    def check_inputs(self, inputs: Sequence[np.ndarray]) -> None:
        if len(inputs) != len(self.inputs):
            names = ", ".join(spec.name for spec in self.inputs)
            raise BadSubgraphInput(names or "(none)", f"expected {len(self.inputs)} arrays, got {len(inputs)}")
        for array, spec in zip(inputs, self.inputs, strict=True):
            if not isinstance(array, np.ndarray):
                raise BadSubgraphInput(spec.name, f"expected a numpy array, got {type(array).__name__}")
            if tuple(array.shape) != spec.shape or array.dtype != spec.dtype:
                raise BadSubgraphInput(spec.name, f"expected {spec.shape} {spec.dtype}, got "
                                                  f"{tuple(array.shape)} {array.dtype}")

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        self.check_inputs(inputs)
        return self.run_checked(inputs)

    def run_checked(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """``run`` for inputs the caller has checked once for all calls (``check_inputs``)."""
        values = self._initial_values.copy()
        for index, array in zip(self._input_indices, inputs, strict=True):
            values[index] = array
        if self._blas is None:
            self._evaluate(values)
        else:
            saved = self._blas.enter()
            try:
                self._evaluate(values)
            finally:
                self._blas.leave(saved)
        return [np.ascontiguousarray(values[i]) for i in self._output_indices]

    def _evaluate(self, values: list) -> None:
        for evaluate, gather, output, outputs in self._program:
            results = evaluate(gather(values))
            if output is not None:
                values[output] = results[0]
            else:
                for index, result in zip(outputs, results, strict=True):
                    values[index] = result


def _check_tensor_bytes(graph) -> None:
    """The subgraph's tensors fit the host runtime's memory cap, counted from their shapes before any of
    them is allocated (a damaged shape can ask for gigabytes)."""
    total = 0
    for index, tensor in enumerate(graph.tensors or []):
        shape = [int(size) for size in (tensor.shape if tensor.shape is not None else [])]
        if any(size < 0 for size in shape):
            raise BadTflite(f"tensor {index} has negative sizes {shape}")
        total += functools.reduce(operator.mul, shape, 1) * np.dtype(NUMPY_DTYPES.get(tensor.type, np.int64)).itemsize
    if total > HOST_MEMORY_CAP:
        raise BadTflite(f"its tensors would take {total:,} bytes, more than the host runtime's cap of "
                        f"{HOST_MEMORY_CAP:,}")
