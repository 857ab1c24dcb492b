"""UnrollRecurrentLayersPass: GRU / LSTM / Elman RNN layers and cells become their steps, in int8-able ops.

torch.export keeps ``nn.GRU`` / ``nn.LSTM`` / ``nn.RNN`` as one ``aten.gru.input`` / ``aten.lstm.input`` /
``aten.rnn_tanh.input`` (``rnn_relu``) node (and their cells as one cell node per step); they decompose only
inside ``to_edge``, after quantization, so every gate ran in float on the CPU. Unrolled here, before
quantization, each step is linear layers, sigmoid, tanh (relu), add, sub, mul and slices: FULLY_CONNECTED,
LOGISTIC, TANH (RELU), ADD, SUB, MUL and SLICE on the NPU, CMSIS-NN kernels on the CPU.

One GRU layer over T steps (gates r, z, n; batch-first, B rows)::

    %xp = linear(%x, W_ih, [b_ir + b_hr, b_iz + b_hz, b_in])     # [B, T, 3H]: every step's input part at once
    %xf = view(%xp, [B, T * 3H])
    per step t:
      %xrz = slice(%xf, 1, 3Ht, 3Ht + 2H);  %xn = slice(%xf, 1, 3Ht + 2H, 3H(t + 1))
      %rz = sigmoid(add(%xrz, linear(%h, W_hrz)))
      %r = slice(%rz, 1, 0, H);  %z = slice(%rz, 1, H, 2H)
      %n = tanh(add(%xn, mul(%r, linear(%h, W_hn, b_hn))))
      %h = add(%n, mul(%z, sub(%h, %n)))                          # (1 - z) n + z h, without a (1 - z)

One LSTM layer (gates i, f, g, o): ``%a = add(slice(%xf, ...), linear(%h, W_hh))`` (both biases in the
input projection); ``%s = sigmoid(%a)``, ``%g = tanh(%a)`` over all 4H (two ops instead of a slice before
each); i, f, o sliced from %s and g from %g; ``%c = add(mul(%f, %c), mul(%i, %g))``; ``%h = mul(%o, tanh(%c))``.

One Elman RNN layer (``nn.RNN``, tanh or relu): ``%h = tanh(add(slice(%xf, ...), linear(%h, W_hh)))``, both
biases in the input projection.

A bidirectional layer runs the same steps backwards in time with its reverse weights; its output at time t
is the two directions' states joined (one ``cat``, made only where read).

A zero initial state (``torch.zeros``, the default) drops the terms it zeroes from the first step: its
hidden projection is the bias alone, so no linear layer reads a constant. A layer's outputs are read where
they are used: ``y[:, -1]`` is the last step's ``%h`` (no stacking), the whole sequence is one ``cat`` of
the steps (a second layer's input, projected by one linear layer again). Every float rewrite here is exact
up to the order of float additions (the folded biases).

Each hidden (and cell) state node is tagged ``RECURRENT_STATE`` with its layer's name: the quantizer gives
all steps of a state one observer, so every step reads and writes the same int8 scale.

Rolled (``rolled=True``, what ``imxrt.compile`` runs), each layer and direction is written as *one* step of
a loop instead (``passes.recurrent_loops``): the input projection of every step at once, time-major ``xs``
(flipped in time for a reverse direction, whose stacked outputs are flipped back), then the step above
between the loop's markers (its input ``loop_input(xs)``, its states ``loop_carry``, its results
``loop_result`` / ``loop_stack``), from a zero state as a constant ``zeros`` carry. With a float cell state,
an LSTM's cell update and tanh(c) are tagged ``KEEP_FLOAT``: the quantizer leaves them in float. Cells unroll
as above.
"""

from __future__ import annotations

import operator

import torch
from torch._guards import detect_fake_mode
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import add_constant, call, constant_value, finish
from imxrt.passes.recurrent_loops import LOOP_CARRY, LOOP_INPUT, LOOP_RESULT, LOOP_STACK

aten = torch.ops.aten

# Node meta key: the recurrent state a node holds one step of (``<layer>.h`` or ``<layer>.c``).
RECURRENT_STATE = "imxrt_recurrent_state"
# Key in a node's ``meta["custom"]`` (kept through export and to_edge): an op the quantizer leaves in float,
# its value why: FLOAT_CELL (a rolled LSTM's cell update, with a float cell state) or FLOAT_LAYER (a module the
# user keeps in float, ``--float-layer``). ``keep_float`` writes it, ``keeps_float`` and ``float_kept_for`` read it.
KEEP_FLOAT = "imxrt_keep_float"
FLOAT_CELL, FLOAT_LAYER = "cell_state", "float_layer"


def keep_float(node: Node, why: str) -> None:
    node.meta["custom"] = {**(node.meta.get("custom") or {}), KEEP_FLOAT: why}  # a copied node shares the dict


def float_kept_for(node: Node) -> str | None:
    """Why the quantizer leaves ``node`` in float (``FLOAT_CELL`` / ``FLOAT_LAYER``), or None."""
    return (node.meta.get("custom") or {}).get(KEEP_FLOAT) or None


def keeps_float(node: Node) -> bool:
    return float_kept_for(node) is not None

_SEQUENCES = {aten.gru.input: "gru", aten.lstm.input: "lstm", aten.rnn_tanh.input: "rnn_tanh",
              aten.rnn_relu.input: "rnn_relu"}
_CELLS = {aten.gru_cell.default: "gru", aten.lstm_cell.default: "lstm", aten.rnn_tanh_cell.default: "rnn_tanh",
          aten.rnn_relu_cell.default: "rnn_relu"}
_GATES = {"gru": 3, "lstm": 4, "rnn_tanh": 1, "rnn_relu": 1}
_RNN_NONLINEARITIES = {"rnn_tanh": aten.tanh.default, "rnn_relu": aten.relu.default}
_ZERO_FILLS = frozenset({aten.zeros.default, aten.zeros_like.default, aten.new_zeros.default})
_FILLS = {aten.full.default: 1, aten.full_like.default: 1, aten.new_full.default: 2}  # op -> fill value position
_VIEWS = frozenset({aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.default, aten.view.default,
                    aten.reshape.default, aten.expand.default})


def is_zero(gm: GraphModule, node: object) -> bool:
    """``node`` is a tensor of zeros known before run time: ``zeros``, ``full(0)`` or an all-zero constant,
    or a view of one (an unbatched cell's ``zeros(H)`` reaches it unsqueezed)."""
    if not isinstance(node, Node):
        return False
    while node.op == "call_function" and node.target in _VIEWS and isinstance(node.args[0], Node):
        node = node.args[0]
    if node.op == "call_function" and node.target in _ZERO_FILLS:
        return True
    if node.op == "call_function" and node.target in _FILLS:
        return node.args[_FILLS[node.target]] == 0
    value = constant_value(gm, node)
    return value is not None and not bool(value.any())


class _Steps:
    """Writes one recurrent layer's steps into ``gm`` before ``like`` (with ``like``'s provenance)."""

    def __init__(self, gm: GraphModule, like: Node, kind: str, name: str, float_cell: bool = False):
        self.gm, self.like, self.kind, self.name = gm, like, kind, name
        self.float_cell = float_cell  # an LSTM's cell update and tanh(c) stay float (``KEEP_FLOAT``)

    def cell_op(self, target, *args) -> Node:
        """An op of an LSTM's cell update: in float when the cell state is."""
        node = self.op(target, *args)
        if self.float_cell:
            keep_float(node, FLOAT_CELL)
        return node

    def op(self, target, *args) -> Node:
        return call(self.gm, target, args, like=self.like)

    @property
    def attribute_stem(self) -> str:
        return self.name.replace(".", "_")

    def constant(self, stem: str, value: torch.Tensor) -> Node:
        return add_constant(self.gm, self.like, f"{self.attribute_stem}_{stem}", value)

    def linear(self, x: Node, weight: Node, bias: Node | None) -> Node:
        return self.op(aten.linear.default, x, weight, bias) if bias is not None else \
            self.op(aten.linear.default, x, weight)

    def slice(self, x: Node, start: int, end: int) -> Node:
        return self.op(aten.slice.Tensor, x, 1, start, end)

    def state(self, node: Node, which: str) -> Node:
        node.meta[RECURRENT_STATE] = f"{self.name}.{which}"
        return node

    def initial_state(self, node: Node, which: str) -> Node:
        """A given initial state joins its state's scale when it is a model input (or a view of one), the
        state a streaming caller feeds back; a computed one keeps its producer's qparams (a tanh's fixed
        [-1, 1) range would clip every later cell state)."""
        source = node.args[0] if node.target in (aten.view.default, aten.select.int) else node
        if node.meta.get(RECURRENT_STATE) is None and source.op == "placeholder":
            self.state(node, which)
        return node

    def gru_step(self, x_rz: Node, x_n: Node, h: Node | None, w_hrz: Node, w_hn: Node, b_hn: Node,
                 hidden: int) -> Node:
        """One GRU step from its input parts (biases b_hr, b_hz already in ``x_rz``); ``h`` None: zero state."""
        pre_rz = x_rz if h is None else self.op(aten.add.Tensor, x_rz, self.linear(h, w_hrz, None))
        rz = self.op(aten.sigmoid.default, pre_rz)
        r, z = self.slice(rz, 0, hidden), self.slice(rz, hidden, 2 * hidden)
        h_n = b_hn if h is None else self.linear(h, w_hn, b_hn)  # W_hn h + b_hn
        n = self.op(aten.tanh.default, self.op(aten.add.Tensor, x_n, self.op(aten.mul.Tensor, r, h_n)))
        if h is None:  # n + z (0 - n)
            return self.state(self.op(aten.sub.Tensor, n, self.op(aten.mul.Tensor, z, n)), "h")
        update = self.op(aten.mul.Tensor, z, self.op(aten.sub.Tensor, h, n))
        return self.state(self.op(aten.add.Tensor, n, update), "h")

    def lstm_step(self, x_gates: Node, h: Node | None, c: Node | None, w_hh: Node, hidden: int
                  ) -> tuple[Node, Node]:
        """One LSTM step from its input part (both biases in ``x_gates``); ``h``/``c`` None: zero state."""
        pre = x_gates if h is None else self.op(aten.add.Tensor, x_gates, self.linear(h, w_hh, None))
        sig, tanh = self.op(aten.sigmoid.default, pre), self.op(aten.tanh.default, pre)
        i, g = self.slice(sig, 0, hidden), self.slice(tanh, 2 * hidden, 3 * hidden)
        o = self.slice(sig, 3 * hidden, 4 * hidden)
        new_input = self.cell_op(aten.mul.Tensor, i, g)
        if c is None:
            c_next = self.state(new_input, "c")
        else:
            kept = self.cell_op(aten.mul.Tensor, self.slice(sig, hidden, 2 * hidden), c)
            c_next = self.state(self.cell_op(aten.add.Tensor, kept, new_input), "c")
        h_next = self.state(self.op(aten.mul.Tensor, o, self.cell_op(aten.tanh.default, c_next)), "h")
        return h_next, c_next

    def rnn_step(self, x_t: Node, h: Node | None, w_hh: Node) -> Node:
        """One Elman RNN step from its input part (both biases in ``x_t``); ``h`` None: zero state."""
        pre = x_t if h is None else self.op(aten.add.Tensor, x_t, self.linear(h, w_hh, None))
        return self.state(self.op(_RNN_NONLINEARITIES[self.kind], pre), "h")


class _LayerWeights:
    """One layer's parameters, rearranged for the unrolled steps: biases folded where exact."""

    def __init__(self, kind: str, w_ih: torch.Tensor, w_hh: torch.Tensor, b_ih: torch.Tensor | None,
                 b_hh: torch.Tensor | None):
        hidden = w_hh.shape[1]
        b_ih = torch.zeros(w_ih.shape[0]) if b_ih is None else b_ih.detach()
        b_hh = torch.zeros(w_hh.shape[0]) if b_hh is None else b_hh.detach()
        self.hidden = hidden
        self.w_ih = w_ih.detach()
        if kind == "gru":  # b_hr, b_hz add to the input part; b_hn is multiplied by r, so it stays
            self.b_ih = torch.cat([b_ih[:2 * hidden] + b_hh[:2 * hidden], b_ih[2 * hidden:]])
            self.w_hh_parts = (w_hh[:2 * hidden].detach(), w_hh[2 * hidden:].detach())
            self.b_hn = b_hh[2 * hidden:]
        else:  # LSTM, Elman RNN: both biases add to the input part
            self.b_ih = b_ih + b_hh
            self.w_hh_parts = (w_hh.detach(),)


def _parameters(gm: GraphModule, nodes: list) -> list[torch.Tensor] | None:
    """The layer's weights and biases, or None when one is not a module constant."""
    values = [constant_value(gm, p) for p in nodes]
    return None if any(v is None for v in values) else values


def _layer_name(node: Node) -> str:
    """The module path of the layer (``rnn``, ``encoder.gru``), else the node's name."""
    stack = node.meta.get("nn_module_stack")
    if stack:
        path = list(stack.values())[-1][0]
        if path:
            return path
    return node.name


def _layer_initial_state(steps: _Steps, state: Node, layer: int, layers: int, batch: int, hidden: int) -> Node | None:
    """A layer's initial state [B, H] from ``[layers, B, H]``; None when it is zero."""
    if is_zero(steps.gm, state):
        return None
    if layers == 1:
        return steps.op(aten.view.default, state, [batch, hidden])
    return steps.op(aten.select.int, state, 0, layer)


def _unroll_sequence(gm: GraphModule, node: Node, rolled: bool = False, float_cell: bool = False) -> bool:
    """Unroll one GRU / LSTM / RNN layer node (``rolled``: one step per layer and direction, as loops of
    ``recurrent_loops``); False (left whole) for a form the steps do not cover."""
    kind = _SEQUENCES[node.target]
    x, hx, params, has_biases, layers, _dropout, _train, bidirectional, batch_first = node.args
    name = _layer_name(node)
    directions = 2 if bidirectional else 1
    per_direction = 4 if has_biases else 2
    x_value = x.meta["val"]
    values = _parameters(gm, params)
    # an LSTM projection (proj_size: one more weight per direction) or an unbatched input
    if len(params) != per_direction * directions * layers or x_value.dim() != 3 or values is None:
        return False
    h_all, c_all = hx if kind == "lstm" else (hx, None)
    batch, time = (x_value.shape[0], x_value.shape[1]) if batch_first else (x_value.shape[1], x_value.shape[0])

    if rolled:
        with gm.graph.inserting_before(node):
            _roll_layers(gm, node, kind, name, values, per_direction, layers, directions, x, batch_first, hx,
                         batch, time, float_cell)
        return True
    with gm.graph.inserting_before(node):
        steps = _Steps(gm, node, kind, name)
        if batch_first:
            layer_input = x
        elif batch == 1:  # [T, 1, I] and [1, T, I] are the same bytes
            layer_input = steps.op(aten.view.default, x, [1, time, x_value.shape[2]])
        else:
            layer_input = steps.op(aten.transpose.int, x, 0, 1)
        last_h, last_c = [], []
        for layer in range(layers):
            per_time = []
            for direction in range(directions):
                index, weights, stem = _direction(kind, name, values, per_direction, layer, direction, directions)
                steps = _Steps(gm, node, kind, stem)
                hs, h, c = _unroll_direction(steps, weights, layer_input, h_all, c_all, index, layers * directions,
                                             batch, time, reverse=direction == 1)
                per_time.append(hs)
                last_h.append(h)
                last_c.append(c)
            outputs = _StepOutputs(steps, per_time)
            if layer + 1 < layers:
                layer_input = outputs.sequence(batch, time, batch_first=True)
        _replace_outputs(gm, node, steps, outputs, last_h, last_c, batch, time, batch_first)
    return True


def _unroll_direction(steps: _Steps, weights: _LayerWeights, layer_input: Node, h_all: Node, c_all: Node | None,
                      index: int, states: int, batch: int, time: int, reverse: bool
                      ) -> tuple[list[Node], Node, Node | None]:
    """One layer's steps in one direction: its hidden state at each time (in time order) and its last states."""
    hidden = weights.hidden
    h = _layer_initial_state(steps, h_all, index, states, batch, hidden)
    c = _layer_initial_state(steps, c_all, index, states, batch, hidden) if c_all is not None else None
    if h is not None:
        steps.initial_state(h, "h")
    if c is not None:
        steps.initial_state(c, "c")
    width = _GATES[steps.kind] * hidden
    projected = steps.linear(layer_input, steps.constant("w_ih", weights.w_ih), steps.constant("b_ih", weights.b_ih))
    flat = steps.op(aten.view.default, projected, [batch, time * width])
    w_hh_nodes = [steps.constant("w_hh", w) for w in weights.w_hh_parts]
    b_hn = steps.constant("b_hn", weights.b_hn) if steps.kind == "gru" else None
    hs: list[Node] = [None] * time
    for t in reversed(range(time)) if reverse else range(time):
        start = t * width
        if steps.kind == "gru":
            x_rz = steps.slice(flat, start, start + 2 * hidden)
            x_n = steps.slice(flat, start + 2 * hidden, start + width)
            h = steps.gru_step(x_rz, x_n, h, *w_hh_nodes, b_hn, hidden)
        elif steps.kind == "lstm":
            h, c = steps.lstm_step(steps.slice(flat, start, start + width), h, c, w_hh_nodes[0], hidden)
        else:
            h = steps.rnn_step(steps.slice(flat, start, start + width), h, w_hh_nodes[0])
        hs[t] = h
    return hs, h, c


def _direction(kind: str, name: str, values: list[torch.Tensor], per_direction: int, layer: int, direction: int,
               directions: int) -> tuple[int, _LayerWeights, str]:
    """One layer's direction: its index in PyTorch's order of parameters and of h_n rows, its weights, and
    the name its steps' state and constants go by."""
    index = layer * directions + direction
    w_ih, w_hh, *biases = values[index * per_direction:(index + 1) * per_direction]
    weights = _LayerWeights(kind, w_ih, w_hh, *(biases or (None, None)))
    return index, weights, f"{name}.l{layer}" + ("_reverse" if direction else "")


def _roll_layers(gm: GraphModule, node: Node, kind: str, name: str, values: list[torch.Tensor], per_direction: int,
                 layers: int, directions: int, x: Node, batch_first: bool, hx, batch: int, time: int,
                 float_cell: bool) -> None:
    """A layer stack as one loop per layer and direction (``recurrent_loops``). The loops run time-major
    (a loop takes ``xs[t]``): a layer's stacked outputs are the next layer's input as they are, so no view
    ever reads a loop's stacked output (ExecuTorch plans it as a tensor whose size grows). A reverse
    direction runs its loop over the time-flipped input and flips its stacked outputs back; the two
    directions' outputs are joined along features."""
    h_all, c_all = hx if kind == "lstm" else (hx, None)
    layer_input, time_major = x, not batch_first
    last_h, last_c = [], []
    for layer in range(layers):
        per_time = []
        for direction in range(directions):
            index, weights, stem = _direction(kind, name, values, per_direction, layer, direction, directions)
            steps = _Steps(gm, node, kind, stem, float_cell)
            outputs, h, c = _roll_direction(steps, weights, layer_input, time_major, h_all, c_all, index,
                                            layers * directions, batch, time, reverse=direction == 1)
            per_time.append(outputs.stacked)
            last_h.append(h)
            last_c.append(c)
        if directions == 2:
            outputs = _LoopOutputs(steps, steps.op(aten.cat.default, per_time, 2), None)
        layer_input, time_major = outputs.stacked, True
    _replace_outputs(gm, node, steps, outputs, last_h, last_c, batch, time, batch_first)


def _roll_direction(steps: _Steps, weights: _LayerWeights, layer_input: Node, time_major: bool, h_all: Node,
                    c_all: Node | None, index: int, states: int, batch: int, time: int, reverse: bool = False
                    ) -> tuple[_LoopOutputs, Node, Node | None]:
    """One layer's loop (``recurrent_loops``): the input projection of every step at once, then one step
    between the loop's markers. Returns the layer's outputs and its last states (``loop_result``)."""
    hidden = weights.hidden
    loop = sum(1 for n in steps.gm.graph.nodes if n.op == "call_function" and n.target is LOOP_INPUT)
    width = _GATES[steps.kind] * hidden
    projected = steps.linear(layer_input, steps.constant("w_ih", weights.w_ih), steps.constant("b_ih", weights.b_ih))
    if time_major:
        xs = projected
    elif batch == 1:  # [1, T, G] and [T, 1, G] are the same bytes
        xs = steps.op(aten.view.default, projected, [time, 1, width])
    else:
        xs = steps.op(aten.transpose.int, projected, 0, 1)
    if reverse:  # the loop walks the sequence from its last step
        xs = steps.op(aten.flip.default, xs, [0])
    x_t = steps.op(LOOP_INPUT, xs, loop)
    fake_mode = detect_fake_mode([layer_input.meta["val"]])
    carried = []
    for k, (state, which) in enumerate(((h_all, "h"), (c_all, "c")) if steps.kind == "lstm" else ((h_all, "h"),)):
        initial = _layer_initial_state(steps, state, index, states, batch, hidden)
        if initial is None:
            initial = steps.constant(f"{which}0", torch.zeros(batch, hidden))
        else:
            steps.initial_state(initial, which)
        carry = steps.op(LOOP_CARRY, initial, xs, loop, k) if which == "h" else \
            steps.cell_op(LOOP_CARRY, initial, xs, loop, k)
        if fake_mode is not None and not isinstance(carry.meta["val"], FakeTensor):  # a constant initial state
            carry.meta["val"] = fake_mode.from_tensor(carry.meta["val"])  # pt2e observes fake-valued nodes only
        carried.append(steps.state(carry, which))
    w_hh_nodes = [steps.constant("w_hh", w) for w in weights.w_hh_parts]
    if steps.kind == "gru":
        x_rz, x_n = steps.slice(x_t, 0, 2 * hidden), steps.slice(x_t, 2 * hidden, width)
        following = [steps.gru_step(x_rz, x_n, carried[0], *w_hh_nodes, steps.constant("b_hn", weights.b_hn),
                                    hidden)]
    elif steps.kind == "lstm":
        following = list(steps.lstm_step(x_t, carried[0], carried[1], w_hh_nodes[0], hidden))
    else:
        following = [steps.rnn_step(x_t, carried[0], w_hh_nodes[0])]
    results = [steps.state((steps.cell_op if k else steps.op)(LOOP_RESULT, n, loop, k), "hc"[k])
               for k, n in enumerate(following)]
    stacked = steps.op(LOOP_STACK, following[0], loop, time)
    if reverse:  # back in time order
        stacked = steps.op(aten.flip.default, stacked, [0])
    return _LoopOutputs(steps, stacked, None if reverse else results[0]), results[0], \
        results[1] if len(results) > 1 else None


class _LoopOutputs:
    """A loop's outputs as ``_StepOutputs`` gives them: the last step's state (``last``; None when the last
    time is not the loop's last step: a reverse or joined direction), or the stacked sequence."""

    def __init__(self, steps: _Steps, stacked: Node, last: Node | None):
        self.steps, self.stacked, self.last = steps, stacked, last

    def at(self, t: int) -> Node:
        time = self.stacked.meta["val"].shape[0]
        if t % time == time - 1 and self.last is not None:
            return self.last
        return self.steps.op(aten.select.int, self.stacked, 0, t % time)

    def sequence(self, batch: int, time: int, batch_first: bool) -> Node:
        if not batch_first:
            return self.stacked
        if batch == 1:
            return self.steps.op(aten.view.default, self.stacked, [1, time, self.stacked.meta["val"].shape[-1]])
        return self.steps.op(aten.transpose.int, self.stacked, 0, 1)


class _StepOutputs:
    """A layer's output at each time: the one direction's hidden state, or both joined along features (a
    ``cat`` made only for the times something reads)."""

    def __init__(self, steps: _Steps, per_direction: list[list[Node]]):
        self.steps, self.per_direction, self.joined = steps, per_direction, {}

    def at(self, t: int) -> Node:
        t %= len(self.per_direction[0])
        if len(self.per_direction) == 1:
            return self.per_direction[0][t]
        if t not in self.joined:
            self.joined[t] = self.steps.op(aten.cat.default, [hs[t] for hs in self.per_direction], 1)
        return self.joined[t]

    def sequence(self, batch: int, time: int, batch_first: bool) -> Node:
        """Every time's output as one tensor, [B, T, F] or [T, B, F]."""
        outputs = [self.at(t) for t in range(time)]
        features = outputs[0].meta["val"].shape[-1]
        joined = self.steps.op(aten.cat.default, outputs, 1 if batch_first else 0)
        shape = [batch, time, features] if batch_first else [time, batch, features]
        return self.steps.op(aten.view.default, joined, shape)


def _stacked(steps: _Steps, states: list[Node], batch: int, hidden: int) -> Node:
    """Each layer's last state as ``[layers, B, H]`` (the ``h_n`` / ``c_n`` output)."""
    whole = states[0] if len(states) == 1 else steps.op(aten.cat.default, states, 0)
    return steps.op(aten.view.default, whole, [len(states), batch, hidden])


def _replace_outputs(gm: GraphModule, node: Node, steps: _Steps, outputs: _StepOutputs, last_h: list[Node],
                     last_c: list[Node], batch: int, time: int, batch_first: bool) -> None:
    """Point the layer's readers at the steps: ``y[:, t]`` / ``y[t]`` is time t's output; ``y`` the sequence;
    ``h_n`` (and ``c_n``) the last states."""
    hidden = last_h[0].meta["val"].shape[-1]
    time_dim = 1 if batch_first else 0
    for getter in list(node.users):
        assert getter.target is operator.getitem
        index = getter.args[1]
        with gm.graph.inserting_before(node):
            if index == 0:
                for reader in list(getter.users):
                    if reader.target == aten.select.int and reader.args[0] is getter and \
                            reader.args[1] % 3 == time_dim and isinstance(reader.args[2], int):
                        reader.replace_all_uses_with(outputs.at(reader.args[2]))
                        gm.graph.erase_node(reader)
                if getter.users:
                    getter.replace_all_uses_with(outputs.sequence(batch, time, batch_first))
            elif getter.users:
                getter.replace_all_uses_with(_stacked(steps, last_h if index == 1 else last_c, batch, hidden))
        gm.graph.erase_node(getter)
    gm.graph.erase_node(node)


def _unroll_cell(gm: GraphModule, node: Node, projections: dict[tuple[str, Node], Node], float_cell: bool = False
                 ) -> bool:
    """Unroll one GRU / LSTM / RNN cell call; False (left whole) for an unbatched one. ``projections``: the input
    projections made so far, per cell and sequence tensor (``_input_parts``); ``float_cell``: an LSTM cell's
    update and tanh(c) stay float."""
    kind = _CELLS[node.target]
    x, state, *params = node.args
    params = [p for p in params if p is not None]
    values = _parameters(gm, params)
    if x.meta["val"].dim() != 2 or values is None:  # unbatched
        return False
    weights = _LayerWeights(kind, *values, *([None] * (4 - len(params))))
    hidden = weights.hidden
    with gm.graph.inserting_before(node):
        # the steps of one cell share W_hh, hence a name: one state scale and one set of constants
        steps = _Steps(gm, node, kind, _layer_name(node) if node.meta.get("nn_module_stack") else params[1].name,
                       float_cell)
        w_hh_nodes = [_cell_constant(steps, f"w_hh{i}", w) for i, w in enumerate(weights.w_hh_parts)]
        if kind == "gru":
            x_rz, x_n = _input_parts(steps, x, weights, projections)
            h = None if is_zero(gm, state) else steps.initial_state(state, "h")
            b_hn = _cell_constant(steps, "b_hn", weights.b_hn)
            node.replace_all_uses_with(steps.gru_step(x_rz, x_n, h, *w_hh_nodes, b_hn, hidden))
        elif kind != "lstm":
            h = None if is_zero(gm, state) else steps.initial_state(state, "h")
            (x_t,) = _input_parts(steps, x, weights, projections)
            node.replace_all_uses_with(steps.rnn_step(x_t, h, w_hh_nodes[0]))
        else:
            h_in, c_in = state
            h, c = (None, None) if is_zero(gm, h_in) and is_zero(gm, c_in) else \
                (steps.initial_state(h_in, "h"), steps.initial_state(c_in, "c"))
            (x_gates,) = _input_parts(steps, x, weights, projections)
            h, c = steps.lstm_step(x_gates, h, c, w_hh_nodes[0], hidden)
            for getter in list(node.users):
                getter.replace_all_uses_with(h if getter.args[1] == 0 else c)
                gm.graph.erase_node(getter)
    gm.graph.erase_node(node)
    return True


def _input_parts(steps: _Steps, x: Node, weights: _LayerWeights, projections: dict[tuple[str, Node], Node]
                 ) -> tuple[Node, ...]:
    """A cell step's input part, as the steps read it (GRU: rz and n; LSTM: all four gates).

    A cell loop reads ``x[:, t]`` of one [B, T, I] sequence: like a layer, one linear layer projects every
    step's frame at once (made at the first step) and each step slices its part (the slices of one tensor
    are one SPLIT_V kernel on the NPU), instead of one or two linear layers per step."""
    hidden = weights.hidden
    width = _GATES[steps.kind] * hidden
    source = x.args[0] if x.target == aten.select.int else None
    if source is None or source.meta["val"].dim() != 3 or x.args[1] % 3 != 1:
        w_ih, b_ih = _cell_constant(steps, "w_ih", weights.w_ih), _cell_constant(steps, "b_ih", weights.b_ih)
        gates = steps.linear(x, w_ih, b_ih)
        return (steps.slice(gates, 0, 2 * hidden), steps.slice(gates, 2 * hidden, width)) \
            if steps.kind == "gru" else (gates,)
    batch, time = source.meta["val"].shape[:2]
    key = (steps.name, source)
    if key not in projections:
        w_ih, b_ih = _cell_constant(steps, "w_ih", weights.w_ih), _cell_constant(steps, "b_ih", weights.b_ih)
        projections[key] = steps.op(aten.view.default, steps.linear(source, w_ih, b_ih), [batch, time * width])
    start = (x.args[2] % time) * width
    flat = projections[key]
    if steps.kind == "gru":
        return steps.slice(flat, start, start + 2 * hidden), steps.slice(flat, start + 2 * hidden, start + width)
    return (steps.slice(flat, start, start + width),)


def _cell_constant(steps: _Steps, stem: str, value: torch.Tensor) -> Node:
    """A rearranged cell parameter, registered once for all steps of the cell; a node for this step."""
    attr = f"{steps.attribute_stem}_{stem}"
    if not hasattr(steps.gm, attr):
        steps.gm.register_parameter(attr, torch.nn.Parameter(value.clone(), requires_grad=False))
    with steps.gm.graph.inserting_before(steps.like):
        node = steps.gm.graph.get_attr(attr)
    node.meta["val"] = value.clone()
    return node


class UnrollRecurrentLayersPass(PassBase):
    """Requires: an aten graph. Ensures: no ``gru`` / ``lstm`` / ``rnn_tanh`` / ``rnn_relu`` layer or
    cell node remains but an LSTM with ``proj_size`` or an unbatched one (left whole: it decomposes in
    ``to_edge`` and runs in float on the CPU, the report naming the layer); each step's states carry
    ``RECURRENT_STATE``."""

    def __init__(self, rolled: bool = False, float_cell_state: bool = False):
        super().__init__()
        self.rolled, self.float_cell_state = rolled, float_cell_state

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        projections: dict[tuple[str, Node], Node] = {}
        for node in list(gm.graph.nodes):
            if node.op != "call_function":
                continue
            if node.target in _SEQUENCES:
                modified |= _unroll_sequence(gm, node, self.rolled, self.float_cell_state)
            elif node.target in _CELLS:
                modified |= _unroll_cell(gm, node, projections, self.float_cell_state)
        return PassResult(finish(gm) if modified else gm, modified)
