"""Kernel calls: an operator named in the program -> a callable that runs it on the program's values.

Portable ``aten::*.out`` ops run through torch's own out-variants, writing into the arena views
(convolution, addmm, mean, cumsum, softmax, sigmoid and bilinear upsampling through ``portable``, in
ExecuTorch's order);
``quantized_decomposed`` quantize/dequantize through ExecuTorch's quantized kernel library (its AOT
build registers the device kernels' C++ code with torch, so rounding is the device's). A few ops need
logic of their own (the table ``SPECIAL``); everything else is bound generically from the op's schema. The
stock runtime's prim ops (``kernels/prim_ops``: shape arithmetic, ``et_view``, and the ``sym_size`` /
``et_copy_index`` a scan or map loop calls) are the runtime's own (``OWN``), with the stock kernels' checks.

A kernel call's arguments are the schema's arguments in order (keyword-only ones included) followed by
its returns, each an index into the plan's values.
"""

from __future__ import annotations

import dataclasses
import functools
import math
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
from imxrt.runtime.memory import dim_order_strides

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
    "aten::cumsum.out": portable.cumsum,
    "aten::upsample_bilinear2d.vec_out": portable.upsample_bilinear2d,
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


@dataclass(frozen=True)
class TensorPlan:
    """What ExecuTorch's TensorImpl keeps beside a tensor's data and current sizes, from its entry in the plan:
    a torch view carries neither its dim order (ambiguous where a size is 1) nor what it may be resized to."""

    dim_order: tuple[int, ...]
    dynamism: schema.TensorShapeDynamism
    numel_bound: int  # the planned sizes' element count: a dynamic tensor's capacity

    @classmethod
    def of(cls, tensor: schema.Tensor) -> TensorPlan:
        return cls(tuple(tensor.dim_order), tensor.shape_dynamism, math.prod(tensor.sizes))


_DYNAMIC = (schema.TensorShapeDynamism.DYNAMIC_BOUND, schema.TensorShapeDynamism.DYNAMIC_UNBOUND)


def _resize_problem(tensor: torch.Tensor, plan: TensorPlan, sizes: list[int]) -> str | None:
    """What ExecuTorch's resize (``TensorImpl::internal_resize_contiguous``) refuses: another shape for a static
    tensor; a negative size, or more elements than it was planned with, for a dynamic one (an unbounded one is
    treated as bounded). Any other dynamism value matches no case there: the resize does nothing."""
    if plan.dynamism == schema.TensorShapeDynamism.STATIC:
        if list(tensor.shape) != sizes:
            return f"would resize the static {tuple(tensor.shape)} tensor to {tuple(sizes)}"
    elif plan.dynamism in _DYNAMIC:
        if min(sizes) < 0 or math.prod(sizes) > plan.numel_bound:
            return (f"would resize it to {tuple(sizes)}, past the {plan.numel_bound} elements it is planned for "
                    f"(its capacity)")
    return None


def _int32(value: int) -> int:
    """``value`` stored as a SizesType (int32), as et_copy_index stores index + 1 among the new sizes."""
    return (value + (1 << 31)) % (1 << 32) - (1 << 31)


def _data_bytes(tensor: torch.Tensor, start: int, count: int) -> torch.Tensor:
    """``count`` bytes from ``start`` bytes past the tensor's data pointer: what a memcpy reads or writes. torch
    refuses bytes past the tensor's storage (the arena buffer it is planned in)."""
    offset = tensor.storage_offset() * tensor.element_size() + start
    return torch.empty(0, dtype=torch.uint8).set_(tensor.untyped_storage(), offset, (count,), (1,))


_TENSOR_DIMENSION_LIMIT = 16  # kTensorDimensionLimit: et_copy_index builds copy_to's new sizes in an array this long


def _copy_index_check(args: dict, plans: tuple[TensorPlan, ...]) -> str | None:
    """``kernels/prim_ops/et_copy_index.cpp``'s checks, in its order, each of which fails the stock kernel: a
    non-negative index; copy_to one dim more than copy_from, with copy_from's sizes after its first; the resize
    to index + 1 rows (``_resize_problem``); row ``index`` inside copy_to's bytes after it. Its rank must also
    fit the stock kernel's sizes array, which it would overrun."""
    copy_to, copy_from, index = args["copy_to"], args["copy_from"], args["index"]
    if not (isinstance(copy_to, torch.Tensor) and isinstance(copy_from, torch.Tensor) and type(index) is int):
        return "its copy_to, copy_from and index are not two tensors and an int"
    if index < 0:
        return f"index {index} is negative"
    if copy_to.dim() - copy_from.dim() != 1:
        return (f"copy_to has {copy_to.dim()} dims and copy_from {copy_from.dim()}; copy_to must have one more "
                "(it stacks copy_from)")
    if copy_to.dim() > _TENSOR_DIMENSION_LIMIT:
        return f"copy_to has {copy_to.dim()} dims, more than the stock kernel's {_TENSOR_DIMENSION_LIMIT}"
    if tuple(copy_to.shape[1:]) != tuple(copy_from.shape):
        return (f"copy_to is {tuple(copy_to.shape)} and copy_from {tuple(copy_from.shape)}: a row of copy_to must "
                "be copy_from's shape")
    sizes = [_int32(index + 1), *copy_from.shape]
    problem = _resize_problem(copy_to, plans[0], sizes)
    if problem:
        return f"writing row {index} of copy_to {problem}"
    row = copy_from.element_size() * copy_from.numel()
    room = copy_to.element_size() * (math.prod(sizes) if plans[0].dynamism in _DYNAMIC else copy_to.numel())
    if row and (index + 1) * row > room:  # exact integers: the stock kernel's overflow checks and bound in one
        return f"row {index} of copy_to would end at byte {(index + 1) * row}, past its {room} bytes"
    return None


def _et_copy_index(copy_to: torch.Tensor, copy_from: torch.Tensor, index: int, *, plans: tuple[TensorPlan, ...]):
    """Row ``index`` of a scan's or map's stacked output: copy_to is resized to index + 1 rows (a DYNAMIC_BOUND
    tensor grows a row per iteration), then copy_from's bytes are copied to index x its size in bytes: a
    memcpy, with no dtype conversion (``et_copy_index.cpp``). ``_copy_index_check`` has passed."""
    (plan,) = plans
    if plan.dynamism in _DYNAMIC:  # the view takes the new sizes and its dim order's strides for them
        sizes = [_int32(index + 1), *copy_from.shape]
        copy_to.as_strided_(sizes, dim_order_strides(sizes, list(plan.dim_order)), copy_to.storage_offset())
    row = copy_from.element_size() * copy_from.numel()
    _data_bytes(copy_to, index * row, row).copy_(_data_bytes(copy_from, 0, row))


def _sym_size_check(args: dict, plans: tuple[TensorPlan, ...]) -> str | None:
    """The stock kernel reads ``TensorImpl::size(dim)``, which fails a dim outside 0..rank - 1 (no negative
    dims, which torch would count from the end)."""
    tensor, dim = args["self"], args["dim"]
    if not isinstance(tensor, torch.Tensor) or type(dim) is not int:
        return "its self and dim are not a tensor and an int"
    if not 0 <= dim < tensor.dim():
        return f"dim {dim} is not a dim of the {tuple(tensor.shape)} tensor (0..{tensor.dim() - 1})"
    return None


def _sym_size(self: torch.Tensor, dim: int) -> int:
    return self.size(dim)


def _operand_kind(value: object) -> str:
    return "bool" if type(value) is bool else type(value).__name__


def _numbers(args: dict, plans: tuple[TensorPlan, ...]) -> str | None:
    """The stock scalar ops take ints and doubles (``ALGEBRA_ET_PRIM_OP``); any other value is InvalidType. A
    Python bool is an int too: the type itself is tested."""
    if all(type(value) in (int, float) for value in args.values()):
        return None
    return f"its operands are {', '.join(_operand_kind(value) for value in args.values())}; it takes ints and floats"


def _ints(args: dict, plans: tuple[TensorPlan, ...]) -> str | None:
    """The stock ``mod`` takes two ints only."""
    if all(type(value) is int for value in args.values()):
        return None
    return f"its operands are {', '.join(_operand_kind(value) for value in args.values())}; it takes ints"


def _numbers_or_bools(args: dict, plans: tuple[TensorPlan, ...]) -> str | None:
    """The stock comparisons also take two bools (``BOOLEAN_ET_PRIM_OP``)."""
    if all(type(value) is bool for value in args.values()):
        return None
    return _numbers(args, plans)


def _same_dim_order(plans: tuple[TensorPlan, ...]) -> bool:
    """``tensors_have_same_dim_order``: all contiguous, or all channels last (4 or 5 dims)."""
    orders = [plan.dim_order for plan in plans]
    return (all(order == tuple(range(len(order))) for order in orders)
            or all(order in ((0, 2, 3, 1), (0, 2, 3, 4, 1)) for order in orders))


def _copy_in_place_check(args: dict, plans: tuple[TensorPlan, ...]) -> str | None:
    """The portable ``copy_``'s checks that torch's does not make: a blocking copy, and self and src in the
    same dim order (torch's broadcast check is the stock one)."""
    if args["non_blocking"]:
        return "non_blocking is True; the stock kernel copies only blocking"
    if not _same_dim_order(plans):
        return f"self and src have dim orders {[list(plan.dim_order) for plan in plans]}, not the same"
    return None


@dataclass(frozen=True)
class Own:
    """A kernel the runtime implements itself: the schema its calls are checked against (``allowlist.check_call``;
    None: only their count), and the stock kernel's checks of the values (``rule``)."""

    fn: Callable
    arguments: tuple[str, ...]
    signature: str | None = None  # the schema, in torch's syntax
    rule: Callable[[dict, tuple[TensorPlan, ...]], str | None] | None = None
    stores_result: bool = True  # a new value (a scalar, a view) in the call's last value, not written into memory
    grows: tuple[int, ...] = ()  # see ``Kernel.grows``; the only tensors such an op writes
    result_values: int | None = None  # see ``Kernel.result_values``


# The stock runtime's prim ops (kernels/prim_ops/register_prim_ops.cpp), by the name the program stores. Scalar
# arithmetic stores Python values: ints wrap at 64 bits (``_int64``).
OWN: dict[str, Own] = {
    **{f"executorch_prim::{name}.Scalar": Own(_int64(getattr(operator, name)), ("a", "b"), rule=_numbers)
       for name in ("add", "sub", "mul", "floordiv", "truediv")},
    "executorch_prim::mod.Scalar": Own(_int64(operator.mod), ("a", "b"), rule=_ints),
    **{f"executorch_prim::{name}.Scalar": Own(_int64(getattr(operator, name)), ("a", "b"), rule=_numbers_or_bools)
       for name in ("eq", "gt", "lt", "ge", "le")},
    "executorch_prim::neg.Scalar": Own(_int64(operator.neg), ("a",), rule=_numbers),
    "executorch_prim::sym_size.int": Own(_sym_size, ("self", "dim"), rule=_sym_size_check),
    "executorch_prim::sym_numel.default": Own(lambda tensor: tensor.numel(), ("self",)),
    "executorch_prim::et_view.default": Own(_et_view, ("self", "size")),
    # What the emitter's scan / map loop calls (_emit_scan, _emit_map): the trip count, and a row of each stacked
    # output per iteration. sym_size is registered under aten, et_copy_index is called without a result value.
    "aten::sym_size.int": Own(_sym_size, ("self", "dim"), rule=_sym_size_check,
                              signature="aten::sym_size.int(Tensor self, int dim) -> SymInt"),
    "executorch_prim::et_copy_index.tensor": Own(
        _et_copy_index, ("copy_to", "copy_from", "index"),
        signature="executorch_prim::et_copy_index.tensor(Tensor(a!) copy_to, Tensor copy_from, SymInt index) -> ()",
        rule=_copy_index_check, stores_result=False, grows=(0,), result_values=0),
}
# The operators the runtime implements itself; every other name must be in ``allowlist.allowed_operators()``.
OWN_OPERATORS = frozenset(OWN)

# The stock kernel's checks that torch's kernel lacks, for ops bound from torch's schema, with the positions
# whose plan entries (``TensorPlan``) they read.
STOCK_CHECKS: dict[str, tuple[Callable[[dict, tuple[TensorPlan, ...]], str | None], tuple[int, ...]]] = {
    "aten::copy_.default": (_copy_in_place_check, (0, 1)),  # the scan loop's carry copies
}


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
    op_schema: torch.FunctionSchema | None = None  # None: only the count of a call's values is checked
    overload: torch._ops.OpOverload | None = None  # torch's op: its meta kernel sizes the results
    # The stock kernel's checks that torch's lacks (``OWN``, ``STOCK_CHECKS``): (named argument values, ``plans``)
    # -> the problem or None.
    rule: Callable[[dict, tuple[TensorPlan, ...]], str | None] | None = None
    described: tuple[int, ...] = ()  # positions whose plan entries ``specialize`` puts in ``plans``
    plans: tuple[TensorPlan, ...] = ()
    # Positions of tensors the op resizes and writes one row of, keeping the others (et_copy_index): their shape
    # changes while running, and their bytes stay live across a loop.
    grows: tuple[int, ...] = ()
    result_values: int | None = None  # values a call passes for the result, if not the emitter's usual count

    def specialize(self, args: list[int], values: list[schema.EValue]) -> Kernel:
        """This kernel for the call on the program values ``args`` (checked by ``check``): the plan entries of the
        ``described`` tensors go to its rule, and to its function if it resizes one of them."""
        if not self.described:
            return self
        plans = tuple(TensorPlan.of(values[args[position]].val) for position in self.described)
        fn = functools.partial(self.fn, plans=plans) if self.grows else self.fn
        return dataclasses.replace(self, fn=fn, plans=plans)

    def precondition(self, values: list[object]) -> str | None:
        """What is wrong with these argument values for the kernel (its ``rule``, ``preconditions``), or None."""
        if self.rule is None and self.overload is None:
            return None
        try:
            args, kwargs = self._convert(values)
        except BadEnum as e:
            return str(e)
        if self.rule is not None:
            named = dict(zip((a.name for a in self.arguments if not a.keyword), args, strict=False)) | kwargs
            problem = self.rule(named, self.plans)
            if problem or self.overload is None:
                return problem
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
        written = () if self.stores_result else self.written  # a stored result replaces its value: any kind
        return allowlist.check_call(self.op_schema, written, args, values, self.result_values)

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
    if name in OWN:
        return _own_kernel(name, OWN[name])
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
    rule, described = STOCK_CHECKS.get(name, (None, ()))
    fn = SPECIAL.get(name, overload)
    if namespace in _CPP_KERNEL_NAMESPACES and name not in SPECIAL:
        fn = _dense_operands(fn)
    if name == "quantized_decomposed::dequantize_per_channel.out":
        fn = _int64_zero_points(fn)
    return Kernel(name, fn, arguments, tuple(written), prepare=prepare, data=data, op_schema=op_schema,
                  overload=overload, rule=rule, described=described)


def _own_kernel(name: str, own: Own) -> Kernel:
    """An ``OWN`` op's kernel: its arguments in order, then its result value (none for et_copy_index)."""
    arguments = tuple(Argument(argument, False, _identity) for argument in own.arguments)
    op_schema = torch._C.parse_schema(own.signature) if own.signature is not None else None
    written = (len(arguments),) if own.stores_result else own.grows
    return Kernel(name, own.fn, arguments, written, stores_result=own.stores_result, op_schema=op_schema,
                  rule=own.rule, described=own.grows,  # a resize reads the grown tensor's plan
                  grows=own.grows, result_values=own.result_values)
