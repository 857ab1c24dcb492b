"""The lowering context: what converters read (edge tensors as LiteRT tensors, constants, the
quantized result slot of a node) and the one helper that creates LiteRT operators.

Values: every int8 edge tensor (a partition input or the output of a quantize node) maps to one LiteRT
tensor; a dequantize node reads that tensor, so ``quantize -> dequantize`` between two ops is one tensor
and no operator. Rank-4 values are NHWC (``layout``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from ai_edge_litert import schema_py_generated as schema
from executorch.exir.dialects._ops import ops as exir_ops
from torch.export import ExportedProgram
from torch.fx import Node

from imxrt.npu.litert import layout, qdq, tflm_limits
from imxrt.npu.litert.errors import UnsupportedForLiteRT
from imxrt.npu.litert.ir import Graph, Operator, PerChannel, PerTensor, Quantization, Tensor
from imxrt.npu.litert.tflm_limits import MAX_CONCATENATION_INPUTS

aten = exir_ops.edge.aten
Activation = schema.ActivationFunctionType

# Ops between a compute op and its quantize node that change neither values nor the edge shape (dim
# order changes are nothing to us: every rank-4 tensor is NHWC).
_PASS_THROUGH = {
    aten.alias_copy.default,
    aten.clone.default,
    aten._to_copy.default,
    exir_ops.edge.dim_order_ops._clone_dim_order.default,
    exir_ops.edge.dim_order_ops._to_dim_order_copy.default,
}
# Clamp ranges a producing op applies itself, as TFLite's fused activation: the ones Neutron fuses after a
# conv or linear layer (reference/neutron.md); any other clamp is a MINIMUM / MAXIMUM after the op, or
# nothing where the output's int8 range already ends at the bound.
_FUSED_ACTIVATIONS = {
    (0.0, math.inf): Activation.RELU,
    (0.0, 6.0): Activation.RELU6,
}



def _joined_shape(tensors: Sequence[Tensor], axis: int) -> tuple[int, ...]:
    shape = list(tensors[0].shape)
    shape[axis] = sum(t.shape[axis] for t in tensors)
    return tuple(shape)


@dataclass(frozen=True)
class Output:
    """Where a converter writes: the int8 tensor of the quantize node that ends the op's chain."""

    anchor: Node  # the quantize node whose tensor this is
    edge_shape: tuple[int, ...]
    quantization: PerTensor
    fused: int  # ActivationFunctionType the converter must put in its options (NONE if not asked)
    clamp: tuple[float, float] | None  # an activation left to apply after the op
    sources: tuple[Node, ...]  # edge nodes the op stands for: the op, activation, pass-throughs, quantize

    @property
    def shape(self) -> tuple[int, ...]:
        return layout.stored_shape(self.edge_shape)


def edge_shape(node: Node) -> tuple[int, ...]:
    return tuple(int(d) for d in node.meta["val"].shape)


def clamp_range(node: Node) -> tuple[float, float] | None:
    """The output range of a relu / hardtanh / clamp node, or None for any other node."""
    if node.op != "call_function":
        return None
    if node.target == aten.relu.default:
        return 0.0, math.inf
    if node.target == aten.hardtanh.default:
        low, high = (list(node.args[1:3]) + [-1.0, 1.0][len(node.args[1:3]) :])[:2]
        return float(low), float(high)
    if node.target == aten.clamp.default:
        low = node.args[1] if len(node.args) > 1 else node.kwargs.get("min")
        high = node.args[2] if len(node.args) > 2 else node.kwargs.get("max")
        return (-math.inf if low is None else float(low)), (math.inf if high is None else float(high))
    return None


class LoweringContext:
    def __init__(self, program: ExportedProgram):
        self.program = program
        self.graph = Graph()
        self.values: dict[Node, Tensor] = {}  # int8 edge tensors (inputs, quantize outputs) -> LiteRT
        self.consumed: set[Node] = set()  # nodes folded into an earlier node's operator
        # tensor name -> the edge feature index at each stored position, for a flatten whose readers are all
        # FULLY_CONNECTED layers: they read the NHWC bytes as they are, with their weight columns permuted
        self.feature_orders: dict[str, np.ndarray] = {}
        self._names: dict[str, int] = {}
        self._constants: dict[tuple, Tensor] = {}
        self._constant_expressions: dict[Node, bool] = {}
        signature = program.graph_signature
        self._constant_names = {
            **signature.inputs_to_parameters,
            **signature.inputs_to_buffers,
            **signature.inputs_to_lifted_tensor_constants,
        }

    # ---- operators -------------------------------------------------------------------------------

    def emit(
        self,
        builtin: str,
        inputs: Sequence[Tensor | None],
        outputs: Sequence[Tensor],
        options: object | None = None,
        sources: Iterable[Node] = (),
        debug_handles: Iterable[int] = (),
    ) -> Operator:
        """Create a LiteRT operator standing for the edge nodes ``sources`` (its provenance), plus
        ``debug_handles`` of operators it replaces. An operator TFLM could abort on (``tflm_limits``) is
        refused here, naming its first source node and the capability table's rule: the table refuses what
        it sees of that rule on the edge graph, this what only the lowering sees (a folded constant)."""
        assert hasattr(schema.BuiltinOperator, builtin), builtin
        sources = tuple(sources)
        problem = tflm_limits.problem(builtin, inputs, outputs)
        if problem is not None:
            assert sources, f"{builtin} without a source node: {problem}"
            raise UnsupportedForLiteRT(sources[0], f"{problem} (rule {tflm_limits.CHECKS[builtin].rule})")
        handles: set[int] = set(debug_handles)
        for node in sources:
            handle = node.meta.get("debug_handle")
            if isinstance(handle, int):
                handles.add(handle)
            elif isinstance(handle, (tuple, list)):
                handles.update(int(h) for h in handle)
        op = Operator(builtin, tuple(inputs), tuple(outputs), options, tuple(sorted(handles)))
        self.graph.operators.append(op)
        return op

    def emit_result(
        self,
        builtin: str,
        inputs: Sequence[Tensor | None],
        out: Output,
        options: object | None = None,
        quantization: PerTensor | None = None,
    ) -> Tensor:
        """Emit an op that writes ``out``. ``quantization``: the qparams the op itself produces, for ops
        that copy bytes (pools, reshapes, pads); a requantize follows if the quantize node wants others."""
        result = self.activation_tensor(out.anchor.name, out.shape, quantization or out.quantization)
        self.emit(builtin, inputs, [result], options, out.sources)
        return self.bind(out, result)

    def bind(self, out: Output, tensor: Tensor) -> Tensor:
        """Make ``tensor`` the value of ``out``: requantize and clamp first if ``out`` says so."""
        assert tensor.shape == out.shape, (tensor.shape, out.shape)
        if tensor.quantization != out.quantization:
            tensor = self.requantize(tensor, out.quantization, out.sources)
        if out.clamp is not None:
            tensor = self.clamp(tensor, *out.clamp, sources=out.sources)
        self.values[out.anchor] = tensor
        return tensor

    def concatenate(self, tensors: Sequence[Tensor], result: Tensor, axis: int, sources: Iterable[Node]) -> Tensor:
        """CONCATENATION of ``tensors`` (all at ``result``'s qparams) along stored ``axis`` into ``result``.
        TFLM's kernel takes at most ``MAX_CONCATENATION_INPUTS``: more are joined in groups first."""
        sources = tuple(sources)
        tensors = list(tensors)
        while len(tensors) > MAX_CONCATENATION_INPUTS:
            groups = [tensors[i:i + MAX_CONCATENATION_INPUTS] for i in range(0, len(tensors), MAX_CONCATENATION_INPUTS)]
            tensors = [group[0] if len(group) == 1 else self.concatenate(
                group, self.activation_tensor(result.name + "_part", _joined_shape(group, axis), result.quantization),
                axis, sources) for group in groups]
        concat_options = schema.ConcatenationOptionsT()
        concat_options.axis = axis
        self.emit("CONCATENATION", tensors, [result], concat_options, sources)
        return result

    def requantize(self, tensor: Tensor, quantization: PerTensor, sources: Iterable[Node]) -> Tensor:
        result = self.activation_tensor(tensor.name + "_requantized", tensor.shape, quantization)
        self.emit("QUANTIZE", [tensor], [result], None, sources)
        return result

    def clamp(self, tensor: Tensor, low: float, high: float, sources: Iterable[Node]) -> Tensor:
        """Clamp in the int8 domain, where it is exact: q(clamp(r)) = clamp(q(r), q(low), q(high)).

        RELU / RELU6 when they fit; else MAXIMUM / MINIMUM with int8 constants (TFLM has no
        RELU_N1_TO_1 or RELU_0_TO_1 kernel)."""
        quant = tensor.quantization
        assert isinstance(quant, PerTensor)
        bounds = (low, high)
        if bounds in {(0.0, math.inf), (0.0, 6.0)}:
            result = self.activation_tensor(tensor.name + "_clamped", tensor.shape, quant)
            self.emit("RELU" if high == math.inf else "RELU6", [tensor], [result], None, sources)
            return result
        for builtin, bound, limit in (("MAXIMUM", low, qdq.INT8_MIN), ("MINIMUM", high, qdq.INT8_MAX)):
            if math.isinf(bound):
                continue
            q = int(qdq.quantize_values(np.array([bound], np.float32), quant)[0])
            if q == limit:
                continue
            bound_tensor = self.constant_tensor(f"{builtin.lower()}_bound", np.array([q], np.int8), quant)
            result = self.activation_tensor(tensor.name + "_clamped", tensor.shape, quant)
            self.emit(builtin, [tensor, bound_tensor], [result], None, sources)
            tensor = result
        return tensor

    # ---- tensors ---------------------------------------------------------------------------------

    def unique_name(self, base: str) -> str:
        count = self._names.get(base, 0)
        self._names[base] = count + 1
        return base if count == 0 else f"{base}_{count}"

    def activation_tensor(self, name: str, shape: Sequence[int], quantization: Quantization) -> Tensor:
        return Tensor(self.unique_name(name), tuple(int(d) for d in shape), np.dtype(np.int8), quantization)

    def constant_tensor(self, name: str, array: np.ndarray, quantization: Quantization = None) -> Tensor:
        """A constant with the data and shape of ``array``; equal constants are shared."""
        array = np.ascontiguousarray(array)
        key = (array.dtype.str, array.shape, array.tobytes(), quantization)
        if key not in self._constants:
            self._constants[key] = Tensor(
                self.unique_name(name), array.shape, array.dtype, quantization, array.tobytes()
            )
        return self._constants[key]

    def int32_constant(self, name: str, values: Sequence[int]) -> Tensor:
        return self.constant_tensor(name, np.array(values, np.int32))

    def edge_constant(self, node: Node) -> torch.Tensor | None:
        """The value of a constant placeholder (parameter, buffer, lifted constant), else None."""
        if node.op != "placeholder" or node.name not in self._constant_names:
            return None
        target = self._constant_names[node.name]
        if target in self.program.state_dict:
            return self.program.state_dict[target]
        return self.program.constants[target]

    def is_constant_expression(self, node: object) -> bool:
        """True for a constant placeholder and for a node computed from constants only (a weight's
        dequantize, its transpose for addmm): converters read these, they emit nothing themselves."""
        if not isinstance(node, Node):
            return False
        if node not in self._constant_expressions:
            if node.op == "placeholder":
                found = node.name in self._constant_names
            else:
                inputs = node.all_input_nodes
                found = node.op == "call_function" and bool(inputs) and all(
                    self.is_constant_expression(n) for n in inputs
                )
            self._constant_expressions[node] = found
        return self._constant_expressions[node]

    def constant_value(self, node: Node) -> torch.Tensor | None:
        """The value of a constant expression, computed with the edge ops themselves (a lifted scalar
        cast to float, a weight's transpose), or None if ``node`` is not one."""
        if not self.is_constant_expression(node):
            return None
        if node.op == "placeholder":
            return self.edge_constant(node)
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), self.constant_value)
        with torch.no_grad():
            return node.target(*args, **kwargs)

    # ---- reading edge operands -------------------------------------------------------------------

    def tensor(self, arg: object, consumer: Node) -> Tensor:
        """The LiteRT tensor an op reads for edge operand ``arg``: an int8 value behind a dequantize
        node, an int8 constant behind one, or a float constant the quantizer left float (quantized here
        symmetrically). Rank-4 operands come NHWC."""
        if qdq.is_dequantize(arg):
            source, quant = arg.args[0], qdq.per_tensor_qparams(arg)
            if source in self.values:
                tensor = self.values[source]
                if tensor.quantization != quant:
                    raise UnsupportedForLiteRT(
                        consumer, f"{arg.name} dequantizes with {quant}, its tensor has {tensor.quantization}"
                    )
                return tensor
            data = self.edge_constant(source)
            if data is not None and data.dtype == torch.int8:
                array = layout.stored_array(qdq.as_numpy(data))
                return self.constant_tensor(source.name, array, quant)
        elif isinstance(arg, Node):
            data = self.constant_value(arg)
            if data is not None and data.dtype.is_floating_point:
                values = qdq.as_numpy(data.to(torch.float32))
                return self.float_constant(arg.name, values)
        name = arg.name if isinstance(arg, Node) else repr(arg)
        raise UnsupportedForLiteRT(consumer, f"operand {name} is not an int8 tensor behind a dequantize node")

    def float_constant(self, name: str, values: np.ndarray) -> Tensor:
        """An int8 constant for a float edge constant (edge layout in, stored layout out)."""
        quant = qdq.symmetric_qparams(values)
        array = layout.stored_array(qdq.quantize_values(np.asarray(values, np.float32), quant))
        return self.constant_tensor(name, array, quant)

    def weight(self, arg: object, consumer: Node) -> tuple[np.ndarray, np.ndarray, int]:
        """An int8 symmetric weight behind a dequantize node: (edge-layout int8 data, scale per slice
        along the axis, axis). A per-tensor weight gets its one scale repeated along axis 0."""
        if qdq.is_dequantize_per_channel(arg):
            data, scales, zero_points = (self.edge_constant(a) for a in arg.args[:3])
            axis = int(arg.args[3]) % max(data.dim(), 1) if data is not None else 0
        elif qdq.is_dequantize(arg):
            data, axis = self.edge_constant(arg.args[0]), 0
            quant = qdq.per_tensor_qparams(arg)
            if data is not None:
                scales = torch.full((data.shape[0],), quant.scale)
                zero_points = torch.full((data.shape[0],), quant.zero_point)
        else:
            data = None
        if data is None or data.dtype != torch.int8:
            raise UnsupportedForLiteRT(consumer, "weight is not a constant int8 tensor behind a dequantize")
        if bool((zero_points != 0).any()):
            raise UnsupportedForLiteRT(consumer, "weight zero points must be 0 (symmetric int8 weights)")
        return qdq.as_numpy(data), qdq.as_numpy(scales.to(torch.float32)).astype(np.float64), axis

    def bias_values(self, arg: object, consumer: Node, channels: int) -> np.ndarray:
        """The int32 bias behind a dequantize node (zeros when the op has none)."""
        if arg is None:
            return np.zeros(channels, np.int32)
        behind_dequantize = qdq.is_dequantize_per_channel(arg) or qdq.is_dequantize(arg)  # conv / linear bias
        value = self.edge_constant(arg.args[0]) if behind_dequantize else None
        if value is None or value.dtype != torch.int32 or tuple(value.shape) != (channels,):
            raise UnsupportedForLiteRT(consumer, "bias is not a constant int32 vector behind a dequantize")
        return qdq.as_numpy(value)

    def bias(self, arg: object, consumer: Node, scales: np.ndarray, per_tensor: bool = False) -> Tensor:
        """The int32 bias tensor at scale s_in * s_w[c] (one scale when ``per_tensor``); a zero bias when
        the op has none (every runtime accepts a bias, not every one accepts a missing one)."""
        values = self.bias_values(arg, consumer, len(scales))
        quantization = PerTensor(float(scales[0]), 0) if per_tensor else PerChannel(tuple(scales), axis=0)
        return self.constant_tensor(f"{consumer.name}_bias", values, quantization)

    def input_quantization(self, arg: Node, consumer: Node) -> PerTensor:
        quant = self.tensor(arg, consumer).quantization
        assert isinstance(quant, PerTensor)
        return quant

    # ---- the result of a node --------------------------------------------------------------------

    def output(self, node: Node, fusable: bool = False) -> Output:
        """Follow ``node`` to the quantize node that ends its chain. Pass-through nodes and at most one
        activation (relu / hardtanh / clamp) may sit in between; the activation is fused into the op
        when ``fusable`` and TFLite has a fused form of it, else it becomes a clamp after the op."""
        sources, current, activation = [node], node, None
        while True:
            users = list(current.users)
            if len(users) != 1:
                raise UnsupportedForLiteRT(node, f"result feeds {len(users)} nodes, expected one quantize")
            user = users[0]
            if qdq.is_quantize(user):
                break
            if self._is_pass_through(user):
                pass
            elif activation is None and clamp_range(user) is not None:
                activation = clamp_range(user)
            else:
                raise UnsupportedForLiteRT(node, f"result reaches {user.name} before being quantized")
            sources.append(user)
            current = user
        sources.append(user)
        self.consumed.update(sources)
        quant = qdq.per_tensor_qparams(user)
        if qdq.int8_range(user) != (qdq.INT8_MIN, qdq.INT8_MAX) or user.args[5] != torch.int8:
            raise UnsupportedForLiteRT(node, f"{user.name} does not quantize to the full int8 range")
        fused = Activation.NONE
        if activation is not None and fusable and activation in _FUSED_ACTIVATIONS:
            fused, activation = _FUSED_ACTIVATIONS[activation], None
        return Output(user, edge_shape(user), quant, fused, activation, tuple(sources))

    @staticmethod
    def _is_pass_through(user: Node) -> bool:
        # (an identity as_strided_copy is gone already: passes.RemoveIdentityCopiesPass; any other
        # restride can move values and is no pass-through)
        if user.target in _PASS_THROUGH:
            return True
        return user.target is operator.getitem and user.args[1] == 0

    # ---- data movement ---------------------------------------------------------------------------

    def apply_steps(self, tensor: Tensor, steps: Sequence[layout.Step], sources: Iterable[Node] = (),
                    debug_handles: Iterable[int] = (), into: Tensor | None = None) -> Tensor:
        """Emit the RESHAPE / TRANSPOSE ops of a layout plan (``layout.view_steps`` and friends); the last
        one writes ``into`` when given (a tensor other ops already refer to)."""
        sources, debug_handles = tuple(sources), tuple(debug_handles)
        for index, step in enumerate(steps):
            if isinstance(step, layout.Transpose):
                builtin, parameter, suffix = "TRANSPOSE", self.int32_constant("perm", step.perm), "_transposed"
                shape = tuple(tensor.shape[p] for p in step.perm)
            else:
                builtin, parameter, suffix = "RESHAPE", self.int32_constant("shape", step.shape), "_reshaped"
                shape = step.shape
            if into is not None and index == len(steps) - 1:
                result = into
            else:
                result = self.activation_tensor(tensor.name + suffix, shape, tensor.quantization)
            self.emit(builtin, [tensor, parameter], [result], None, sources, debug_handles)
            tensor = result
        return tensor
