"""What the stock runtime's portable kernels refuse of their arguments, as named rules (``STOCK_RULES``).

The allowlist says which operators the stock ExecuTorch runtime has a kernel for; a kernel can still refuse the
arguments of a call. Each portable kernel checks them first (``ET_KERNEL_CHECK`` on the ``check_*_args`` of
``kernels/portable/cpu/util/*_util.cpp``, then the dtypes its ``ET_SWITCH_*`` macro takes) and fails the call
with InvalidArgument otherwise: the board cannot run such a program, though torch's own kernels (the host
runtime's) would. A convolution over a 5-D input is the case in point: torch runs a 3-D convolution, the stock
kernel takes 3-D or 4-D inputs only.

Each check is a rule here, written once: a function of the call's arguments by schema name (tensors, or fake
tensors at compile time; ``out`` the tensor it writes) returning the value found when it refuses, its docstring
the rule as the user reads it. The same rules refuse a program at compile time (``node_refusal`` on the lowered
graph, ``serialization.check_stock_kernels``) and a file at load (``preconditions.check``). Dim orders are
read from strides, as torch reads them: a dim of size 1 may be stored in any order.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch

# The dtype sets of ExecuTorch's ET_SWITCH_* macros (runtime/core/exec_aten/util/scalar_type_util.h).
_REAL = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float32, torch.float64)
_REALHBF16 = (*_REAL, torch.float16, torch.bfloat16)
_FLOATHBF16 = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class StockRule:
    """A portable kernel's check: ``check(args)`` gives the value found when the kernel refuses them, else None;
    its docstring is the rule. ``advice``: what the user can do instead."""

    check: Callable[[dict], str | None]
    advice: str = ""

    @property
    def name(self) -> str:
        return self.check.__name__.lstrip("_")

    @property
    def text(self) -> str:
        return " ".join(inspect.getdoc(self.check).split())


def _describe(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _tensor(tensor: torch.Tensor) -> str:
    return f"{tensor.dim()}-D {tuple(tensor.shape)} {_describe(tensor.dtype)}"


def _one_dtype(args: dict, names: tuple[str, ...], dtypes: tuple[torch.dtype, ...]) -> str | None:
    """The tensors ``names`` (None ones skipped) of one dtype, which is among ``dtypes``."""
    tensors = {name: args[name] for name in names if args.get(name) is not None}
    kinds = {tensor.dtype for tensor in tensors.values()}
    if len(kinds) > 1:
        return ", ".join(f"{name} {_describe(tensor.dtype)}" for name, tensor in tensors.items())
    (kind,) = kinds
    if kind not in dtypes:
        return f"{_describe(kind)} tensors"
    return None


def _ranks(args: dict, names: tuple[str, ...], ranks: tuple[int, ...]) -> str | None:
    for name in names:
        if args[name].dim() not in ranks:
            return f"{name} is {_tensor(args[name])}"
    return None


def _param_list(name: str, values: list[int], length: int, minimum: int, allow_empty: bool = False) -> str | None:
    """``param_array_is_valid``: one value or one per kernel dim (or none, where allowed), each at least
    ``minimum``."""
    sizes = (0, 1, length) if allow_empty else (1, length)
    if len(values) not in sizes or any(value < minimum for value in values):
        return f"{name} {list(values)}"
    return None


def _val_at(values: list[int], index: int, default: int) -> int:
    """``val_at``: a list of one value stands for every dim."""
    if not values:
        return default
    return values[0] if len(values) == 1 else values[index]


# convolution.out: check_convolution_args (kernel_ops_util.cpp) and ET_SWITCH_REALHBF16_TYPES.

def _convolution_rank(args: dict) -> str | None:
    """the stock runtime's convolution kernel takes 3-D or 4-D inputs (1-D and 2-D convolutions), with a weight
    and an output of the input's rank"""
    input = args["input"]
    if input.dim() not in (3, 4):
        return f"the input is {_tensor(input)}"
    return _ranks(args, ("weight", "out"), (input.dim(),))


def _convolution_dtype(args: dict) -> str | None:
    """the stock convolution kernel takes an input, weight and output of one dtype, an integer or floating one
    (not bool)"""
    return _one_dtype(args, ("input", "weight", "out"), _REALHBF16)


def _convolution_window(args: dict) -> str | None:
    """the stock convolution kernel takes one stride, padding and dilation value or one per spatial dim, strides
    and dilations at least 1 and paddings at least 0, a transposed convolution's output padding smaller than
    its stride or its dilation, and a bias of rank 1"""
    kernel_dims = args["weight"].dim() - 2
    stride, dilation = args["stride"], args["dilation"]
    problem = (_param_list("stride", stride, kernel_dims, 1) or _param_list("padding", args["padding"], kernel_dims, 0)
               or _param_list("dilation", dilation, kernel_dims, 1))
    if problem:
        return problem
    if args["transposed"]:
        output_padding = args["output_padding"]
        problem = _param_list("output_padding", output_padding, kernel_dims, 0)
        if problem:
            return problem
        for dim in range(kernel_dims):
            padding = _val_at(output_padding, dim, 0)
            if not (padding < _val_at(stride, dim, 1) or padding < _val_at(dilation, dim, 1)):
                return f"output_padding {list(output_padding)} with stride {list(stride)}, dilation {list(dilation)}"
    bias = args.get("bias")
    if bias is not None and bias.dim() != 1:
        return f"the bias is {_tensor(bias)}"
    return None


def _convolution_groups(args: dict) -> str | None:
    """the stock convolution kernel takes a group count dividing the weight's first dim, and an input with the
    channels the weight reads (groups x weight.size(1), or weight.size(0) transposed)"""
    input, weight, groups = args["input"], args["weight"], args["groups"]
    if groups < 1 or weight.shape[0] < groups or weight.shape[0] % groups:
        return f"groups {groups} for a {tuple(weight.shape)} weight"
    channels = weight.shape[0] if args["transposed"] else groups * weight.shape[1]
    if input.shape[1] != channels:
        return f"an input of {input.shape[1]} channels for {channels}"
    return None


_NO_3D_CONVOLUTION = ("neither Neutron nor CMSIS-NN has a 3-D convolution either: use Conv2d (fold the depth into the "
                      "channels or the batch) or Conv1d")

# 2-D pools: check_avg_pool2d_args / check_max_pool2d_with_indices_args (kernel_ops_util.cpp).

def _pool_rank(args: dict) -> str | None:
    """the stock runtime's 2-D pool kernels take a 3-D (C, H, W) or 4-D (N, C, H, W) input whose channel and
    spatial dims are not empty"""
    input = args["self"]
    if input.dim() not in (3, 4) or 0 in input.shape[-3:]:
        return f"the input is {_tensor(input)}"
    return None


def _pool_window(args: dict) -> str | None:
    """the stock 2-D pool kernels take one or two kernel sizes of at least 1 and one or two paddings from 0 to
    half the kernel size"""
    kernel_size, padding = args["kernel_size"], args["padding"]
    problem = _param_list("kernel_size", kernel_size, 2, 1) or _param_list("padding", padding, 2, 0)
    if problem:
        return problem
    for dim, pad in enumerate(padding):
        if pad > _val_at(kernel_size, dim, 1) // 2:
            return f"padding {list(padding)} for kernel_size {list(kernel_size)}"
    return None


def _pool_input_contiguous(args: dict) -> str | None:
    """the stock average pool kernels read their input in the contiguous dim order (N, C, H, W), not channels
    last"""
    input = args["self"]
    if not input.is_contiguous():  # strides: a dim of size 1 may be stored in any order, as torch reads it
        return f"an input with strides {input.stride()} for {tuple(input.shape)}"
    return None


def _adaptive_pool_output_size(args: dict) -> str | None:
    """the stock adaptive average pool kernel takes an output size of two positive values"""
    output_size = list(args["output_size"])
    if len(output_size) != 2 or not all(size > 0 for size in output_size):
        return f"output_size {output_size}"
    return None


def _avg_pool_divisor(args: dict) -> str | None:
    """the stock avg_pool2d kernel takes no divisor_override of 0"""
    if args.get("divisor_override") == 0:
        return "divisor_override 0"
    return None


def _avg_pool_dtype(args: dict) -> str | None:
    """the stock avg_pool2d kernel takes an input and output of one floating dtype or int64"""
    return _one_dtype(args, ("self", "out"), (*_FLOATHBF16, torch.int64))


def _max_pool_dtype(args: dict) -> str | None:
    """the stock max_pool2d_with_indices kernel takes an input and output of one integer or floating dtype (not
    bool), and int64 indices"""
    indices = args["indices"]
    if indices.dtype != torch.int64:
        return f"{_describe(indices.dtype)} indices"
    return _one_dtype(args, ("self", "out"), _REALHBF16)


# 3-D pools never reach a kernel: ConvertPoolsTo2dPass splits them into 2-D pools or refuses them at export.
_NO_3D_POOL = "neither Neutron nor CMSIS-NN has a 3-D pool either: pool over 2-D views of the input"


# upsample_{bilinear,nearest}2d.vec_out: check_upsample_2d_common_args (upsample_util.cpp).

def _upsample_rank(args: dict) -> str | None:
    """the stock runtime's 2-D upsampling kernels take a 4-D input and output (N, C, H, W)"""
    return _ranks(args, ("input", "out"), (4,))


def _upsample_dtype(args: dict) -> str | None:
    """the stock 2-D upsampling kernels take an input and output of one integer or floating dtype (not bool)"""
    return _one_dtype(args, ("input", "out"), _REALHBF16)


def _upsample_size(args: dict) -> str | None:
    """the stock 2-D upsampling kernels take either an output size or scale factors, two positive values"""
    size, scales = args.get("output_size"), args.get("scale_factors")
    if (size is None) == (scales is None):
        return f"output_size {size} and scale_factors {scales}"
    values = list(size if size is not None else scales)
    if len(values) != 2 or not all(value > 0 for value in values):
        return f"{'output_size' if size is not None else 'scale_factors'} {values}"
    return None


# _softmax.out / _log_softmax.out: check_log_softmax_args (activation_ops_util.cpp), ET_SWITCH_FLOATHBF16_TYPES.

def _softmax_arguments(args: dict) -> str | None:
    """the stock softmax kernels take an input and output of one floating dtype, a dim of the input, and no
    half-to-float conversion"""
    input, dim = args["self"], args["dim"]
    if args["half_to_float"]:
        return "half_to_float True"
    if not -max(input.dim(), 1) <= dim < max(input.dim(), 1):
        return f"dim {dim} of a {_tensor(input)} input"
    return _one_dtype(args, ("self", "out"), _FLOATHBF16)


# mm / bmm / addmm: check_{mm,bmm,addmm}_args (matmul_ops_util.cpp) and their ET_SWITCH macros.

def _mm_arguments(args: dict) -> str | None:
    """the stock mm kernel takes 2-D operands and output of one integer or floating dtype (not bool)"""
    return _ranks(args, ("self", "mat2", "out"), (2,)) or _one_dtype(args, ("self", "mat2", "out"), _REALHBF16)


def _bmm_arguments(args: dict) -> str | None:
    """the stock bmm kernel takes 3-D operands and output of one integer or floating dtype (not bool)"""
    return _ranks(args, ("self", "mat2", "out"), (3,)) or _one_dtype(args, ("self", "mat2", "out"), _REALHBF16)


def _addmm_arguments(args: dict) -> str | None:
    """the stock addmm kernel takes 2-D matrices and output, and an addend, matrices and output of one integer or
    floating dtype (not bool)"""
    return (_ranks(args, ("mat1", "mat2", "out"), (2,))
            or _one_dtype(args, ("self", "mat1", "mat2", "out"), _REALHBF16))


# embedding.out: check_embedding_args (kernel_ops_util.cpp), and its ET_CHECK_MSG on the index dtype, which aborts
# the device runtime instead of failing the call.

def _embedding_arguments(args: dict) -> str | None:
    """the stock embedding kernel takes a 2-D weight, int64 or int32 indices, and an output of the weight's
    dtype with one dim more than the indices"""
    weight, indices, out = args["weight"], args["indices"], args["out"]
    if weight.dim() != 2:
        return f"the weight is {_tensor(weight)}"
    if indices.dtype not in (torch.int64, torch.int32):
        return f"{_describe(indices.dtype)} indices"
    if out.dim() != indices.dim() + 1 or out.dtype != weight.dtype:
        return f"an output {_tensor(out)} for {_tensor(indices)} indices into a {_tensor(weight)} weight"
    return None


# By the qualified name of the out variant a program calls, each kernel's rules in the order it checks them.
STOCK_RULES: dict[str, tuple[StockRule, ...]] = {
    "aten::convolution.out": (StockRule(_convolution_rank, _NO_3D_CONVOLUTION), StockRule(_convolution_dtype),
                              StockRule(_convolution_window), StockRule(_convolution_groups)),
    "aten::avg_pool2d.out": (StockRule(_avg_pool_dtype), StockRule(_pool_rank, _NO_3D_POOL), StockRule(_pool_window),
                             StockRule(_avg_pool_divisor), StockRule(_pool_input_contiguous)),
    "aten::_adaptive_avg_pool2d.out": (StockRule(_avg_pool_dtype), StockRule(_pool_rank, _NO_3D_POOL),
                                       StockRule(_adaptive_pool_output_size), StockRule(_pool_input_contiguous)),
    "aten::max_pool2d_with_indices.out": (StockRule(_max_pool_dtype), StockRule(_pool_rank, _NO_3D_POOL),
                                          StockRule(_pool_window)),
    "aten::upsample_bilinear2d.vec_out": (StockRule(_upsample_dtype), StockRule(_upsample_rank),
                                          StockRule(_upsample_size)),
    "aten::upsample_nearest2d.vec_out": (StockRule(_upsample_dtype), StockRule(_upsample_rank),
                                         StockRule(_upsample_size)),
    "aten::_softmax.out": (StockRule(_softmax_arguments),),
    "aten::_log_softmax.out": (StockRule(_softmax_arguments),),
    "aten::embedding.out": (StockRule(_embedding_arguments),),
    "aten::mm.out": (StockRule(_mm_arguments),),
    "aten::bmm.out": (StockRule(_bmm_arguments),),
    "aten::addmm.out": (StockRule(_addmm_arguments),),
}


_RULED_OPERATORS = frozenset(name.partition(".")[0] for name in STOCK_RULES)


@dataclass(frozen=True)
class Refusal:
    """The first rule a call breaks and the value it found."""

    rule: StockRule
    found: str

    def __str__(self) -> str:
        advice = f"; {self.rule.advice}" if self.rule.advice else ""
        return f"{self.rule.text} (rule {self.rule.name}); here {self.found}{advice}"


def refusal(name: str, args: dict) -> Refusal | None:
    """The first of operator ``name``'s rules its arguments (by schema name, ``out`` included) break, or None."""
    for rule in STOCK_RULES.get(name, ()):
        found = rule.check(args)
        if found is not None:
            return Refusal(rule, found)
    return None


def node_refusal(node: torch.fx.Node) -> str | None:
    """Why the stock kernel a graph node becomes would refuse it (the kernel and the first rule it breaks), or
    None. A functional
    edge op is checked as the out variant ``to_executorch`` makes of it, its result as ``out``; an out variant
    (after ``to_executorch``) as it is. Arguments are read from the nodes' fake tensors."""
    from executorch.exir.operator.convert import is_out_variant, to_out_variant

    if node.op != "call_function":
        return None
    overload = node.target
    if not isinstance(overload, torch._ops.OpOverload):
        overload = getattr(overload, "_op", None)  # an edge op wraps torch's
    if not isinstance(overload, torch._ops.OpOverload):
        return None
    op_schema = overload._schema
    results: dict = {}
    if not is_out_variant(op_schema.name, overload._overloadname):
        if op_schema.name not in _RULED_OPERATORS:
            return None
        try:
            out_variant, out_names = to_out_variant(overload)
        except (RuntimeError, AssertionError):
            return None
        value = node.meta.get("val")
        results = dict(zip(out_names, value if isinstance(value, (tuple, list)) else (value,), strict=False))
        overload = out_variant
    name = f"{overload._schema.name}.{overload._overloadname}"
    if name not in STOCK_RULES:
        return None
    args = {}
    for position, argument in enumerate(overload._schema.arguments):
        if position < len(node.args) and not argument.kwarg_only:
            value = node.args[position]
        elif argument.name in node.kwargs:
            value = node.kwargs[argument.name]
        elif argument.name in results:
            value = results[argument.name]
        else:
            value = argument.default_value if argument.has_default_value() else None
        args[argument.name] = _value(value)
    refused = refusal(name, args)
    return f"{name} would run on the CPU, where {refused}" if refused is not None else None


def _value(value):
    """A node argument as the rules read it: a node as its fake tensor (or value), lists item by item."""
    if isinstance(value, torch.fx.Node):
        return value.meta.get("val")
    if isinstance(value, (list, tuple)):
        return [_value(item) for item in value]
    return value
