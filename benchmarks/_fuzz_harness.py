"""Fuzzing the loader and host runtime: seeded damaged and crafted ``.pte`` files, each loaded and run in a
worker process, each outcome put in one class.

A ``.pte`` is untrusted input. Whatever a file holds, ``imxrt.runtime.load(data).forward(*inputs)`` must either
raise one ``ImxrtError`` or run; running with outputs other than the undamaged program's is allowed only for a
file without a checksum (``integrity.Unsealed``), which cannot know it was damaged. Everything else is a defect:
another exception type, the process dying by a signal, no answer within the timeout, or reaching the worker's
address-space cap.

The files come from a few small programs compiled at start (``BASES``) and one mutation each (``MUTATIONS``, one
row of the table): byte damage to the sealed file (which the checksum must catch) and to the same program
serialized without a checksum (which the reader must survive), and crafted programs: the program object
edited (sizes, indices, jumps, operator names, arguments, values, delegate payloads, the payload's LiteRT
model) and serialized again, unsealed. Trial ``i`` of seed ``s`` is a function of ``(s, i)`` and the compiled
programs alone, so ``--seed`` and a trial index reproduce a file.

Workers (``_fuzz_worker.py``) are long-lived processes, each running many trials; the parent sends a file
path, waits at most ``timeout`` seconds for the reply, and kills and restarts a worker that hangs or dies.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import os
import random
import selectors
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import flatbuffers
import numpy as np
import torch
from ai_edge_litert import schema_py_generated as tfl
from executorch.exir import schema
from executorch.exir._serialize._named_data_store import NamedDataStore
from executorch.exir._serialize._program import PTEFile, deserialize_pte_binary, serialize_pte_binary

import imxrt
from imxrt import integrity
from imxrt.npu import reference_payload
from imxrt.runtime.allowlist import allowed_operators

WORKER = Path(__file__).resolve().parent / "_fuzz_worker.py"
TIMEOUT_SECONDS = 20.0
ADDRESS_SPACE_CAP = 4 << 30
_STARTUP_SECONDS = 300.0  # importing torch on a loaded machine
_ATTEMPTS = 50  # draws of a mutation before giving up on a base (one with nothing to act on draws again)

# -- outcome classes, in table order

CLEAN = "clean error"
SAME = "ran, same outputs"
FLAGGED = "ran, different outputs, flagged"
FORGED = "ran, different outputs, seal forged"
SILENT = "ran, different outputs, silently"
INTERNAL = "internal error"
CRASH = "crash"
HANG = "hang"
OVER_CAP = "over the cap"
OUTCOMES = (CLEAN, SAME, FLAGGED, FORGED, SILENT, INTERNAL, CRASH, HANG, OVER_CAP)
DEFECTS = (SILENT, INTERNAL, CRASH, HANG, OVER_CAP)
_HEADERS = {CLEAN: "clean", SAME: "same", FLAGGED: "flagged", FORGED: "forged", SILENT: "SILENT", INTERNAL: "internal",
            CRASH: "crash", HANG: "hang", OVER_CAP: "over cap"}


# -- the programs the files are made from


class _ConvNet(torch.nn.Module):
    """conv -> relu -> linear, as in the runtime's error tests."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.linear = torch.nn.Linear(4 * 4 * 4, 2)

    def forward(self, x):
        return self.linear(torch.relu(self.conv(x)).flatten(1))


class _Pools(torch.nn.Module):
    """conv -> max pool -> padded average pool: window and stride arguments to damage."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        z = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        return torch.nn.functional.avg_pool2d(z, 3, stride=1, padding=1)


class _Mixed(torch.nn.Module):
    """linear -> projected LSTM (no int8 kernel: float ops on the CPU) -> linear -> softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(6, 8)
        self.rnn = torch.nn.LSTM(8, 4, batch_first=True, proj_size=2)
        self.out = torch.nn.Linear(2, 3)

    def forward(self, x):
        y, _ = self.rnn(torch.relu(self.fc(x)).unsqueeze(1))
        return self.out(y[:, -1]).softmax(-1)


# name -> (model, input shape, target); each compiles in about a second.
BASES = {
    "conv_npu": lambda: (_ConvNet(), (1, 3, 6, 6), "imxrt700"),
    "conv_cpu": lambda: (_ConvNet(), (1, 3, 6, 6), "imxrt700-cpu"),
    "pools_npu": lambda: (_Pools(), (1, 3, 8, 8), "imxrt700"),
    "pools_cpu": lambda: (_Pools(), (1, 3, 8, 8), "imxrt700-cpu"),
    "mixed_npu": lambda: (_Mixed(), (1, 6), "imxrt700"),
    "mixed_cpu": lambda: (_Mixed(), (1, 6), "imxrt700-cpu"),
}


@dataclass(frozen=True)
class Base:
    """A compiled program the trials damage: sealed as compiled, and the same program without its checksum."""

    name: str
    sealed: bytes
    unsealed: bytes
    inputs: tuple[np.ndarray, ...]
    delegated: bool  # holds NeutronBackend payloads


def compile_bases(names: Iterable[str] = tuple(BASES)) -> dict[str, Base]:
    bases = {}
    for name in names:
        torch.manual_seed(0)
        model, shape, target = BASES[name]()
        inputs = (torch.randn(*shape, generator=torch.Generator().manual_seed(1)),)
        sealed = imxrt.compile(model.eval(), inputs, target, [inputs],
                               imxrt.CompileOptions(show_progress=False)).pte
        program = deserialize_pte_binary(sealed).program
        unsealed = _serialize(program)
        bases[name] = Base(name, sealed, unsealed, tuple(x.numpy() for x in inputs),
                           delegated=bool(program.backend_delegate_data))
    return bases


def _serialize(program: schema.Program) -> bytes:
    return bytes(serialize_pte_binary(PTEFile(program=program, mutable_data=None, named_data=None)))


def forge_seal(program: schema.Program) -> bytes:
    """``program`` serialized with a valid imxrt seal, as anyone can make one: the ``imxrt.sha256`` named data
    entry last, then the SHA-256 of every byte before the digest written into it (``integrity`` documents
    the layout). Unlike ``integrity.seal`` it does not check that the program reads back equal (NaN values
    never compare equal)."""
    store = NamedDataStore()
    store.add_named_data(integrity.KEY, integrity.RECORD_MARKER + bytes(integrity.DIGEST_BYTES))
    data = bytes(serialize_pte_binary(PTEFile(program=program, mutable_data=None,
                                              named_data=store.get_named_data_store_output()),
                                      extract_delegate_segments=True))
    return reseal(data)


def reseal(data: bytes) -> bytes:
    """``data`` with its digest recomputed over the bytes before it (the seal's record must end the file)."""
    body = data[:-integrity.DIGEST_BYTES]
    return body + hashlib.sha256(body).digest()


def forge_record(body: bytes) -> bytes:
    """Any bytes made to end in a matching seal record: the marker, then the SHA-256 of everything before."""
    return reseal(body + integrity.RECORD_MARKER + bytes(integrity.DIGEST_BYTES))


# -- hostile numbers

_RANGES = {"u8": (0, 255), "i8": (-128, 127), "i32": (-(1 << 31), (1 << 31) - 1), "u32": (0, (1 << 32) - 1),
           "i64": (-(1 << 63), (1 << 63) - 1)}
_EDGES = (0, 1, -1, 2, 3, 7, 127, 128, 255, 256, 65535, 65536, (1 << 31) - 1, 1 << 31, -(1 << 31), (1 << 32) - 1,
          1 << 32, 1 << 40, 1 << 53, 1 << 62, (1 << 63) - 1, -(1 << 63))
_DOUBLES = (math.nan, math.inf, -math.inf, 0.0, -0.0, 1e308, 5e-324, -1.0, 1e-45, 3.4e38, 2.0 ** 31)


def _hostile(rng: random.Random, field: str, current: int | None = None) -> int:
    """An edge value of the field's type, or (for a known current value) a value near or far from it."""
    low, high = _RANGES[field]
    if current is not None and rng.random() < 0.4:
        near = rng.choice((current + 1, current - 1, current * 2, current + rng.randrange(1, 64), -current,
                           current * 1000 + 7))
        if low <= near <= high and near != current:
            return near
    return rng.choice([v for v in _EDGES if low <= v <= high and v != current] or [low])


class _NotHere(Exception):
    """The edit has nothing to act on in this program (no delegate, no list value, ...): draw again."""


@dataclass(frozen=True)
class _Context:
    """What edits may take from outside the program being edited."""

    op_names: tuple[str, ...]  # qualified operator names: the allowlist and torch's aten/prims ops
    payloads: tuple[bytes, ...]  # every base's delegate payloads, to put one where another belongs


@dataclass(frozen=True)
class Crafted:
    data: bytes
    description: str
    sealed: bool  # made from the sealed file: the checksum covers it
    forged: bool = False  # its seal was computed again after the damage: the checksum matches


# -- byte damage


def _flip_bits(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    damaged = bytearray(data)
    bits = sorted(rng.sample(range(len(data) * 8), rng.randint(1, 8)))
    for bit in bits:
        damaged[bit // 8] ^= 1 << (bit % 8)
    return bytes(damaged), "flipped bit(s) " + ", ".join(f"0x{bit // 8:x}.{bit % 8}" for bit in bits)


def _fill(rng: random.Random, length: int) -> tuple[bytes, str]:
    kind = rng.choice(("random", "zeros", "0xff"))
    fill = {"random": lambda: rng.randbytes(length), "zeros": lambda: bytes(length),
            "0xff": lambda: b"\xff" * length}[kind]()
    return fill, kind


def _overwrite(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    length = rng.choice((1, 2, 4, 8, 16, 64, 256, rng.randrange(1, len(data))))
    start = rng.randrange(len(data))
    fill, kind = _fill(rng, min(length, len(data) - start))
    return data[:start] + fill + data[start + len(fill):], f"bytes 0x{start:x}..0x{start + len(fill):x} := {kind}"


def _truncate(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    cut = rng.choice((rng.randrange(len(data)), len(data) - rng.randrange(1, 65), rng.randrange(64)))
    cut = max(0, min(cut, len(data) - 1))
    return data[:cut], f"cut to {cut} of {len(data)} bytes"


def _append(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    length = rng.choice((1, 4, 16, 100, 4096, rng.randrange(1, 1 << 16)))
    if rng.random() < 0.2:
        return data + data[:length], f"{min(length, len(data))} bytes of its own start appended"
    fill, kind = _fill(rng, length)
    return data + fill, f"{length} bytes appended ({kind})"


def _on_bytes(damage: Callable, sealed: bool):
    def make(rng: random.Random, base: Base, context: _Context, reseal: bool = False) -> Crafted:
        if reseal:  # the damage hits the sealed file before its seal record, and the seal is computed again
            original = base.sealed[:-integrity.RECORD_BYTES]
            for _ in range(_ATTEMPTS):
                data, description = damage(rng, original)
                if data != original:
                    return Crafted(forge_record(data), description + ", resealed", sealed=True, forged=True)
            raise _NotHere
        original = base.sealed if sealed else base.unsealed
        for _ in range(_ATTEMPTS):
            data, description = damage(rng, original)
            if data != original:  # zeros written over zeros: not a trial
                return Crafted(data, description, sealed)
        raise _NotHere
    return make


# -- crafted programs: edits of the deserialized program, serialized again without a checksum


def _plan(program: schema.Program) -> schema.ExecutionPlan:
    return program.execution_plan[0]


def _pick_value(rng: random.Random, program: schema.Program, *kinds: type) -> tuple[int, object]:
    found = [(i, v.val) for i, v in enumerate(_plan(program).values) if isinstance(v.val, kinds)]
    if not found:
        raise _NotHere
    return rng.choice(found)


def _pick_call(rng: random.Random, program: schema.Program) -> tuple[int, schema.KernelCall | schema.DelegateCall]:
    calls = [(i, instruction.instr_args) for i, instruction in enumerate(_plan(program).chains[0].instructions)
             if isinstance(instruction.instr_args, (schema.KernelCall, schema.DelegateCall))]
    if not calls:
        raise _NotHere
    return rng.choice(calls)


def _value_index(rng: random.Random, program: schema.Program, current: int | None = None) -> int:
    """A value index: mostly one that exists (another value of the program), sometimes none."""
    count = len(_plan(program).values)
    if rng.random() < 0.6:
        return rng.randrange(count)
    return rng.choice((-1, count, count + 1, _hostile(rng, "i32", current)))


def _edit_buffer_sizes(rng: random.Random, program: schema.Program, context: _Context) -> str:
    sizes = _plan(program).non_const_buffer_sizes
    if rng.random() < 0.15:
        added = _hostile(rng, "i64")
        sizes.append(added)
        return f"non_const_buffer_sizes {sizes[:-1]} + [{added}]"
    memory_id = rng.randrange(len(sizes))
    old = sizes[memory_id]
    new = rng.choice((_hostile(rng, "i64", old), max(0, old - rng.randrange(1, old + 2)), -old - 1,
                      -(1 << rng.randrange(1, 63))))
    sizes[memory_id] = new
    return f"non_const_buffer_sizes[{memory_id}] {old} -> {new}"


def _edit_tensor(rng: random.Random, program: schema.Program, context: _Context) -> str:
    index, tensor = _pick_value(rng, program, schema.Tensor)
    where = f"tensor value {index} {tensor.sizes}"
    how = rng.choice(("size", "size", "add dim", "drop dim", "dim_order", "scalar_type", "storage_offset",
                      "dynamism"))
    if how == "size" and tensor.sizes:
        dim = rng.randrange(len(tensor.sizes))
        old, tensor.sizes[dim] = tensor.sizes[dim], _hostile(rng, "i32", tensor.sizes[dim])
        return f"{where}: sizes[{dim}] {old} -> {tensor.sizes[dim]}"
    if how in ("size", "add dim"):
        added = rng.choice((1, 2, _hostile(rng, "i32")))
        tensor.sizes.append(added)
        tensor.dim_order.append(len(tensor.sizes) - 1)
        return f"{where}: dimension of {added} added"
    if how == "drop dim" and tensor.sizes:
        dim = rng.randrange(len(tensor.sizes))
        tensor.sizes.pop(dim)
        tensor.dim_order = [d - (d > dim) for d in tensor.dim_order if d != dim]
        return f"{where}: dimension {dim} dropped"
    if how in ("drop dim", "dim_order"):
        old = list(tensor.dim_order)
        if rng.random() < 0.5 and len(old) > 1:
            rng.shuffle(tensor.dim_order)
        else:
            tensor.dim_order = [rng.choice((0, len(old), 255, *old)) for _ in range(len(old) or 1)]
        return f"{where}: dim_order {old} -> {tensor.dim_order}"
    if how == "scalar_type":
        old, tensor.scalar_type = tensor.scalar_type, rng.choice(list(schema.ScalarType))
        return f"{where}: scalar_type {old.name} -> {tensor.scalar_type.name}"
    if how == "storage_offset":
        old, tensor.storage_offset = tensor.storage_offset, _hostile(rng, "i32", tensor.storage_offset)
        return f"{where}: storage_offset {old} -> {tensor.storage_offset}"
    old, tensor.shape_dynamism = tensor.shape_dynamism, rng.choice(list(schema.TensorShapeDynamism))
    return f"{where}: shape_dynamism {old.name} -> {tensor.shape_dynamism.name}"


def _edit_allocation(rng: random.Random, program: schema.Program, context: _Context) -> str:
    index, tensor = _pick_value(rng, program, schema.Tensor)
    allocation = tensor.allocation_info
    where = f"tensor value {index}"
    if allocation is None:
        planned = [v.val.allocation_info for v in _plan(program).values
                   if isinstance(v.val, schema.Tensor) and v.val.allocation_info is not None]
        tensor.allocation_info = copy.deepcopy(rng.choice(planned)) if planned else schema.AllocationDetails(1, 0, 0)
        return f"{where} (unplanned) given the allocation {tensor.allocation_info}"
    how = rng.choice(("memory_id", "low", "low", "high", "drop", "alias"))
    if how == "memory_id":
        old, allocation.memory_id = allocation.memory_id, rng.choice(
            (0, len(_plan(program).non_const_buffer_sizes), _hostile(rng, "u32", allocation.memory_id)))
        return f"{where}: memory_id {old} -> {allocation.memory_id}"
    if how == "low":
        old = allocation.memory_offset_low
        allocation.memory_offset_low = rng.choice((old + 1, old + rng.randrange(1, 256), _hostile(rng, "u32", old)))
        allocation.memory_offset_low = min(allocation.memory_offset_low, _RANGES["u32"][1])
        return f"{where}: memory_offset_low {old} -> {allocation.memory_offset_low}"
    if how == "high":
        old, allocation.memory_offset_high = allocation.memory_offset_high, _hostile(rng, "u32",
                                                                                    allocation.memory_offset_high)
        return f"{where}: memory_offset_high {old} -> {allocation.memory_offset_high}"
    if how == "drop":
        tensor.allocation_info = None
        return f"{where}: allocation dropped (unplanned)"
    other, donor = _pick_value(rng, program, schema.Tensor)
    tensor.allocation_info = copy.deepcopy(donor.allocation_info)
    return f"{where}: allocation of tensor value {other} ({tensor.allocation_info})"


def _edit_constants(rng: random.Random, program: schema.Program, context: _Context) -> str:
    buffers = program.constant_buffer
    with_data = [(i, v.val) for i, v in enumerate(_plan(program).values)
                 if isinstance(v.val, schema.Tensor) and v.val.data_buffer_idx]
    if with_data and rng.random() < 0.3:
        index, tensor = rng.choice(with_data)
        storage = buffers[tensor.data_buffer_idx].storage
        old = len(storage)
        cut = rng.choice((0, old // 2, max(0, old - 1), old + rng.randrange(1, 64)))
        buffers[tensor.data_buffer_idx].storage = bytes(storage[:cut]) + bytes(max(0, cut - old))
        return f"constant buffer {tensor.data_buffer_idx} (of tensor value {index}) {old} -> {cut} bytes"
    if with_data and rng.random() < 0.7:
        index, tensor = rng.choice(with_data)
    else:
        index, tensor = _pick_value(rng, program, schema.Tensor)
    old = tensor.data_buffer_idx
    tensor.data_buffer_idx = rng.choice((0, len(buffers), len(buffers) - 1, rng.randrange(len(buffers) or 1),
                                         _hostile(rng, "u32", old)))
    return f"tensor value {index}: data_buffer_idx {old} -> {tensor.data_buffer_idx} (of {len(buffers)})"


def _edit_call_target(rng: random.Random, program: schema.Program, context: _Context) -> str:
    step, call = _pick_call(rng, program)
    plan = _plan(program)
    if isinstance(call, schema.KernelCall):
        count, old = len(plan.operators), call.op_index
        call.op_index = rng.choice((rng.randrange(count), count, -1, _hostile(rng, "i32", old)))
        return f"instruction {step}: op_index {old} -> {call.op_index} (of {count})"
    count, old = len(plan.delegates), call.delegate_index
    call.delegate_index = rng.choice((count, -1, _hostile(rng, "i32", old)))
    return f"instruction {step}: delegate_index {old} -> {call.delegate_index} (of {count})"


def _edit_value_indices(rng: random.Random, program: schema.Program, context: _Context) -> str:
    plan = _plan(program)
    how = rng.choice(("argument", "argument", "argument", "io", "list"))
    if how == "list":
        try:
            index, val = _pick_value(rng, program, schema.TensorList, schema.IntList, schema.OptionalTensorList)
        except _NotHere:
            how = "argument"
        else:
            if val.items:
                position = rng.randrange(len(val.items))
                old = val.items[position]
                val.items[position] = _value_index(rng, program, old)
                return f"list value {index}: items[{position}] {old} -> {val.items[position]}"
            val.items.append(_value_index(rng, program))
            return f"list value {index}: item {val.items[-1]} added"
    if how == "io":
        vector, name = rng.choice(((plan.inputs, "inputs"), (plan.outputs, "outputs")))
        old = list(vector)
        choice = rng.randrange(3)
        if choice == 0 and vector:
            vector[rng.randrange(len(vector))] = _value_index(rng, program)
        elif choice == 1:
            vector.append(_value_index(rng, program))
        elif vector:
            vector.pop(rng.randrange(len(vector)))
        return f"plan {name} {old} -> {vector}"
    step, call = _pick_call(rng, program)
    if not call.args:
        raise _NotHere
    position = rng.randrange(len(call.args))
    old = call.args[position]
    call.args[position] = _value_index(rng, program, old)
    return f"instruction {step}: args[{position}] {old} -> {call.args[position]}"


def _jump_destination(rng: random.Random, position: int, count: int) -> int:
    return rng.choice((-1, -2, -(1 << 31), position, max(position - 1, 0), 0, count, count + 1, (1 << 31) - 1,
                       rng.randrange(count + 1)))


def _edit_control_flow(rng: random.Random, program: schema.Program, context: _Context) -> str:
    plan = _plan(program)
    instructions = plan.chains[0].instructions
    position = rng.randrange(len(instructions) + 1)
    how = rng.choice(("jump", "jump", "jump", "retarget", "move", "free", "drop", "duplicate", "swap"))
    if how in ("jump", "retarget"):
        condition = rng.choice(("false", "true", "int", "tensor", "any"))
        if condition in ("false", "true"):
            plan.values.append(schema.EValue(schema.Bool(condition == "true")))
            condition_index = len(plan.values) - 1
        elif condition == "int":
            plan.values.append(schema.EValue(schema.Int(0)))
            condition_index = len(plan.values) - 1
        elif condition == "tensor":
            condition_index = _pick_value(rng, program, schema.Tensor)[0]
        else:
            condition_index = _value_index(rng, program)
        count = len(instructions) + (how == "jump")
        destination = _jump_destination(rng, position if how == "jump" else min(position, count - 1), count)
        jump = schema.Instruction(schema.JumpFalseCall(condition_index, destination))
        if how == "jump":
            instructions.insert(position, jump)
            return f"JumpFalseCall({condition} value {condition_index}, to {destination}) inserted at {position}"
        position = min(position, len(instructions) - 1)
        instructions[position] = jump
        return f"instruction {position} := JumpFalseCall({condition} value {condition_index}, to {destination})"
    if how == "move":
        move = schema.MoveCall(_value_index(rng, program), _value_index(rng, program))
        instructions.insert(position, schema.Instruction(move))
        return f"MoveCall({move.move_from} -> {move.move_to}) inserted at {position}"
    if how == "free":
        free = schema.FreeCall(_value_index(rng, program))
        instructions.insert(position, schema.Instruction(free))
        return f"FreeCall({free.value_index}) inserted at {position}"
    position = min(position, len(instructions) - 1)
    if how == "drop":
        instructions.pop(position)
        return f"instruction {position} dropped"
    if how == "duplicate":
        instructions.insert(position, copy.deepcopy(instructions[position]))
        return f"instruction {position} duplicated"
    other = rng.randrange(len(instructions))
    instructions[position], instructions[other] = instructions[other], instructions[position]
    return f"instructions {position} and {other} swapped"


# Operator names no registry has.
_GARBAGE_OPERATORS = (("", ""), ("::", ""), ("aten::", "out"), ("a" * 5000, "out"), ("aten::add", "out.out"),
                      ("cortex_m::quantized_conv2d\0", "out"), ("aten::add", "\u00fc"), ("torch::from_file", ""))


def _edit_operator(rng: random.Random, program: schema.Program, context: _Context) -> str:
    operators = _plan(program).operators
    if not operators:
        raise _NotHere
    index = rng.randrange(len(operators))
    operator = operators[index]
    old = f"{operator.name}.{operator.overload}"
    source = rng.random()
    if source < 0.15:
        operator.name, operator.overload = rng.choice(_GARBAGE_OPERATORS)
    elif source < 0.3:
        operator.overload = rng.choice(("", "default", "out", "Tensor", "Scalar_out", "int_out"))
    else:
        name, _, overload = rng.choice(context.op_names).partition(".")
        operator.name, operator.overload = name, overload
    return f"operators[{index}] {old} -> {operator.name[:60]}.{operator.overload}"


def _edit_arguments(rng: random.Random, program: schema.Program, context: _Context) -> str:
    step, call = _pick_call(rng, program)
    old = list(call.args)
    how = rng.choice(("shorten", "lengthen", "retype", "retype", "swap", "empty", "repeat"))
    if how == "shorten" and call.args:
        for _ in range(rng.randint(1, len(call.args))):
            call.args.pop(rng.randrange(len(call.args)))
    elif how == "lengthen" or not call.args:
        call.args.extend(_value_index(rng, program) for _ in range(rng.randint(1, 3)))
    elif how == "retype":
        position = rng.randrange(len(call.args))
        values = _plan(program).values
        kind = type(values[call.args[position]].val) if 0 <= call.args[position] < len(values) else None
        others = [i for i, v in enumerate(values) if type(v.val) is not kind]
        if not others:
            raise _NotHere
        call.args[position] = rng.choice(others)
    elif how == "swap" and len(call.args) > 1:
        a, b = rng.sample(range(len(call.args)), 2)
        call.args[a], call.args[b] = call.args[b], call.args[a]
    elif how == "empty":
        call.args.clear()
    else:
        call.args[:] = call.args * rng.choice((2, 100, 5000))
    shown = call.args if len(call.args) <= 12 else f"{call.args[:6]}... ({len(call.args)} args)"
    return f"instruction {step} ({how}): args {old} -> {shown}"


def _edit_scalar_value(rng: random.Random, program: schema.Program, context: _Context) -> str:
    values = _plan(program).values
    if rng.random() < 0.25:  # a value of another kind where the program expects this one
        index = rng.randrange(len(values))
        old = type(values[index].val).__name__
        kind = rng.choice(("Null", "Int", "Double", "Bool", "String", "IntList", "TensorList", "copy"))
        values[index].val = {
            "Null": lambda: schema.Null(), "Int": lambda: schema.Int(_hostile(rng, "i64")),
            "Double": lambda: schema.Double(rng.choice(_DOUBLES)), "Bool": lambda: schema.Bool(rng.random() < 0.5),
            "String": lambda: schema.String("x" * rng.randrange(8)),
            "IntList": lambda: schema.IntList([_value_index(rng, program) for _ in range(rng.randrange(4))]),
            "TensorList": lambda: schema.TensorList([_value_index(rng, program) for _ in range(rng.randrange(4))]),
            "copy": lambda: copy.deepcopy(rng.choice(values).val),
        }[kind]()
        return f"value {index} {old} -> {values[index].val}"[:200]
    index, val = _pick_value(rng, program, schema.Int, schema.Double, schema.Bool, schema.IntList,
                             schema.DoubleList, schema.BoolList, schema.String)
    old = copy.deepcopy(val)
    if isinstance(val, schema.Int):
        val.int_val = _hostile(rng, "i64", val.int_val)
    elif isinstance(val, schema.Double):
        val.double_val = rng.choice(_DOUBLES)
    elif isinstance(val, schema.Bool):
        val.bool_val = not val.bool_val
    elif isinstance(val, schema.String):
        val.string_val = rng.choice(("", "\0", "x" * 10000, val.string_val[::-1]))
    elif isinstance(val, schema.IntList):
        if val.items and rng.random() < 0.7:
            position = rng.randrange(len(val.items))
            val.items[position] = _value_index(rng, program, val.items[position])
        else:
            val.items.append(_value_index(rng, program))
    elif val.items:  # DoubleList, BoolList
        position = rng.randrange(len(val.items))
        val.items[position] = (rng.choice(_DOUBLES) if isinstance(val, schema.DoubleList)
                               else not val.items[position])
    else:
        raise _NotHere
    return f"value {index} {old} -> {val}"[:200]


# -- delegate payloads and the LiteRT model inside them


def _delegate_blob(rng: random.Random, program: schema.Program) -> tuple[int, bytes]:
    blobs = program.backend_delegate_data
    if not blobs:
        raise _NotHere
    index = rng.randrange(len(blobs))
    return index, bytes(blobs[index].data)


def _json_paths(node, path=()):
    """Every (path, leaf or container) in a JSON document, for choosing what to edit."""
    yield path, node
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        yield from _json_paths(child, (*path, key))


def _edit_payload(rng: random.Random, program: schema.Program, context: _Context) -> str:
    index, blob = _delegate_blob(rng, program)
    where = f"delegate payload {index} ({len(blob)} bytes)"
    how = rng.choice(("flip", "overwrite", "truncate", "append", "header", "metadata", "metadata", "swap"))
    if how == "header":
        field, offset = rng.choice((("version", 8), ("metadata length", 12), ("LiteRT offset", 16),
                                    ("LiteRT length", 20)))
        old = int.from_bytes(blob[offset:offset + 4], "little")
        new = _hostile(rng, "u32", old)
        edited = blob[:offset] + new.to_bytes(4, "little") + blob[offset + 4:]
        description = f"{where}: header {field} {old} -> {new}"
    elif how == "metadata":
        parsed = reference_payload.unpack(blob)
        metadata = copy.deepcopy(parsed.metadata)
        path, node = rng.choice([(p, n) for p, n in _json_paths(metadata) if p])
        parent = metadata
        for key in path[:-1]:
            parent = parent[key]
        choice = rng.randrange(4)
        if choice == 0 and isinstance(parent, dict):
            del parent[path[-1]]
            new = "deleted"
        elif isinstance(node, (int, float)) and not isinstance(node, bool) and choice < 3:
            new = parent[path[-1]] = rng.choice((_hostile(rng, "i64", int(node)), -1, 0, rng.choice(_DOUBLES)))
        else:
            new = parent[path[-1]] = rng.choice((None, "x", [], {}, -1, 1 << 40, [1] * 9))
        edited = reference_payload.pack(metadata, parsed.tflite)
        description = f"{where}: metadata {'.'.join(map(str, path))} {json.dumps(node)[:40]} -> {new}"
    elif how == "swap":
        edited = rng.choice(context.payloads)
        description = f"{where} replaced by a payload of {len(edited)} bytes from another program"
    else:
        damage = {"flip": _flip_bits, "overwrite": _overwrite, "truncate": _truncate, "append": _append}[how]
        edited, detail = damage(rng, blob)
        description = f"{where}: {detail}"
    program.backend_delegate_data[index].data = edited
    return description


def _int_fields(options) -> list[str]:
    """The int fields of a LiteRT options object: strides, windows, dilations, padding, activation, ..."""
    return [name for name, value in vars(options).items() if isinstance(value, int) and not isinstance(value, bool)]


def _edit_litert(rng: random.Random, program: schema.Program, context: _Context) -> str:
    index, blob = _delegate_blob(rng, program)
    parsed = reference_payload.unpack(blob)
    model = tfl.ModelT.InitFromPackedBuf(bytearray(parsed.tflite), 0)
    graph = model.subgraphs[0]
    op_names = {v: k for k, v in vars(tfl.BuiltinOperator).items() if not k.startswith("_")}
    ops = list(enumerate(graph.operators))
    with_options = [(i, op) for i, op in ops if op.builtinOptions is not None]
    pools = [(i, op) for i, op in with_options if isinstance(op.builtinOptions, tfl.Pool2DOptionsT)]
    how = rng.choice(("options", "options", "tensor shape", "tensor type", "tensor buffer", "buffer data",
                      "quantization", "operator io", "opcode", "graph io"))
    where = f"delegate {index} LiteRT"
    if how == "options" and with_options:
        step, op = rng.choice(pools if pools and rng.random() < 0.6 else with_options)
        fields = _int_fields(op.builtinOptions)
        if not fields:
            raise _NotHere
        name = rng.choice(fields)
        old = getattr(op.builtinOptions, name)
        new = rng.choice((0, -1, 1, 2, old + 1, rng.randrange(-4, 64), _hostile(rng, "i32", old)))
        if name in ("padding", "fusedActivationFunction", "weightsFormat", "quantizedBiasType"):
            new = rng.choice((0, 1, 2, 3, 6, 7, 100, -1))  # byte enums
        setattr(op.builtinOptions, name, new)
        kind = op_names.get(model.operatorCodes[op.opcodeIndex].builtinCode, "?")
        description = f"{where} op {step} ({kind}): {name} {old} -> {new}"
    elif how == "tensor shape" or how == "options":
        tensor_index = rng.randrange(len(graph.tensors))
        tensor = graph.tensors[tensor_index]
        old = None if tensor.shape is None else tensor.shape.tolist()
        shape = list(old or [])
        choice = rng.randrange(3)
        if choice == 0 and shape:
            shape[rng.randrange(len(shape))] = _hostile(rng, "i32")
        elif choice == 1:
            shape.append(rng.choice((1, 2, 3, 1 << 20)))
        elif shape:
            shape.pop(rng.randrange(len(shape)))
        tensor.shape = np.array(shape, np.int32)
        description = f"{where} tensor {tensor_index}: shape {old} -> {shape}"
    elif how == "tensor type":
        tensor_index = rng.randrange(len(graph.tensors))
        old, graph.tensors[tensor_index].type = graph.tensors[tensor_index].type, rng.randrange(-1, 20)
        description = f"{where} tensor {tensor_index}: type {old} -> {graph.tensors[tensor_index].type}"
    elif how == "tensor buffer":
        tensor_index = rng.randrange(len(graph.tensors))
        old = graph.tensors[tensor_index].buffer
        graph.tensors[tensor_index].buffer = rng.choice((0, len(model.buffers), rng.randrange(len(model.buffers)),
                                                         _hostile(rng, "u32", old)))
        description = f"{where} tensor {tensor_index}: buffer {old} -> {graph.tensors[tensor_index].buffer}"
    elif how == "buffer data":
        with_data = [i for i, buffer in enumerate(model.buffers) if buffer.data is not None and len(buffer.data)]
        if not with_data:
            raise _NotHere
        buffer_index = rng.choice(with_data)
        data = model.buffers[buffer_index].data
        cut = rng.choice((0, 1, len(data) // 2, len(data) - 1, len(data) + 16))
        model.buffers[buffer_index].data = np.resize(data, cut).astype(np.uint8)
        description = f"{where} buffer {buffer_index}: {len(data)} -> {cut} bytes"
    elif how == "quantization":
        quantized = [(i, t) for i, t in enumerate(graph.tensors) if t.quantization is not None]
        if not quantized:
            raise _NotHere
        tensor_index, tensor = rng.choice(quantized)
        q = tensor.quantization
        choice = rng.randrange(4)
        if choice == 0 and q.scale is not None:
            q.scale = np.full(len(q.scale), rng.choice(_DOUBLES[:6] + (1e-45, -1.0)), np.float32)
            detail = f"scale -> {q.scale[:1].tolist()}"
        elif choice == 1 and q.zeroPoint is not None:
            q.zeroPoint = np.full(len(q.zeroPoint), _hostile(rng, "i64"), np.int64)
            detail = f"zero point -> {q.zeroPoint[:1].tolist()}"
        elif choice == 2:
            q.scale = None if q.scale is None else q.scale[: rng.randrange(len(q.scale) + 2)]
            detail = "scale vector resized"
        else:
            tensor.quantization = None
            detail = "quantization dropped"
        description = f"{where} tensor {tensor_index}: {detail}"
    elif how == "operator io":
        step, op = rng.choice(ops)
        vector_name = rng.choice(("inputs", "outputs"))
        vector = getattr(op, vector_name)
        old = vector.tolist()
        edited = list(old)
        if edited:
            edited[rng.randrange(len(edited))] = rng.choice((-1, len(graph.tensors), rng.randrange(len(graph.tensors)),
                                                             _hostile(rng, "i32")))
        else:
            edited.append(rng.randrange(len(graph.tensors)))
        setattr(op, vector_name, np.array(edited, np.int32))
        description = f"{where} op {step}: {vector_name} {old} -> {edited}"
    elif how == "opcode":
        if rng.random() < 0.5:
            step, op = rng.choice(ops)
            old, op.opcodeIndex = op.opcodeIndex, rng.choice((len(model.operatorCodes), _hostile(rng, "u32")))
            description = f"{where} op {step}: opcodeIndex {old} -> {op.opcodeIndex}"
        else:
            code_index = rng.randrange(len(model.operatorCodes))
            code = model.operatorCodes[code_index]
            old = code.builtinCode
            code.builtinCode = rng.choice((rng.choice(sorted(op_names)), rng.randrange(-1, 300)))
            code.deprecatedBuiltinCode = min(code.builtinCode, 127) if code.builtinCode >= 0 else 0
            description = (f"{where} operator code {code_index}: {op_names.get(old, old)} -> "
                           f"{op_names.get(code.builtinCode, code.builtinCode)}")
    else:
        vector_name = rng.choice(("inputs", "outputs"))
        old = getattr(graph, vector_name).tolist()
        edited = [rng.choice((-1, len(graph.tensors), rng.randrange(len(graph.tensors)))) for _ in old or [0]]
        setattr(graph, vector_name, np.array(edited, np.int32))
        description = f"{where} subgraph {vector_name} {old} -> {edited}"
    builder = flatbuffers.Builder(0)
    try:
        builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    except (struct.error, OverflowError, ValueError):  # a value its field cannot hold: draw again
        raise _NotHere from None
    program.backend_delegate_data[index].data = reference_payload.pack(parsed.metadata, bytes(builder.Output()))
    return description


def _crafted(edit: Callable[[random.Random, schema.Program, _Context], str]):
    def make(rng: random.Random, base: Base, context: _Context, reseal: bool = False) -> Crafted:
        for _ in range(_ATTEMPTS):
            program = deserialize_pte_binary(base.unsealed).program
            try:
                description = edit(rng, program, context)
            except _NotHere:
                continue
            try:
                data = _serialize(program)
            except Exception:  # a value the serializer cannot write (out of its field's range): draw again
                continue
            if data != base.unsealed:  # an edit that changed nothing: not a trial
                if reseal:
                    return Crafted(forge_seal(program), description + ", sealed", sealed=True, forged=True)
                return Crafted(data, description, sealed=False)
        raise _NotHere
    return make


@dataclass(frozen=True)
class Mutation:
    name: str  # the table row
    make: Callable[..., Crafted]  # (rng, base, context, reseal=False)
    needs_delegate: bool = False


# One row per mutation, in table order.
MUTATIONS = (
    Mutation("bit flips, sealed", _on_bytes(_flip_bits, sealed=True)),
    Mutation("overwrite, sealed", _on_bytes(_overwrite, sealed=True)),
    Mutation("truncate, sealed", _on_bytes(_truncate, sealed=True)),
    Mutation("append, sealed", _on_bytes(_append, sealed=True)),
    Mutation("bit flips", _on_bytes(_flip_bits, sealed=False)),
    Mutation("overwrite", _on_bytes(_overwrite, sealed=False)),
    Mutation("truncate", _on_bytes(_truncate, sealed=False)),
    Mutation("append", _on_bytes(_append, sealed=False)),
    Mutation("buffer sizes", _crafted(_edit_buffer_sizes)),
    Mutation("tensor shapes", _crafted(_edit_tensor)),
    Mutation("allocations", _crafted(_edit_allocation)),
    Mutation("constants", _crafted(_edit_constants)),
    Mutation("op/delegate index", _crafted(_edit_call_target)),
    Mutation("value indices", _crafted(_edit_value_indices)),
    Mutation("jumps, moves, frees", _crafted(_edit_control_flow)),
    Mutation("operator names", _crafted(_edit_operator)),
    Mutation("argument lists", _crafted(_edit_arguments)),
    Mutation("scalar values", _crafted(_edit_scalar_value)),
    Mutation("delegate payload", _crafted(_edit_payload), needs_delegate=True),
    Mutation("payload LiteRT", _crafted(_edit_litert), needs_delegate=True),
)


def make_context(bases: dict[str, Base]) -> _Context:
    # aten and prims are registered by torch itself: the same names whatever else the process imported.
    names = sorted(name for name in torch._C._dispatch_get_all_op_names()
                   if name.partition("::")[0] in ("aten", "prims"))
    payloads = [bytes(blob.data) for base in bases.values()
                for blob in deserialize_pte_binary(base.unsealed).program.backend_delegate_data]
    return _Context(tuple(sorted(allowed_operators())) + tuple(names), tuple(payloads))


@dataclass(frozen=True)
class Trial:
    index: int
    base: str
    mutation: str
    description: str
    sealed: bool
    data: bytes
    forged: bool = False  # sealed again after the damage: only what is behind the seal can refuse it


def make_trial(seed: int, index: int, bases: dict[str, Base], context: _Context, reseal: bool = False) -> Trial:
    """Trial ``index`` of ``seed``: mutations in turn, on a base drawn from the trial's own generator. With
    ``reseal`` every file ends in a matching seal computed after the damage, as an attacker makes it."""
    mutation = MUTATIONS[index % len(MUTATIONS)]
    rng = random.Random(f"imxrt-fuzz/{seed}/{index}" + ("/resealed" if reseal else ""))
    names = sorted(name for name, base in bases.items() if base.delegated or not mutation.needs_delegate)
    for _ in range(_ATTEMPTS):
        name = rng.choice(names)
        try:
            crafted = mutation.make(rng, bases[name], context, reseal=reseal)
        except _NotHere:  # nothing to edit in this base: another one
            continue
        return Trial(index, name, mutation.name, crafted.description, crafted.sealed, crafted.data, crafted.forged)
    raise RuntimeError(f"mutation {mutation.name!r} found nothing to edit in {names}")


# -- running: a pool of long-lived workers


@dataclass(frozen=True)
class Job:
    """One request to a worker: a file and inputs, or a ``probe`` the harness tests itself with."""

    request: dict
    timeout: float


@dataclass(frozen=True)
class Reply:
    """A worker's answer: its JSON reply, or what happened to the worker (``crash``, ``hang``)."""

    result: str  # ran, error, memory, internal, crash, hang
    detail: str = ""
    digest: str = ""
    seal: str = ""
    signature: str = ""  # what makes two failures the same: the exception type and place, or the signal


class _Worker:
    def __init__(self, number: int, cap: int, folder: Path) -> None:
        self.log_path = folder / f"worker-{number}.log"
        self.cap = cap
        self.process = None
        self.job = None
        self.deadline = 0.0
        self.pending = b""
        self.start()

    def start(self) -> None:
        environment = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        self.log = self.log_path.open("wb")
        self.process = subprocess.Popen([sys.executable, str(WORKER), str(self.cap)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.log, env=environment, bufsize=0)
        self.ready = False

    def fileno(self) -> int:
        return self.process.stdout.fileno()

    def send(self, job: Job) -> None:
        self.job, self.deadline = job, time.monotonic() + job.timeout
        try:
            self.process.stdin.write((json.dumps(job.request) + "\n").encode())
            self.process.stdin.flush()
        except BrokenPipeError:  # it died after its last reply: the end of its output says so next
            pass

    def read(self) -> list[dict] | None:
        """The complete replies available now; None when the worker has closed its end (it died)."""
        chunk = os.read(self.fileno(), 1 << 16)
        if not chunk:
            return None
        self.pending += chunk
        *lines, self.pending = self.pending.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.log.close()

    def death(self) -> Reply:
        """Why the worker died: the signal or exit code, and the last line it wrote; an allocator's abort
        counts as reaching the cap."""
        code = self.process.wait()
        self.log.flush()
        tail = self.log_path.read_bytes()[-4000:].decode(errors="replace")
        last = next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), "")
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        if "bad_alloc" in tail or "MemoryError" in tail or "Cannot allocate memory" in tail:
            return Reply("memory", f"worker {how} after an allocation failure: {last}"[:300], signature=how)
        return Reply("crash", f"worker {how}: {last}"[:300], signature=how)


class WorkerPool:
    """``jobs`` worker processes, each under an address-space cap; ``run`` spreads jobs over them."""

    def __init__(self, jobs: int, cap: int = ADDRESS_SPACE_CAP) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="imxrt-fuzz-"))
        self.workers = [_Worker(number, cap, self.folder) for number in range(max(1, jobs))]
        self.restarts = 0

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()
        for path in self.folder.iterdir():
            path.unlink()
        self.folder.rmdir()

    def _restart(self, worker: _Worker) -> None:
        worker.stop()
        worker.start()
        self.restarts += 1

    def run(self, jobs: Iterable[Job], on_reply: Callable[[int, Reply], None]) -> None:
        """Run every job; ``on_reply(position, reply)`` for each, in the order they finish."""
        queue = iter(enumerate(jobs))
        selector = selectors.DefaultSelector()
        for worker in self.workers:
            selector.register(worker.process.stdout, selectors.EVENT_READ, worker)
        busy: dict[_Worker, int] = {}
        started = {worker: time.monotonic() for worker in self.workers if not worker.ready}
        exhausted = False

        def finish(worker: _Worker, reply: Reply) -> None:
            position = busy.pop(worker)
            worker.job = None
            on_reply(position, reply)

        def replace(worker: _Worker) -> None:
            selector.unregister(worker.process.stdout)
            self._restart(worker)
            selector.register(worker.process.stdout, selectors.EVENT_READ, worker)
            started[worker] = time.monotonic()

        while True:
            for worker in self.workers:
                if worker.ready and worker not in busy and not exhausted:
                    item = next(queue, None)
                    if item is None:
                        exhausted = True
                        break
                    busy[worker] = item[0]
                    worker.send(item[1])
            if exhausted and not busy:
                break
            now = time.monotonic()
            deadlines = [w.deadline for w in busy] + [t + _STARTUP_SECONDS for t in started.values()]
            events = selector.select(max(0.0, min(deadlines) - now) if deadlines else None)
            for key, _ in events:
                worker = key.data
                replies = worker.read()
                if replies is None:  # died: a crash while busy, a failed start before it was ready
                    if worker in busy:
                        finish(worker, worker.death())
                    elif not worker.ready:
                        raise RuntimeError(f"a fuzzing worker failed to start: {worker.death().detail}")
                    replace(worker)
                    continue
                for reply in replies:
                    if reply["result"] == "ready":
                        worker.ready = True
                        started.pop(worker, None)
                    else:
                        finish(worker, Reply(reply["result"], _detail(reply), reply.get("digest", ""),
                                             reply.get("seal", ""), f"{reply.get('type')} at {reply.get('where')}"))
            now = time.monotonic()
            for worker in list(busy):
                if worker.job is not None and now > worker.deadline:
                    finish(worker, Reply("hang", f"no reply in {worker.job.timeout:g} s", signature="hang"))
                    replace(worker)
            for since in started.values():
                if now > since + _STARTUP_SECONDS:
                    raise RuntimeError(f"a fuzzing worker did not start in {_STARTUP_SECONDS:g} s")
        selector.close()


def _detail(reply: dict) -> str:
    if reply["result"] == "ran":
        return ""
    where = f" ({reply['where']})" if reply.get("where") else ""
    return f"{reply['type']}: {reply['message']}{where}"


# -- the fuzzing run


@dataclass(frozen=True)
class Result:
    trial: Trial
    outcome: str
    detail: str  # the error line, or what happened to the worker
    signature: str = ""  # defects with the same signature are most likely one bug


def classify(trial: Trial, reply: Reply, reference: str) -> tuple[str, str]:
    """The outcome class of a trial from its worker's reply and the undamaged program's output digest."""
    if reply.result == "error":
        if "\n" in reply.detail.strip():
            return INTERNAL, f"an ImxrtError of {len(reply.detail.splitlines())} lines: {reply.detail.splitlines()[0]}"
        return CLEAN, reply.detail
    if reply.result == "ran":
        if reply.digest == reference:
            return SAME, ""
        if trial.forged:  # a matching seal computed after the damage: nothing can tell it from a real one
            return FORGED, "ran with other outputs (its seal was computed again after the damage)"
        return (SILENT, f"ran with other outputs (the runtime read it as {reply.seal})") if trial.sealed else (
            FLAGGED, "ran with other outputs")
    return {"internal": INTERNAL, "memory": OVER_CAP, "crash": CRASH, "hang": HANG}[reply.result], reply.detail


@dataclass
class Report:
    seed: int
    bases: dict[str, Base]
    results: list[Result]
    seconds: float = 0.0
    restarts: int = 0
    reseal: bool = False

    def counts(self) -> dict[str, Counter]:
        """Mutation -> outcome -> trials, mutations in table order."""
        table = {mutation.name: Counter() for mutation in MUTATIONS}
        for result in self.results:
            table[result.trial.mutation][result.outcome] += 1
        return table

    def totals(self) -> Counter:
        return Counter(result.outcome for result in self.results)

    def defects(self) -> list[Result]:
        return [result for result in self.results if result.outcome in DEFECTS]

    def format(self, examples: int = 5) -> str:
        width = max(len(mutation.name) for mutation in MUTATIONS) + 2
        columns = [_HEADERS[outcome] for outcome in OUTCOMES] + ["total"]
        lines = [f"{'mutation':<{width}}" + "".join(f"{column:>10}" for column in columns)]
        for name, counter in [*self.counts().items(), ("total", self.totals())]:
            if name == "total":
                lines.append("-" * len(lines[0]))
            cells = [counter[outcome] for outcome in OUTCOMES] + [sum(counter.values())]
            lines.append(f"{name:<{width}}" + "".join(f"{cell or '.':>10}" for cell in cells))
        lines += ["", "clean: clean error (an ImxrtError, one line)    same: ran, same outputs",
                  "flagged: ran, different outputs, flagged (unsealed: damage cannot be detected)",
                  "forged: ran, different outputs, its seal computed again after the damage (undetectable)",
                  "defects: SILENT (a sealed file ran with different outputs), internal (any other exception),",
                  "         crash (the worker died), hang (no reply in time), over cap (the address-space cap)"]
        for outcome in DEFECTS:
            found = sorted((r for r in self.results if r.outcome == outcome), key=lambda r: r.trial.index)
            if not found:
                continue
            groups: dict[str, list[Result]] = {}
            for result in found:
                groups.setdefault(result.signature, []).append(result)
            lines += ["", f"{outcome}: {len(found)} trial(s), {len(groups)} kind(s) (exception and place); the first "
                          f"trial of {'each' if len(groups) <= examples else f'the first {examples}'}:"]
            for group in list(groups.values())[:examples]:
                trial = group[0].trial
                alike = f" [{len(group) - 1} more alike: #{', #'.join(str(r.trial.index) for r in group[1:6])}" + (
                    ", ...]" if len(group) > 6 else "]") if len(group) > 1 else ""
                lines.append(f"  #{trial.index} {trial.base} / {trial.mutation}: {trial.description}{alike}")
                lines.append(f"      -> {group[0].detail}")
        if self.defects():
            lines += ["", f"reproduce a trial: python benchmarks/fuzz.py --seed {self.seed} --only INDEX "
                          f"{'--reseal ' if self.reseal else ''}--save-dir DIR (writes its file)"]
        return "\n".join(lines)


def reference_digests(pool: WorkerPool, bases: dict[str, Base], inputs: dict[str, Path], folder: Path) -> dict:
    """The output digest of each undamaged program, sealed and unsealed (they must agree and run)."""
    jobs, keys = [], []
    for name, base in bases.items():
        for label, data in (("sealed", base.sealed), ("unsealed", base.unsealed)):
            path = folder / f"{name}-{label}.pte"
            path.write_bytes(data)
            jobs.append(Job({"file": str(path), "inputs": str(inputs[name])}, _STARTUP_SECONDS))
            keys.append((name, label))
    replies = {}
    pool.run(jobs, lambda position, reply: replies.__setitem__(keys[position], reply))
    digests = {}
    for name in bases:
        sealed, unsealed = replies[name, "sealed"], replies[name, "unsealed"]
        if sealed.result != "ran" or unsealed.result != "ran" or sealed.digest != unsealed.digest:
            raise RuntimeError(f"the undamaged program {name} does not run the same sealed and unsealed: "
                               f"{sealed.result} {sealed.detail} / {unsealed.result} {unsealed.detail}")
        digests[name] = sealed.digest
    return digests


def fuzz(pool: WorkerPool, bases: dict[str, Base], seed: int, indices: Sequence[int],
         timeout: float = TIMEOUT_SECONDS, save_dir: Path | None = None, reseal: bool = False) -> Report:
    """Make and run trials ``indices`` of ``seed``; with ``save_dir``, write each defective trial's file there;
    with ``reseal``, every file's seal is computed again after its damage."""
    start = time.monotonic()
    restarts = pool.restarts
    folder = pool.folder
    inputs = {}
    for name, base in bases.items():
        inputs[name] = folder / f"{name}-inputs.npz"
        np.savez(inputs[name], *base.inputs)
    references = reference_digests(pool, bases, inputs, folder)
    if save_dir is not None:  # the inputs each saved file runs on
        save_dir.mkdir(parents=True, exist_ok=True)
        for name, base in bases.items():
            np.savez(save_dir / f"{name}-inputs.npz", *base.inputs)
    context = make_context(bases)
    trials: dict[int, Trial] = {}
    results: list[Result] = []

    def jobs():
        for position, index in enumerate(indices):
            trial = make_trial(seed, index, bases, context, reseal)
            path = folder / f"trial-{index}.pte"
            path.write_bytes(trial.data)
            trials[position] = trial
            yield Job({"file": str(path), "inputs": str(inputs[trial.base])}, timeout)

    def on_reply(position: int, reply: Reply) -> None:
        trial = trials.pop(position)
        (folder / f"trial-{trial.index}.pte").unlink()
        outcome, detail = classify(trial, reply, references[trial.base])
        signature = trial.mutation if outcome == SILENT else reply.signature
        results.append(Result(dataclasses.replace(trial, data=b""), outcome, detail, signature))
        if save_dir is not None and outcome in DEFECTS:
            (save_dir / f"seed{seed}-trial{trial.index}-{trial.base}.pte").write_bytes(trial.data)

    pool.run(jobs(), on_reply)
    results.sort(key=lambda result: result.trial.index)
    return Report(seed, bases, results, time.monotonic() - start, pool.restarts - restarts, reseal)
