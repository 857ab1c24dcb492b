"""The interpreter: run a ``.pte``'s instruction chain over its planned memory, as the device runtime does.

Loading prepares everything once: the arena (one buffer per memory id, ``non_const_buffer_sizes``), a
torch view per planned tensor at its offset, the constants, a resolved kernel per operator, an executor
per delegate, and one ready-to-call step per instruction (a kernel call whose arguments no instruction
reassigns has them converted once). ``run`` copies the inputs into their planned tensors, executes the
chain (kernel calls, delegate calls, moves, jumps, frees) and copies the outputs out of theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from executorch.exir import schema

from imxrt.errors import BadFile, BadInput, ImxrtError
from imxrt.pte.reader import ProgramFile, allocation_offset, tensor_nbytes
from imxrt.runtime import ops, plan_check, threads
from imxrt.runtime.memory import Arena, constant_tensor, unplanned_tensor
from imxrt.runtime.neutron import DELEGATE_ID, NeutronDelegate

# A chain with a jump back can loop, which on the device lasts until its condition changes. The host allows a
# forward MAX_JUMPS_BACK jumps back and refuses the next, so a forward executes at most (MAX_JUMPS_BACK + 1) x
# the chain's length instructions (a jump to itself would never end). The compiler's jumps are its recurrent
# layers' loops (a scan's, once per step): a million steps per forward is past any sequence it compiles.
MAX_JUMPS_BACK = 1_000_000


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
        self.growing = self._growing()
        self.regions = {
            index: plan_check.Region(value.val.allocation_info.memory_id,
                                     allocation_offset(value.val.allocation_info), tensor_nbytes(value.val))
            for index, value in enumerate(plan.values)
            if isinstance(value.val, schema.Tensor) and value.val.allocation_info is not None
        }
        self.check_plan = check_plan
        self.poison_after = None
        if check_plan:  # overlaps are named before anything runs; poisoning catches what they cannot
            accesses = [self._access(i) for i in self.instructions]
            found = plan_check.conflicts(self.regions, accesses, plan.inputs, plan.outputs)
            if found:
                raise plan_check.PlanConflict(program.name, found)
            self.poison_after = plan_check.poison_schedule(self.regions, accesses, plan.inputs, plan.outputs)
        self.reassigned = self._reassigned()
        self.steps = [self._step(index, instruction) for index, instruction in enumerate(self.instructions)]
        self.feeds = [self._feed(index) for index in plan.inputs]
        self.results = [self._result(index) for index in plan.outputs]
        self.one_thread = threads.one_thread()

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
            args = instruction.args
            written = [args[p] for p in kernel.written if p < len(args)]
            read = [arg for p, arg in enumerate(args) if p not in kernel.written or p in kernel.grows]
            return plan_check.Access(self._expand(read), self._expand(written),
                                     updates=self._expand([args[p] for p in kernel.grows if p < len(args)]))
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

    def _growing(self) -> frozenset[int]:
        """Tensors a kernel resizes while running (et_copy_index's stacked outputs): kernels reading them are
        checked at each call, and their shape is read when they are given out or taken in again."""
        return frozenset(instruction.args[p] for instruction in self.instructions
                         if isinstance(instruction, schema.KernelCall)
                         for p in self.kernels[instruction.op_index].grows if p < len(instruction.args)
                         and instruction.args[p] in self.layouts)

    def _reassigned(self) -> frozenset[int]:
        """Values an instruction or a run replaces (rather than writes into): everything else is the same
        object on every run, so a call reading only those can be prepared once."""
        indices = {index for index in self.program.plan.inputs if not isinstance(self.values[index], torch.Tensor)}
        for instruction in self.instructions:
            if isinstance(instruction, schema.KernelCall) and self.kernels[instruction.op_index].stores_result:
                indices.add(instruction.args[-1])
            elif isinstance(instruction, schema.MoveCall):
                indices.add(instruction.move_to)
        return frozenset(indices)

    def _step(self, step: int, instruction) -> Callable[[], int]:
        """Instruction ``step`` as a call returning the index of the next instruction."""
        following = step + 1
        if isinstance(instruction, schema.KernelCall):
            return self._kernel_step(step, instruction)
        if isinstance(instruction, schema.DelegateCall):
            delegate = self.delegates[instruction.delegate_index]
            indices = tuple(instruction.args)
            if self.reassigned.isdisjoint(indices):
                call = delegate.bind([self.values[index] for index in indices])
                return lambda: call() or following
            values = self.values
            return lambda: delegate.run([values[index] for index in indices]) or following
        if isinstance(instruction, schema.MoveCall):
            source, target, values = instruction.move_from, instruction.move_to, self.values

            def move() -> int:
                values[target] = values[source]  # EValue copy: a tensor is aliased
                return following
            return move
        if isinstance(instruction, schema.JumpFalseCall):
            condition_index, destination, values = (instruction.cond_value_index,
                                                    instruction.destination_instruction, self.values)
            backward = destination <= step  # only a jump back can loop

            def jump_false() -> int:
                condition = values[condition_index]
                if isinstance(condition, torch.Tensor):
                    condition = bool(condition.all())
                if condition:
                    return following
                if backward:
                    self.jumps_back_left -= 1
                    if self.jumps_back_left < 0:
                        raise BadFile(self.program.name, f"instruction {step} (JumpFalseCall) jumped back to "
                                      f"instruction {destination} more than {MAX_JUMPS_BACK:,} times in one "
                                      f"forward: its loop does not end (the host runs a chain of "
                                      f"{len(self.steps)} instructions at most {MAX_JUMPS_BACK + 1:,} times over)")
                return destination
            return jump_false
        # FreeCall releases runtime-allocated memory on the device; Python's memory is managed, so only
        # plan checking acts on it (through the schedule).
        return lambda: following

    def _kernel_step(self, step: int, instruction: schema.KernelCall) -> Callable[[], int]:
        kernel = self.kernels[instruction.op_index]
        indices = tuple(instruction.args)
        problem = kernel.check(list(indices), self.program.plan.values)  # before anything runs
        if problem:
            raise BadFile(self.program.name, f"instruction {step} calls {kernel.name} but {problem}; the file is "
                                             "not a program the compiler writes")
        kernel = kernel.specialize(list(indices), self.program.plan.values)
        checked_per_call = (not self._static(indices) or not self.growing.isdisjoint(self._expand(indices))
                            or not all(self._constant(indices[p]) for p in kernel.contents_read() if p < len(indices)))
        if not checked_per_call:
            problem = kernel.precondition([self._resolve(self.values[index]) for index in indices])
            if problem:
                raise BadFile(self.program.name, f"instruction {step} calls {kernel.name} but {problem}; the file "
                                                 "is not a program the compiler writes")
        following, values = step + 1, self.values
        written = [indices[p] for p in kernel.written  # a grown tensor keeps the layout its kernel gave it
                   if not kernel.stores_result and p < len(indices) and indices[p] in self.layouts
                   and p not in kernel.grows]
        fixed = [(self.values[i], self.layouts[i]) for i in written if i not in self.reassigned]
        moving = [(i, self.layouts[i]) for i in written if i in self.reassigned]  # whatever value is there now
        if self._static(indices):
            prepare = kernel.prepare is not None and all(
                self._constant(indices[p]) for p in kernel.constant_positions() if p < len(indices))
            try:
                call = kernel.bind([self._resolve(self.values[index]) for index in indices], prepare=prepare)
            except BadFile:
                raise
            except ImxrtError as e:  # arguments the kernel refuses (a window it cannot slide): name the file
                raise BadFile(self.program.name, f"instruction {step}: {e}") from None
            if prepare:
                fixed = []  # a prepared call writes numpy views of the bytes: torch's strides stay as planned
        else:
            def call():
                return kernel.call([self._resolve(values[index]) for index in indices])
        result_index = indices[-1]

        def run_kernel() -> int:
            if checked_per_call:
                problem = kernel.precondition([self._resolve(values[index]) for index in indices])
                if problem:
                    raise BadFile(self.program.name, f"instruction {step} calls {kernel.name} but {problem}")
            try:
                result = call()
            except IndexError as e:  # indices beyond their table: the data's fault (the device's kernel refuses them)
                raise BadInput(f"instruction {step} ({kernel.name}): {e}; integer inputs must index within the "
                               "model's tables (an embedding's token ids below its number of rows)") from None
            except (RuntimeError, TypeError, ValueError) as e:
                raise RuntimeError(f"instruction {step} ({kernel.name}) failed: {e}") from e
            if kernel.stores_result:
                values[result_index] = result
            else:
                _restore_layouts(fixed)
                if moving:
                    _restore_layouts([(values[i], layout) for i, layout in moving
                                      if isinstance(values[i], torch.Tensor)])
            return following
        return run_kernel

    def _constant(self, index: int) -> bool:
        """The value never changes: not a tensor, or a tensor of the program's constant data."""
        value = self.program.plan.values[index].val
        return not isinstance(value, schema.Tensor) or (value.allocation_info is None and bool(value.data_buffer_idx))

    def _static(self, indices: Sequence[int]) -> bool:
        """No index (nor any item of a list value) is reassigned while running."""
        for index in indices:
            if index in self.reassigned:
                return False
            value = self.values[index]
            if isinstance(value, ValueList) and not self._static([i for i in value.items if i >= 0]):
                return False
        return True

    def _feed(self, index: int):
        """How ``run`` binds the input at value ``index``: (target tensor or None for a scalar, numpy view of
        its planned bytes or None when numpy has no such dtype)."""
        target = self.values[index]
        if not isinstance(target, torch.Tensor):
            return index, None, None
        return index, target, _numpy_view(target)

    def _result(self, index: int):
        """(value index, numpy view of its planned bytes if it is a tensor no instruction replaces)."""
        value = self.values[index]
        fixed = isinstance(value, torch.Tensor) and index not in self.reassigned and index not in self.growing
        return index, _numpy_view(value) if fixed else None

    # -- running

    def run(self, inputs: Sequence[np.ndarray | torch.Tensor]) -> list[np.ndarray]:
        """Execute the program once; ``inputs`` in the program's order, outputs as numpy arrays. BLAS and torch
        run on one thread meanwhile, whatever the kernels call (``threads``)."""
        torch_threads = self.one_thread.enter()
        try:
            return self._run(inputs)
        finally:
            self.one_thread.leave(torch_threads)

    def _run(self, inputs: Sequence[np.ndarray | torch.Tensor]) -> list[np.ndarray]:
        if self.check_plan:
            for memory_id, size in enumerate(self.arena.sizes):
                self.arena.poison(memory_id, 0, size)  # uninitialised reads see garbage too
        for index, target, _ in self.feeds:  # an input a kernel resized: set_input resizes it to the input's shape
            if index in self.growing:
                target.as_strided_(*self.layouts[index])
        self._bind_inputs(inputs)
        self.jumps_back_left = MAX_JUMPS_BACK
        steps, count = self.steps, len(self.steps)
        step = 0
        if self.poison_after is None:
            while step < count:
                step = steps[step]()
        else:
            while step < count:
                following = steps[step]()
                for index in self.poison_after[step]:
                    region = self.regions[index]
                    self.arena.poison(region.memory_id, region.offset, region.nbytes)
                step = following
        return [self._output(index, view) for index, view in self.results]

    def _resolve(self, value):
        if isinstance(value, ValueList):
            return [None if index < 0 else self._resolve(self.values[index]) for index in value.items]
        return value

    def _bind_inputs(self, inputs: Sequence[np.ndarray | torch.Tensor]) -> None:
        if len(inputs) != len(self.feeds):
            raise BadInput(f"the program takes {len(self.feeds)} input(s) {self.signature()}, got {len(inputs)}")
        for position, ((index, target, view), given) in enumerate(zip(self.feeds, inputs, strict=True)):
            if target is None:
                self.values[index] = given  # a scalar input
                continue
            if (view is not None and type(given) is np.ndarray and given.shape == view.shape
                    and given.dtype == view.dtype):
                np.copyto(view, given)  # into the planned bytes, in the planned dim order
                continue
            tensor = given if isinstance(given, torch.Tensor) else _from_numpy(given)
            if tuple(tensor.shape) != tuple(target.shape) or tensor.dtype != target.dtype:
                hint = _input_hint(target.dtype, tensor.dtype)
                raise BadInput(f"input {position}: the program expects {_describe(target)}, "
                               f"got {_describe(tensor)}{hint}")
            target.copy_(tensor)

    def signature(self) -> str:
        return ", ".join(_describe(self.values[i]) if isinstance(self.values[i], torch.Tensor) else "scalar"
                         for i in self.program.plan.inputs)

    def _output(self, index: int, view: np.ndarray | None) -> np.ndarray:
        # A copy: the arena's bytes belong to the next run.
        if view is not None:
            return np.array(view, order="C")
        value = self.values[index]
        if isinstance(value, torch.Tensor):
            return value.detach().clone(memory_format=torch.contiguous_format).numpy()
        return np.asarray(value)


def _input_hint(expected: torch.dtype, given: torch.dtype) -> str:
    """What to do when an input of dtype ``given`` is fed where the program takes ``expected``."""
    if expected == torch.int8 and given.is_floating_point:
        return "; it takes int8 data (compiled with --io int8): quantize it, or run it with imxrt run --quantize-inputs"
    if expected == torch.bool:
        return "; it takes a boolean mask, as the model's example input was: save it with dtype bool"
    if not expected.is_floating_point:
        kind = str(expected).removeprefix("torch.")
        return (f"; it takes integer indices, as the model's example input was: give them as {kind} "
                f"(numpy.{kind}), not {str(given).removeprefix('torch.')} data")
    return ""


def _restore_layouts(written: list[tuple[torch.Tensor, tuple]]) -> None:
    """Give written tensors back their planned strides. ExecuTorch's quantized kernels (the AOT build
    wrapped for torch) write the bytes in the device's order but leave the out tensor's metadata
    restrided to contiguous; the bytes are right, only the view must be restored."""
    for tensor, (shape, stride, offset) in written:
        if tensor.stride() != stride:
            tensor.as_strided_(shape, stride, offset)


def _numpy_view(tensor: torch.Tensor) -> np.ndarray | None:
    """The tensor's bytes as a numpy array with its strides (sharing memory), or None for a dtype numpy
    lacks (bfloat16) or an empty tensor."""
    try:
        view = tensor.detach().numpy()
    except (TypeError, RuntimeError):
        return None
    return view if view.size else None


def _from_numpy(array) -> torch.Tensor:
    array = np.asarray(array)
    if not array.flags.writeable:  # torch.from_numpy warns on read-only memory; we only read it anyway
        array = array.copy()
    return torch.from_numpy(array)


def _describe(tensor: torch.Tensor) -> str:
    return f"shape {tuple(tensor.shape)} {str(tensor.dtype).removeprefix('torch.')}"

