"""Independent references for the tests: the TFLM and LiteRT interpreters and a plain .tflite reader.

Nothing here imports imxrt: these are the yardsticks the compiler's output is measured against.
TFLM is the bit-exact golden model (CMSIS-NN double rounding); LiteRT runs with its reference kernels
(BUILTIN_REF), never the default XNNPACK path, which is off by several LSB on int8 graphs.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence

import numpy as np
from ai_edge_litert import schema_py_generated as schema
from ai_edge_litert.interpreter import Interpreter as LiteRtInterpreter
from ai_edge_litert.interpreter import OpResolverType
from tflite_micro.python.tflite_micro import runtime as tflm

TensorInfo = tuple[tuple[int, ...], np.dtype, float, int]  # (shape, dtype, scale, zero_point)

_BUILTIN_NAMES = {code: name for name, code in vars(schema.BuiltinOperator).items() if name.isupper()}
_NUMPY_DTYPES = {
    schema.TensorType.FLOAT32: np.float32,
    schema.TensorType.INT32: np.int32,
    schema.TensorType.INT16: np.int16,
    schema.TensorType.INT8: np.int8,
    schema.TensorType.UINT8: np.uint8,
    schema.TensorType.INT64: np.int64,
    schema.TensorType.BOOL: np.bool_,
}
_MAX_ARENA_BYTES = 1 << 30
_TFLM_TOTAL = re.compile(rb"Arena allocation total (\d+) bytes")


def _model(tflite: bytes) -> schema.ModelT:
    return schema.ModelT.InitFromPackedBuf(bytearray(tflite), 0)


def _tensor_info(tensor: schema.TensorT) -> TensorInfo:
    shape = tuple(int(d) for d in (tensor.shape if tensor.shape is not None else ()))
    q = tensor.quantization
    has_q = q is not None and q.scale is not None and len(q.scale) > 0
    # Per-tensor qparams, or (0.0, 0) when the tensor is not quantized (LiteRT's convention).
    scale = float(q.scale[0]) if has_q else 0.0
    zero_point = int(q.zeroPoint[0]) if has_q and q.zeroPoint is not None else 0
    return shape, np.dtype(_NUMPY_DTYPES[tensor.type]), scale, zero_point


def tflite_ops(tflite: bytes) -> list[str]:
    """Operator names of the main subgraph in execution order; custom ops by their custom code."""
    model = _model(tflite)
    names = []
    for op in model.subgraphs[0].operators or []:
        code = model.operatorCodes[op.opcodeIndex]
        # Codes past 127 live only in builtinCode; older writers fill only deprecatedBuiltinCode.
        builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
        if builtin == schema.BuiltinOperator.CUSTOM:
            names.append(bytes(code.customCode).decode() if code.customCode else "CUSTOM")
        else:
            names.append(_BUILTIN_NAMES[builtin])
    return names


def tflite_io(tflite: bytes) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """(inputs, outputs) of the main subgraph, each a list of (shape, dtype, scale, zero_point)."""
    graph = _model(tflite).subgraphs[0]
    inputs = [_tensor_info(graph.tensors[i]) for i in graph.inputs]
    outputs = [_tensor_info(graph.tensors[i]) for i in graph.outputs]
    return inputs, outputs


def _check_inputs(tflite: bytes, inputs: Sequence[np.ndarray]) -> list[TensorInfo]:
    expected, outputs = tflite_io(tflite)
    if len(inputs) != len(expected):
        raise ValueError(f"model has {len(expected)} inputs, got {len(inputs)}")
    for i, (array, (shape, dtype, _, _)) in enumerate(zip(inputs, expected, strict=True)):
        if tuple(array.shape) != shape or array.dtype != dtype:
            got = f"{tuple(array.shape)} {array.dtype}"
            raise ValueError(f"input {i}: model wants {shape} {dtype}, got {got}")
    return outputs


def _tflm_interpreter(tflite: bytes, arena_size: int | None) -> tflm.Interpreter:
    """A TFLM interpreter; without `arena_size`, the arena doubles from a guess until the model fits."""
    if arena_size is not None:
        return tflm.Interpreter.from_bytes(tflite, arena_size=arena_size)
    # Guess: every non-constant tensor live at once, plus room for TFLM's per-tensor bookkeeping.
    graph = _model(tflite).subgraphs[0]
    size = 16 * 1024
    for tensor in graph.tensors:
        shape, dtype, _, _ = _tensor_info(tensor)
        size += 256 + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    while True:
        try:
            return tflm.Interpreter.from_bytes(tflite, arena_size=size)
        except RuntimeError:
            if size >= _MAX_ARENA_BYTES:
                raise
            size *= 2


def run_tflm(tflite: bytes, inputs: Sequence[np.ndarray], arena_size: int | None = None) -> list[np.ndarray]:
    """Run `tflite` once in TFLM (reference kernels, CMSIS-NN rounding) and return its outputs."""
    outputs = _check_inputs(tflite, inputs)
    interpreter = _tflm_interpreter(tflite, arena_size)
    for i, array in enumerate(inputs):
        interpreter.set_input(np.array(array, order="C"), i)  # (ascontiguousarray makes a scalar 1-d)
    interpreter.invoke()
    return [np.array(interpreter.get_output(i)) for i in range(len(outputs))]


# Ops TFLM implements for float only: their int8 oracle is LiteRT's reference kernels.
NO_TFLM_INT8_KERNEL = frozenset({"EXP", "LOG"})


def run_reference(tflite: bytes, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The int8 oracle for a subgraph: TFLM, or LiteRT's reference kernels where TFLM has no int8 kernel."""
    if NO_TFLM_INT8_KERNEL & set(tflite_ops(tflite)):
        return run_litert(tflite, inputs)
    return run_tflm(tflite, inputs)


def run_litert(tflite: bytes, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run `tflite` once in LiteRT with the reference (BUILTIN_REF) kernels and return its outputs."""
    _check_inputs(tflite, inputs)
    interpreter = LiteRtInterpreter(
        model_content=bytes(tflite), experimental_op_resolver_type=OpResolverType.BUILTIN_REF
    )
    interpreter.allocate_tensors()
    for detail, array in zip(interpreter.get_input_details(), inputs, strict=True):
        interpreter.set_tensor(detail["index"], np.array(array, order="C"))
    interpreter.invoke()
    return [np.array(interpreter.get_tensor(d["index"])) for d in interpreter.get_output_details()]


def tflm_arena_bytes(tflite: bytes) -> int:
    """TFLM's recorded arena total from `print_allocations()`: every tensor, struct and kernel buffer.

    The smallest arena that works is this plus the allocator's unrecorded overhead (a few hundred bytes
    on tiny graphs, none on large ones).
    """
    inputs, _ = tflite_io(tflite)
    interpreter = _tflm_interpreter(tflite, None)
    for i, (shape, dtype, _, _) in enumerate(inputs):
        interpreter.set_input(np.zeros(shape, dtype), i)
    interpreter.invoke()
    # TFLM prints with C stdio to fd 2, which Python's sys.stderr (and pytest's capsys) never sees.
    with tempfile.TemporaryFile() as log:
        saved = os.dup(2)
        try:
            os.dup2(log.fileno(), 2)
            interpreter.print_allocations()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        log.seek(0)
        text = log.read()
    match = _TFLM_TOTAL.search(text)
    if match is None:
        raise RuntimeError(f"no arena total in TFLM's allocation log: {text[:500]!r}")
    return int(match.group(1))
