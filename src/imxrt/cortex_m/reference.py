"""CPU reference implementations of the cortex_m ops: what ExecuTorch's Cortex-M kernels compute on the
device (CMSIS-NN, double rounding), on imxrt's int8 kernel library.

Each op is a kernel factory, ``<op>_kernel``: it takes the op's schema arguments (without ``out``) as torch
values, checks them, converts the constant ones once, and returns the evaluation on the data arrays (the
activations). ``functional`` makes the reference (one factory call, one evaluation, the logical result the
op library copies into ``out``, whatever its strides); ``prepared`` the host runtime's call, factory once,
evaluation per call into the arena's views. Quantize and dequantize are written out as both. Layout:
non-``_nhwc`` ops see
NCHW-logical tensors (channels_last in memory on the device), ``_nhwc`` ops NHWC-logical ones; the kernels
work on NHWC numpy arrays, so the NCHW variants permute on the way in and out. Argument conventions
(reference/cortex_m.md): conv family and linear take ``input_offset = -zp_in`` and ``output_offset = zp_out``;
add, mul, max_pool and softmax take raw zero points; batch matmul takes negated zero points.
Arguments the device kernel rejects raise ``BadKernelArguments``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from imxrt.cortex_m import shapes
from imxrt.errors import ImxrtError
from imxrt.kernels import conv, elementwise, fully_connected, movement, pooling
from imxrt.kernels import softmax as softmax_fixed_point
from imxrt.kernels.requantize import INT8_MAX, INT8_MIN, round_half_away

SOFTMAX_OUTPUT_ZERO_POINT = -128  # arm_softmax_s8 writes on scale 1/256, zero point -128


class BadKernelArguments(ImxrtError):
    """A cortex_m op was called with arguments its device kernel refuses (the board fails the same call)."""

    def __init__(self, op: str, problem: str):
        super().__init__(f"cortex_m::{op}: {problem}")
        self.op = op


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().contiguous().numpy()


def _from_nhwc(array: np.ndarray) -> torch.Tensor:
    """NHWC values as an NCHW-logical tensor (channels_last strides: no copy)."""
    return torch.from_numpy(np.ascontiguousarray(array)).permute(0, 3, 1, 2)


def _nchw_of(nhwc_reference):
    """The NCHW-logical op of an ``_nhwc`` reference: same arguments, input and result permuted."""

    def reference(input, *args):
        return _from_nhwc(_numpy(nhwc_reference(input.permute(0, 2, 3, 1), *args)))

    return reference


def _pair(values) -> tuple[int, int]:
    values = [int(v) for v in values]
    return (values[0], values[0]) if len(values) == 1 else (values[0], values[1])


def _int8(op: str, *tensors: torch.Tensor) -> None:
    for tensor in tensors:
        if tensor.dtype != torch.int8:
            raise BadKernelArguments(op, f"takes int8 tensors, got {tensor.dtype}")


def _window(input_hw, filter_hw, stride, padding, dilation, output_hw) -> conv.Window:
    """Symmetric PyTorch padding: ``padding`` before, whatever the output size needs after."""
    return conv.Window(_pair(stride), _pair(dilation), _pair(padding), tuple(output_hw), tuple(filter_hw))


def _check_window(op: str, input: torch.Tensor, filter_hw, stride, padding, dilation) -> None:
    """The window against what the kernels take (``conv.check_window``, PyTorch's symmetric padding), before
    its output is sized from it."""
    if input.dim() != 4:
        raise BadKernelArguments(op, f"takes a 4-D input, got {tuple(input.shape)}")
    try:
        conv.check_window(tuple(input.shape), _pair(filter_hw), _pair(stride), _pair(dilation),
                          [(pad, pad) for pad in _pair(padding)])
    except ValueError as e:
        raise BadKernelArguments(op, str(e)) from None


def _pool_params(op: str, window: conv.Window, input_hw, act_min: int, act_max: int) -> pooling.PoolParams:
    try:
        return pooling.prepare_pool(window, tuple(input_hw), act_min, act_max)
    except ValueError as e:  # a window of padding only
        raise BadKernelArguments(op, str(e)) from None


def _output_hw(op, input: torch.Tensor, *args) -> tuple[int, int]:
    """H, W of the NHWC-logical result the op's fake gives."""
    shape = op(input, *args).shape
    return int(shape[1]), int(shape[2])


# --- quantize / dequantize (op_quantize_per_tensor.cpp, op_dequantize_per_tensor.cpp): float32 arithmetic


def _check_quantize(input, dtype) -> None:
    if input.dtype != torch.float32 or dtype != torch.int8:
        raise BadKernelArguments("quantize_per_tensor", f"quantizes float32 to int8, got {input.dtype} -> {dtype}")


def _quantize(x: np.ndarray, inverse_scale: np.float32, zero_point: np.float32, quant_min: np.float32,
              quant_max: np.float32, work: np.ndarray) -> np.ndarray:
    """``work`` (float32, x's shape) = clamp(zp + nearbyint(x * (1.0f / scale))): the float32 product, ties to
    even; zp + q and the clamp in float32 too, exact wherever the sum can land inside [quant_min, quant_max]
    (|q| < 2**24), and beyond that both clamp to the same end."""
    np.multiply(x, inverse_scale, out=work)
    np.rint(work, out=work)
    np.add(work, zero_point, out=work)
    np.maximum(work, quant_min, out=work)
    return np.minimum(work, quant_max, out=work)


def _quantize_constants(scale, zero_point, quant_min, quant_max) -> tuple[np.float32, ...]:
    return (np.float32(1.0) / np.float32(scale), np.float32(zero_point), np.float32(quant_min),
            np.float32(quant_max))


def quantize_per_tensor(input, scale, zero_point, quant_min, quant_max, dtype):
    """q = clamp(zp + nearbyint(x * (1.0f / scale))): float32 product, ties to even."""
    _check_quantize(input, dtype)
    x = _numpy(input)
    q = _quantize(x, *_quantize_constants(scale, zero_point, quant_min, quant_max), np.empty(x.shape, np.float32))
    return torch.from_numpy(q.astype(np.int8)).reshape(input.shape)


def prepare_quantize_per_tensor(input, scale, zero_point, quant_min, quant_max, dtype, *, out):
    """``quantize_per_tensor.out`` on tensors that stay the same: the checks, constants and numpy views of
    their bytes (any strides) are made once; a call is the arithmetic and one strided copy into ``out``."""
    _check_quantize(input, dtype)
    check_out("quantize_per_tensor", out.shape, out.dtype, input.shape, torch.int8)
    source, target = _view(input), _view(out)
    constants = _quantize_constants(scale, zero_point, quant_min, quant_max)
    work = np.empty(source.shape, np.float32)

    def run():
        np.copyto(target, _quantize(source, *constants, work), casting="unsafe")  # integral floats -> int8
        return out
    return run


def dequantize_per_tensor(input, scale, zero_point, quant_min, quant_max, dtype):
    """x = float(q - zp) * (float)scale, in float32."""
    _int8("dequantize_per_tensor", input)
    x = _numpy(input)
    return torch.from_numpy(_dequantize(x, np.float32(zero_point), np.float32(scale),
                                        np.empty(x.shape, np.float32))).reshape(input.shape)


def _dequantize(q: np.ndarray, zero_point: np.float32, scale: np.float32, out: np.ndarray) -> np.ndarray:
    """``out`` (float32) = float(q - zp) * scale; q - zp is an integer of at most 9 bits, exact in float32."""
    np.subtract(q, zero_point, out=out, dtype=np.float32)
    return np.multiply(out, scale, out=out)


def prepare_dequantize_per_tensor(input, scale, zero_point, quant_min, quant_max, dtype, *, out):
    """``dequantize_per_tensor.out`` prepared once, as ``prepare_quantize_per_tensor``."""
    _int8("dequantize_per_tensor", input)
    check_out("dequantize_per_tensor", out.shape, out.dtype, input.shape, torch.float32)
    source, target = _view(input), _view(out)
    zero_point, scale = np.float32(zero_point), np.float32(scale)
    if target.flags.c_contiguous:
        def run():
            _dequantize(source, zero_point, scale, target)
            return out
        return run
    work = np.empty(source.shape, np.float32)

    def run_strided():
        np.copyto(target, _dequantize(source, zero_point, scale, work))
        return out
    return run_strided


def check_out(op: str, out_shape, out_dtype, result_shape, result_dtype) -> None:
    """An ``.out`` call's ``out`` must have its result's shape and dtype (torch or numpy, alike on both sides)."""
    if tuple(out_shape) != tuple(result_shape) or out_dtype != result_dtype:
        raise BadKernelArguments(f"{op}.out", f"out is {tuple(out_shape)} {out_dtype}, the result "
                                              f"{tuple(result_shape)} {result_dtype}")


# --- the other ops: each a kernel factory. ``<op>_kernel(*args)`` checks the arguments, converts the
# constant ones (weights, multipliers, tables) and fixes the shapes; the evaluation it returns takes the data
# arrays (the tensors at the op's ``data`` positions; NHWC for the conv family) and returns the result. The
# functional reference is one factory call and one evaluation; ``prepared`` makes the factory call once for
# a kernel that is called again and again on the same tensors (the host runtime's arena views).

Evaluate = Callable[..., np.ndarray]


def functional(kernel: Callable[..., Evaluate], data: tuple[int, ...], nchw: bool = False
               ) -> Callable[..., torch.Tensor]:
    """The op's reference: its result for these arguments, as a tensor. ``nchw``: see ``prepared``."""

    def reference(*args):
        return torch.from_numpy(np.ascontiguousarray(kernel(*args)(*[_numpy(args[i]) for i in data])))

    reference.__doc__ = kernel.__doc__
    return _nchw_of(reference) if nchw else reference


def prepared(name: str, kernel: Callable[..., Evaluate], data: tuple[int, ...], nchw: bool = False,
             fake: Callable[..., torch.Tensor] | None = None, elementwise: bool = False) -> Callable:
    """The ``.out`` call prepared once: ``prepare(*args, out=out)`` runs ``kernel`` on the arguments (the ones
    outside ``data`` must hold the same values at every call: constants) and returns a call that evaluates on
    numpy views of the data tensors' bytes and writes into ``out``'s, whatever their strides. ``nchw``: the
    op's tensors are NCHW-logical, its kernel takes and gives NHWC (the ``_nhwc`` twin's factory). ``fake``
    (the op's shapes): ``out`` must have the shape and dtype it gives, checked once here. ``elementwise``: the
    kernel maps each element alone, so data and ``out`` laid out alike (a channels_last NCHW tensor) are read
    and written in memory order, with no transposing copies."""

    def prepare(*args, out):
        evaluate = kernel(*((args[0].permute(0, 2, 3, 1), *args[1:]) if nchw else args))
        if fake is not None:  # after the kernel's own checks, which the fake's arithmetic relies on
            result = fake(*on_meta(args))
            check_out(name, out.shape, out.dtype, result.shape, result.dtype)
        if nchw:
            args = (args[0].permute(0, 2, 3, 1), *args[1:])
        views = [_view(args[i]) for i in data]
        target = _view(out.permute(0, 2, 3, 1) if nchw else out)
        if elementwise:
            views, target = _in_memory_order(views, target)
        if isinstance(evaluate, Direct) and evaluate.writes(views, target):
            write = evaluate.write

            def run_direct():
                write(*views, target)
                return out
            return run_direct
        contiguous = all(view.flags.c_contiguous for view in views)  # the arena's views keep their strides
        shape, dtype = target.shape, target.dtype

        def run():
            result = evaluate(*(views if contiguous else [np.ascontiguousarray(view) for view in views]))
            if result.shape != shape or result.dtype != dtype:
                check_out(name, shape, dtype, result.shape, result.dtype)
            np.copyto(target, result)
            return out
        return run
    return prepare


def _in_memory_order(views: list[np.ndarray], target: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Arrays of one shape and one dense layout (the bytes of a C-contiguous array with its axes permuted) as
    1-D views in memory order; as they are otherwise."""
    if any(view.shape != target.shape or view.strides != target.strides for view in views):
        return views, target
    order = sorted(range(target.ndim), key=lambda axis: -target.strides[axis])
    flat = [array.transpose(order) for array in (*views, target)]
    if not all(array.flags.c_contiguous for array in flat):
        return views, target
    *views, target = (array.reshape(-1) for array in flat)
    return views, target


@dataclass(frozen=True)
class Direct:
    """An evaluation a C kernel runs, which can also write its result straight into an array: ``write(*data,
    out)`` takes C-contiguous int8 data and a C-contiguous int8 ``out`` of ``shape``. The prepared call uses it
    where the arena's views are such (a copy of a kernel's result costs as much as a small layer)."""

    evaluate: Evaluate
    write: Callable[..., object]
    shape: tuple[int, ...]

    def __call__(self, *data: np.ndarray) -> np.ndarray:
        return self.evaluate(*data)

    def writes(self, views: list[np.ndarray], target: np.ndarray) -> bool:
        """``write`` can take these views: all C-contiguous int8, the target of the result's shape and sharing
        no bytes with the data (a kernel reads its input while writing)."""
        return (target.shape == self.shape and target.dtype == np.int8 and target.flags.c_contiguous
                and all(view.dtype == np.int8 and view.flags.c_contiguous
                        and not np.may_share_memory(view, target) for view in views))


def on_meta(args) -> tuple:
    """The arguments with every tensor on the meta device: a fake run on them sizes a result without
    allocating it (a file's arguments can ask for any size)."""
    return tuple(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args)


def _view(tensor: torch.Tensor) -> np.ndarray:
    """The tensor's bytes as a numpy array of its logical shape (sharing memory, with its strides)."""
    return tensor.detach().numpy()


# --- elementwise


def quantized_add_kernel(self, self_zero_point, self_multiplier, self_shift, other, other_zero_point,
                         other_multiplier, other_shift, output_zero_point, output_multiplier, output_shift,
                         activation_min, activation_max) -> Evaluate:
    """arm_elementwise_add_s8 with op_quantized_add.cpp's left_shift of 20 (``elementwise.ADD_LEFT_SHIFT``):
    v_i = requantize((q_i - zp_i) << 20, M_i, s_i);  q = clamp(requantize(v_1 + v_2, M, s) + zp_out). Two int8
    inputs take 65536 value pairs: the kernel runs once on each when preparing, a call reads the table
    (``elementwise.pair_table``)."""
    _int8("quantized_add", self, other)
    params = elementwise.AddParams(int(self_zero_point), int(self_multiplier), int(self_shift),
                                   int(other_zero_point), int(other_multiplier), int(other_shift),
                                   int(output_multiplier), int(output_shift), int(output_zero_point),
                                   int(activation_min), int(activation_max), subtract=False)
    return functools.partial(elementwise.lookup_pair, table=elementwise.pair_table(elementwise.add, params))


def quantized_mul_kernel(self, self_zero_point, other, other_zero_point, output_zero_point, output_multiplier,
                         output_shift) -> Evaluate:
    """arm_elementwise_mul_s8: q = clamp(requantize((q_1 - zp_1)(q_2 - zp_2)) + zp_out) over int8, as a table of
    the 65536 value pairs (``quantized_add_kernel``)."""
    _int8("quantized_mul", self, other)
    params = elementwise.MulParams(int(self_zero_point), int(other_zero_point), int(output_multiplier),
                                   int(output_shift), int(output_zero_point), INT8_MIN, INT8_MAX)
    return functools.partial(elementwise.lookup_pair, table=elementwise.pair_table(elementwise.mul, params))


def quantized_div_kernel(self, self_zero_point, other, other_zero_point, output_zero_point, output_scale
                         ) -> Evaluate:
    """op_quantized_div.cpp (CMSIS-NN has no division): in float32,
    q = clamp(round_half_away((float(q_1 - zp_1) / float(q_2 - zp_2)) * scale) + zp_out), 0 where q_2 = zp_2;
    ``output_scale`` is the effective s_1 / (s_2 s_out)."""
    _int8("quantized_div", self, other)
    if self.shape != other.shape:
        raise BadKernelArguments("quantized_div", f"needs equal shapes, got {tuple(self.shape)} and "
                                                  f"{tuple(other.shape)}")
    self_zero_point, other_zero_point, output_zero_point = int(self_zero_point), int(other_zero_point), \
        int(output_zero_point)
    scale = np.float32(output_scale)

    def evaluate(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        numerator = (a.astype(np.int32) - self_zero_point).astype(np.float32)
        denominator = (b.astype(np.int32) - other_zero_point).astype(np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            quotient = np.where(denominator != 0, numerator / denominator, np.float32(0.0)).astype(np.float32)
        q = round_half_away(quotient * scale).astype(np.int64) + output_zero_point
        return np.clip(q, INT8_MIN, INT8_MAX).astype(np.int8)
    return evaluate


def quantized_activation_kernel(input, lut) -> Evaluate:
    """out = lut[q + 128]."""
    _int8("quantized_activation", input, lut)
    if lut.numel() != 256:
        raise BadKernelArguments("quantized_activation", f"takes a 256-entry table, got {lut.numel()} entries")
    table = np.roll(_numpy(lut).reshape(256), -128)  # indexed by the byte: q & 0xFF

    def evaluate(q: np.ndarray) -> np.ndarray:
        return table[q.view(np.uint8)]
    return evaluate


def minimum_kernel(self, other) -> Evaluate:
    return elementwise.minimum


def maximum_kernel(self, other) -> Evaluate:
    return elementwise.maximum


# --- matrix products


def quantized_linear_kernel(input, weights, bias, kernel_sum, input_offset, filter_offset, output_offset,
                            requantize_multipliers, requantize_shifts, activation_max, activation_min) -> Evaluate:
    """arm_fully_connected_s8 per row of ``input``: acc = bias + sum_i w[o, i] (q[i] + input_offset)
    (DSP / scalar: ``bias``), or acc = kernel_sum[o] + sum_i w[o, i] q[i] (MVE: ``kernel_sum`` holds
    input_offset * sum_i w[o, i] + bias); q_out = clamp(requantize(acc) + output_offset). One multiplier is
    per tensor, one per output feature is per channel (arm_fully_connected_per_channel_s8)."""
    _int8("quantized_linear", input, weights)
    out_features = weights.shape[0]
    if int(filter_offset) != 0:
        raise BadKernelArguments("quantized_linear", f"filter_offset {filter_offset}: weights are symmetric, "
                                                     "the offset must be 0")
    if len(requantize_multipliers) not in (1, out_features) or len(requantize_shifts) != len(requantize_multipliers):
        raise BadKernelArguments("quantized_linear", f"{len(requantize_multipliers)} multipliers and "
                                                     f"{len(requantize_shifts)} shifts for {out_features} outputs")
    if kernel_sum is not None:
        input_zero_point, accumulator_base = 0, _numpy(kernel_sum).astype(np.int64)
    else:
        input_zero_point = -int(input_offset)
        accumulator_base = None if bias is None else _numpy(bias).astype(np.int64)
    output_shape = (*input.shape[:-1], out_features)
    params = fully_connected.prepare_fully_connected(
        _numpy(weights), accumulator_base, input_zero_point, list(requantize_multipliers), list(requantize_shifts),
        int(output_offset), int(activation_min), int(activation_max), output_shape)
    bound = fully_connected.bind_fully_connected(params)
    return bound if params.native is None else Direct(bound, params.native.run, tuple(output_shape))


def quantized_batch_matmul_kernel(lhs, lhs_zero_point, rhs_transposed, rhs_zero_point, output_zero_point,
                                  output_multiplier, output_shift, scratch) -> Evaluate:
    """arm_batch_matmul_s8: acc = (lhs + lhs_offset) @ (rhs + rhs_offset), rhs given as [B, N, K]; the
    ``*_zero_point`` arguments are those offsets (negated zero points)."""
    _int8("quantized_batch_matmul", lhs, rhs_transposed)
    params = fully_connected.prepare_batch_matmul(
        lhs.shape[-1], -int(lhs_zero_point), -int(rhs_zero_point), adjoint_lhs=False, adjoint_rhs=True,
        multiplier=int(output_multiplier), shift=int(output_shift), output_zero_point=int(output_zero_point))
    return functools.partial(fully_connected.batch_matmul, params=params)


# --- softmax and data movement


def softmax_kernel(input, dim, input_zero_point, output_zero_point, input_multiplier, input_shift, diff_min
                   ) -> Evaluate:
    """arm_softmax_s8 over the last dimension (the only one op_softmax.cpp accepts); output zero point -128.
    The input zero point cancels (softmax sees only q - max(row))."""
    _int8("softmax", input)
    if int(dim) % input.dim() != input.dim() - 1:
        raise BadKernelArguments("softmax", f"runs over the last dimension only, got dim {dim} of a "
                                            f"rank-{input.dim()} tensor")
    if int(output_zero_point) != SOFTMAX_OUTPUT_ZERO_POINT:
        raise BadKernelArguments("softmax", f"output zero point must be {SOFTMAX_OUTPUT_ZERO_POINT}, got "
                                            f"{output_zero_point}")
    params = softmax_fixed_point.prepare_softmax_fixed_point(int(input_multiplier), int(input_shift), int(diff_min))
    return functools.partial(softmax_fixed_point.softmax, params=params)


def transpose_kernel(input, perm) -> Evaluate:
    """arm_transpose_s8 on the logical (contiguous) tensor, rank 1 to 4."""
    _int8("transpose", input)
    return functools.partial(movement.transpose, perm=tuple(int(p) for p in perm))


def pad_kernel(input, pre_pad, post_pad, pad_value) -> Evaluate:
    """arm_pad_s8: constant padding; the four pads are in memory order (shapes.logical_padding)."""
    _int8("pad", input)
    if len(pre_pad) != 4 or len(post_pad) != 4:
        raise BadKernelArguments("pad", f"pre_pad and post_pad have 4 entries, got {len(pre_pad)} and "
                                        f"{len(post_pad)}")
    paddings = tuple(shapes.logical_padding(input, pre_pad, post_pad))
    return functools.partial(movement.pad, paddings=paddings, value=int(pad_value))


# --- convolutions and pooling: NHWC kernels, NCHW twins


def quantized_conv2d_nhwc_kernel(input, weight, bias, stride, padding, dilation, input_offset, output_offset,
                                 requantize_multipliers, requantize_shifts, activation_min, activation_max, scratch
                                 ) -> Evaluate:
    """arm_convolve_wrapper_s8, weights OHWI; C_in / weight's I groups, each its slice of C_out."""
    _int8("quantized_conv2d", input, weight)
    _check_window("quantized_conv2d", input, weight.shape[1:3], stride, padding, dilation)
    in_channels, group_channels = input.shape[3], weight.shape[shapes.WEIGHT_IN]
    if in_channels % group_channels:
        raise BadKernelArguments("quantized_conv2d", f"{in_channels} input channels do not split into groups "
                                                     f"of {group_channels}")
    output_hw = _output_hw(shapes.quantized_conv2d_nhwc, input, weight, bias, stride, padding, dilation,
                           input_offset, output_offset, requantize_multipliers, requantize_shifts, activation_min,
                           activation_max, scratch)
    window = _window(input.shape[1:3], weight.shape[1:3], stride, padding, dilation, output_hw)
    filters = _numpy(weight)
    bias = None if bias is None else _numpy(bias)
    multipliers, shifts = _numpy(requantize_multipliers), _numpy(requantize_shifts)
    groups = in_channels // group_channels
    group_out = filters.shape[0] // groups
    params = []
    for group in range(groups):
        outs = slice(group * group_out, (group + 1) * group_out)
        params.append(conv.prepare_conv(filters[outs], None if bias is None else bias[outs], window,
                                        -int(input_offset), multipliers[outs], shifts[outs], int(output_offset),
                                        int(activation_min), int(activation_max)))
    if groups == 1:
        evaluate = functools.partial(conv.conv2d, params=params[0])
        return evaluate if params[0].native is None else Direct(
            evaluate, params[0].native.run, (input.shape[0], *output_hw, filters.shape[0]))

    def evaluate(x: np.ndarray) -> np.ndarray:
        return np.concatenate([conv.conv2d(x[..., group * group_channels:(group + 1) * group_channels], p)
                               for group, p in enumerate(params)], axis=3)
    return evaluate


def quantized_depthwise_conv2d_nhwc_kernel(input, weight, bias, stride, padding, dilation, depth_multiplier,
                                           input_offset, output_offset, requantize_multipliers, requantize_shifts,
                                           activation_min, activation_max, scratch) -> Evaluate:
    """arm_depthwise_conv_wrapper_s8, weights [1, kh, kw, C_out]: output channel c reads input channel
    c // depth_multiplier."""
    _int8("quantized_depthwise_conv2d", input, weight)
    _check_window("quantized_depthwise_conv2d", input, weight.shape[1:3], stride, padding, dilation)
    out_channels = weight.shape[shapes.DEPTHWISE_OUT]
    if out_channels != input.shape[3] * int(depth_multiplier):
        raise BadKernelArguments("quantized_depthwise_conv2d", f"{out_channels} output channels are not "
                                 f"{input.shape[3]} input channels x depth multiplier {depth_multiplier}")
    output_hw = _output_hw(shapes.quantized_depthwise_conv2d_nhwc, input, weight, bias, stride, padding,
                           dilation, depth_multiplier, input_offset, output_offset, requantize_multipliers,
                           requantize_shifts, activation_min, activation_max, scratch)
    window = _window(input.shape[1:3], weight.shape[1:3], stride, padding, dilation, output_hw)
    bias = np.zeros(out_channels, np.int64) if bias is None else _numpy(bias).astype(np.int64)
    params = conv.DepthwiseParams(window, int(depth_multiplier), _numpy(weight)[0].astype(np.int32), bias,
                                  -int(input_offset), _numpy(requantize_multipliers).astype(np.int64),
                                  _numpy(requantize_shifts).astype(np.int64), int(output_offset),
                                  int(activation_min), int(activation_max))
    evaluate = functools.partial(conv.depthwise_conv2d, params=params)
    return evaluate if params.native is None else Direct(evaluate, params.native.run,
                                                         (input.shape[0], *output_hw, out_channels))


def quantized_transpose_conv2d_nhwc_kernel(input, weight, bias, stride, padding, output_padding, dilation,
                                           input_offset, output_offset, requantize_multipliers, requantize_shifts,
                                           activation_min, activation_max, scratch, output_scratch) -> Evaluate:
    """arm_transpose_conv_wrapper_s8, weights [C_out, kh, kw, C_in]: input pixel (y, x) adds w (q + offset)
    at (y s + fy - padding); ``output_padding`` extends the end."""
    _int8("quantized_transpose_conv2d", input, weight)
    if _pair(dilation) != (1, 1):
        raise BadKernelArguments("quantized_transpose_conv2d", f"supports dilation 1 only, got {list(dilation)}")
    try:  # before the output is sized from them
        conv.check_steps(weight.shape[1:3], _pair(stride), (1, 1))
    except ValueError as e:
        raise BadKernelArguments("quantized_transpose_conv2d", str(e)) from None
    output_shape = shapes.quantized_transpose_conv2d_nhwc(
        input, weight, bias, stride, padding, output_padding, dilation, input_offset, output_offset,
        requantize_multipliers, requantize_shifts, activation_min, activation_max, scratch, output_scratch).shape
    try:
        conv.check_transpose_window(tuple(input.shape), weight.shape[1:3], _pair(stride), _pair(padding),
                                    tuple(output_shape))
    except ValueError as e:
        raise BadKernelArguments("quantized_transpose_conv2d", str(e)) from None
    params = conv.prepare_transpose_conv(
        _numpy(weight), None if bias is None else _numpy(bias), _pair(stride), False, tuple(output_shape),
        -int(input_offset), _numpy(requantize_multipliers), _numpy(requantize_shifts), int(output_offset),
        int(activation_min), int(activation_max))
    params = dataclasses.replace(params, pad_before=_pair(padding))
    return functools.partial(conv.transpose_conv2d, params=params)


def quantized_avg_pool2d_nhwc_kernel(input, kernel_size, stride, padding, ceil_mode, zero_point, multiplier, shift,
                                     scratch) -> Evaluate:
    """arm_avgpool_s8: the mean of the taps inside the input (padding not counted), rounded half away from
    zero; input and output share qparams, so zero_point, multiplier and shift are unused (as on the device)."""
    _int8("quantized_avg_pool2d", input)
    _check_window("quantized_avg_pool2d", input, kernel_size, stride, padding, (1, 1))
    output_hw = _output_hw(shapes.quantized_avg_pool2d_nhwc, input, kernel_size, stride, padding, ceil_mode,
                           zero_point, multiplier, shift, scratch)
    window = _window(input.shape[1:3], _pair(kernel_size), stride, padding, (1, 1), output_hw)
    params = _pool_params("quantized_avg_pool2d", window, input.shape[1:3], INT8_MIN, INT8_MAX)
    evaluate = functools.partial(pooling.average_pool, params=params)
    return evaluate if params.native is None else Direct(evaluate, params.native.average,
                                                         (input.shape[0], *output_hw, input.shape[3]))


def quantized_max_pool2d_nhwc_kernel(input, kernel_size, stride, padding, dilation, ceil_mode, input_zero_point,
                                     output_zero_point, activation_min, activation_max) -> Evaluate:
    """arm_max_pool_s8: the largest tap inside the input, clamped to [activation_min, activation_max]; input
    and output zero points must match (op_quantized_max_pool2d.cpp)."""
    _int8("quantized_max_pool2d", input)
    if int(input_zero_point) != int(output_zero_point):
        raise BadKernelArguments("quantized_max_pool2d", f"input and output zero points must match, got "
                                                         f"{input_zero_point} and {output_zero_point}")
    _check_window("quantized_max_pool2d", input, kernel_size, stride, padding, dilation)
    output_hw = _output_hw(shapes.quantized_max_pool2d_nhwc, input, kernel_size, stride, padding, dilation,
                           ceil_mode, input_zero_point, output_zero_point, activation_min, activation_max)
    window = _window(input.shape[1:3], _pair(kernel_size), stride, padding, dilation, output_hw)
    params = _pool_params("quantized_max_pool2d", window, input.shape[1:3], int(activation_min),
                          int(activation_max))
    evaluate = functools.partial(pooling.max_pool, params=params)
    return evaluate if params.native is None else Direct(evaluate, params.native.maximum,
                                                         (input.shape[0], *output_hw, input.shape[3]))
