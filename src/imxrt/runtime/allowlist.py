"""The operators a ``.pte`` may call on the host runtime, and the argument types each accepts.

A program names its operators by string; binding any name torch knows would let a file call
``aten::from_file`` (read or create files), TorchScript internals that crash the process, or anything else
registered with torch. The host runtime instead runs only what a program of ours, or a plain ExecuTorch
program on the stock runtime's kernels, can contain:

- the portable kernel library's ops and its dim-order / copy ops: the operator lists the stock runtime's
  portable kernels are generated from (``kernels/portable/functions.yaml`` and ``et_copy_ops.yaml``, shipped
  in the executorch wheel we pin);
- quantize / dequantize of the quantized kernel library (``kernels/quantized/quantized.yaml``);
- the ``cortex_m`` ops (``imxrt.cortex_m.ops.OPS``, the stock Cortex-M kernel library's schemas);
- the stock runtime's prim ops, which the runtime implements itself (``ops.OWN``): the ``executorch_prim`` scalar
  ops, ``et_view``, and what the emitter's scan / map loop calls, ``aten::sym_size.int`` and
  ``executorch_prim::et_copy_index.tensor`` (with schemas of their own: torch registers no such kernels).

Each call's arguments are then checked against the operator's schema at load (``check_call``): the count,
each value's kind (tensor, int, list, ...), and that every tensor the op writes is planned memory (never a
constant or an unplanned tensor). Nothing from the file reaches ``torch.ops`` otherwise.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

import torch
from executorch.exir import schema

from imxrt.cortex_m import ops as cortex_m_ops

# The kernel lists of the stock runtime, in the executorch package, and which of their ops we take.
_KERNEL_LISTS = (("kernels/portable", "functions.yaml"), ("kernels/portable", "et_copy_ops.yaml"),
                 ("kernels/quantized", "quantized.yaml"))
_QUANTIZED_OPS = re.compile(r"quantized_decomposed::(de)?quantize_per_(tensor|channel)\.")
# "- op: add.out" (an aten op) or "- func: ns::name.overload(schema...)".
_ENTRY = re.compile(r"^- (?:op|func): (?:(\w+)::)?(\w+)(?:\.(\w+))?", re.MULTILINE)


@functools.cache
def allowed_operators() -> frozenset[str]:
    """Qualified names ("ns::name.overload") of every operator a program may call."""
    names = set()
    package = resources.files("executorch")
    for folder, file in _KERNEL_LISTS:
        text = package.joinpath(folder).joinpath(file).read_text()
        for namespace, name, overload in _ENTRY.findall(text):
            qualified = f"{namespace or 'aten'}::{name}.{overload or 'default'}"
            if file != "quantized.yaml" or _QUANTIZED_OPS.match(qualified):
                names.add(qualified)
    names.update(f"cortex_m::{op.name}.out" for op in cortex_m_ops.OPS)
    return frozenset(names)


def _accepts(kind: torch.Type, val: object) -> bool:
    """Whether a program value (an EValue's payload) can be passed where the schema expects ``kind``."""
    name = kind.kind()
    if name == "OptionalType":
        return isinstance(val, schema.Null) or _accepts(kind.getElementType(), val)
    if name == "TensorType":
        return isinstance(val, schema.Tensor)
    if name == "ListType":
        element = kind.getElementType()
        if element.kind() == "TensorType":
            return isinstance(val, schema.TensorList)
        if element.kind() == "OptionalType":
            return isinstance(val, (schema.OptionalTensorList, schema.TensorList))
        return isinstance(val, _LISTS.get(element.kind(), ()))
    return isinstance(val, _SCALARS.get(name, ()))


_LISTS = {"IntType": schema.IntList, "SymIntType": schema.IntList, "FloatType": schema.DoubleList,
          "BoolType": schema.BoolList}
# ScalarType, MemoryFormat and Layout are ints in a schema; a float argument may be serialized as an int.
_SCALARS = {"IntType": schema.Int, "SymIntType": schema.Int, "FloatType": (schema.Double, schema.Int),
            "BoolType": schema.Bool, "NumberType": (schema.Int, schema.Double, schema.Bool),
            "StringType": schema.String}


def _planned(values: list[schema.EValue], index: int) -> bool:
    """A tensor in planned memory (what an op may write), or a list of them."""
    val = values[index].val
    if isinstance(val, (schema.TensorList, schema.OptionalTensorList)):
        return all(item < 0 or _planned(values, item) for item in val.items)
    return isinstance(val, schema.Tensor) and val.allocation_info is not None


def check_call(op_schema: torch.FunctionSchema, written: tuple[int, ...], args: list[int],
               values: list[schema.EValue], results: int | None = None) -> str | None:
    """What is wrong with calling ``op_schema`` on the program values ``args``, or None.

    ``args`` is what ExecuTorch's emitter writes: the schema's arguments in order, then one value for the
    result (an out variant's out argument again, a list of them if several), or one per return of another
    op; ``results`` if the emitter writes another count (none for et_copy_index). ``written``: the positions
    the op writes."""
    arguments = op_schema.arguments
    outs = [argument for argument in arguments if argument.is_out]
    if results is None:
        results = 1 if outs else max(1, len(op_schema.returns))
    if len(args) != len(arguments) + results:
        return f"passes {len(args)} values, its schema takes {len(arguments) + results}"
    for position, argument in enumerate(arguments):
        val = values[args[position]].val
        if not _accepts(argument.type, val):
            return f"passes a {type(val).__name__} as argument '{argument.name}' ({argument.type})"
        if isinstance(val, (schema.TensorList, schema.OptionalTensorList, schema.IntList)):
            kinds = (schema.Int,) if isinstance(val, schema.IntList) else (schema.Tensor,)
            if any(item >= 0 and not isinstance(values[item].val, kinds) for item in val.items):
                return f"passes a list with an item of the wrong kind as argument '{argument.name}'"
    result = values[args[len(arguments)]].val if results else None
    if not results:
        fits = True
    elif len(outs) == 1:
        fits = _accepts(outs[0].type, result)
    elif len(outs) > 1:
        fits = isinstance(result, schema.TensorList)
    else:
        fits = len(op_schema.returns) != 1 or _accepts(op_schema.returns[0].type, result)
    if not fits:
        return f"stores its result in a {type(result).__name__}"
    for position in written:
        if not _planned(values, args[position]):
            name = arguments[position].name if position < len(arguments) else "its result"
            return f"writes '{name}' into a value that is not planned memory (a constant or an unplanned tensor)"
    return None
