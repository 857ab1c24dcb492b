"""``model.bpte``: the program with test inputs and the outputs it must give, as ExecuTorch's BundledProgram.

ExecuTorch's bundled-program runtime (``executorch/devtools/bundled_program``, ``load_bundled_input`` and
``verify_method_outputs``) loads such a file on the board, runs each test case and compares the outputs with
the expected ones; a runner that does so checks the device against the compiler. The expected outputs come
from the host runtime, which is bit-exact with the kernels the board runs, so the board must match them
exactly (the bundled comparison's tolerance is only ever a margin).

Test inputs: the first N calibration samples the model source gives, then (or else) seeded random values over
each input's int8 range (``scale * (q - zero_point)``, q in [-128, 127]). Each tensor is stored in the dim
order the program takes or gives it (a channels_last input as NHWC bytes): ExecuTorch's BundledProgram writes
every tensor contiguous, and the runtime's loader copies bytes as the bundled tensor's dim order says while its
output check insists on the program's strides.

``imxrt run model.bpte`` reads a bundle back (``read``), runs every case on the host runtime and reports the
largest difference per output (``verify``). The file is untrusted: before ExecuTorch's reader expands it, what
that reader would build is priced by the walk that prices a ``.pte`` (``pte/read_cost.py``; a tensor that
a thousand test cases share by offset is read a thousand times) and the program inside is read and checked as
any ``.pte`` is; their sum over ``HOST_MEMORY_CAP`` is a ``BadFile``. Every bundled tensor is then checked
against its sizes, dtype and dim order before it becomes an array.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from imxrt.errors import BadFile
from imxrt.model_checks import INDEX_DTYPE_NAMES
from imxrt.pte.read_cost import BYTES, NUMBERS, SCALARS, STRING, TABLES, U32, UNION, Prices, ReadCost, Table
from imxrt.pte.reader import ProgramFile, check_cap, read_program

IDENTIFIER = b"BP08"  # the BundledProgram flatbuffer's file identifier (bytes 4..8)
METHOD = "forward"
INT8_MIN, INT8_MAX = -128, 127
# what our programs take and give, by report.json name: data, and indices or masks taken as they are
_DTYPES = {"float32": torch.float32, "int8": torch.int8, "int64": torch.int64, "int32": torch.int32,
           "bool": torch.bool}


def _numpy_dtype(scalar_type) -> type | None:
    """The numpy dtype of a bundled tensor's ExecuTorch scalar type, None for one our programs never use."""
    from executorch.exir.scalar_type import ScalarType

    return {ScalarType.FLOAT: np.float32, ScalarType.CHAR: np.int8, ScalarType.LONG: np.int64,
            ScalarType.INT: np.int32, ScalarType.BOOL: np.bool_}.get(scalar_type)


def is_bundle(data: bytes) -> bool:
    return len(data) >= 8 and bytes(data[4:8]) == IDENTIFIER


def test_inputs(io: dict, count: int, samples: Iterable[Sequence[torch.Tensor]] | None = None,
                seed: int = 0) -> list[tuple[torch.Tensor, ...]]:
    """``count`` input tuples for the program ``io`` describes: the given samples first (quantized where the
    program takes int8), then seeded random values over each input's int8 range (zeros for indices and masks,
    whose valid range the program does not say)."""
    cases: list[tuple[torch.Tensor, ...]] = []
    for sample in samples or ():
        if len(cases) == count:
            break
        sample = tuple(sample) if isinstance(sample, (list, tuple)) else (sample,)
        cases.append(tuple(_as_input(torch.as_tensor(x), info) for x, info in zip(sample, io["inputs"], strict=True)))
    generator = torch.Generator().manual_seed(seed)
    while len(cases) < count:
        cases.append(tuple(_random_input(info, generator) for info in io["inputs"]))
    return cases


def _as_input(value: torch.Tensor, info: dict) -> torch.Tensor:
    if info["dtype"] == "int8" and value.is_floating_point():  # as imxrt run --quantize-inputs does
        from imxrt.runtime.inputs import quantize_input  # reading a bundle does not load the host runtime

        value = torch.from_numpy(quantize_input(value.numpy(), info["scale"], info["zero_point"], info["name"]))
    return value.to(_DTYPES[info["dtype"]]).reshape(info["shape"])


def _random_input(info: dict, generator: torch.Generator) -> torch.Tensor:
    if info["dtype"] in INDEX_DTYPE_NAMES:  # indices and masks: all 0 (False), the one value every
        return torch.zeros(info["shape"], dtype=_DTYPES[info["dtype"]])  # table has; samples give real ones
    codes = torch.randint(INT8_MIN, INT8_MAX + 1, info["shape"], generator=generator, dtype=torch.int32)
    if info["dtype"] == "int8":
        return codes.to(torch.int8)
    scale, zero_point = info.get("scale"), info.get("zero_point")
    if scale is None:  # a float input nothing quantizes: the unit range
        return torch.rand(info["shape"], generator=generator) * 2 - 1
    return ((codes - zero_point).to(torch.float64) * scale).to(torch.float32)


def _lay_out(tensor, dim_order: Sequence[int]) -> None:
    """Store a bundled tensor (``bundled_program_schema.Tensor``, contiguous as ExecuTorch's BundledProgram
    writes every tensor) in ``dim_order``: the runtime's loader takes the bytes in the order the tensor says,
    and its output check requires the program's strides, so a channels_last input or output must be NHWC."""
    order = [int(d) for d in dim_order]
    if order == sorted(order):
        return
    dtype = _numpy_dtype(tensor.scalar_type)
    assert dtype is not None, tensor.scalar_type  # bundle() is given only our programs' tensors
    logical = np.frombuffer(bytes(tensor.data), dtype=dtype).reshape([int(s) for s in tensor.sizes])
    tensor.data = np.ascontiguousarray(np.transpose(logical, order)).tobytes()
    tensor.dim_order = order


def bundle(pte: bytes, io: dict, inputs: Sequence[tuple[torch.Tensor, ...]]) -> bytes:
    """The ``.bpte`` bytes: ``pte`` with one test case per input tuple, its expected outputs computed by the
    host runtime."""
    from executorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
    from executorch.devtools.bundled_program.core import BundledProgram
    from executorch.devtools.bundled_program.serialize import serialize_from_bundled_program_to_flatbuffer

    from imxrt.runtime import load

    program = load(pte)
    cases = []
    for case in inputs:
        outputs = program.forward(*case)
        cases.append(MethodTestCase(inputs=[x.contiguous() for x in case],
                                    expected_outputs=[torch.from_numpy(np.ascontiguousarray(y)) for y in outputs]))
    # BundledProgram reads the program from a file when it is not handed ExecuTorch's manager
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.pte")
        with open(path, "wb") as f:
            f.write(pte)
        bundled = BundledProgram(None, [MethodTestSuite(METHOD, cases)], pte_file_path=path)
        schema = bundled.serialize_to_schema()  # kept by the BundledProgram: the serializer writes this one
    for case in schema.method_test_suites[0].test_cases:
        for value, info in zip(case.inputs, io["inputs"], strict=True):
            _lay_out(value.val, info["dim_order"])
        for value, info in zip(case.expected_outputs, io["outputs"], strict=True):
            _lay_out(value.val, info["dim_order"])
    return serialize_from_bundled_program_to_flatbuffer(bundled)


@dataclass(frozen=True)
class Case:
    inputs: list[np.ndarray]
    expected: list[np.ndarray]


# ExecuTorch's bundle reader (deserialize_from_flatbuffer_to_bundled_program) has flatc write the file as JSON,
# each number of a vector on a line of its own indented by its depth, then json.loads the text and builds
# dataclasses from the dicts. Measured peaks (tracemalloc; flatc's own peak is half of Python's): 51 bytes per
# byte of a tensor's data, the deepest vectors.
_READER = Prices(table=1024,  # a JSON object's text, its dict and its dataclass
                 item=96,  # a number of sizes or dim_order: its line, an int object, a slot in two lists
                 byte=56)  # a byte of data or of the program: its line of text and a list slot, then a byte
_TENSOR = Table("Tensor", (6, NUMBERS, 4), (8, BYTES, None), (10, NUMBERS, 1))
_VALUE = Table("Value", (6, UNION, (_TENSOR, SCALARS, SCALARS, SCALARS)))  # ValueUnion: Tensor, Int, Bool, Double
_CASE = Table("BundledMethodTestCase", (4, TABLES, _VALUE), (6, TABLES, _VALUE))
_SUITE = Table("BundledMethodTestSuite", (4, STRING, None), (6, TABLES, _CASE))
_BUNDLE = Table("BundledProgram", (6, TABLES, _SUITE), (8, BYTES, None))
_PROGRAM_SLOT = 8  # BundledProgram.program


def read_cost(data: bytes, name: str) -> tuple[int, bytes]:
    """(what ExecuTorch's reader would build from the ``.bpte`` bytes ``data``, counted without building it;
    the program's bytes, read in place); ``BadFile`` for an offset outside the file."""
    cost = ReadCost(data, _READER)
    try:
        root = cost.read(U32, 0)
        total = cost.table(_BUNDLE, root) + len(data)  # flatc reads the whole file
        return total, cost.vector(root, _PROGRAM_SLOT, "u1").tobytes()
    except ValueError as e:
        raise BadFile(name, f"is a damaged BundledProgram ({e}); bundle the program again") from None


def read(data: bytes, name: str) -> tuple[ProgramFile, list[Case]]:
    """(the program, read and checked as a ``.pte``; the forward method's test cases) of a ``.bpte``;
    ``BadFile`` naming ``name`` for anything that is not a bundle of tensors we can check, or that would take
    more than the host runtime's memory cap to read."""
    from executorch.devtools.bundled_program.serialize import deserialize_from_flatbuffer_to_bundled_program

    if not is_bundle(data):
        raise BadFile(name, "is not a BundledProgram (.bpte); give the file imxrt compile --bundle wrote")
    reading, program_bytes = read_cost(data, name)
    check_cap(name, reading, "to read")
    program = read_program(program_bytes, f"{name} (its program)")
    check_cap(name, reading + program.required_bytes, "to read with its program")  # the program stays loaded
    try:
        bundled = deserialize_from_flatbuffer_to_bundled_program(bytes(data))
    except Exception as e:  # noqa: BLE001  (flatc's or the JSON reader's error: the file is damaged)
        raise BadFile(name, f"is a damaged BundledProgram ({type(e).__name__}); bundle the program again") from None
    suites = [s for s in bundled.method_test_suites if s.method_name == METHOD]
    if len(suites) != 1 or not suites[0].test_cases:
        raise BadFile(name, f"holds no test cases for {METHOD}; bundle the program again with --bundle N")
    cases = []
    for index, case in enumerate(suites[0].test_cases):
        where = f"{name}: test case {index}"
        cases.append(Case([_array(v, f"{where}, input {i}") for i, v in enumerate(case.inputs)],
                          [_array(v, f"{where}, expected output {i}") for i, v in enumerate(case.expected_outputs)]))
    return program, cases


def _array(value, where: str) -> np.ndarray:
    """A bundled tensor as a numpy array in its logical (NCHW) order, after checking it holds what it says."""
    tensor = getattr(value, "val", None)
    dtype = _numpy_dtype(getattr(tensor, "scalar_type", None))
    if dtype is None:
        raise BadFile(where, "is not a float32, int8, int64, int32 or bool tensor, which is all an imxrt program "
                             "takes and gives")
    sizes, order = [int(s) for s in tensor.sizes], [int(d) for d in tensor.dim_order]
    if any(s < 0 for s in sizes) or sorted(order) != list(range(len(sizes))) or \
            math.prod(sizes) * np.dtype(dtype).itemsize != len(tensor.data):
        raise BadFile(where, f"holds {len(tensor.data)} bytes for sizes {sizes} and dim order {order}; the bundle "
                             "is damaged")
    stored = np.frombuffer(bytes(tensor.data), dtype=dtype).reshape([sizes[d] for d in order])
    return np.ascontiguousarray(np.transpose(stored, np.argsort(order)))


@dataclass(frozen=True)
class OutputCheck:
    output: int
    worst: float  # the largest |got - expected| over every case
    case: int  # the case where it is


def verify(program, cases: Sequence[Case]) -> list[OutputCheck]:
    """Run every case on ``program`` (a loaded host-runtime program) and compare with the expected outputs."""
    worst: dict[int, OutputCheck] = {}
    for index, case in enumerate(cases):
        outputs = program.forward(*case.inputs)
        if len(outputs) != len(case.expected):
            raise BadFile(program.name, f"gives {len(outputs)} outputs, the bundle expects {len(case.expected)}")
        for position, (got, expected) in enumerate(zip(outputs, case.expected, strict=True)):
            if got.shape != expected.shape:
                raise BadFile(program.name, f"output {position} has shape {got.shape}, the bundle expects "
                                            f"{expected.shape} (test case {index})")
            got, expected = got.astype(np.float64), expected.astype(np.float64)
            both_nan = np.isnan(got) & np.isnan(expected)  # a float op's NaN, given by both
            gap = float(np.max(np.where(both_nan, 0.0, np.abs(got - expected)), initial=0.0))
            gap = float("inf") if np.isnan(gap) else gap
            if position not in worst or gap > worst[position].worst:
                worst[position] = OutputCheck(position, gap, index)
    return [worst[p] for p in sorted(worst)]
