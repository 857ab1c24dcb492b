"""Kernel calls: an operator named in the program -> a callable that runs it on the program's values.

Portable ``aten::*.out`` ops run through torch's own out-variants, writing into the arena views
(convolution, addmm, mean, softmax and sigmoid through ``portable``, in ExecuTorch's order);
``quantized_decomposed`` quantize/dequantize through ExecuTorch's quantized kernel library (its AOT
build registers the device kernels' C++ code with torch, so rounding is the device's). A few ops need
logic of their own (the table ``SPECIAL``); everything else is bound generically from the op's schema.

A kernel call's arguments are the schema's arguments in order (keyword-only ones included) followed by
its returns, each an index into the plan's values.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass

import executorch.exir.passes.dim_order_ops_registry  # noqa: F401  (registers dim_order_ops::*)
import executorch.exir.passes.executorch_prim_ops_registry  # noqa: F401  (registers executorch_prim::*)
import executorch.kernels.quantized  # noqa: F401,I001  (registers quantized_decomposed::*.out: ExecuTorch's C++)
import torch
from executorch.exir import schema

from imxrt.cortex_m import ops as cortex_m_ops  # registers cortex_m::* and their .out kernels
from imxrt.errors import BadFile
from imxrt.pte.reader import TORCH_DTYPES
from imxrt.runtime import allowlist, portable, preconditions

# The enum arguments a program stores as ints, by value: torch's binding casts any int to its C++ enum, and
# an int outside the enum crashes torch's kernels (a memory_format of -1 made aten::clone.out segfault).
_MEMORY_FORMATS = (torch.contiguous_format, torch.preserve_format, torch.channels_last, torch.channels_last_3d)
_LAYOUTS = (torch.strided,)  # ExecuTorch's tensors are strided; sparse layouts are not a program's


def _copy_into_out(self, *, out, **_):
    """dim_order ops: the out tensor already has the target dtype and dim order (its view's strides),
    so converting layout and dtype is one strided copy."""
    out.copy_(self)
    return out


def _empty_into_out(size, *, out, **_):
    return out


def _dense_operands(kernel: Callable) -> Callable:
    """ExecuTorch's C++ quantize/dequantize kernels index their tensors as contiguous: given other strides
    (a dim order the program may hold, [1, 0, 2, 3] for a [4, 1, 3, 3] weight) they wrote out of bounds.
    Such operands go in as contiguous copies, and the result is copied into the planned view."""

    def call(*args, out, **kwargs):
        if all(_dense(a) for a in (*args, out, *kwargs.values()) if isinstance(a, torch.Tensor)):
            return kernel(*args, out=out, **kwargs)
        args = [a.clone(memory_format=torch.contiguous_format) if isinstance(a, torch.Tensor) and not _dense(a)
                else a for a in args]
        result = kernel(*args, out=torch.empty(out.shape, dtype=out.dtype), **kwargs)
        out.copy_(result)
        return out

    return call


def _dense(tensor: torch.Tensor) -> bool:
    """Laid out with the contiguous strides themselves (not only ones torch calls contiguous)."""
    expected = 1
    for size, stride in zip(reversed(tensor.shape), reversed(tensor.stride()), strict=True):
        if stride != expected:
            return False
        expected *= size
    return True


# Namespaces whose kernels are ExecuTorch's C++ (registered with torch by executorch.kernels.quantized).
_CPP_KERNEL_NAMESPACES = frozenset({"quantized_decomposed"})


def _int64_zero_points(kernel: Callable) -> Callable:
    """dequantize_per_channel takes int32 zero points, but its int8 fast path reads them as int64, past the
    end of the tensor: an int32 tensor goes in widened, with the same values."""

    def call(input, scales, zero_points, *args, **kwargs):
        if isinstance(zero_points, torch.Tensor) and zero_points.dtype == torch.int32:
            zero_points = zero_points.to(torch.int64)
        return kernel(input, scales, zero_points, *args, **kwargs)

    return call


def _et_view(self, size):
    """A view sharing its input's bytes (ExecuTorch points the output at the input's data)."""
    return self.view(size)


# Ops with logic of their own, keyed by the qualified name the program stores ("ns::name.overload").
SPECIAL: dict[str, Callable] = {
    "aten::convolution.out": portable.convolution,  # ExecuTorch's summation order: bit-exact floats
    "aten::addmm.out": portable.addmm,
    "aten::sigmoid.out": portable.sigmoid,
    "aten::_softmax.out": portable.softmax,
    "aten::mean.out": portable.mean,
    "aten::upsample_nearest2d.vec_out": portable.upsample_nearest2d,  # int8 channels_last (data movement)
    "dim_order_ops::_to_dim_order_copy.out": _copy_into_out,
    "dim_order_ops::_clone_dim_order.out": _copy_into_out,
    "dim_order_ops::_empty_dim_order.out": _empty_into_out,
}

# cortex_m kernels are called directly: the same .out kernels torch dispatches to, without the dispatcher's
# round trip into Python (about 10 us per call, most of a small model's quantize / dequantize).
SPECIAL.update({f"cortex_m::{op.name}.out": cortex_m_ops.out_kernel(op) for op in cortex_m_ops.OPS})

# Ops that can be prepared once (``Kernel.bind``) when the arguments outside their data positions are
# constants: the call is then only the arithmetic on numpy views of the arena.
PREPARED: dict[str, tuple[Callable, tuple[int, ...]]] = {
    f"cortex_m::{op.name}.out": (op.prepare, op.data) for op in cortex_m_ops.OPS if op.prepare is not None}

def _int64(fn: Callable) -> Callable:
    """A scalar op as the device computes it: ints wrap at 64 bits (Python's would grow without bound in
    a loop a file can write), and a zero divisor is an error, not a Python exception of another kind."""

    divides = fn in (operator.floordiv, operator.truediv, operator.mod)

    def call(*args):
        if divides and args[1] == 0:
            raise ValueError(f"{fn.__name__} by zero")
        result = fn(*args)
        if isinstance(result, int) and not isinstance(result, bool):
            result = (result + (1 << 63)) % (1 << 64) - (1 << 63)
        return result

    return call


# executorch_prim scalar ops (symbolic shape arithmetic) without a torch schema: plain Python operators.
_SCALAR_OPS: dict[str, Callable] = {
    f"executorch_prim::{name}.Scalar": _int64(getattr(operator, name))
    for name in ("add", "sub", "mul", "floordiv", "truediv", "mod", "eq", "gt", "lt", "ge", "le", "neg")
} | {
    "executorch_prim::sym_size.int": lambda tensor, dim: tensor.size(dim),
    "executorch_prim::sym_numel.default": lambda tensor: tensor.numel(),
}
_SCALAR_ARITY = {"executorch_prim::neg.Scalar": 1, "executorch_prim::sym_numel.default": 1}
_ET_VIEW = "executorch_prim::et_view.default"
# The operators the runtime implements itself; every other name must be in ``allowlist.allowed_operators()``.
OWN_OPERATORS = frozenset({*_SCALAR_OPS, _ET_VIEW})


# CMSIS-NN work buffers: the stock cortex_m schemas declare them without (a!), but the kernel writes them,
# so plan checking must treat them as written (not as views of whatever their bytes held before).
_SCRATCH_ARGUMENTS = frozenset({"scratch", "output_scratch"})


def qualified_name(op: schema.Operator) -> str:
    return f"{op.name}.{op.overload or 'default'}"


@dataclass(frozen=True)
class Argument:
    """How one schema argument is passed: by position or keyword, and converted from its EValue how."""

    name: str
    keyword: bool
    convert: Callable[[object], object]


@dataclass(frozen=True)
class Kernel:
    """A resolved operator: call it with the converted values of an instruction's argument indices."""

    name: str
    fn: Callable
    arguments: tuple[Argument, ...]
    written: tuple[int, ...]  # positions (among the instruction's args) of the values the op writes
    stores_result: bool = False  # the op returns a new value (a view, a scalar) instead of writing an out
    prepare: Callable | None = None  # (args, **kwargs) -> the call, for values that stay the same objects
    data: tuple[int, ...] = ()  # with ``prepare``: positions whose values may change between calls
    op_schema: torch.FunctionSchema | None = None  # None for the runtime's own scalar ops and et_view
    overload: torch._ops.OpOverload | None = None  # torch's op: its meta kernel sizes the results

    def precondition(self, values: list[object]) -> str | None:
        """What is wrong with these argument values for the kernel (``preconditions``), or None."""
        if self.op_schema is None:
            return None
        try:
            args, kwargs = self._convert(values)
        except BadEnum as e:
            return str(e)
        return preconditions.check(self.name, self.op_schema, self.overload, args, kwargs)

    def contents_read(self) -> list[int]:
        """Positions of the arguments whose tensor contents ``precondition`` reads."""
        names = preconditions.reads(self.name)
        return [position for position, argument in enumerate(self.arguments) if argument.name in names]

    def check(self, args: list[int], values: list[schema.EValue]) -> str | None:
        """What is wrong with calling this kernel on the program values ``args``, or None."""
        if self.op_schema is None:
            expected = len(self.arguments) + 1
            return None if len(args) == expected else f"passes {len(args)} values, it takes {expected}"
        return allowlist.check_call(self.op_schema, self.written, args, values)

    def bind(self, values: list[object], prepare: bool = False) -> Callable[[], object]:
        """The call with these argument values, converted now, once; with ``prepare`` (the caller has checked
        that every argument outside ``data`` is a constant), set up once where the op can be."""
        args, kwargs = self._convert(values)
        if prepare and self.prepare is not None:
            return self.prepare(*args, **kwargs)
        return functools.partial(self.fn, *args, **kwargs)

    def constant_positions(self) -> list[int]:
        """Positions of the arguments ``prepare`` takes as constants: all but the data, ``out`` and the
        kernel's work buffers (the reference never reads them)."""
        return [position for position, argument in enumerate(self.arguments)
                if position not in self.data and not argument.keyword and argument.name not in _SCRATCH_ARGUMENTS]

    def call(self, values: list[object]) -> object:
        args, kwargs = self._convert(values)
        return self.fn(*args, **kwargs)

    def _convert(self, values: list[object]) -> tuple[list, dict]:
        args, kwargs = [], {}
        for argument, value in zip(self.arguments, values, strict=False):
            try:
                value = argument.convert(value)
            except BadEnum as e:
                raise BadEnum(f"argument '{argument.name}': {e}") from None
            if argument.keyword:
                kwargs[argument.name] = value
            else:
                args.append(value)
        return args, kwargs


def _identity(value):
    return value


class BadEnum(ValueError):
    """An int argument that is no value of the enum its schema declares."""


def _to_dtype(value):
    if value is None:
        return None
    try:
        return TORCH_DTYPES[schema.ScalarType(value)]
    except (ValueError, KeyError):
        raise BadEnum(f"{value} is not a dtype the runtime holds") from None


def _enum(members: tuple, what: str) -> Callable:
    def convert(value):
        if value is None:
            return None
        if not isinstance(value, int) or not 0 <= value < len(members):
            raise BadEnum(f"{value} is not a {what} (0..{len(members) - 1})")
        return members[value]
    return convert


_CONVERTERS = {"ScalarType": _to_dtype, "MemoryFormat": _enum(_MEMORY_FORMATS, "memory format"),
               "Layout": _enum(_LAYOUTS, "layout")}


def _converter(argument: torch.Argument) -> Callable:
    """How a schema argument's program value becomes the Python value torch takes: enums by their real type
    ("Optional[MemoryFormat]" is a plain ``int?`` in ``argument.type``), everything else as it is."""
    real = str(argument.real_type).removeprefix("Optional[").removesuffix("]")
    return _CONVERTERS.get(real, _identity)


def resolve(op: schema.Operator, program_name: str) -> Kernel:
    """The kernel for ``op``; an operator outside ``allowlist.allowed_operators()`` is a ``BadFile`` naming it."""
    name = qualified_name(op)
    if name in _SCALAR_OPS:
        arity = _SCALAR_ARITY.get(name, 2)
        arguments = tuple(Argument(f"a{i}", False, _identity) for i in range(arity))
        return Kernel(name, _SCALAR_OPS[name], arguments, written=(arity,), stores_result=True)
    if name == _ET_VIEW:
        arguments = (Argument("self", False, _identity), Argument("size", False, _identity))
        return Kernel(name, _et_view, arguments, written=(2,), stores_result=True)
    if name not in allowlist.allowed_operators():  # the only way from a file's names to torch.ops
        raise BadFile(program_name, f"calls operator {name}, which the host runtime does not have; "
                                    "only portable ExecuTorch ops, quantize/dequantize, cortex_m ops and "
                                    "NeutronBackend delegates run on the host")
    namespace, _, op_name = op.name.partition("::")
    try:
        overload = getattr(getattr(getattr(torch.ops, namespace), op_name), op.overload or "default")
    except (AttributeError, RuntimeError):  # listed for the device, not registered with torch (et_copy::*)
        raise BadFile(program_name, f"calls operator {name}, which the host runtime cannot run") from None
    op_schema = overload._schema
    # ScalarType is an int in a schema (cortex_m's ``dtype``); torch's dispatcher converted it, a direct call must.
    arguments = tuple(Argument(a.name, a.kwarg_only, _converter(a)) for a in op_schema.arguments)
    written = [i for i, a in enumerate(op_schema.arguments)
               if (a.alias_info is not None and a.alias_info.is_write) or a.name in _SCRATCH_ARGUMENTS]
    if op_schema.returns:  # several returns are serialized as one list value
        written.append(len(op_schema.arguments))
    prepare, data = PREPARED.get(name, (None, ()))
    fn = SPECIAL.get(name, overload)
    if namespace in _CPP_KERNEL_NAMESPACES and name not in SPECIAL:
        fn = _dense_operands(fn)
    if name == "quantized_decomposed::dequantize_per_channel.out":
        fn = _int64_zero_points(fn)
    return Kernel(name, fn, arguments, tuple(written), prepare=prepare, data=data, op_schema=op_schema,
                  overload=overload)
