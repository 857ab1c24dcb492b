"""The interpreter: run a ``.pte``'s instruction chain over its planned memory, as the device runtime does.

Loading prepares everything once: the arena (one buffer per memory id, ``non_const_buffer_sizes``), a
torch view per planned tensor at its offset, the constants, a resolved kernel per operator and an
executor per delegate. ``run`` copies the inputs into their planned tensors, executes the chain
(kernel calls, delegate calls, moves, jumps, frees) and copies the outputs out of theirs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from executorch.exir import schema

from imxrt.errors import BadFile, BadInput
from imxrt.runtime import ops, plan_check
from imxrt.runtime.memory import Arena, constant_tensor, unplanned_tensor
from imxrt.runtime.neutron import DELEGATE_ID, NeutronDelegate
from imxrt.runtime.program import ProgramFile, allocation_offset, tensor_nbytes


@dataclass(frozen=True)
class ValueList:
    """A list EValue (tensors, optional tensors or ints): its items are indices of other values, read at
    call time (an Int in it may be computed by an earlier instruction)."""

    items: tuple[int, ...]


def _scalar(value: schema.EValue):
    val = value.val
    if isinstance(val, schema.Int):
        return val.int_val
    if isinstance(val, schema.Double):
        return float(val.double_val)  # "inf" / "-inf" are stored as strings
    if isinstance(val, schema.Bool):
        return val.bool_val
    if isinstance(val, schema.String):
        return val.string_val
    if isinstance(val, (schema.DoubleList, schema.BoolList)):
        return list(val.items)
    if isinstance(val, (schema.IntList, schema.TensorList, schema.OptionalTensorList)):
        return ValueList(tuple(val.items))
    return None  # Null


class Interpreter:
    """One loaded program. ``check_plan`` poisons each planned tensor's bytes when its lifetime ends."""

    def __init__(self, program: ProgramFile, check_plan: bool = False) -> None:
        self.program = program
        plan = program.plan
        self.kernels = [ops.resolve(op, program.name) for op in plan.operators]
        self.delegates = [self._delegate(index, delegate) for index, delegate in enumerate(plan.delegates)]
        self.instructions = [instruction.instr_args for instruction in plan.chains[0].instructions]
        self.arena = Arena(plan.non_const_buffer_sizes)
        self.values = [self._materialize(value) for value in plan.values]
        self.layouts = {index: (tuple(value.shape), value.stride(), value.storage_offset())
                        for index, value in enumerate(self.values) if isinstance(value, torch.Tensor)}
        self.regions = {
            index: plan_check.Region(value.val.allocation_info.memory_id,
                                     allocation_offset(value.val.allocation_info), tensor_nbytes(value.val))
            for index, value in enumerate(plan.values)
            if isinstance(value.val, schema.Tensor) and value.val.allocation_info is not None
        }
        self.check_plan = check_plan
        self.poison_after = (plan_check.poison_schedule(self.regions, [self._access(i) for i in self.instructions],
                                                        plan.inputs, plan.outputs) if check_plan else None)

    # -- loading

    def _delegate(self, index: int, delegate: schema.BackendDelegate) -> NeutronDelegate:
        if delegate.id != DELEGATE_ID:
            raise BadFile(self.program.name, f"delegate {index} is {delegate.id!r}; the host runtime runs "
                                             f"{DELEGATE_ID} delegates (imxrt's reference payloads) only")
        return NeutronDelegate(self.program.delegate_data[delegate.processed.index], self.program.name, index)

    def _materialize(self, value: schema.EValue):
        tensor = value.val
        if not isinstance(tensor, schema.Tensor):
            return _scalar(value)
        if tensor.allocation_info is not None:
            return self.arena.view(tensor)
        if tensor.data_buffer_idx:
            return constant_tensor(self.program.constants[tensor.data_buffer_idx], tensor)
        return unplanned_tensor(tensor)

    def _expand(self, indices: Sequence[int]) -> frozenset[int]:
        """Value indices with list values replaced by their items (what an instruction really touches)."""
        result = set()
        for index in indices:
            value = self.values[index]
            if isinstance(value, ValueList):
                result.update(i for i in value.items if i >= 0)
            else:
                result.add(index)
        return frozenset(result)

    def _access(self, instruction) -> plan_check.Access:
        if isinstance(instruction, schema.KernelCall):
            kernel = self.kernels[instruction.op_index]
            written = [instruction.args[p] for p in kernel.written if p < len(instruction.args)]
            return plan_check.Access(self._expand(instruction.args), self._expand(written))
        if isinstance(instruction, schema.DelegateCall):
            delegate = self.delegates[instruction.delegate_index]
            written = [instruction.args[p] for p in delegate.written(len(instruction.args))]
            return plan_check.Access(frozenset(instruction.args), frozenset(written))
        if isinstance(instruction, schema.MoveCall):
            return plan_check.Access(frozenset({instruction.move_from}), frozenset(),
                                     move=(instruction.move_from, instruction.move_to))
        if isinstance(instruction, schema.JumpFalseCall):
            return plan_check.Access(frozenset({instruction.cond_value_index}), frozenset(),
                                     jump_to=instruction.destination_instruction)
        return plan_check.Access(frozenset({instruction.value_index}), frozenset())  # FreeCall

    # -- running

    def run(self, inputs: Sequence[np.ndarray | torch.Tensor]) -> list[np.ndarray]:
        """Execute the program once; ``inputs`` in the program's order, outputs as numpy arrays."""
        if self.check_plan:
            for memory_id, size in enumerate(self.arena.sizes):
                self.arena.poison(memory_id, 0, size)  # uninitialised reads see garbage too
        self._bind_inputs(inputs)
        step = 0
        while step < len(self.instructions):
            step = self._execute(step)
        return [self._output(index) for index in self.program.plan.outputs]

    def _execute(self, step: int) -> int:
        """Run instruction ``step``; return the index of the next one."""
        instruction = self.instructions[step]
        values = self.values
        if isinstance(instruction, schema.KernelCall):
            kernel = self.kernels[instruction.op_index]
            args = [self._resolve(values[index]) for index in instruction.args]
            try:
                result = kernel.call(args)
            except (RuntimeError, TypeError, ValueError, IndexError) as e:
                raise RuntimeError(f"instruction {step} ({kernel.name}) failed: {e}") from e
            if kernel.stores_result:
                values[instruction.args[-1]] = result
            else:
                self._restore_layouts(instruction.args, kernel.written)
        elif isinstance(instruction, schema.DelegateCall):
            self.delegates[instruction.delegate_index].run([values[index] for index in instruction.args])
        elif isinstance(instruction, schema.MoveCall):
            values[instruction.move_to] = values[instruction.move_from]  # EValue copy: a tensor is aliased
        elif isinstance(instruction, schema.JumpFalseCall):
            condition = values[instruction.cond_value_index]
            if isinstance(condition, torch.Tensor):
                condition = bool(condition.all())
            if not condition:
                return instruction.destination_instruction
        # FreeCall releases runtime-allocated memory on the device; Python's memory is managed, so only
        # plan checking acts on it (below, through the schedule).
        if self.poison_after is not None:
            for index in self.poison_after[step]:
                region = self.regions[index]
                self.arena.poison(region.memory_id, region.offset, region.nbytes)
        return step + 1

    def _restore_layouts(self, args: Sequence[int], written: Sequence[int]) -> None:
        """Give written tensors back their planned strides. ExecuTorch's quantized kernels (the AOT build
        wrapped for torch) write the bytes in the device's order but leave the out tensor's metadata
        restrided to contiguous; the bytes are right, only the view must be restored."""
        for position in written:
            if position >= len(args):
                continue
            index = args[position]
            layout = self.layouts.get(index)
            tensor = self.values[index]
            if layout is not None and isinstance(tensor, torch.Tensor) and tensor.stride() != layout[1]:
                tensor.as_strided_(*layout)

    def _resolve(self, value):
        if isinstance(value, ValueList):
            return [None if index < 0 else self._resolve(self.values[index]) for index in value.items]
        return value

    def _bind_inputs(self, inputs: Sequence[np.ndarray | torch.Tensor]) -> None:
        expected = self.program.plan.inputs
        if len(inputs) != len(expected):
            raise BadInput(f"the program takes {len(expected)} input(s) {self.signature()}, got {len(inputs)}")
        for position, (index, given) in enumerate(zip(expected, inputs, strict=True)):
            target = self.values[index]
            if not isinstance(target, torch.Tensor):
                self.values[index] = given  # a scalar input
                continue
            tensor = given if isinstance(given, torch.Tensor) else _from_numpy(given)
            if tuple(tensor.shape) != tuple(target.shape) or tensor.dtype != target.dtype:
                raise BadInput(f"input {position}: the program expects {_describe(target)}, "
                               f"got {_describe(tensor)}")
            target.copy_(tensor)  # into the planned bytes, in the planned dim order

    def signature(self) -> str:
        return ", ".join(_describe(self.values[i]) if isinstance(self.values[i], torch.Tensor) else "scalar"
                         for i in self.program.plan.inputs)

    def _output(self, index: int) -> np.ndarray:
        value = self.values[index]
        if isinstance(value, torch.Tensor):
            # A copy: the arena's bytes belong to the next run.
            return value.detach().clone(memory_format=torch.contiguous_format).numpy()
        return np.asarray(value)


def _from_numpy(array) -> torch.Tensor:
    array = np.asarray(array)
    if not array.flags.writeable:  # torch.from_numpy warns on read-only memory; we only read it anyway
        array = array.copy()
    return torch.from_numpy(array)


def _describe(tensor: torch.Tensor) -> str:
    return f"shape {tuple(tensor.shape)} {str(tensor.dtype).removeprefix('torch.')}"

