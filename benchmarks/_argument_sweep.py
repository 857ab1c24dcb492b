"""The argument sweep: every operator the host runtime admits, called by a sealed program with arguments of the
right kinds and hostile values.

The allowlist decides which operators a ``.pte`` may call and checks each argument's kind; a file's seal can be
recomputed by anyone, so the values behind it are the attacker's. Each trial here is one program of one
instruction: operator ``allowed_operators()[i % count]`` called with values drawn for its schema (tensors of
random shapes and dtypes, some constants filled with edge values; ints, floats, lists and dtypes at their
edges; the out tensors sized by torch's shape function for the drawn inputs most of the time, so the call gets
past the shape check to the kernel), sealed with a valid checksum and run in a fuzzing worker
(``_fuzz_harness.WorkerPool``). It must end with one ``ImxrtError`` line or run; an abort, a crash, a hang,
reaching the address-space cap or another exception is a defect.

Trial ``i`` of seed ``s`` is a function of ``(s, i)`` alone.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import _fuzz_harness as harness
import numpy as np
import torch
from executorch.exir import schema

from imxrt.pte.reader import TORCH_DTYPES
from imxrt.runtime import ops
from imxrt.runtime.allowlist import allowed_operators

_SCALAR_TYPES = {dtype: scalar_type for scalar_type, dtype in TORCH_DTYPES.items()}
# Tensor dtypes drawn, most often the ones programs hold.
_DTYPES = (torch.float32,) * 4 + (torch.int8,) * 3 + (torch.int32, torch.int64, torch.int64, torch.bool, torch.uint8,
                                                     torch.float64, torch.int16, torch.float16)
_INTS = (0, 1, -1, 2, 3, 4, 7, 8, 127, 255, 1000, 8000, 40000, 1 << 20, (1 << 31) - 1, 1 << 31, -(1 << 31), 1 << 40,
         (1 << 63) - 1, -(1 << 63))
_DOUBLES = (0.0, -0.0, 1.0, -1.0, 0.5, 1e-30, 1e30, 1e308, 5e-324, math.nan, math.inf, -math.inf, 3.4e38, 2.0 ** 31)
_STRINGS = ("none", "tanh", "mean", "sum", "floor", "trunc", "", "x" * 64)
# Enum arguments (ints in a program): valid values and values outside the enum.
_ENUMS = {"ScalarType": tuple(range(16)) + (22, 23, 99, -1), "MemoryFormat": (0, 1, 2, 3, 4, -1, 99),
          "Layout": (0, 0, 1, -1, 7)}
_INVALID = object()  # an enum value the runtime refuses: torch's shape function is not asked


@dataclass(frozen=True)
class SweepTrial:
    index: int
    operator: str
    description: str
    data: bytes  # the sealed program


class OneCallProgram:
    """A program of one kernel call being written: its values, constants and one planned memory buffer;
    ``sealed`` serializes it with a valid seal."""

    def __init__(self) -> None:
        self.values: list[schema.EValue] = []
        self.constants: list[schema.Buffer] = [schema.Buffer(storage=b"")]  # index 0: no data
        self.arena = 0

    def add(self, val) -> int:
        self.values.append(schema.EValue(val))
        return len(self.values) - 1

    def tensor(self, shape: list[int], dtype: torch.dtype, data: bytes | None = None) -> int:
        count = math.prod(shape)
        nbytes = count * dtype.itemsize
        allocation, buffer_index = None, 0
        if data is None:
            offset = -(-self.arena // 16) * 16
            allocation = schema.AllocationDetails(memory_id=1, memory_offset_low=offset & 0xFFFFFFFF,
                                                  memory_offset_high=offset >> 32)
            self.arena = offset + nbytes
        else:
            self.constants.append(schema.Buffer(storage=data))
            buffer_index = len(self.constants) - 1
        return self.add(schema.Tensor(
            scalar_type=_SCALAR_TYPES[dtype], storage_offset=0, sizes=list(shape),
            dim_order=list(range(len(shape))), requires_grad=False, layout=0, data_buffer_idx=buffer_index,
            allocation_info=allocation, shape_dynamism=schema.TensorShapeDynamism.STATIC))


    def sealed(self, name: str, args: list[int], outputs: list[int]) -> bytes:
        """The program calling operator ``name`` ("ns::op.overload") on value indices ``args`` (the schema's
        arguments, then the result), returning ``outputs``, serialized with a matching seal."""
        namespace_name, _, overload = name.rpartition(".")
        plan = schema.ExecutionPlan(
            name="forward", container_meta_type=schema.ContainerMetadata("", ""), values=self.values, inputs=[],
            outputs=outputs, chains=[schema.Chain(inputs=[], outputs=outputs, instructions=[
                schema.Instruction(schema.KernelCall(op_index=0, args=args))], stacktrace=None)],
            operators=[schema.Operator(name=namespace_name, overload=overload)], delegates=[],
            non_const_buffer_sizes=[0, max(self.arena, 1)])
        program = schema.Program(version=0, execution_plan=[plan], constant_buffer=self.constants,
                                 backend_delegate_data=[], segments=[],
                                 constant_segment=schema.SubsegmentOffsets(0, []), mutable_data_segments=[],
                                 named_data=[])
        return harness.forge_seal(program)


def _shape(rng: random.Random) -> list[int]:
    rank = rng.choice((0, 1, 2, 2, 3, 4, 4, 4, 5))
    return [rng.choice((0, 1, 1, 2, 3, 4, 5, 8)) for _ in range(rank)]


def _contents(rng: random.Random, shape: list[int], dtype: torch.dtype) -> bytes:
    """Edge values (huge, negative, NaN) or small ones, as the dtype's bytes."""
    count = math.prod(shape)
    if dtype.is_floating_point:
        pool = _DOUBLES if rng.random() < 0.5 else (0.0, 1.0, -2.5, 0.125)
        values = torch.tensor([rng.choice(pool) for _ in range(count)], dtype=torch.float64).to(dtype)
    elif dtype == torch.bool:
        values = torch.tensor([rng.random() < 0.5 for _ in range(count)], dtype=torch.bool)
    else:
        info = torch.iinfo(dtype)
        pool = [v for v in _INTS if info.min <= v <= info.max] if rng.random() < 0.5 else [0, 1, 2, -1, 3]
        values = torch.tensor([min(max(rng.choice(pool), info.min), info.max) for _ in range(count)], dtype=dtype)
    return values.contiguous().view(torch.uint8).numpy().tobytes() if count else b""


@dataclass
class _Drawn:
    """An argument as drawn: its value in the program, and what torch's shape function takes for it."""

    index: int
    example: object


def _draw(rng: random.Random, program: OneCallProgram, kind: torch.Type, real: str) -> _Drawn:
    """A value of the schema type ``kind`` (``real``: the type the schema declares, "MemoryFormat" where
    ``kind`` says int), hostile or plausible."""
    text = str(kind)
    kind_name = kind.kind()
    if kind_name == "OptionalType":
        if rng.random() < 0.3:
            return _Drawn(program.add(schema.Null()), None)
        return _draw(rng, program, kind.getElementType(), real.removeprefix("Optional[").removesuffix("]"))
    if kind_name == "TensorType":
        shape, dtype = _shape(rng), rng.choice(_DTYPES)
        data = _contents(rng, shape, dtype) if rng.random() < 0.5 else None
        example = torch.empty(shape, dtype=dtype, device="meta")
        return _Drawn(program.tensor(shape, dtype, data), example)
    if kind_name == "ListType":
        element = kind.getElementType()
        count = rng.choice((0, 1, 1, 2, 2, 3, 4))
        if element.kind() in ("TensorType", "OptionalType"):
            items = [_draw(rng, program, element, str(element)) for _ in range(max(count, 1))]
            indices = [-1 if item.example is None else item.index for item in items]
            if element.kind() == "OptionalType":
                return _Drawn(program.add(schema.OptionalTensorList(indices)), [item.example for item in items])
            return _Drawn(program.add(schema.TensorList(indices)), [item.example for item in items])
        if element.kind() in ("IntType", "SymIntType"):
            values = [_int(rng) for _ in range(count)]
            return _Drawn(program.add(schema.IntList([program.add(schema.Int(v)) for v in values])), values)
        if element.kind() == "FloatType":
            values = [rng.choice(_DOUBLES) for _ in range(count)]
            return _Drawn(program.add(schema.DoubleList(values)), values)
        values = [rng.random() < 0.5 for _ in range(count)]
        return _Drawn(program.add(schema.BoolList(values)), values)
    if real in _ENUMS:  # an int in the schema; torch takes the enum value the runtime converts it to
        value = rng.choice(_ENUMS[real])
        try:
            example = ops._CONVERTERS[real](value)
        except ops.BadEnum:
            example = _INVALID
        return _Drawn(program.add(schema.Int(value)), example)
    if kind_name in ("IntType", "SymIntType"):
        value = _int(rng)
        return _Drawn(program.add(schema.Int(value)), value)
    if kind_name == "FloatType":
        value = rng.choice(_DOUBLES)
        return _Drawn(program.add(schema.Double(value)), value)
    if kind_name == "BoolType":
        value = rng.random() < 0.5
        return _Drawn(program.add(schema.Bool(value)), value)
    if kind_name == "NumberType":
        if rng.random() < 0.5:
            value = _int(rng)
            return _Drawn(program.add(schema.Int(value)), value)
        value = rng.choice(_DOUBLES)
        return _Drawn(program.add(schema.Double(value)), value)
    if kind_name == "StringType":
        value = rng.choice(_STRINGS)
        return _Drawn(program.add(schema.String(value)), value)
    raise harness._NotHere(f"no values for {text}")


def _int(rng: random.Random) -> int:
    return rng.choice(_INTS) if rng.random() < 0.5 else rng.randint(-2, 9)


def _result_shapes(overload, op_schema: torch.FunctionSchema, examples: dict) -> dict | None:
    """The out tensors torch's shape function gives for the drawn inputs, or None where it refuses them."""
    if any(value is _INVALID for value in examples.values()):
        return None
    args = [examples[a.name] for a in op_schema.arguments if not a.kwarg_only]
    kwargs = {a.name: examples[a.name] for a in op_schema.arguments if a.kwarg_only and not a.is_out}
    outs = {a.name: examples[a.name] for a in op_schema.arguments if a.is_out}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            overload(*args, **kwargs, **outs)
    except Exception:
        return None
    return outs


def make_sweep_trial(seed: int, index: int, operators: tuple[str, ...]) -> SweepTrial:
    name = operators[index % len(operators)]
    rng = random.Random(f"imxrt-sweep/{seed}/{index}")
    namespace, _, rest = name.partition("::")
    op_name, _, overload_name = rest.rpartition(".")
    overload = getattr(getattr(getattr(torch.ops, namespace), op_name), overload_name)
    op_schema = overload._schema
    for _ in range(harness._ATTEMPTS):
        program = OneCallProgram()
        drawn = {argument.name: _draw(rng, program, argument.type, str(argument.real_type))
                 for argument in op_schema.arguments}
        examples = {key: value.example for key, value in drawn.items()}
        outs = _result_shapes(overload, op_schema, examples) if rng.random() < 0.75 else None
        if outs is not None:  # out tensors of the shapes the call computes: the trial reaches the kernel
            for argument in op_schema.arguments:
                if argument.is_out:
                    drawn[argument.name] = _planned_like(program, outs[argument.name])
        out_arguments = [a for a in op_schema.arguments if a.is_out]
        args = [drawn[a.name].index for a in op_schema.arguments]
        if len(out_arguments) == 1:
            result = drawn[out_arguments[0].name].index
        elif out_arguments:
            result = program.add(schema.TensorList([drawn[a.name].index for a in out_arguments]))
        else:
            result = program.tensor(_shape(rng), rng.choice(_DTYPES))
        if program.arena > 64 << 20:  # a result of that size is refused by the cap at load: draw again
            continue
        try:
            data = program.sealed(name, args + [result], outputs=[result])
        except (TypeError, OverflowError):  # a size past the schema's int32: the file cannot hold it
            continue
        description = ", ".join(_say(a.name, drawn[a.name].example) for a in op_schema.arguments)
        return SweepTrial(index, name, f"{name}({description})" + ("" if outs is not None else " [unsized out]"),
                          data)
    raise RuntimeError(f"no program of size for {name}")


def _planned_like(program: OneCallProgram, example) -> _Drawn:
    if isinstance(example, (list, tuple)):
        items = [_planned_like(program, item) for item in example]
        return _Drawn(program.add(schema.TensorList([item.index for item in items])), [i.example for i in items])
    return _Drawn(program.tensor(list(example.shape), example.dtype), example)


def _say(name: str, example) -> str:
    if isinstance(example, torch.Tensor):
        return f"{name}={tuple(example.shape)} {str(example.dtype).removeprefix('torch.')}"
    if isinstance(example, list) and example and isinstance(example[0], torch.Tensor):
        return f"{name}=[{len(example)} tensors]"
    return f"{name}={example!r}"[:60]


def operators() -> tuple[str, ...]:
    """Every operator the allowlist admits and torch has (the sweep's rows), sorted."""
    names = []
    for name in sorted(allowed_operators()):
        namespace, _, rest = name.partition("::")
        op_name, _, overload = rest.rpartition(".")
        try:
            getattr(getattr(getattr(torch.ops, namespace), op_name), overload)
        except (AttributeError, RuntimeError):
            continue  # listed for the device only: the runtime refuses it by name
        names.append(name)
    return tuple(names)


@dataclass(frozen=True)
class SweepResult:
    trial: SweepTrial
    outcome: str
    detail: str
    signature: str


@dataclass
class SweepReport:
    seed: int
    results: list[SweepResult]
    seconds: float = 0.0

    def totals(self) -> Counter:
        return Counter(result.outcome for result in self.results)

    def defects(self) -> list[SweepResult]:
        return [result for result in self.results if result.outcome in harness.DEFECTS]

    def format(self, examples: int = 5) -> str:
        totals = self.totals()
        operators_seen = len({result.trial.operator for result in self.results})
        ran_by_operator = Counter(r.trial.operator for r in self.results if r.outcome == harness.SAME)
        lines = [f"argument sweep: {len(self.results)} trials over {operators_seen} operators, "
                 f"{self.seconds:.0f} s",
                 "  " + ", ".join(f"{harness._HEADERS[o] if o != harness.SAME else 'ran'} {totals[o]}"
                                  for o in harness.OUTCOMES if totals[o] or o in (harness.CLEAN, harness.SAME)),
                 f"  operators that ran at least once: {len(ran_by_operator)}"]
        groups: dict[str, list[SweepResult]] = {}
        for result in self.defects():
            groups.setdefault(result.signature, []).append(result)
        for group in list(groups.values())[:max(examples, 0) or None]:
            first = group[0]
            lines.append(f"  {first.outcome}: #{first.trial.index} {first.trial.description}"
                         + (f" [{len(group) - 1} more alike]" if len(group) > 1 else ""))
            lines.append(f"      -> {first.detail}")
        if self.defects():
            lines.append(f"reproduce a trial: python benchmarks/fuzz.py --seed {self.seed} --sweep --only INDEX "
                         "--save-dir DIR")
        return "\n".join(lines)


def sweep(pool: harness.WorkerPool, seed: int, indices, timeout: float = harness.TIMEOUT_SECONDS,
          save_dir: Path | None = None) -> SweepReport:
    """Make and run sweep trials ``indices`` of ``seed``."""
    start = time.monotonic()
    names = operators()
    folder = pool.folder
    no_inputs = folder / "no-inputs.npz"
    np.savez(no_inputs)
    trials: dict[int, SweepTrial] = {}
    results: list[SweepResult] = []

    def jobs():
        for position, index in enumerate(indices):
            trial = make_sweep_trial(seed, index, names)
            path = folder / f"sweep-{index}.pte"
            path.write_bytes(trial.data)
            trials[position] = trial
            yield harness.Job({"file": str(path), "inputs": str(no_inputs)}, timeout)

    def on_reply(position: int, reply: harness.Reply) -> None:
        trial = trials.pop(position)
        (folder / f"sweep-{trial.index}.pte").unlink()
        if reply.result == "error" and "\n" in reply.detail.strip():
            outcome, detail = harness.INTERNAL, f"an ImxrtError of {len(reply.detail.splitlines())} lines"
        elif reply.result == "error":
            outcome, detail = harness.CLEAN, reply.detail
        elif reply.result == "ran":
            outcome, detail = harness.SAME, ""
        else:
            outcome, detail = harness.classify(_ANY_TRIAL, reply, reference="")
        results.append(SweepResult(dataclasses.replace(trial, data=b""), outcome, detail,
                                   f"{trial.operator}/{reply.signature}"))
        if save_dir is not None and outcome in harness.DEFECTS:
            save_dir.mkdir(parents=True, exist_ok=True)
            (save_dir / f"sweep{seed}-trial{trial.index}.pte").write_bytes(trial.data)

    pool.run(jobs(), on_reply)
    results.sort(key=lambda result: result.trial.index)
    return SweepReport(seed, results, time.monotonic() - start)


_ANY_TRIAL = harness.Trial(-1, "sweep", "sweep", "", sealed=True, data=b"")
