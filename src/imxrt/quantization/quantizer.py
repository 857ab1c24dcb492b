"""The pt2e quantizer: annotates each node of an exported aten graph from the ``rules`` table."""

from __future__ import annotations

from collections.abc import Container

import torch
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e.quantizer import (
    QuantizationAnnotation,
    QuantizationSpecBase,
    Quantizer,
    SharedQuantizationSpec,
)

from imxrt.passes.recurrent_loops import LOOP_CARRY
from imxrt.passes.unroll_recurrent_layers import RECURRENT_STATE, float_kept_for, keep_float, keeps_float
from imxrt.quantization import rules, specs

_ANNOTATION = "quantization_annotation"
# Graph-module meta key: the devices of every ImxrtQuantizer about to annotate the graph.
_DEVICES = "imxrt_quantization_devices"


def _tensor_inputs(node: Node) -> list[Node]:
    """The Node arguments of ``node`` that carry float tensors (lists flattened, as for cat)."""
    found: list[Node] = []
    for arg in node.args:
        candidates = arg if isinstance(arg, (list, tuple)) else [arg]
        for candidate in candidates:
            if isinstance(candidate, Node) and _is_float_tensor(candidate) and candidate not in found:
                found.append(candidate)
    return found


_CONVS = (torch.ops.aten.conv1d.default, torch.ops.aten.conv2d.default)  # what pt2e's QAT conv+BN fusion folds


def _symmetric_outputs(graph: torch.fx.Graph, table: rules.RuleTable) -> set[Node]:
    """The values an op with ``symmetric_inputs`` reads, followed back through ops that share qparams to the
    op (or model input) that sets them. A fixed-qparam producer (softmax) keeps its range: on NPU targets
    ``RescaleBatchMatmulOperandsPass`` has put a ``mul`` by 1 between it and the bmm, which is what is found."""
    found: set[Node] = set()
    for node in graph.nodes:
        rule = rules.rule_for(table, node) if node.op == "call_function" else None
        if not (isinstance(rule, rules.Compute) and rule.symmetric_inputs):
            continue
        for value in _tensor_inputs(node):
            while value.op == "call_function" \
                    and isinstance(rules.rule_for(table, value), (rules.SharedWithInput, rules.Lookup)) \
                    and _tensor_inputs(value):
                value = _tensor_inputs(value)[0]
            found.add(value)
    return found


def _is_float_tensor(node: Node) -> bool:
    value = node.meta.get("val")
    return value is not None and hasattr(value, "dtype") and value.dtype.is_floating_point


class ImxrtQuantizer(Quantizer):
    """int8 quantizer for the NPU and the Cortex-M: one rule set, post-training or QAT.

    Beyond the upstream Neutron quantizer: ``mul`` operands keep calibrated qparams, and an op that
    shares qparams with a fixed-qparam producer (softmax -> mean) is annotated like any other.

    Composable: when ExecuTorch's recipe API composes several (``ComposableQuantizer``: the NPU recipe's
    and the Cortex-M recipe's), every one first adds its devices to the graph's (``transform_for_annotation``
    runs for all before any ``annotate``), then the first to annotate applies the rules of every op those
    devices run and the others find nothing left. The result is the one a single quantizer for all the
    devices gives, whatever the order: a node's annotation can depend on its producer's, so annotating
    device by device would not be.
    """

    def __init__(self, target=None, qat: bool = False, devices: frozenset[rules.Device] | None = None,
                 ranges: str = "minmax"):
        """``target``: whose devices' rules apply (default: the i.MX RT700's NPU and Cortex-M33);
        ``devices``: these devices' instead (the recipes' per-device quantizers); ``ranges``: how PTQ picks
        activation ranges (``options.ACTIVATION_RANGES``)."""
        super().__init__()
        self.devices = devices if devices is not None else rules.devices_of(target)
        self.qat = qat
        self.ranges = ranges
        self._symmetric: set[Node] = set()  # values read at zero point 0 (``_symmetric_outputs``)

    def transform_for_annotation(self, model: GraphModule) -> GraphModule:
        model.meta[_DEVICES] = model.meta.get(_DEVICES, frozenset()) | self.devices
        return model

    def annotate(self, model: GraphModule) -> GraphModule:
        table = rules.rules_on(model.meta.get(_DEVICES, self.devices))
        self._symmetric = _symmetric_outputs(model.graph, table)
        # loop carries first: their readers share them
        _annotate_loop_carries(model, specs.activation_spec(self.qat, ranges=self.ranges))
        float_state = float_state_movements(model.graph)
        for node, why in float_state.items():  # the report and the advice then say why they are float
            keep_float(node, why)
        for node in model.graph.nodes:
            if node.op != "call_function" or _ANNOTATION in node.meta or keeps_float(node):
                continue
            rule = rules.rule_for(table, node)
            if rule is None or not (_is_float_tensor(node) or isinstance(rule, rules.Compare)):
                continue
            self._annotate(node, rule)
        _share_recurrent_state_observers(model, float_state)
        _point_shares_at_their_roots(model)
        return model

    def validate(self, model: GraphModule) -> None:
        pass

    def _annotate(self, node: Node, rule: rules.Rule) -> None:
        """Annotate ``node`` (and a fused activation after it)."""
        act = specs.activation_spec(self.qat, ranges=self.ranges)
        symmetric = specs.activation_spec(self.qat, symmetric=True, ranges=self.ranges)
        inputs = _tensor_inputs(node)
        in_spec = lambda arg: self._input_spec(arg, symmetric if arg in self._symmetric else act)  # noqa: E731
        fused = self._fusable_user(node)
        if node in self._symmetric or (fused is not None and fused in self._symmetric):
            act = symmetric
        if not inputs:
            return
        input_specs: dict[Node, QuantizationSpecBase] = {}
        output_spec: QuantizationSpecBase | None

        if isinstance(rule, rules.MatMul):
            right = node.args[1]
            constant = right.op == "get_attr" and right.meta["val"].dim() == 2
            # W is [K, N]: its output channels are its columns
            rule = rules.Weighted(weight_axis=1, per_channel=False) if constant else rules.Compute()
        if isinstance(rule, rules.Weighted):
            activation, weight = node.args[0], node.args[1]
            input_specs[activation] = in_spec(activation)
            input_specs[weight] = specs.weight_spec(rule.weight_axis, self.qat, rule.per_channel)
            bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
            if isinstance(bias, Node):
                input_specs[bias] = specs.bias_spec(node, activation, weight, rule.per_channel, rule.weight_axis)
            output_spec = self._output_through_fused_activation(node, act)
        elif isinstance(rule, rules.Compute):
            input_specs = {arg: in_spec(arg) for arg in inputs}
            output_spec = self._output_through_fused_activation(node, act) if rule.fuses_activation else act
        elif isinstance(rule, rules.FixedOutput):
            input_specs = {arg: in_spec(arg) for arg in inputs}
            output_spec = specs.fixed_spec(rule.scale, rule.zero_point)
        elif isinstance(rule, rules.Compare):
            if not _is_float_tensor(node.args[0]):
                return
            input_specs = {node.args[0]: in_spec(node.args[0])}
            output_spec = None  # a boolean mask
        elif isinstance(rule, rules.Lookup):
            table = node.args[0]
            if table not in inputs:
                return
            # a constant table (an embedding's weights) gets its own observer on this edge, like an activation;
            # values written into it (index_put's) take its qparams
            input_specs[table] = in_spec(table)
            output_spec = specs.same_qparams_spec(table, node) if rule.writes_constant \
                else SharedQuantizationSpec((table, node))
            for other in inputs:
                if other is not table:
                    input_specs[other] = output_spec
        else:
            assert isinstance(rule, rules.SharedWithInput)
            computed = [arg for arg in inputs if arg.op != "get_attr"]
            if not computed:
                return  # moving a constant (W.t() of a weight) is constant folding, not an int8 op
            # the first computed input anchors the shared qparams; a constant beside it (a ViT's class token
            # joined to the patch tokens) is quantized with them, its values observed with the others
            first = computed[0]
            input_specs[first] = in_spec(first)
            shared = SharedQuantizationSpec((first, node))
            for other in inputs:
                if other is not first:
                    input_specs[other] = shared
            output_spec = shared

        node.meta[_ANNOTATION] = QuantizationAnnotation(
            input_qspec_map=input_specs, output_qspec=output_spec, _annotated=True
        )

    @staticmethod
    def _input_spec(arg: Node, act: QuantizationSpecBase) -> QuantizationSpecBase:
        """Read a producer's int8 output as it is: share its observer instead of adding a second one.

        Without this, a tensor with fixed qparams (softmax's output) would be requantized before the
        next op (softmax -> mean), a Q/DQ pair the upstream partitioner then refuses to delegate.
        """
        annotation = arg.meta.get(_ANNOTATION)
        if annotation is not None and annotation.output_qspec is not None:
            return SharedQuantizationSpec(arg)
        return act

    def _output_through_fused_activation(self, node: Node, act: QuantizationSpecBase) -> QuantizationSpecBase | None:
        """The output spec of an op whose kernel clamps its own output: none when a fusable activation
        follows (it is part of the kernel: observe only after it), else ``act``."""
        bn = self._training_batch_norm(node) if self.qat else None
        if bn is not None:
            # QAT: the batch norm folds into the conv at convert (pt2e's conv+BN fusion), so it is part
            # of the kernel like the activation: observe only after it (or after the activation it feeds).
            inner = self._output_through_fused_activation(bn, act)
            bn.meta[_ANNOTATION] = QuantizationAnnotation(input_qspec_map={}, output_qspec=inner, _annotated=True)
            return None
        fused = self._fusable_user(node)
        if fused is None:
            return act
        fused.meta[_ANNOTATION] = QuantizationAnnotation(input_qspec_map={}, output_qspec=act, _annotated=True)
        return None

    @staticmethod
    def _training_batch_norm(node: Node) -> Node | None:
        users = list(node.users)
        if node.target not in _CONVS:
            return None
        if (len(users) == 1 and users[0].target == torch.ops.aten.batch_norm.default and users[0].args[0] is node
                and _ANNOTATION not in users[0].meta):
            return users[0]
        return None

    @staticmethod
    def _fusable_user(node: Node) -> Node | None:
        users = list(node.users)
        if len(users) == 1 and rules.is_fusable_activation(users[0]) and _ANNOTATION not in users[0].meta:
            return users[0]
        return None


def _annotate_loop_carries(model: GraphModule, act: QuantizationSpecBase) -> None:
    """A loop's carry (``recurrent_loops.LOOP_CARRY``) leads its state's observer group: its output holds the
    observer, first in graph order (as pt2e needs of a group's root), so every step's readers find the int8
    carry. Its initial value stays as it is: rolling the loop quantizes it once, before the first step."""
    for node in model.graph.nodes:
        if node.op == "call_function" and node.target is LOOP_CARRY and _is_float_tensor(node) \
                and not keeps_float(node):
            node.meta[_ANNOTATION] = QuantizationAnnotation(input_qspec_map={}, output_qspec=act, _annotated=True)


def _moves(node: object) -> bool:
    return isinstance(node, Node) and node.op == "call_function" and node.target in rules.DATA_MOVEMENT


def _reaches_output_by_movement(node: Node) -> bool:
    return all(user.op == "output" or (_moves(user) and _reaches_output_by_movement(user)) for user in node.users)


def float_state_movements(graph) -> dict[Node, str]:
    """The data movement between the model's inputs / outputs and a value kept in float (``KEEP_FLOAT``: an
    LSTM's cell state, a layer kept in float), left in float so the value crosses the program's boundary as it
    is; each with why the op it serves is kept float.

    A streaming model takes its state as one input, ``state[0]`` its h, ``state[1]`` its c, and returns
    ``stack([h, c])``: quantizing that tensor gave c, kept in float inside the step, one int8 scale between
    calls, and h the same scale as c (ExecuTorch's Silero VAD example: h in ±1 rounded to a step of 0.15). The
    parts of such an input are taken in float, each quantized by its own readers (h by the linear layers,
    c not at all), and the stack of such an output is made in float from the dequantized h and the float c."""
    left: dict[Node, str] = {}
    for node in graph.nodes:
        why = float_kept_for(node)
        if why is None:
            continue
        for value in node.all_input_nodes:  # back to a model input through its part's movement
            chain = []
            while _moves(value) and isinstance(value.args[0], Node):
                chain.append(value)
                value = value.args[0]
            if chain and value.op == "placeholder":
                siblings = [user for user in value.users if _moves(user)]  # its sibling parts too
                left.update((moved, left.get(moved, why)) for moved in chain + siblings)
        stack = [user for user in node.users if _moves(user) and _reaches_output_by_movement(user)]
        while stack:  # forward to the model's outputs
            user = stack.pop()
            if user not in left:
                left[user] = why
                stack.extend(u for u in user.users if u.op != "output")
    return left


def _share_recurrent_state_observers(model: GraphModule, float_state: Container[Node] = frozenset()) -> None:
    """Every step of a recurrent state (``RECURRENT_STATE``: a GRU's or LSTM's h, an LSTM's c) reads and writes
    one int8 scale: one observer for all of them, as TFLite's int8 LSTM keeps one scale per state.

    The first annotated step leads (a given initial state, else step 1); every later step's output shares its
    observer. An initial state no rule annotates (a model input) is tied through its readers' input edges.
    ``_input_spec`` already makes each reader share its producer's observer, so the groups compose with it.
    A state taken in float from the model's input (``float_state``) is left to its readers' own observers.

    Unlike TFLite, whose integer LSTM keeps the cell state in int16, the cell state here is int8: the NPU's
    and CMSIS-NN's elementwise kernels are int8, and an int16 state would put every step's cell update on a
    kernel neither device has.
    """
    groups: dict[str, list[Node]] = {}
    for node in model.graph.nodes:
        if RECURRENT_STATE in node.meta:
            groups.setdefault(node.meta[RECURRENT_STATE], []).append(node)
    for members in groups.values():
        annotated = [m for m in members if _output_annotation(m) is not None]
        if not annotated:
            continue
        leader = annotated[0]
        shared = SharedQuantizationSpec(leader)
        for member in members:
            if member is leader or member in float_state:
                continue
            annotation = _output_annotation(member)
            if annotation is not None:
                annotation.output_qspec = shared
                continue
            for reader in member.users:
                reader_annotation = reader.meta.get(_ANNOTATION)
                if reader_annotation is not None and member in reader_annotation.input_qspec_map:
                    reader_annotation.input_qspec_map[member] = shared


def _point_shares_at_their_roots(model: GraphModule) -> None:
    """Make every ``SharedQuantizationSpec`` name the edge or node whose own spec is not shared, the end of the
    chain it starts (the same observer group: only the path changes).

    pt2e's union-find (``torchao.quantization.pt2e.prepare``) loops forever on some chains: in
    ``cat([x[:, 4:], x])`` the concrete spec sits on the edge x -> slice, the slice's output shares it, the
    cat's first input shares the slice's output and its second input the first; pt2e's implicit sharing of x's
    two edges made the cat's second input, whose spec is shared, the group's root, and resolving it recursed
    until Python's limit. With every share pointing at a concrete spec, a group's root is that spec's holder.
    """

    def spec_of(target: Node | tuple[Node, Node]) -> QuantizationSpecBase | None:
        if isinstance(target, Node):
            annotation = target.meta.get(_ANNOTATION)
            return annotation.output_qspec if annotation is not None else None
        producer, reader = target
        annotation = reader.meta.get(_ANNOTATION)
        return annotation.input_qspec_map.get(producer) if annotation is not None else None

    def root(spec: QuantizationSpecBase | None) -> QuantizationSpecBase | None:
        seen = set()
        while isinstance(spec, SharedQuantizationSpec):
            target = spec.edge_or_node
            if target in seen:
                raise ValueError(f"quantization specs share in a cycle through {target}")
            seen.add(target)
            shared = spec_of(target)
            if not isinstance(shared, SharedQuantizationSpec):
                return SharedQuantizationSpec(target)
            spec = shared
        return spec

    for node in model.graph.nodes:
        annotation = node.meta.get(_ANNOTATION)
        if annotation is None:
            continue
        annotation.input_qspec_map = {arg: root(spec) for arg, spec in annotation.input_qspec_map.items()}
        annotation.output_qspec = root(annotation.output_qspec)


def _output_annotation(node: Node) -> QuantizationAnnotation | None:
    annotation = node.meta.get(_ANNOTATION)
    return annotation if annotation is not None and annotation.output_qspec is not None else None
