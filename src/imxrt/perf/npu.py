"""Cost model, NPU side: cycles of each LiteRT op of a Neutron partition on the N3's pipes x MACs array.

A Neutron-C kernel costs ``KERNEL_OVERHEAD`` (the Cortex-M33 firmware programs and starts it) plus the larger
of its compute cycles and its bus cycles (``bytes moved / BUS_BYTES_PER_CYCLE``); a partition adds
``INFERENCE_OVERHEAD`` once per call. Compute cycles come from the op's shape against the array:

- matrix ops (CONV_2D, TRANSPOSE_CONV, FULLY_CONNECTED, BATCH_MATMUL): per output pixel and kernel tap, the
  ``num_pipes`` pipelines take one output channel each and each pipeline's ``num_macs`` MACs one input
  channel each (the converter's ``kH·kW·roundup(C_in, num_macs)`` accumulator bound is this reduction), so
  ``cycles = pixels · taps · ceil(C_out / pipes) · ceil(C_in / macs)`` and a layer with 3 input channels
  uses 3 of 8 MACs of every pipeline;
- DEPTHWISE_CONV_2D is the same with one input channel per group: each pipeline computes one channel and
  uses one of its MACs, ``cycles = pixels · taps · ceil(C / pipes)`` (utilisation ``1 / macs``);
- vector ops (pools, elementwise, activations, reductions, softmax) process ``pipes · macs`` int8 values
  per cycle, ``VECTOR_PASSES[op]`` times over their widest tensor (per tap for pools);
- data movement (PAD, SLICE, CONCATENATION, RESIZE, ...) is bus time only; TRANSPOSE gathers single bytes
  (``TRANSPOSE_BYTES_PER_CYCLE``); a RESHAPE of a contiguous NHWC tensor is no kernel at all.

Every constant is documented with its source in docs/cost_model.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ai_edge_litert import schema_py_generated as tfl

from imxrt.targets import NeutronConfig

# Calibrated on the two published RT700 NPU latencies (DS-CNN-S 576-595 us, CifarNet 1,027 us at 324 MHz),
# least squares on the relative error with every other term fixed. Their kernel counts (12 and 9) are too
# alike to separate a call's overhead from a kernel's: a call is taken to cost what one more kernel does
# (the firmware sets it up and waits for it the same way), which leaves one constant to fit.
KERNEL_OVERHEAD = 5_100  # cycles per kernel: the M33 firmware writes its descriptor, starts it, waits
INFERENCE_OVERHEAD = KERNEL_OVERHEAD  # cycles per partition call (neutronRunBlocking entry and exit)

# Not calibrated (no published figure isolates them): the NPU reads and writes the shared SRAM over a
# 64-bit AXI port at its own clock; a transpose moves one byte per beat.
BUS_BYTES_PER_CYCLE = 8
TRANSPOSE_BYTES_PER_CYCLE = 1

_OP = tfl.BuiltinOperator
_ITEM_BYTES = {tfl.TensorType.INT8: 1, tfl.TensorType.UINT8: 1, tfl.TensorType.INT16: 2, tfl.TensorType.INT32: 4,
               tfl.TensorType.FLOAT32: 4, tfl.TensorType.INT64: 8}
_NAMES = {v: k for k, v in vars(_OP).items() if not k.startswith("_")}

# Passes of the vector unit over the op's widest tensor: a compare or add is one; a rescaled
# elementwise op rescales both inputs and the output; softmax finds the max, sums exponentials, divides.
VECTOR_PASSES: dict[int, int] = {
    _OP.MAX_POOL_2D: 1, _OP.AVERAGE_POOL_2D: 1,
    _OP.ADD: 3, _OP.SUB: 3, _OP.MUL: 2, _OP.MAXIMUM: 1, _OP.MINIMUM: 1, _OP.PRELU: 2,
    _OP.RELU: 1, _OP.RELU6: 1, _OP.RELU_N1_TO_1: 1, _OP.RELU_0_TO_1: 1, _OP.LEAKY_RELU: 2, _OP.ABS: 1,
    _OP.NEG: 1, _OP.LOGISTIC: 1, _OP.TANH: 1, _OP.EXP: 1, _OP.LOG: 1, _OP.RSQRT: 1, _OP.HARD_SWISH: 1,
    _OP.MEAN: 1, _OP.SUM: 1, _OP.REDUCE_MAX: 1, _OP.REDUCE_MIN: 1, _OP.QUANTIZE: 1,
    _OP.SOFTMAX: 3,
}
_MATRIX = frozenset({_OP.CONV_2D, _OP.TRANSPOSE_CONV, _OP.DEPTHWISE_CONV_2D, _OP.FULLY_CONNECTED, _OP.BATCH_MATMUL})
_POOLS = frozenset({_OP.MAX_POOL_2D, _OP.AVERAGE_POOL_2D})
_FREE = frozenset({_OP.RESHAPE})  # contiguous NHWC in and out: the converter folds it into tensor metadata
_BUS_ONLY = frozenset({_OP.PAD, _OP.PADV2, _OP.MIRROR_PAD, _OP.SLICE, _OP.STRIDED_SLICE, _OP.SPLIT, _OP.SPLIT_V,
                       _OP.CONCATENATION, _OP.RESIZE_NEAREST_NEIGHBOR, _OP.RESIZE_BILINEAR})
# Every builtin the model has a rule for: anything else in a partition is a KeyError (``kernel_cost``).
COSTED_OPS = _MATRIX | {_OP.TRANSPOSE} | VECTOR_PASSES.keys() | _FREE | _BUS_ONLY


@dataclass(frozen=True)
class Tensor:
    shape: tuple[int, ...]
    nbytes: int
    constant: bool


@dataclass(frozen=True)
class LiteRTOp:
    """One op of a partition as the cost model needs it: the builtin code, its tensors and pool window."""

    code: int
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    window: tuple[int, int] = (1, 1)  # pool filter (height, width)

    @property
    def name(self) -> str:
        return _NAMES.get(self.code, "CUSTOM")


@dataclass(frozen=True)
class KernelCost:
    """The estimate of one LiteRT op: its terms, so a reader can see which one bound it."""

    litert: str
    macs: int
    utilisation: float  # useful MACs / MAC slots the array spends on the op (0 for non-matrix ops)
    compute_cycles: int
    bus_cycles: int
    overhead_cycles: int
    cycles: int  # overhead + max(compute, bus)


def read_ops(tflite: bytes) -> list[LiteRTOp]:
    """The operators of a partition's LiteRT flatbuffer, in execution order."""
    model = tfl.ModelT.InitFromPackedBuf(tflite, 0)
    graph = model.subgraphs[0]

    def tensor(index: int) -> Tensor | None:
        if index < 0:
            return None
        t = graph.tensors[index]
        shape = tuple(int(d) for d in t.shape) if t.shape is not None else ()
        constant = bool(t.buffer) and model.buffers[t.buffer].data is not None
        return Tensor(shape, math.prod(shape) * _ITEM_BYTES.get(t.type, 4), constant)

    ops = []
    for op in graph.operators:
        code = model.operatorCodes[op.opcodeIndex]
        options = op.builtinOptions
        window = (options.filterHeight, options.filterWidth) if isinstance(options, tfl.Pool2DOptionsT) else (1, 1)
        ops.append(LiteRTOp(
            code=max(code.builtinCode, code.deprecatedBuiltinCode),
            inputs=tuple(t for t in map(tensor, op.inputs.tolist()) if t is not None),
            outputs=tuple(t for t in map(tensor, op.outputs.tolist()) if t is not None),
            window=window,
        ))
    return ops


def _pixels(shape: tuple[int, ...]) -> int:
    return math.prod(shape[:-1])  # NHWC: everything but the channels


def _matrix(op: LiteRTOp, npu: NeutronConfig) -> tuple[int, int] | None:
    """(MACs, array cycles) of a matrix op, or None for other ops."""
    if op.code not in _MATRIX:
        return None
    pipes, lanes = npu.num_pipes, npu.num_macs
    out = op.outputs[0].shape
    if op.code == _OP.CONV_2D:
        c_out, kh, kw, c_in = op.inputs[1].shape
        steps = _pixels(out) * kh * kw
        return steps * c_out * c_in, steps * math.ceil(c_out / pipes) * math.ceil(c_in / lanes)
    if op.code == _OP.TRANSPOSE_CONV:  # inputs: output shape, weights, input (every input pixel scatters)
        c_out, kh, kw, c_in = op.inputs[1].shape
        steps = _pixels(op.inputs[2].shape) * kh * kw
        return steps * c_out * c_in, steps * math.ceil(c_out / pipes) * math.ceil(c_in / lanes)
    if op.code == _OP.DEPTHWISE_CONV_2D:  # a conv with one input channel per group: one MAC of each pipeline
        _, kh, kw, channels = op.inputs[1].shape
        steps = _pixels(out) * kh * kw
        return steps * channels, steps * math.ceil(channels / pipes)
    if op.code == _OP.FULLY_CONNECTED:
        n_out, n_in = op.inputs[1].shape
        rows = math.prod(op.inputs[0].shape) // n_in
        return rows * n_out * n_in, rows * math.ceil(n_out / pipes) * math.ceil(n_in / lanes)
    if op.code == _OP.BATCH_MATMUL:
        k = op.inputs[0].shape[-1]
        n = out[-1]
        rows = math.prod(out[:-1])
        return rows * n * k, rows * math.ceil(n / pipes) * math.ceil(k / lanes)
    return None


def kernel_cost(op: LiteRTOp, npu: NeutronConfig) -> KernelCost:
    """The estimate of one LiteRT op on ``npu`` (module docstring)."""
    if op.code in _FREE:
        return KernelCost(op.name, 0, 0.0, 0, 0, 0, 0)
    moved = sum(t.nbytes for t in op.inputs) + sum(t.nbytes for t in op.outputs)
    bus = math.ceil(moved / BUS_BYTES_PER_CYCLE)
    macs, compute, utilisation = 0, 0, 0.0
    matrix = _matrix(op, npu)
    if matrix is not None:
        macs, compute = matrix
        utilisation = macs / (compute * npu.macs_per_cycle) if compute else 0.0
    elif op.code == _OP.TRANSPOSE:
        bus = math.ceil(op.outputs[0].nbytes / TRANSPOSE_BYTES_PER_CYCLE)
    elif op.code in VECTOR_PASSES:
        widest = max(t.nbytes for t in (*op.inputs, *op.outputs) if not t.constant)
        if op.code in _POOLS:  # every tap of the window reads the output-sized slice once more
            widest = op.outputs[0].nbytes * op.window[0] * op.window[1]
        compute = VECTOR_PASSES[op.code] * math.ceil(widest / npu.macs_per_cycle)
    elif op.code not in _BUS_ONLY:
        raise KeyError(f"no NPU cost rule for LiteRT op {op.name}")
    cycles = KERNEL_OVERHEAD + max(compute, bus)
    return KernelCost(op.name, macs, utilisation, compute, bus, KERNEL_OVERHEAD, cycles)


def partition_cycles(kernels: list[KernelCost]) -> int:
    """A partition call: its kernels, plus the per-inference overhead."""
    return INFERENCE_OVERHEAD + sum(k.cycles for k in kernels)
