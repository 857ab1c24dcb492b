"""What each kernel requires of its arguments' values, checked before it runs (the host runtime's load stage).

``allowlist.check_call`` checks each argument's kind (a tensor where the schema takes a tensor, an int list
where it takes ``int[]``). A file's checksum can be recomputed by anyone, so the values must hold too, before
any kernel sees them:

- **Shapes and dtypes, for every operator**: the call runs once on meta tensors (torch's own shape
  functions, our cortex_m fakes), which computes each result's shape and dtype without allocating it; the
  planned ``out`` tensor must have exactly that shape and dtype. The device runtime fails a kernel whose out
  tensor would need another shape (a statically planned tensor cannot be resized), and here the check also
  prices what the kernel allocates: a result larger than its planned tensor (padding of 8,000 around an
  8 x 8 image, a repeat by 10^4) is refused instead of built. What the kernels allocate beside their results is
  bounded by their operands and results, which the file's plan already prices (``program._run_bytes``).
- **ExecuTorch's C++ quantize / dequantize kernels** (``RULES``): they ``ET_CHECK`` their arguments and abort
  the process on a failure, which no Python handler can catch. Each check of ``op_quantize.cpp`` /
  ``op_dequantize.cpp`` is a rule here (dtypes, quant range inside the dtype, one scale and zero point per
  channel, the out tensor's shape), plus what keeps their arithmetic defined (a finite, positive scale; a zero
  point inside the quant range; cast to int32 by the kernel).

- **The stock portable kernels' own argument checks** (``stock_rules.STOCK_RULES``, the same rules the compiler
  refuses a program by): torch's kernels run what the stock ones refuse (a 3-D convolution), so a file calling
  one so is refused before the host runs what the board cannot.

``check`` gives the first problem as text, or None. Arguments whose tensor *contents* a rule reads (a scale
tensor) are checked at every call unless they are constants; everything else once, at load.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from imxrt.runtime import stock_rules

# Integer dtypes ExecuTorch's quantize kernel writes, with the range its quant_min / quant_max must lie in.
_QUANTIZED_DTYPES = {torch.uint8: (0, 255), torch.int8: (-128, 127), torch.uint16: (0, (1 << 16) - 1),
                     torch.int16: (-(1 << 15), (1 << 15) - 1), torch.int32: (-(1 << 31), (1 << 31) - 1)}
_QUANTIZE_INPUTS = (torch.float32, torch.float64)  # ET_FORALL_FLOAT_TYPES: the others reach an ET_CHECK
_DEQUANTIZE_OUTPUTS = (torch.float32, torch.float64, torch.float16)  # ET_FORALL_FLOATH_TYPES


@dataclass(frozen=True)
class Rule:
    """A named precondition on an operator's arguments (by schema name); ``reads``: the arguments whose tensor
    contents it reads, so it is checked again at each call where one of them is not a constant."""

    check: Callable[[dict], str | None]
    reads: tuple[str, ...] = ()


def _describe(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _quant_range(args: dict, dtype: torch.dtype) -> str | None:
    """quant_min and quant_max inside ``dtype`` and in order (check_quantize_per_tensor_args)."""
    low, high = _QUANTIZED_DTYPES[dtype]
    qmin, qmax = args["quant_min"], args["quant_max"]
    if not (low <= qmin <= qmax <= high):
        return f"quant range [{qmin}, {qmax}] is not an ordered range inside {_describe(dtype)}'s [{low}, {high}]"
    return None


def _scales_and_zero_points(scales: list[float], zero_points: list[int], args: dict) -> str | None:
    """Every scale finite and positive, every zero point inside [quant_min, quant_max]."""
    for scale in scales:
        if not (math.isfinite(scale) and scale > 0):
            return f"scale {scale} is not a finite positive number"
    for zero_point in zero_points:
        if not args["quant_min"] <= zero_point <= args["quant_max"]:
            return f"zero point {zero_point} lies outside the quant range [{args['quant_min']}, {args['quant_max']}]"
    return None


def _same_shape(args: dict) -> str | None:
    """The kernel resizes out to the input's shape; a planned out of another shape cannot be resized."""
    if tuple(args["out"].shape) != tuple(args["input"].shape):
        return f"out is {tuple(args['out'].shape)}, the input {tuple(args['input'].shape)}"
    return None


def _quantize_types(args: dict) -> str | None:
    input, out, dtype = args["input"], args["out"], args["dtype"]
    if input.dtype not in _QUANTIZE_INPUTS:
        return f"quantizes a {_describe(input.dtype)} input; it takes float32 or float64"
    if dtype not in _QUANTIZED_DTYPES:
        return f"dtype {_describe(dtype)} is not one it writes (uint8, int8, uint16, int16, int32)"
    if out.dtype != dtype:
        return f"dtype argument {_describe(dtype)} is not the out tensor's {_describe(out.dtype)}"
    return _quant_range(args, dtype) or _same_shape(args)


def _dequantize_types(args: dict) -> str | None:
    input, out, dtype = args["input"], args["out"], args["dtype"]
    if input.dtype not in _QUANTIZED_DTYPES:
        return f"dequantizes a {_describe(input.dtype)} input; it takes uint8, int8, uint16, int16 or int32"
    if dtype != input.dtype:
        return f"dtype argument {_describe(dtype)} is not the input's {_describe(input.dtype)}"
    if out.dtype not in _DEQUANTIZE_OUTPUTS:
        return f"writes a {_describe(out.dtype)} out tensor; it writes float32, float64 or float16"
    if args.get("out_dtype") is not None and args["out_dtype"] != out.dtype:
        return f"out_dtype {_describe(args['out_dtype'])} is not the out tensor's {_describe(out.dtype)}"
    return _quant_range(args, dtype) or _same_shape(args)


def _scalar_tensor(tensor: torch.Tensor, name: str, dtype: torch.dtype) -> str | None:
    if tensor.dtype != dtype or tensor.numel() != 1:
        return f"{name} must be one {_describe(dtype)} value, got {tuple(tensor.shape)} {_describe(tensor.dtype)}"
    return None


def _channel_tensor(tensor: torch.Tensor, name: str, dtypes: tuple[torch.dtype, ...], channels: int) -> str | None:
    if tensor.dtype not in dtypes or tensor.dim() != 1 or tensor.numel() != channels:
        kinds = " or ".join(_describe(dtype) for dtype in dtypes)
        return (f"{name} must be {channels} {kinds} values (one per channel), got "
                f"{tuple(tensor.shape)} {_describe(tensor.dtype)}")
    return None


def _channels(args: dict) -> tuple[int | None, str | None]:
    """The channel count along ``axis``, or the problem with the axis."""
    input, axis = args["input"], args["axis"]
    if input.dim() < 1 or not -input.dim() <= axis < input.dim():
        return None, f"axis {axis} is not a dimension of the {tuple(input.shape)} input"
    return input.shape[axis], None


def _per_tensor(types: Callable[[dict], str | None]) -> Rule:
    def check(args: dict) -> str | None:
        return types(args) or _scales_and_zero_points([args["scale"]], [args["zero_point"]], args)
    return Rule(check)


def _per_tensor_tensors(types: Callable[[dict], str | None]) -> Rule:
    def check(args: dict) -> str | None:
        scale, zero_point = args["scale"], args["zero_point"]
        problem = (types(args) or _scalar_tensor(scale, "scale", torch.float64)
                   or _scalar_tensor(zero_point, "zero_point", torch.int64))
        return problem or _scales_and_zero_points([float(scale)], [int(zero_point)], args)
    return Rule(check, reads=("scale", "zero_point"))


def _per_channel(types: Callable[[dict], str | None], scale_dtypes: tuple[torch.dtype, ...],
                 zero_point_dtypes: tuple[torch.dtype, ...], zero_points_optional: bool) -> Rule:
    def check(args: dict) -> str | None:
        problem = types(args)
        if problem:
            return problem
        channels, problem = _channels(args)
        if problem:
            return problem
        scales, zero_points = args["scales"], args["zero_points"]
        problem = _channel_tensor(scales, "scales", scale_dtypes, channels)
        if zero_points is not None or not zero_points_optional:
            problem = problem or _channel_tensor(zero_points, "zero_points", zero_point_dtypes, channels)
        zero_point_values = zero_points.tolist() if zero_points is not None else []
        return problem or _scales_and_zero_points(scales.tolist(), zero_point_values, args)
    return Rule(check, reads=("scales", "zero_points"))


def _pdist(args: dict) -> str | None:
    """check_pdist_args of the portable kernel; torch's ``_pdist_forward`` CPU kernel checks none of it and
    reads a tensor of another rank out of bounds (a segmentation fault)."""
    input, out, p = args["self"], args["out"], args["p"]
    if input.dim() != 2 or not input.is_contiguous():
        return f"takes a contiguous 2-D input, got {tuple(input.shape)}"
    if out.dtype != input.dtype:
        return f"writes a {_describe(out.dtype)} out for a {_describe(input.dtype)} input"
    if not p >= 0:
        return f"p {p} is not a non-negative number"
    return None


def _dim_order(args: dict) -> str | None:
    """``dim_order``, if given, is the out tensor's: the portable kernel copies into that order, and the host
    runtime writes through the out tensor's strides."""
    out, dim_order = args["out"], args.get("dim_order")
    if dim_order is None:
        return None
    if sorted(dim_order) != list(range(out.dim())):
        return f"dim_order {list(dim_order)} is no order of the out tensor's {out.dim()} dims"
    stride, strides = 1, [0] * out.dim()
    for dim in reversed(dim_order):
        strides[dim], stride = stride, stride * max(out.shape[dim], 1)
    if any(size > 1 and strides[d] != out.stride(d) for d, size in enumerate(out.shape)):
        return f"dim_order {list(dim_order)} is not the out tensor's"
    return None


def _copy_in_dim_order(args: dict) -> str | None:
    if tuple(args["out"].shape) != tuple(args["self"].shape):
        return f"out is {tuple(args['out'].shape)}, the input {tuple(args['self'].shape)}"
    return _dim_order(args)


def _empty_in_dim_order(args: dict) -> str | None:
    if list(args["size"]) != list(args["out"].shape):
        return f"size {list(args['size'])} is not the out tensor's {list(args['out'].shape)}"
    return _dim_order(args)


# By qualified name, the operators torch's shape functions cannot vouch for: ExecuTorch's quantized kernels (every
# check they ET_CHECK, and abort on), the torch kernels the argument sweep of benchmarks/fuzz.py crashed (with
# the portable kernel's own checks), and the ops the host runtime runs with kernels of its own.
RULES: dict[str, Rule] = {
    "aten::_pdist_forward.out": Rule(_pdist),
    # The host runtime's own kernels for ExecuTorch's dim order ops (ops.SPECIAL): a copy through out's strides.
    "dim_order_ops::_to_dim_order_copy.out": Rule(_copy_in_dim_order),
    "dim_order_ops::_clone_dim_order.out": Rule(_copy_in_dim_order),
    "dim_order_ops::_empty_dim_order.out": Rule(_empty_in_dim_order),
    "quantized_decomposed::quantize_per_tensor.out": _per_tensor(_quantize_types),
    "quantized_decomposed::quantize_per_tensor.Tensor_out": _per_tensor_tensors(_quantize_types),
    "quantized_decomposed::quantize_per_channel.out": _per_channel(_quantize_types, (torch.float64,), (torch.int64,),
                                                                   zero_points_optional=False),
    "quantized_decomposed::dequantize_per_tensor.out": _per_tensor(_dequantize_types),
    "quantized_decomposed::dequantize_per_tensor.Tensor_out": _per_tensor_tensors(_dequantize_types),
    "quantized_decomposed::dequantize_per_channel.out": _per_channel(
        _dequantize_types, (torch.float64, torch.float32), (torch.int64, torch.int32), zero_points_optional=True),
}


def reads(name: str) -> tuple[str, ...]:
    """The arguments of operator ``name`` whose tensor contents its precondition reads."""
    rule = RULES.get(name)
    return rule.reads if rule is not None else ()


def check(name: str, op_schema: torch.FunctionSchema, overload: torch._ops.OpOverload, args: list,
          kwargs: dict) -> str | None:
    """The first problem with calling operator ``name`` on these (converted) arguments, or None: what the stock
    portable kernel refuses (``stock_rules``) first, then the rule here or the result shapes."""
    named = dict(zip((a.name for a in op_schema.arguments if not a.kwarg_only), args, strict=False)) | kwargs
    refused = stock_rules.refusal(name, named)
    if refused is not None:
        return f"the stock runtime would refuse it: {refused}"
    rule = RULES.get(name)
    if rule is not None:
        return rule.check(named)
    return _result_shapes(op_schema, overload, args, kwargs)


def _result_shapes(op_schema: torch.FunctionSchema, overload, args: list, kwargs: dict) -> str | None:
    """Run the call on meta tensors: the shapes and dtypes it computes must be the planned out tensors'."""
    meta_args, meta_kwargs = _on_meta(args), _on_meta(kwargs)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "an output with one or more elements was resized"
            overload(*meta_args, **meta_kwargs)
    except NotImplementedError:
        return None  # no shape function (data-dependent results): the kernel's own checks stand
    except Exception as e:  # torch's argument checks: RuntimeError, IndexError, ValueError, TypeError, ...
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return f"cannot run on these arguments ({type(e).__name__}: {detail})"
    for argument in op_schema.arguments:
        if argument.is_out:
            problem = _same_planned(argument.name, kwargs[argument.name], meta_kwargs[argument.name])
            if problem:
                return problem
    return None


def _same_planned(name: str, planned, computed) -> str | None:
    if isinstance(planned, (list, tuple)):
        if len(planned) != len(computed):
            return f"'{name}' holds {len(planned)} tensors, the op writes {len(computed)}"
        for item, (p, c) in enumerate(zip(planned, computed, strict=True)):
            problem = _same_planned(f"{name}[{item}]", p, c)
            if problem:
                return problem
        return None
    if tuple(planned.shape) != tuple(computed.shape) or planned.dtype != computed.dtype:
        return (f"its result would be {tuple(computed.shape)} {_describe(computed.dtype)}, but '{name}' is planned "
                f"as {tuple(planned.shape)} {_describe(planned.dtype)}")
    return None


def _on_meta(value):
    """Tensors replaced by meta tensors of the same shape, strides and dtype (nothing allocated)."""
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    if isinstance(value, dict):
        return {key: _on_meta(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_on_meta(item) for item in value)
    return value
