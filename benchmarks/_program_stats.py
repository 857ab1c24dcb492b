"""What a `.pte` holds, read the way a board's runtime reads it: planned arena, CMSIS-NN scratch, kernel
calls by kind, constant tensors serialized and the ones no instruction reads.

Shared by the CPU benchmark for both pipelines, so ours and upstream's programs are measured by the same
code. The file is parsed with ExecuTorch's own deserializer (through `imxrt.pte.reader`, which also
checks every index the plan holds); an operator's argument names come from its registered schema, so a
scratch buffer is found by the name the kernel gives it, not by position.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch
from executorch.exir import schema

import imxrt.cortex_m.ops  # noqa: F401  (defines the cortex_m schemas, whichever library is imported first)
from imxrt.pte.reader import read_program, tensor_nbytes

SCRATCH_ARGUMENTS = frozenset({"scratch", "output_scratch"})  # CMSIS-NN buffers of the cortex_m kernels

# Portable aten kernels that only move, view or re-lay data; every other aten kernel on a float output is
# float compute still running on the CPU outside CMSIS-NN.
DATA_MOVEMENT = frozenset({
    "aten::view_copy", "aten::reshape", "aten::permute_copy", "aten::clone", "aten::_to_copy",
    "aten::expand_copy", "aten::squeeze_copy", "aten::unsqueeze_copy", "aten::cat", "aten::slice_copy",
    "aten::select_copy", "aten::split_copy", "aten::split_with_sizes_copy", "aten::t_copy",
    "aten::transpose_copy", "aten::alias_copy", "aten::constant_pad_nd", "aten::full", "aten::zeros",
})
FLOAT_TYPES = frozenset({schema.ScalarType.FLOAT, schema.ScalarType.HALF, schema.ScalarType.DOUBLE,
                         schema.ScalarType.BFLOAT16})


@dataclass(frozen=True)
class ProgramStats:
    pte_bytes: int
    arena_bytes: int  # non_const_buffer_sizes summed over memory ids >= 1 (id 0 is reserved)
    scratch_bytes: int  # distinct tensors passed as a cortex_m kernel's scratch / output_scratch argument
    scratch_allocs: int
    calls: int  # kernel calls + delegate calls in the instruction chain
    cortex_m_calls: int
    float_aten_calls: int  # aten compute kernels writing a float tensor
    delegate_calls: int
    constants: int  # constant tensor values serialized (data in the constant buffer)
    dead_constants: int  # ... that no instruction, program input or output refers to
    operators: Counter  # "namespace::name" -> kernel calls


def _argument_names(operator: schema.Operator) -> list[str]:
    """The operator's argument names in schema order (a kernel call's args follow it, `out` included)."""
    namespace, name = operator.name.split("::")
    packet = getattr(getattr(torch.ops, namespace), name)
    return [argument.name for argument in getattr(packet, operator.overload or "default")._schema.arguments]


def _referenced(plan: schema.ExecutionPlan, indices: list[int], seen: set[int]) -> None:
    """Add ``indices`` and, for list values, the values they hold."""
    for index in indices:
        if index < 0 or index in seen:
            continue
        seen.add(index)
        value = plan.values[index].val
        if isinstance(value, (schema.TensorList, schema.OptionalTensorList)):
            _referenced(plan, value.items, seen)


def program_stats(pte: bytes) -> ProgramStats:
    plan = read_program(pte).plan
    names = [operator.name for operator in plan.operators]
    argument_names = {}
    operators: Counter = Counter()
    scratch: set[int] = set()
    referenced: set[int] = set()
    _referenced(plan, [*plan.inputs, *plan.outputs], referenced)
    calls = cortex_m = float_aten = delegates = 0
    for instruction in plan.chains[0].instructions:
        call = instruction.instr_args
        if isinstance(call, schema.DelegateCall):
            calls += 1
            delegates += 1
            _referenced(plan, call.args, referenced)
            continue
        if not isinstance(call, schema.KernelCall):
            continue
        calls += 1
        name = names[call.op_index]
        operators[name] += 1
        _referenced(plan, call.args, referenced)
        if name.startswith("cortex_m::"):
            cortex_m += 1
            if call.op_index not in argument_names:
                argument_names[call.op_index] = _argument_names(plan.operators[call.op_index])
            # A call's args are the schema's arguments (`out` last) followed by the returned value.
            scratch.update(index for index, argument in zip(call.args, argument_names[call.op_index], strict=False)
                           if argument in SCRATCH_ARGUMENTS)
        elif name.startswith("aten::") and name not in DATA_MOVEMENT:
            out = plan.values[call.args[-1]].val
            if isinstance(out, schema.Tensor) and out.scalar_type in FLOAT_TYPES:
                float_aten += 1
    constants = [index for index, value in enumerate(plan.values)
                 if isinstance(value.val, schema.Tensor) and value.val.allocation_info is None
                 and value.val.data_buffer_idx > 0]
    return ProgramStats(
        pte_bytes=len(pte),
        arena_bytes=sum(plan.non_const_buffer_sizes[1:]),
        scratch_bytes=sum(tensor_nbytes(plan.values[index].val) for index in scratch),
        scratch_allocs=len(scratch),
        calls=calls,
        cortex_m_calls=cortex_m,
        float_aten_calls=float_aten,
        delegate_calls=delegates,
        constants=len(constants),
        dead_constants=sum(1 for index in constants if index not in referenced),
        operators=operators,
    )
