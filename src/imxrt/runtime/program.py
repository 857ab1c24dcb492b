"""Program reader: a ``.pte`` file (bytes or path) -> its ExecuTorch program, checked before anything runs.

The bytes are parsed with ExecuTorch's own schema and deserializer, so the runtime reads exactly what the
device runtime reads. Whatever is wrong with the file (truncated, corrupted, not a ``.pte``, a plan that
points outside its buffers) becomes one ``BadFile`` naming the file and the problem here, never an
IndexError deep inside the interpreter.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from executorch.exir import schema
from executorch.exir._serialize._program import _get_extended_header, deserialize_pte_binary

from imxrt import integrity
from imxrt.errors import BadFile

# A .pte is a flatbuffer with file identifier "ET" + two digits at bytes 4..8 (ET12 in ExecuTorch 1.x).
_IDENTIFIER_SLICE = slice(4, 8)
_MAX_PLANNED_BYTES = 1 << 32  # far above any MCU's SRAM; a larger plan is a corrupted size field
_FIX = "recompile the model (imxrt compile) or copy the file again"

# Bytes per element of each ExecuTorch scalar type the runtime can hold in memory.
ELEMENT_BYTES = {
    schema.ScalarType.BYTE: 1, schema.ScalarType.CHAR: 1, schema.ScalarType.SHORT: 2,
    schema.ScalarType.INT: 4, schema.ScalarType.LONG: 8, schema.ScalarType.HALF: 2,
    schema.ScalarType.FLOAT: 4, schema.ScalarType.DOUBLE: 8, schema.ScalarType.BOOL: 1,
    schema.ScalarType.BFLOAT16: 2, schema.ScalarType.UINT16: 2, schema.ScalarType.UINT32: 4,
    schema.ScalarType.UINT64: 8,
}


@dataclass(frozen=True)
class ProgramFile:
    """A deserialized, checked ``.pte``: its first execution plan and the data that plan refers to."""

    name: str  # the file name, or "<bytes>", for messages
    plan: schema.ExecutionPlan
    constants: list[bytes]  # constant_buffer, indexed by a tensor's data_buffer_idx (0 = no data)
    delegate_data: list[bytes]  # backend_delegate_data (inline; segments were moved back inline)
    seal: integrity.Sealed | integrity.Unsealed  # whether the file's checksum was checked, or it has none


def tensor_nbytes(tensor: schema.Tensor) -> int:
    count = 1
    for size in tensor.sizes:
        count *= size
    return count * ELEMENT_BYTES[tensor.scalar_type]


def allocation_offset(allocation: schema.AllocationDetails) -> int:
    # The schema splits a 64-bit offset into two 32-bit halves.
    return allocation.memory_offset_low | (allocation.memory_offset_high << 32)


def read_program(source: bytes | bytearray | memoryview | str | os.PathLike) -> ProgramFile:
    """Read and check a ``.pte`` from its bytes or a path; raise ``BadFile`` if it cannot be run."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        name, data = "<bytes>", bytes(source)
    else:
        name = str(source)
        try:
            data = Path(source).read_bytes()
        except FileNotFoundError:
            raise BadFile(name, "no such file") from None
        except IsADirectoryError:
            raise BadFile(name, "is a folder; give the .pte file (e.g. out/model.pte)") from None
        except OSError as e:
            raise BadFile(name, f"cannot be read ({e.strerror})") from None
    if not data:
        raise BadFile(name, "is empty; expected an ExecuTorch .pte program")
    if len(data) < 8 or data[_IDENTIFIER_SLICE][:2] != b"ET" or not data[_IDENTIFIER_SLICE][2:].isdigit():
        kind = " (it is a TFLite model)" if data[_IDENTIFIER_SLICE] == b"TFL3" else ""
        raise BadFile(name, f"is not an ExecuTorch .pte program{kind}: no 'ET' file identifier at byte 4")
    header = _get_extended_header(data)
    if header is not None:
        expected = max(header.program_size, header.segment_base_offset + header.segment_data_size)
        if expected > len(data):
            raise BadFile(name, f"is truncated: its header says {expected:,} bytes, the file has {len(data):,}; "
                                f"{_FIX}")
    seal = integrity.check(name, data)  # a damaged byte must not run as another program
    try:
        pte = deserialize_pte_binary(data)
    except Exception as e:  # the flatbuffer reader fails in many ways (IndexError, struct.error, ...)
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BadFile(name, f"is truncated or corrupted ({detail}); {_FIX}") from e
    program = pte.program
    if not program.execution_plan:
        raise BadFile(name, "holds no execution plan")
    plan = program.execution_plan[0]
    constants = [bytes(buffer.storage) for buffer in program.constant_buffer]
    delegates = [bytes(blob.data) for blob in program.backend_delegate_data]
    if sum(plan.non_const_buffer_sizes) > _MAX_PLANNED_BYTES:
        raise BadFile(name, f"plans {sum(plan.non_const_buffer_sizes):,} bytes of memory, which no program for "
                            f"a microcontroller needs: the file is corrupted; {_FIX}")
    checked = ProgramFile(name, plan, constants, delegates, seal)
    try:
        _check_plan(checked)
    except (TypeError, ValueError, KeyError, IndexError) as e:  # a vector or value the reader gave as None
        raise BadFile(name, f"is corrupted ({type(e).__name__}: {e}); {_FIX}") from e
    return checked


def _check_plan(program: ProgramFile) -> None:
    """Every index the plan holds points at something, and every planned tensor lies inside its buffer."""
    plan, name = program.plan, program.name
    values = plan.values

    def fail(problem: str):
        raise BadFile(name, f"{problem}; {_FIX}")

    def check_index(index: int, what: str) -> None:
        if not 0 <= index < len(values):
            fail(f"{what} refers to value {index}, but the plan has {len(values)} values")

    if not plan.chains:
        fail("the execution plan has no instruction chain")
    for index in (*plan.inputs, *plan.outputs):
        check_index(index, "a program input or output")
    for value_index, value in enumerate(values):
        val = value.val
        if isinstance(val, (schema.TensorList, schema.IntList)):
            for item in val.items or []:  # a damaged file can drop a vector: None
                check_index(item, f"list value {value_index}")
        elif isinstance(val, schema.OptionalTensorList):
            for item in val.items or []:
                if item != -1:
                    check_index(item, f"list value {value_index}")
        elif isinstance(val, schema.Tensor):
            _check_tensor(program, value_index, val, fail)
    for step, instruction in enumerate(plan.chains[0].instructions):
        args = instruction.instr_args
        where = f"instruction {step}"
        if isinstance(args, schema.KernelCall):
            if not 0 <= args.op_index < len(plan.operators):
                fail(f"{where} calls operator {args.op_index}, but the plan lists {len(plan.operators)}")
            if args.args is None:
                fail(f"{where} has no argument list")
            for index in args.args:
                check_index(index, where)
        elif isinstance(args, schema.DelegateCall):
            if not 0 <= args.delegate_index < len(plan.delegates):
                fail(f"{where} calls delegate {args.delegate_index}, but the plan lists {len(plan.delegates)}")
            if args.args is None:
                fail(f"{where} has no argument list")
            for index in args.args:
                check_index(index, where)
        elif isinstance(args, schema.MoveCall):
            check_index(args.move_from, where)
            check_index(args.move_to, where)
        elif isinstance(args, schema.JumpFalseCall):
            check_index(args.cond_value_index, where)
        elif isinstance(args, schema.FreeCall):
            check_index(args.value_index, where)
    for index, delegate in enumerate(plan.delegates):
        processed = delegate.processed
        if processed.location != schema.DataLocation.INLINE or not 0 <= processed.index < len(program.delegate_data):
            fail(f"delegate {index} ({delegate.id}) has no data in the file")


def _check_tensor(program: ProgramFile, index: int, tensor: schema.Tensor, fail) -> None:
    # A damaged file can drop a vector the reader then gives as None; an empty one is what rank 0 means.
    tensor.sizes, tensor.dim_order = list(tensor.sizes or []), list(tensor.dim_order or [])
    if tensor.scalar_type not in ELEMENT_BYTES:
        fail(f"tensor value {index} has scalar type {tensor.scalar_type!r}, which the runtime cannot hold")
    if sorted(tensor.dim_order) != list(range(len(tensor.sizes))):
        fail(f"tensor value {index} has dim_order {tensor.dim_order} for sizes {tensor.sizes}")
    if any(size < 0 for size in tensor.sizes):
        fail(f"tensor value {index} has negative sizes {tensor.sizes}")
    nbytes = tensor_nbytes(tensor)
    allocation = tensor.allocation_info
    if allocation is not None:
        sizes = program.plan.non_const_buffer_sizes
        if not 0 < allocation.memory_id < len(sizes):
            fail(f"tensor value {index} is planned in memory buffer {allocation.memory_id}, but the plan has "
                 f"buffers 1..{len(sizes) - 1}")
        if allocation_offset(allocation) % ELEMENT_BYTES[tensor.scalar_type]:
            fail(f"tensor value {index} is planned at offset {allocation_offset(allocation)}, not a multiple of "
                 f"its element size {ELEMENT_BYTES[tensor.scalar_type]}")
        end = allocation_offset(allocation) + nbytes
        if end > sizes[allocation.memory_id]:
            fail(f"tensor value {index} ({nbytes} bytes at offset {allocation_offset(allocation)}) overruns "
                 f"memory buffer {allocation.memory_id} ({sizes[allocation.memory_id]} bytes)")
    elif tensor.data_buffer_idx:
        if tensor.data_buffer_idx >= len(program.constants):
            fail(f"tensor value {index} refers to constant buffer {tensor.data_buffer_idx}, but the file has "
                 f"{len(program.constants)}")
        if len(program.constants[tensor.data_buffer_idx]) < nbytes:
            fail(f"constant tensor value {index} needs {nbytes} bytes, its buffer holds "
                 f"{len(program.constants[tensor.data_buffer_idx])}")
