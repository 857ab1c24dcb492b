"""LiteRT (.tflite) subgraph executor on the int8 kernel library: what a NeutronBackend reference payload runs.

``LiteRTRunner.from_bytes(tflite)`` parses the flatbuffer once (``litert_model.read_model``: its size bounded
before it is unpacked), refuses whatever TFLM refuses (``litert_rules``) and prepares every operator
(multipliers, shifts, lookup tables, windows, constant weights in matmul layout); ``run(inputs)`` then only
evaluates.
Numerics are TFLM's reference kernels (LiteRT's where TFLM has no int8 kernel: EXP, LOG).
Operators map to kernels through ``PREPARERS``, one explicit table keyed by ``BuiltinOperator``, assembled
from one module per op family (``runtime/litert_preparers``).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import threadpoolctl
from ai_edge_litert import schema_py_generated as schema

from imxrt.errors import ImxrtError
from imxrt.pte.reader import HOST_MEMORY_CAP  # the cap the .pte's own memory counts against
from imxrt.runtime import litert_rules
from imxrt.runtime.litert_model import (  # also this module's names for what it reads
    BUILTIN_NAMES,
    NUMPY_DTYPES,
    BadTflite,
    Op,
    OperatorView,
    UnsupportedOperator,
    constant_data,
    qparams,
    read_model,
    tensor_shape,
)
from imxrt.runtime.litert_preparers import PREPARERS
from imxrt.runtime.litert_preparers.common import BlasFree, Evaluate


class BadSubgraphInput(ImxrtError):
    """An input array does not match the subgraph's input (count, shape or dtype)."""

    def __init__(self, name: str, problem: str):
        super().__init__(f"LiteRT subgraph input {name}: {problem}")
        self.name = name


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    scale: float  # 0.0 when the tensor is not quantized
    zero_point: int


@dataclass(frozen=True)
class Step:
    op: str
    evaluate: Evaluate
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    uses_blas: bool = True


def _spec(tensor: schema.TensorT) -> TensorSpec:
    name = tensor.name.decode() if isinstance(tensor.name, bytes) else str(tensor.name)
    scale, zero_point = qparams(tensor)
    return TensorSpec(name, tensor_shape(tensor), np.dtype(NUMPY_DTYPES[tensor.type]), scale, zero_point)


class SingleThreadedBlas:
    """Our matmuls are small: a multi-threaded BLAS spends more on waking threads than on the work (seen
    100-500x slower on two-core machines), so BLAS runs single-threaded while a subgraph runs. The BLAS
    libraries are found once; entering and leaving costs a few C calls (threadpoolctl's ``limit``, which
    rescans them every time, costs ~10 us, a small layer's whole runtime)."""

    def __init__(self) -> None:
        self._libraries = threadpoolctl.ThreadpoolController().select(user_api="blas").lib_controllers

    def enter(self) -> list:
        """Limit every BLAS to one thread; returns what ``leave`` restores."""
        saved = [library.get_num_threads() for library in self._libraries]
        for library, threads in zip(self._libraries, saved, strict=True):
            if threads != 1:
                library.set_num_threads(1)
        return saved

    def leave(self, saved: list) -> None:
        for library, threads in zip(self._libraries, saved, strict=True):
            if threads != 1 and threads is not None:
                library.set_num_threads(threads)


@functools.cache
def single_threaded_blas() -> SingleThreadedBlas:
    return SingleThreadedBlas()


def _gather(indices: tuple[int, ...]) -> Callable[[list], tuple]:
    """The operand arrays of a step from the value list, as one C call; an omitted operand (-1) reads the
    list's last slot, which always holds None."""
    if len(indices) == 1:
        index = indices[0]
        return lambda values: (values[index],)
    if not indices:
        return lambda values: ()
    return operator.itemgetter(*indices)


class LiteRTRunner:
    """A prepared LiteRT subgraph: ``inputs`` / ``outputs`` describe its I/O tensors in the .tflite's own
    shapes and layout; ``run`` evaluates it."""

    def __init__(self, steps: list[Step], tensor_count: int, constants: dict[int, np.ndarray],
                 input_indices: list[int], output_indices: list[int], inputs: list[TensorSpec],
                 outputs: list[TensorSpec]):
        self.steps = steps
        self.inputs, self.outputs = inputs, outputs
        self._input_indices, self._output_indices = input_indices, output_indices
        # The value list every run starts from: constants in place, and a last slot for omitted operands.
        self._initial_values: list = [None] * (tensor_count + 1)
        for index, data in constants.items():
            self._initial_values[index] = data
        self._program = [(step.evaluate, _gather(step.inputs), step.outputs[0] if len(step.outputs) == 1 else None,
                          step.outputs) for step in steps]
        self._blas = single_threaded_blas() if any(step.uses_blas for step in steps) else None

    @classmethod
    def from_bytes(cls, tflite: bytes) -> LiteRTRunner:
        model = read_model(tflite)
        graph = model.subgraphs[0]
        _check_tensor_bytes(graph)
        for index, tensor in enumerate(graph.tensors or []):
            litert_rules.check_tensor(tensor, index)
        input_indices = [int(i) for i in (graph.inputs if graph.inputs is not None else [])]
        output_indices = [int(i) for i in (graph.outputs if graph.outputs is not None else [])]
        for kind, indices in (("input", input_indices), ("output", output_indices)):
            if any(not 0 <= i < len(graph.tensors or []) for i in indices):
                raise BadTflite(f"subgraph {kind}s {indices} are not all among its {len(graph.tensors or [])} tensors")
        constants = {}
        for index, tensor in enumerate(graph.tensors or []):
            data = constant_data(model, tensor)
            if data is not None:
                constants[index] = data
        steps = []
        for index, op in enumerate(graph.operators or []):
            code = model.operatorCodes[op.opcodeIndex]
            builtin = max(code.builtinCode, code.deprecatedBuiltinCode)  # codes past 127 live in builtinCode
            name = BUILTIN_NAMES.get(builtin, str(builtin))
            if builtin == Op.CUSTOM:
                name = bytes(code.customCode).decode() if code.customCode else "CUSTOM"
            prepare = PREPARERS.get(builtin)
            if prepare is None:
                raise UnsupportedOperator(name, index)
            view = OperatorView(model, graph, op, builtin, name, index)
            litert_rules.check_operator(view)
            evaluate = prepare(view)
            blas_free = isinstance(evaluate, BlasFree)
            steps.append(Step(name, evaluate.evaluate if blas_free else evaluate, tuple(view.inputs),
                              tuple(view.outputs), uses_blas=not blas_free))
        return cls(steps, len(graph.tensors), constants, input_indices, output_indices,
                   [_spec(graph.tensors[i]) for i in input_indices], [_spec(graph.tensors[i]) for i in output_indices])

    def check_inputs(self, inputs: Sequence[np.ndarray]) -> None:
        if len(inputs) != len(self.inputs):
            names = ", ".join(spec.name for spec in self.inputs)
            raise BadSubgraphInput(names or "(none)", f"expected {len(self.inputs)} arrays, got {len(inputs)}")
        for array, spec in zip(inputs, self.inputs, strict=True):
            if not isinstance(array, np.ndarray):
                raise BadSubgraphInput(spec.name, f"expected a numpy array, got {type(array).__name__}")
            if tuple(array.shape) != spec.shape or array.dtype != spec.dtype:
                raise BadSubgraphInput(spec.name, f"expected {spec.shape} {spec.dtype}, got "
                                                  f"{tuple(array.shape)} {array.dtype}")

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        self.check_inputs(inputs)
        return self.run_checked(inputs)

    def run_checked(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """``run`` for inputs the caller has checked once for all calls (``check_inputs``)."""
        values = self._initial_values.copy()
        for index, array in zip(self._input_indices, inputs, strict=True):
            values[index] = array
        if self._blas is None:
            self._evaluate(values)
        else:
            saved = self._blas.enter()
            try:
                self._evaluate(values)
            finally:
                self._blas.leave(saved)
        return [np.ascontiguousarray(values[i]) for i in self._output_indices]

    def _evaluate(self, values: list) -> None:
        for evaluate, gather, output, outputs in self._program:
            results = evaluate(gather(values))
            if output is not None:
                values[output] = results[0]
            else:
                for index, result in zip(outputs, results, strict=True):
                    values[index] = result


def _check_tensor_bytes(graph) -> None:
    """The subgraph's tensors fit the host runtime's memory cap, counted from their shapes before any of
    them is allocated (a damaged shape can ask for gigabytes)."""
    total = 0
    for index, tensor in enumerate(graph.tensors or []):
        shape = [int(size) for size in (tensor.shape if tensor.shape is not None else [])]
        if any(size < 0 for size in shape):
            raise BadTflite(f"tensor {index} has negative sizes {shape}")
        total += functools.reduce(operator.mul, shape, 1) * np.dtype(NUMPY_DTYPES.get(tensor.type, np.int64)).itemsize
    if total > HOST_MEMORY_CAP:
        raise BadTflite(f"its tensors would take {total:,} bytes, more than the host runtime's cap of "
                        f"{HOST_MEMORY_CAP:,}")
