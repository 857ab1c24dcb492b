"""Test harness for the LiteRT lowering: quantize a tiny model as the pipeline does, capture the
partition programs ExecuTorch hands the NPU backend, lower them, and run the result in TFLM and LiteRT
against the quantized PyTorch program.

Partitions come from the project's ``NpuPartitioner`` (its delegation redirected to a capturing backend);
``partitioner="all"`` instead delegates every quantized op, for converters of ops the NPU partitioner
does not admit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, final

import numpy as np
import torch
from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.partitioner import DelegationSpec, PartitionResult
from executorch.exir.backend.utils import tag_constant_data
from executorch.exir.dialects._ops import ops as exir_ops
from torch.export import ExportedProgram

from imxrt.npu.litert import LiteRTSubgraph, lower_partition
from imxrt.npu.partitioner import NpuPartitioner
from imxrt.passes import EDGE_PASSES
from imxrt.pipeline import CompileOptions, export, quantize
from imxrt.targets import get_target

_QUANTIZE = exir_ops.edge.quantized_decomposed.quantize_per_tensor.default
_DEQUANTIZE = exir_ops.edge.quantized_decomposed.dequantize_per_tensor.default


@final
class CapturingBackend(BackendDetails):
    """Stores every partition program handed to ``preprocess``; the payload is a placeholder."""

    captured: ClassVar[list[ExportedProgram]] = []

    @staticmethod
    def preprocess(edge_program: ExportedProgram, compile_specs) -> PreprocessResult:
        CapturingBackend.captured.append(edge_program)
        return PreprocessResult(processed_bytes=b"\0")


def capturing_npu_partitioner() -> NpuPartitioner:
    partitioner = NpuPartitioner(get_target("imxrt700"))
    partitioner.delegation_spec = DelegationSpec(CapturingBackend.__name__, [])
    return partitioner


class DelegateEverything(NpuPartitioner):
    """Tags every quantized op as one partition: all call_function nodes except the quantize nodes that
    read model inputs and the dequantize nodes that feed model outputs. ``keep_whole=False`` lets
    to_edge decompose linear (into permute_copy + addmm) and the other ops the NPU partitioner keeps."""

    def __init__(self, keep_whole: bool = True):
        super().__init__(get_target("imxrt700"))
        self.delegation_spec = DelegationSpec(CapturingBackend.__name__, [])
        self.keep_whole = keep_whole

    def ops_to_not_decompose(self, ep):
        if not self.keep_whole:
            return [], None
        ops, keep = super().ops_to_not_decompose(ep)
        return [*ops, torch.ops.aten.pad.default], keep  # reflect padding: one node, not index arithmetic

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        tags = {}
        for node in exported_program.graph.nodes:
            if node.op != "call_function":
                continue
            reads_model_input = node.target == _QUANTIZE and node.args[0].op == "placeholder"
            feeds_model_output = node.target == _DEQUANTIZE and all(u.op == "output" for u in node.users)
            if reads_model_input or feeds_model_output:
                continue
            node.meta["delegation_tag"] = "tag0"
            tags["tag0"] = self.delegation_spec
        tag_constant_data(exported_program)
        return PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)


_PARTITIONERS = {
    "npu": capturing_npu_partitioner,
    "all": DelegateEverything,
    "all_decomposed": lambda: DelegateEverything(keep_whole=False),
}


@dataclass
class Quantized:
    """A model after pt2e quantization and its delegated partition programs."""

    reference: torch.nn.Module  # the int8 program as PyTorch runs it: the numeric reference
    partitions: list[ExportedProgram]
    inputs: tuple[torch.Tensor, ...]


def quantize_and_capture(
    model: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    calibration: list | None = None,
    partitioner: str = "npu",
) -> Quantized:
    quantized = quantize(export(model, inputs), inputs, calibration, CompileOptions(show_progress=False))
    CapturingBackend.captured.clear()
    to_edge_transform_and_lower(
        quantized,
        transform_passes=[pass_type() for pass_type in EDGE_PASSES],
        partitioner=[_PARTITIONERS[partitioner]()],
        compile_config=EdgeCompileConfig(_check_ir_validity=False),
    )
    partitions = list(CapturingBackend.captured)
    CapturingBackend.captured.clear()
    return Quantized(reference=quantized.module(), partitions=partitions, inputs=inputs)


def lower_single(q: Quantized) -> LiteRTSubgraph:
    assert len(q.partitions) == 1, f"expected one partition, got {len(q.partitions)}"
    return lower_partition(q.partitions[0])


def quantize_array(x: torch.Tensor, scale: float, zero_point: int) -> np.ndarray:
    q = torch.clamp(torch.round(x / scale) + zero_point, -128, 127)
    return q.to(torch.int8).numpy()


def to_litert_layout(array: np.ndarray, io) -> np.ndarray:
    """An edge-layout (NCHW) array as the LiteRT tensor holds it."""
    if array.ndim == 4 and io.channels_last:
        return np.ascontiguousarray(array.transpose(0, 2, 3, 1))
    return array.reshape(io.tflite_shape)


def from_litert_layout(array: np.ndarray, io) -> np.ndarray:
    if array.ndim == 4 and io.channels_last:
        return np.ascontiguousarray(array.transpose(0, 3, 1, 2))
    return array.reshape(io.shape)


def run_tflm(subgraph: LiteRTSubgraph, int8_inputs: list[np.ndarray]) -> list[np.ndarray]:
    from tflite_micro.python.tflite_micro import runtime

    interpreter = runtime.Interpreter.from_bytes(subgraph.tflite, arena_size=4 * 1024 * 1024)
    for index, (array, io) in enumerate(zip(int8_inputs, subgraph.inputs, strict=True)):
        interpreter.set_input(to_litert_layout(array, io), index)
    interpreter.invoke()
    return [from_litert_layout(interpreter.get_output(i), io) for i, io in enumerate(subgraph.outputs)]


def run_litert(subgraph: LiteRTSubgraph, int8_inputs: list[np.ndarray], reference_kernels=True) -> list:
    """LiteRT with its reference kernels (``reference_kernels=False``: the builtin optimized ones)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    resolver = OpResolverType.BUILTIN_REF
    if not reference_kernels:
        resolver = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    interpreter = Interpreter(model_content=subgraph.tflite, experimental_op_resolver_type=resolver)
    interpreter.allocate_tensors()
    for detail, array, io in zip(interpreter.get_input_details(), int8_inputs, subgraph.inputs, strict=True):
        interpreter.set_tensor(detail["index"], to_litert_layout(array, io))
    interpreter.invoke()
    return [
        from_litert_layout(interpreter.get_tensor(detail["index"]), io)
        for detail, io in zip(interpreter.get_output_details(), subgraph.outputs, strict=True)
    ]


@dataclass
class Comparison:
    subgraph: LiteRTSubgraph
    tflm: list[np.ndarray]
    litert: list[np.ndarray]
    expected: list[np.ndarray]

    def max_error(self, outputs: list[np.ndarray]) -> int:
        return max(
            int(np.abs(got.astype(np.int32) - want.astype(np.int32)).max(initial=0))
            for got, want in zip(outputs, self.expected, strict=True)
        )


def compare(
    q: Quantized, subgraph: LiteRTSubgraph | None = None, litert_reference_kernels: bool = True
) -> Comparison:
    """Run the lowered partition in TFLM and LiteRT on the model inputs quantized with the partition's
    input qparams; the expected output is the quantized PyTorch program run on the same dequantized
    inputs, quantized with the partition's output qparams."""
    subgraph = subgraph or lower_single(q)
    int8_inputs = [
        quantize_array(x, io.scale, io.zero_point) for x, io in zip(q.inputs, subgraph.inputs, strict=True)
    ]
    dequantized = [
        (torch.from_numpy(a.astype(np.float32)) - io.zero_point) * io.scale
        for a, io in zip(int8_inputs, subgraph.inputs, strict=True)
    ]
    with torch.no_grad():
        reference = q.reference(*dequantized)
    reference = reference if isinstance(reference, (tuple, list)) else (reference,)
    expected = [
        quantize_array(r, io.scale, io.zero_point) for r, io in zip(reference, subgraph.outputs, strict=True)
    ]
    return Comparison(
        subgraph=subgraph,
        tflm=run_tflm(subgraph, int8_inputs),
        litert=run_litert(subgraph, int8_inputs, litert_reference_kernels),
        expected=expected,
    )


def check_lowering(
    model: torch.nn.Module,
    inputs: tuple[torch.Tensor, ...],
    partitioner: str = "npu",
    litert_reference_kernels: bool = True,
) -> Comparison:
    """Quantize, capture the one partition, lower it twice, and check what every lowering must satisfy:
    the same bytes both times, TFLM and LiteRT run it, and both are within one quantization step of
    the quantized PyTorch program on every element."""
    torch.manual_seed(0)
    # Scaled copies of the inputs: other ranges, same signs (rsqrt, log stay in their domain).
    calibration = [inputs] + [tuple(x * (0.5 + torch.rand_like(x)) for x in inputs) for _ in range(3)]
    q = quantize_and_capture(model, inputs, calibration, partitioner)
    first, second = lower_single(q), lower_single(q)
    assert [io.shape for io in first.inputs] == [tuple(x.shape) for x in inputs], "partition is not the model"
    assert first.tflite == second.tflite, "two lowerings of one partition differ"
    result = compare(q, first, litert_reference_kernels)
    assert [e.shape for e in result.expected] == [io.shape for io in first.outputs], (
        "partition is not the model"
    )
    assert result.max_error(result.tflm) <= 1, f"TFLM off by {result.max_error(result.tflm)} steps"
    assert result.max_error(result.litert) <= 1, f"LiteRT off by {result.max_error(result.litert)} steps"
    return result


def op_names(subgraph: LiteRTSubgraph) -> list[str]:
    return [op.builtin for op in subgraph.ops]
