"""Program reader: a ``.pte`` file (bytes or path) -> its ExecuTorch program, checked before anything uses it.

The bytes are parsed with ExecuTorch's own schema and deserializer, so imxrt reads exactly what the device
runtime reads. The host runtime runs what this returns; the memory report, the ETDump, the C header and the
bundle read it without loading the runtime. Whatever is wrong with the file (truncated, corrupted, not a
``.pte``, a plan that points outside its buffers) becomes one ``BadFile`` naming the file and the problem
here, never an IndexError deep inside the interpreter.

A ``.pte`` is untrusted input: a small file can describe gigabytes (a huge unplanned tensor, a buffer size,
or one constant that thousands of flatbuffer offsets share, each reference read as a copy of its own). Before
ExecuTorch's reader builds anything, ``read_cost`` prices what it would build (the walk of ``read_cost.py``);
after it, ``required_bytes`` adds what running needs (planned buffers, unplanned tensors, constant copies,
delegate payloads). Either over ``HOST_MEMORY_CAP`` is a ``BadFile`` saying so, before anything is allocated.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

import numpy as np
import torch
from executorch.exir import schema
from executorch.exir._serialize._program import _get_extended_header, deserialize_pte_binary

from imxrt import integrity
from imxrt.errors import BadFile
from imxrt.files import read_regular
from imxrt.pte.read_cost import (
    BYTES,
    NUMBERS,
    SCALARS,
    STRING,
    TABLE,
    TABLES,
    U32,
    U64,
    UNION,
    Prices,
    ReadCost,
    Table,
)

# A .pte is a flatbuffer with file identifier "ET" + two digits at bytes 4..8 (ET12 in ExecuTorch 1.x).
_IDENTIFIER_SLICE = slice(4, 8)
# The most memory the host runtime takes for one program. The target's SRAM is not known here; our programs
# need a few MB (the RT700 has 7.5 MB of SRAM), so a file needing more is corrupted or hostile.
HOST_MEMORY_CAP = 1 << 30
_FIX = "recompile the model (imxrt compile) or copy the file again"
PROGRAM_FILE = "a .pte program (e.g. out/model.pte)"  # what a path given for a program must be, for messages

# Bytes per element of each ExecuTorch scalar type the runtime can hold in memory.
ELEMENT_BYTES = {
    schema.ScalarType.BYTE: 1, schema.ScalarType.CHAR: 1, schema.ScalarType.SHORT: 2,
    schema.ScalarType.INT: 4, schema.ScalarType.LONG: 8, schema.ScalarType.HALF: 2,
    schema.ScalarType.FLOAT: 4, schema.ScalarType.DOUBLE: 8, schema.ScalarType.BOOL: 1,
    schema.ScalarType.BFLOAT16: 2, schema.ScalarType.UINT16: 2, schema.ScalarType.UINT32: 4,
    schema.ScalarType.UINT64: 8,
}
# The torch dtype of each of those scalar types.
TORCH_DTYPES = {
    schema.ScalarType.BYTE: torch.uint8, schema.ScalarType.CHAR: torch.int8, schema.ScalarType.SHORT: torch.int16,
    schema.ScalarType.INT: torch.int32, schema.ScalarType.LONG: torch.int64, schema.ScalarType.HALF: torch.float16,
    schema.ScalarType.FLOAT: torch.float32, schema.ScalarType.DOUBLE: torch.float64,
    schema.ScalarType.BOOL: torch.bool, schema.ScalarType.BFLOAT16: torch.bfloat16,
    schema.ScalarType.UINT16: torch.uint16, schema.ScalarType.UINT32: torch.uint32,
    schema.ScalarType.UINT64: torch.uint64,
}


@dataclass(frozen=True)
class ProgramFile:
    """A deserialized, checked ``.pte``: its first execution plan and the data that plan refers to."""

    name: str  # the file name, or "<bytes>", for messages
    plan: schema.ExecutionPlan
    constants: list[bytes]  # constant_buffer, indexed by a tensor's data_buffer_idx (0 = no data)
    delegate_data: list[bytes]  # backend_delegate_data (inline; segments were moved back inline)
    seal: integrity.Sealed | integrity.Unsealed  # whether the file's checksum was checked, or it has none
    # What the host runtime takes for it: reading the file, planned buffers, unplanned tensors, constant
    # copies and delegate payloads (each parsed once per delegate); at most HOST_MEMORY_CAP.
    required_bytes: int = 0
    data: bytes = field(default=b"", repr=False)  # the file's bytes, as read: another process loads them again


def tensor_nbytes(tensor: schema.Tensor) -> int:
    count = 1
    for size in tensor.sizes:
        count *= size
    return count * ELEMENT_BYTES[tensor.scalar_type]


def allocation_offset(allocation: schema.AllocationDetails) -> int:
    # The schema splits a 64-bit offset into two 32-bit halves.
    return allocation.memory_offset_low | (allocation.memory_offset_high << 32)


def read_program(source: bytes | bytearray | memoryview | str | os.PathLike, name: str | None = None) -> ProgramFile:
    """Read and check a ``.pte`` from its bytes or a path; raise ``BadFile`` if it cannot be run. ``name``:
    how errors name bytes (the file they came out of)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        name, data = name or "<bytes>", bytes(source)
    else:
        name, data = str(source), read_regular(source, HOST_MEMORY_CAP, PROGRAM_FILE)
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
    read_bytes = _read_cost(data, name)
    check_cap(name, read_bytes, "to read")
    try:
        pte = deserialize_pte_binary(data)
    except Exception as e:  # the flatbuffer reader fails in many ways (IndexError, struct.error, ...)
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BadFile(name, f"is truncated or corrupted ({detail}); {_FIX}") from e
    program = pte.program
    if not program.execution_plan:
        raise BadFile(name, "holds no execution plan")
    plan = program.execution_plan[0]
    try:  # a vector or value the reader gave as None
        constants = [bytes(buffer.storage) for buffer in program.constant_buffer]
        delegates = [bytes(blob.data) for blob in program.backend_delegate_data]
        checked = ProgramFile(name, plan, constants, delegates, seal)
        _check_plan(checked)
        required = read_bytes + _run_bytes(checked)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
        raise BadFile(name, f"is corrupted ({type(e).__name__}: {e}); {_FIX}") from e
    check_cap(name, required, "to load and run")
    return dataclasses.replace(checked, required_bytes=required, data=data)


def check_cap(name: str, nbytes: int, what: str) -> None:
    if nbytes > HOST_MEMORY_CAP:
        raise BadFile(name, f"would need {nbytes:,} bytes {what}, more than the host runtime's cap of "
                            f"{HOST_MEMORY_CAP:,}; no program for a microcontroller needs that much: the file is "
                            f"corrupted; {_FIX}")


def _run_bytes(program: ProgramFile) -> int:
    """What running takes beyond the file: the planned buffers, a zeroed block per unplanned tensor, a private
    copy per constant tensor (``runtime/memory.constant_tensor``), each delegate's payload parsed once per delegate."""
    total = sum(program.plan.non_const_buffer_sizes)
    for value in program.plan.values:
        tensor = value.val
        if isinstance(tensor, schema.Tensor) and tensor.allocation_info is None:
            total += max(tensor_nbytes(tensor), 1)
    for delegate in program.plan.delegates:
        total += len(program.delegate_data[delegate.processed.index])
    return total


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
    for memory_id, size in enumerate(plan.non_const_buffer_sizes):
        if size < 0:  # a negative size would slip past any sum of the sizes
            fail(f"memory buffer {memory_id} has size {size:,}")
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
            count = len(plan.chains[0].instructions)
            if not 0 <= args.destination_instruction <= count:  # Python would take -1 as the last one
                fail(f"{where} jumps to instruction {args.destination_instruction}, but the chain has {count} "
                     f"(0..{count - 1}, {count} to end it)")
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


# -- what reading the file builds

# ExecuTorch's reader (the flatbuffer object API, then dataclasses) builds one Python object per table and
# one list, bytes or str per vector or string for every offset that refers to it (``read_cost.py``). The
# walk prices every field of program.fbs.
_READER = Prices(table=600,  # the object-API object and the dataclass of one table, at their peak while reading
                 item=40,  # one number of a vector: a list slot and an int object
                 byte=1)
_TWO_STRINGS = Table("Operator, ContainerMetadata", (4, STRING, None), (6, STRING, None))
_TENSOR = Table("Tensor", (8, NUMBERS, 4), (10, NUMBERS, 1), (16, TABLE, SCALARS),
                (22, TABLE, Table("ExtraTensorInfo", (6, STRING, None))))
_INDEX_LIST = Table("TensorList, OptionalTensorList", (4, NUMBERS, 4))
_EVALUE = Table("EValue", (6, UNION, (  # KernelTypes, in the schema's order
    SCALARS, SCALARS, SCALARS, SCALARS, _TENSOR, Table("String", (4, STRING, None)),
    Table("IntList", (4, NUMBERS, 8)), Table("DoubleList", (4, NUMBERS, 8)), Table("BoolList", (4, NUMBERS, 1)),
    _INDEX_LIST, _INDEX_LIST)))
_CALL = Table("KernelCall, DelegateCall", (6, NUMBERS, 4))
_INSTRUCTION = Table("Instruction", (6, UNION, (_CALL, _CALL, SCALARS, SCALARS, SCALARS)))
_FRAME_LIST = Table("FrameList", (4, TABLES, Table("Frame", (4, STRING, None), (8, STRING, None),
                                                   (10, STRING, None))))
_CHAIN = Table("Chain", (4, NUMBERS, 4), (6, NUMBERS, 4), (8, TABLES, _INSTRUCTION), (10, TABLES, _FRAME_LIST))
_DELEGATE = Table("BackendDelegate", (4, STRING, None), (6, TABLE, SCALARS),
                  (8, TABLES, Table("CompileSpec", (4, STRING, None), (6, BYTES, None))))
_PLAN = Table("ExecutionPlan", (4, STRING, None), (6, TABLE, _TWO_STRINGS), (8, TABLES, _EVALUE),
              (10, NUMBERS, 4), (12, NUMBERS, 4), (14, TABLES, _CHAIN), (16, TABLES, _TWO_STRINGS),
              (18, TABLES, _DELEGATE), (20, NUMBERS, 8), (22, TABLES, SCALARS))
_BLOB = Table("Buffer, BackendDelegateInlineData", (4, BYTES, None))
_SUBSEGMENTS = Table("SubsegmentOffsets", (6, NUMBERS, 8))
_PROGRAM = Table("Program", (6, TABLES, _PLAN), (8, TABLES, _BLOB), (10, TABLES, _BLOB), (12, TABLES, SCALARS),
                 (14, TABLE, _SUBSEGMENTS), (16, TABLES, _SUBSEGMENTS),
                 (18, TABLES, Table("NamedData", (4, STRING, None))))


def _segment_bytes(cost: ReadCost, root: int, available: int) -> int:
    """What moving the segments back into the program copies (``_restore_segments``): each segment, each
    constant or mutable tensor cut out of its segment, each named data entry's segment."""
    sizes = [min(cost.scalar(p, 6, U64), available) for p in cost.tables(root, 12)]  # DataSegment.size
    total = sum(sizes)
    constant = cost.slot(root, 14)
    subsegments = ([cost.refer(constant)] if constant is not None else []) + cost.tables(root, 16)[:1]
    for position in subsegments:  # SubsegmentOffsets: segment_index, offsets (any order: each cut is a copy)
        index = cost.scalar(position, 4, U32)
        length = sizes[index] if index < len(sizes) else 0
        starts = np.minimum(cost.vector(position, 6, "<u8"), length).astype(np.int64)
        ends = np.append(starts[1:], length)
        total += int(np.maximum(ends - starts, 0).sum()) + cost.prices.table * len(starts)
    for position in cost.tables(root, 18):  # NamedData.segment_index
        index = cost.scalar(position, 6, U32)
        total += sizes[index] if index < len(sizes) else 0
    return total


def _read_cost(data: bytes, name: str) -> int:
    """What ExecuTorch's reader builds from the ``.pte`` bytes ``data``, priced before it runs; ``BadFile``
    for a damaged file."""
    header = _get_extended_header(data)
    program_size = header.program_size if header is not None else len(data)
    segment_base = header.segment_base_offset if header is not None else 0
    cost = ReadCost(memoryview(data)[:program_size], _READER)
    try:
        root = cost.read(U32, 0)
        total = cost.table(_PROGRAM, root) + len(data)  # the program's and the segments' bytes, copied once
        if segment_base:
            total += _segment_bytes(cost, root, len(data) - segment_base)
    except ValueError as e:
        raise BadFile(name, f"is truncated or corrupted ({e}); {_FIX}") from None
    return total
