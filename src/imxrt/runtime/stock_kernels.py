"""What ExecuTorch's stock portable kernels refuse of their arguments, one named rule each (``STOCK_RULES``).

A portable kernel checks its arguments before it computes (``ET_KERNEL_CHECK`` / ``ET_CHECK_OR_RETURN_FALSE`` in
``kernels/portable/cpu/op_*.cpp`` and ``util/*_util.cpp``) and fails the call with ``InvalidArgument`` (0x12): a
program whose call breaks one loads on the board and fails when it runs. torch's own kernels accept more (a 3-D
convolution, a pool on a channels-last input), so the host runtime would run what the board refuses. Each check
of those kernels that torch's shape functions do not make is a ``StockRule`` here, evaluated on the call's
argument values by schema name (tensors: real, meta or fake; only their dtypes, shapes and strides are read):

- at compile time, on every float op the CPU lowering leaves (``cpu.lowering``: the node is refused by name as
  soon as its arguments are known) and on every call of the serialized program
  (``serialization.check_stock_kernels``);
- at load, by the host runtime (``runtime.preconditions``), so it never runs what the stock runtime refuses.

Dim orders are read from strides (torch's ``is_contiguous``), which, where a size is 1, accept every order the
stock runtime's dim-order checks could tell apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

# The dtype sets of the kernels' ET_SWITCH_* macros.
_REAL = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float32, torch.float64)
_REALHBF16 = (*_REAL, torch.float16, torch.bfloat16)  # ET_SWITCH_REALHBF16_TYPES
_FLOATHBF16_AND_LONG = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64)
_FLOATHBF16 = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class StockRule:
    """One check of a stock kernel: ``check(args)`` returns the value found when the call breaks it, else None;
    the check's docstring is the rule as the user reads it; ``advice``: what to do when a model's op breaks it."""

    check: Callable[[dict], str | None]
    advice: str = "change the model so the op's arguments fit the rule, or report it with the model"

    @property
    def name(self) -> str:
        return self.check.__name__

    @property
    def text(self) -> str:
        return " ".join(self.check.__doc__.split())


@dataclass(frozen=True)
class Broken:
    """A call breaking ``rule``, with the value found."""

    rule: StockRule
    found: str

    def __str__(self) -> str:
        return f"breaks the stock kernel's rule {self.rule.name} ({self.rule.text}): {self.found}"


def _describe(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _shape(tensor: torch.Tensor) -> str:
    return f"{tuple(tensor.shape)}"


def _default_or_channels_last(tensor: torch.Tensor) -> bool:
    """``tensor_is_default_or_channels_last_dim_order``."""
    if tensor.is_contiguous():
        return True
    formats = {4: torch.channels_last, 5: torch.channels_last_3d}
    return tensor.dim() in formats and tensor.is_contiguous(memory_format=formats[tensor.dim()])


def _same_dim_order(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``tensors_have_same_dim_order`` for two tensors of rank 4 at most: both contiguous or both channels last."""
    if a.is_contiguous() and b.is_contiguous():
        return True
    return a.dim() == b.dim() == 4 and all(t.is_contiguous(memory_format=torch.channels_last) for t in (a, b))


def _one_dtype(args: dict, names: tuple[str, ...], allowed: tuple[torch.dtype, ...], switch: str) -> str | None:
    """The tensors ``names`` of one dtype (``tensors_have_same_dtype``), one of ``allowed``."""
    dtypes = [args[name].dtype for name in names]
    if len(set(dtypes)) > 1:
        return ", ".join(f"{name} {_describe(dtype)}" for name, dtype in zip(names, dtypes, strict=True))
    if dtypes[0] not in allowed:
        return f"{_describe(dtypes[0])}, outside {switch}"
    return None


def _params(name: str, values, length: int, minimum: int, allow_empty: bool) -> str | None:
    """``param_array_is_valid``: 1 or ``length`` entries (or none, if allowed), each at least ``minimum``."""
    values = list(values)
    sizes = (0, 1, length) if allow_empty else (1, length)
    if len(values) not in sizes:
        return f"{name} {values} has {len(values)} entries, not {' or '.join(map(str, sorted(set(sizes))))}"
    if any(value < minimum for value in values):
        return f"{name} {values} has an entry below {minimum}"
    return None


def _at(values, index: int) -> int:
    """``val_at``: a one-entry list stands for every dim."""
    values = list(values)
    return values[0] if len(values) == 1 else values[index]


# --- convolution (check_convolution_args, op_convolution.cpp) ---

def convolution_rank(args: dict) -> str | None:
    """the stock runtime's convolution kernel takes 3-D or 4-D inputs (1-D/2-D convolutions), its weight and
    out of the input's rank"""
    input, weight, out = args["input"], args["weight"], args["out"]
    if input.dim() not in (3, 4):
        return f"a {input.dim()}-D input {_shape(input)}"
    if weight.dim() != input.dim() or out.dim() != input.dim():
        return f"a {input.dim()}-D input with a {weight.dim()}-D weight and a {out.dim()}-D out"
    return None


def convolution_dtype(args: dict) -> str | None:
    """the convolution kernel takes an input, weight and out of one real dtype (ET_SWITCH_REALHBF16_TYPES)"""
    return _one_dtype(args, ("input", "weight", "out"), _REALHBF16, "the real dtypes")


def convolution_dim_order(args: dict) -> str | None:
    """the convolution kernel takes an input and out in one dim order, contiguous or channels last (a
    transposed convolution's weight in any)"""
    input, weight, out = args["input"], args["weight"], args["out"]
    named = [("input", input), ("out", out)] + ([] if args["transposed"] else [("weight", weight)])
    for name, tensor in named:
        if not _default_or_channels_last(tensor):
            return f"{name} with strides {tensor.stride()}"
    if not _same_dim_order(input, out):
        return f"input strides {input.stride()}, out strides {out.stride()}"
    return None


def convolution_window(args: dict) -> str | None:
    """the convolution kernel takes 1 or one-per-spatial-dim strides and dilations of at least 1, paddings of at
    least 0, a transposed convolution's output padding below its stride or dilation, and groups dividing the
    weight's output channels and matching the input's channels"""
    input, weight, groups = args["input"], args["weight"], args["groups"]
    kernel_dims = weight.dim() - 2
    problem = (_params("stride", args["stride"], kernel_dims, 1, allow_empty=False)
               or _params("padding", args["padding"], kernel_dims, 0, allow_empty=False)
               or _params("dilation", args["dilation"], kernel_dims, 1, allow_empty=False))
    if problem:
        return problem
    if args["transposed"]:
        output_padding = args["output_padding"]
        problem = _params("output_padding", output_padding, kernel_dims, 0, allow_empty=False)
        if problem:
            return problem
        for dim in range(kernel_dims):
            padding, stride, dilation = (_at(output_padding, dim), _at(args["stride"], dim),
                                         _at(args["dilation"], dim))
            if not (padding < stride or padding < dilation):
                return f"output_padding {padding} is neither below stride {stride} nor dilation {dilation}"
    if groups < 1 or weight.shape[0] < groups or weight.shape[0] % groups:
        return f"groups {groups} for a weight of {weight.shape[0]} output channels"
    channels = weight.shape[0] if args["transposed"] else groups * weight.shape[1]
    if input.shape[1] != channels:
        return f"an input of {input.shape[1]} channels where groups {groups} and the weight take {channels}"
    return None


# --- 2-D pools (check_avg_pool2d_args, check_max_pool2d_with_indices_args, check_adaptive_avg_pool2d_args) ---

def pool_rank(args: dict) -> str | None:
    """the stock runtime's pool kernels take 3-D or 4-D inputs (2-D pools, batched or not) with nonzero channels,
    height and width; 3-D pools are neither NPU nor CMSIS-NN nor portable kernels"""
    input = args["self"]
    spatial = input.shape[-3:] if input.dim() in (3, 4) else ()
    if input.dim() not in (3, 4) or 0 in spatial:
        return f"a {input.dim()}-D input {_shape(input)}"
    return None


def _window(args: dict, stride) -> str | None:
    """``kernel_size_is_valid``, ``stride_is_valid`` and ``padding_is_valid`` with the half-kernel bound."""
    kernel_size = list(args["kernel_size"])
    problem = (_params("kernel_size", kernel_size, 2, 1, allow_empty=False)
               or _params("stride", stride, 2, 1, allow_empty=True)
               or _params("padding", args["padding"], 2, 0, allow_empty=False))
    if problem:
        return problem
    for dim, padding in enumerate(args["padding"]):
        if padding > _at(kernel_size, dim) // 2:
            return f"padding {list(args['padding'])} is more than half the kernel size {kernel_size}"
    return None


def avg_pool_window(args: dict) -> str | None:
    """the average pool kernel takes 1 or 2 kernel sizes of at least 1, 0, 1 or 2 strides of at least 1, and 1
    or 2 paddings of at least 0 and at most half the kernel size"""
    return _window(args, args["stride"])


def max_pool_window(args: dict) -> str | None:
    """the max pool kernel takes 1 or 2 kernel sizes of at least 1, and 1 or 2 paddings of at least 0 and at
    most half the kernel size"""
    # The stock kernel checks its kernel size where it means the stride (torch's own check stands for it).
    return _window(args, args["kernel_size"])


def avg_pool_dtype(args: dict) -> str | None:
    """the average pool kernels take an input and out of one float dtype or int64
    (ET_SWITCH_FLOATHBF16_TYPES_AND(Long))"""
    return _one_dtype(args, ("self", "out"), _FLOATHBF16_AND_LONG, "the float dtypes and int64")


def avg_pool_contiguous(args: dict) -> str | None:
    """the average pool kernels take a contiguous input and out (the default dim order, not channels last)"""
    for name in ("self", "out"):
        if not args[name].is_contiguous():
            return f"{name} with strides {args[name].stride()}"
    return None


def avg_pool_divisor(args: dict) -> str | None:
    """the average pool kernel takes no divisor_override of 0"""
    if args.get("divisor_override") == 0:
        return "divisor_override 0"
    return None


def max_pool_dtype(args: dict) -> str | None:
    """the max pool kernel takes an input and out of one real dtype (ET_SWITCH_REALHBF16_TYPES) and int64
    indices"""
    problem = _one_dtype(args, ("self", "out"), _REALHBF16, "the real dtypes")
    if problem is None and args["indices"].dtype != torch.int64:
        return f"indices of {_describe(args['indices'].dtype)}"
    return problem


def pool_dim_order(args: dict) -> str | None:
    """the max pool kernel takes an input and out in the contiguous or channels-last dim order"""
    for name in ("self", "out"):
        if not _default_or_channels_last(args[name]):
            return f"{name} with strides {args[name].stride()}"
    return None


def adaptive_pool_output_size(args: dict) -> str | None:
    """the adaptive average pool kernel takes an output size of 2 positive entries"""
    output_size = list(args["output_size"])
    if len(output_size) != 2 or min(output_size) <= 0:
        return f"output_size {output_size}"
    return None


# --- upsampling (check_upsample_2d_common_args, upsample_util.cpp) ---

def upsample_2d(args: dict) -> str | None:
    """the stock runtime's 2-D upsampling kernels take a 4-D input and out of one real dtype
    (ET_SWITCH_REALHBF16_TYPES) in one dim order, contiguous or channels last, and either 2 positive output
    sizes or 2 positive scale factors"""
    input, out = args["input"], args["out"]
    if input.dim() != 4 or out.dim() != 4:
        return f"a {input.dim()}-D input {_shape(input)} and a {out.dim()}-D out"
    problem = _one_dtype(args, ("input", "out"), _REALHBF16, "the real dtypes")
    if problem:
        return problem
    if not (_default_or_channels_last(input) and _same_dim_order(input, out)):
        return f"input strides {input.stride()}, out strides {out.stride()}"
    output_size, scales = args["output_size"], args["scale_factors"]
    if (output_size is None) == (scales is None):
        return "output_size and scale_factors " + ("both given" if output_size is not None else "both missing")
    given = list(output_size if output_size is not None else scales)
    if len(given) != 2 or not min(given) > 0:
        return f"{'output_size' if output_size is not None else 'scale_factors'} {given}"
    return None


# --- softmax (check_softmax_args, activation_ops_util.cpp) ---

def softmax_arguments(args: dict) -> str | None:
    """the softmax kernels take an input and out of one float dtype (ET_SWITCH_FLOATHBF16_TYPES), a dim of the
    input, no half-to-float conversion, and the contiguous or channels-last dim order"""
    input, dim = args["self"], args["dim"]
    if args["half_to_float"]:
        return "half_to_float True"
    problem = _one_dtype(args, ("self", "out"), _FLOATHBF16, "the float dtypes")
    if problem:
        return problem
    rank = max(input.dim(), 1)  # tensor_has_dim: a 0-D tensor has dim 0 and -1
    if not -rank <= dim < rank:
        return f"dim {dim} of a {input.dim()}-D input"
    if not (_default_or_channels_last(input) and _default_or_channels_last(args["out"])):
        return f"input strides {input.stride()}, out strides {args['out'].stride()}"
    return None


# --- embedding (check_embedding_args, op_embedding.cpp) ---

def embedding_arguments(args: dict) -> str | None:
    """the embedding kernel takes a 2-D weight of out's dtype, int64 or int32 indices and an out of one dim
    more than the indices"""
    weight, indices, out = args["weight"], args["indices"], args["out"]
    if weight.dim() != 2:
        return f"a {weight.dim()}-D weight {_shape(weight)}"
    if indices.dtype not in (torch.int64, torch.int32):
        return f"indices of {_describe(indices.dtype)}"
    if out.dim() != indices.dim() + 1 or out.dtype != weight.dtype:
        return (f"a {out.dim()}-D {_describe(out.dtype)} out for {indices.dim()}-D indices of a "
                f"{_describe(weight.dtype)} weight")
    return None


_CONV3D_ADVICE = ("neither Neutron nor CMSIS-NN has a 3-D convolution: use Conv2d (fold the depth into the batch "
                  "or the channels) or Conv1d")
_POOL3D_ADVICE = "use a 2-D pool (fold the depth into the batch or the channels)"

_CONVOLUTION = (StockRule(convolution_rank, _CONV3D_ADVICE), StockRule(convolution_dtype),
                StockRule(convolution_dim_order), StockRule(convolution_window))
_AVG_POOL = (StockRule(pool_rank, _POOL3D_ADVICE), StockRule(avg_pool_dtype), StockRule(avg_pool_contiguous),
             StockRule(avg_pool_window), StockRule(avg_pool_divisor))
_SOFTMAX = (StockRule(softmax_arguments),)

# By the qualified name of the out variant the program calls: each kernel's rules in the order it checks them.
STOCK_RULES: dict[str, tuple[StockRule, ...]] = {
    "aten::convolution.out": _CONVOLUTION,
    "aten::avg_pool2d.out": _AVG_POOL,
    "aten::max_pool2d_with_indices.out": (StockRule(pool_rank, _POOL3D_ADVICE), StockRule(max_pool_dtype),
                                          StockRule(pool_dim_order), StockRule(max_pool_window)),
    "aten::_adaptive_avg_pool2d.out": (StockRule(pool_rank, _POOL3D_ADVICE), StockRule(avg_pool_dtype),
                                       StockRule(avg_pool_contiguous), StockRule(adaptive_pool_output_size)),
    "aten::upsample_bilinear2d.vec_out": (StockRule(upsample_2d),),
    "aten::upsample_nearest2d.vec_out": (StockRule(upsample_2d),),
    "aten::_softmax.out": _SOFTMAX,
    "aten::_log_softmax.out": _SOFTMAX,
    "aten::embedding.out": (StockRule(embedding_arguments),),
}


def first_broken(name: str, args: dict) -> Broken | None:
    """The first rule of operator ``name``'s stock kernel that a call with the named ``args`` breaks, or None."""
    for rule in STOCK_RULES.get(name, ()):
        found = rule.check(args)
        if found is not None:
            return Broken(rule, found)
    return None
