"""A recurrent layer's loop while it is compiled: one step body between four marker ops, rolled into a
``torch.ops.higher_order.scan`` once the body is quantized (and, on the edge graph, lowered).

``UnrollRecurrentLayersPass`` writes a GRU / LSTM / RNN layer as the ops of *one* step, so quantization,
partitioning and the CPU lowering see one body however long the sequence is (compile time and memory do not
grow with it). The step reads its inputs through markers and leaves its results through markers::

    x_t  = imxrt.loop_input(xs, loop)            # xs [T, B, F]: the step's slice of it, [B, F]
    h    = imxrt.loop_carry(h0, xs, loop, k)     # carry k: its initial value, then the last step's result
    ...the step's ops...
    h_T  = imxrt.loop_result(h_next, loop, k)    # carry k after the last step (and the next step's carry k)
    ys   = imxrt.loop_stack(h_next, loop, T)     # every step's h_next, stacked [T, B, H]

A marker copies its input in eager (``loop_input`` takes step 0, ``loop_stack`` repeats one step): the
template's own ``forward`` is not the layer. ``run_loops`` runs it as the layer (calibration goes through
it, so every observer in the body sees all T steps: one scale per gate role, as TFLite's int8 LSTM keeps),
and ``roll`` turns each loop into a real ``scan`` whose body is the step's nodes. The markers quantize like a
view (their output shares their input's qparams), so after convert each sits between a dequantize and a
quantize of equal qparams, and after the CPU lowering on the int8 tensor itself.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch
from executorch.exir.dialects._ops import ops as exir_ops
from torch.export import ExportedProgram
from torch.fx import Graph, GraphModule, Node
from torch.fx.interpreter import Interpreter

from imxrt.op_kinds import is_view_copy

_LIBRARY = torch.library.Library("imxrt", "DEF")
_LIBRARY.define("loop_input(Tensor xs, int loop) -> Tensor")
_LIBRARY.define("loop_carry(Tensor initial, Tensor xs, int loop, int index) -> Tensor")
_LIBRARY.define("loop_result(Tensor next, int loop, int index) -> Tensor")
_LIBRARY.define("loop_stack(Tensor step, int loop, int steps) -> Tensor")


@torch.library.impl(_LIBRARY, "loop_input", "CompositeExplicitAutograd")
def _loop_input(xs: torch.Tensor, loop: int) -> torch.Tensor:
    return xs[0].clone()


@torch.library.impl(_LIBRARY, "loop_carry", "CompositeExplicitAutograd")
def _loop_carry(initial: torch.Tensor, xs: torch.Tensor, loop: int, index: int) -> torch.Tensor:
    return initial.clone()


@torch.library.impl(_LIBRARY, "loop_result", "CompositeExplicitAutograd")
def _loop_result(next: torch.Tensor, loop: int, index: int) -> torch.Tensor:  # noqa: A002
    return next.clone()


@torch.library.impl(_LIBRARY, "loop_stack", "CompositeExplicitAutograd")
def _loop_stack(step: torch.Tensor, loop: int, steps: int) -> torch.Tensor:
    return step.unsqueeze(0).expand(steps, *step.shape).clone()


@torch.library.register_fake("imxrt::loop_input")
def _loop_input_fake(xs, loop):
    return xs.new_empty(xs.shape[1:])


@torch.library.register_fake("imxrt::loop_carry")
def _loop_carry_fake(initial, xs, loop, index):
    return torch.empty_like(initial)


@torch.library.register_fake("imxrt::loop_result")
def _loop_result_fake(next, loop, index):  # noqa: A002
    return torch.empty_like(next)


@torch.library.register_fake("imxrt::loop_stack")
def _loop_stack_fake(step, loop, steps):
    return step.new_empty((steps, *step.shape))


LOOP_INPUT = torch.ops.imxrt.loop_input.default
LOOP_CARRY = torch.ops.imxrt.loop_carry.default
LOOP_RESULT = torch.ops.imxrt.loop_result.default
LOOP_STACK = torch.ops.imxrt.loop_stack.default
# A loop's carry result names the next step's carry even when nothing reads the last one: never dead code;
# a carry's value changes every step, though its initial value may be a constant: it also takes the loop's
# ``xs`` (unread), so no constant folding ever takes it for a constant.
torch.fx.node.has_side_effect(LOOP_RESULT)
torch.fx.node.has_side_effect(exir_ops.edge.imxrt.loop_result.default)
MARKERS = {"imxrt::loop_input": LOOP_INPUT, "imxrt::loop_carry": LOOP_CARRY, "imxrt::loop_result": LOOP_RESULT,
           "imxrt::loop_stack": LOOP_STACK}


def marker_of(node: Node) -> torch._ops.OpOverload | None:
    """The loop marker ``node`` calls (an aten graph's op or the edge dialect's wrapper of it), else None."""
    if node.op != "call_function":
        return None
    name = getattr(node.target, "_name", None) or getattr(getattr(node.target, "_op", None), "_name", None)
    return MARKERS.get(name)


@dataclass
class Loop:
    """One loop's markers and the nodes of its step body, in graph order."""

    id: int
    inputs: list[Node] = field(default_factory=list)  # loop_input, by graph order
    carries: dict[int, Node] = field(default_factory=dict)  # index -> loop_carry
    results: dict[int, Node] = field(default_factory=dict)  # index -> loop_result
    stacks: list[Node] = field(default_factory=list)  # loop_stack
    body: list[Node] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return int(self.stacks[0].args[2]) if self.stacks else int(self.inputs[0].args[0].meta["val"].shape[0])


def find_loops(graph: Graph) -> list[Loop]:
    """The graph's loops, each with its body: the nodes that depend on one of its ``loop_input`` /
    ``loop_carry`` markers and that one of its ``loop_result`` / ``loop_stack`` markers depends on (with
    the argument-free nodes, such as scratch buffers, only the body reads)."""
    loops: dict[int, Loop] = {}
    for node in graph.nodes:
        marker = marker_of(node)
        if marker is None:
            continue
        number = int(node.args[2] if marker is LOOP_CARRY else node.args[1])
        loop = loops.setdefault(number, Loop(number))
        if marker is LOOP_INPUT:
            loop.inputs.append(node)
        elif marker is LOOP_CARRY:
            loop.carries[int(node.args[3])] = node
        elif marker is LOOP_RESULT:
            loop.results[int(node.args[2])] = node
        else:
            loop.stacks.append(node)
    for loop in loops.values():
        starts = [*loop.inputs, *loop.carries.values()]
        downstream = set(starts)
        for node in graph.nodes:  # graph order is a topological order
            if node not in downstream and any(a in downstream for a in node.all_input_nodes):
                downstream.add(node)
        ends = [*loop.results.values(), *loop.stacks]
        upstream = set()
        work = [a for end in ends for a in end.all_input_nodes]
        while work:
            node = work.pop()
            if node in upstream or node.op == "placeholder":
                continue
            upstream.add(node)
            work.extend(node.all_input_nodes)
        body = (downstream & upstream) | set(starts)
        # argument-free helpers (scratch allocations) belong with their readers
        for node in graph.nodes:
            if node.op == "call_function" and not node.all_input_nodes and node.users and \
                    all(u in body for u in node.users):
                body.add(node)
        loop.body = [n for n in graph.nodes if n in body]
    return [loops[k] for k in sorted(loops)]


def has_loops(graph: Graph) -> bool:
    return any(marker_of(n) is not None for n in graph.nodes)


class _LoopRunner(Interpreter):
    """Runs a template graph as the layers it stands for: each loop's step (as generated code, ``_Step``) for
    every time step, the carries fed back."""

    def __init__(self, module: GraphModule):
        super().__init__(module, garbage_collect_values=False)  # the steps read values after their turn
        nodes = tuple(module.graph.nodes)  # the graph as it is now: an edited graph is the same object
        cached = module.meta.get(_STEPS)
        if cached is None or cached[0] != nodes:
            cached = module.meta[_STEPS] = (nodes, [_Step(module, loop) for loop in find_loops(module.graph)])
        steps = cached[1]
        # a loop runs at its last body node, when everything its steps read from outside is computed
        self.last = {step.loop.body[-1]: step for step in steps if step.loop.body}
        self.computed_by_loop = {n for step in steps for n in (*step.loop.body, *step.loop.results.values(),
                                                               *step.loop.stacks)}

    def run_node(self, n: Node):
        if n in self.last:
            self.last[n].run(self.env)
        if n in self.computed_by_loop:
            return self.env.get(n)
        return super().run_node(n)


_STEPS = "imxrt_loop_steps"  # GraphModule.meta: (the nodes of the graph they were made for, its loops' _Step)


class _Step:
    """One loop's step as a GraphModule of its own: (step inputs, carries, values from outside) in, (next
    carries, stacked values) out."""

    def __init__(self, module: GraphModule, loop: Loop):
        self.loop = loop
        self.carries = [loop.carries[k] for k in sorted(loop.carries)]
        self.results = [loop.results[k] for k in sorted(loop.results)]
        starts = {*loop.inputs, *self.carries}
        inner = [n for n in loop.body if n not in starts]
        inside = set(loop.body)
        self.externals = list(dict.fromkeys(a for n in inner for a in n.all_input_nodes if a not in inside))
        graph = Graph()
        env = {node: graph.placeholder(f"in_{i}") for i, node in enumerate([*loop.inputs, *self.carries,
                                                                             *self.externals])}
        for node in inner:
            env[node] = graph.node_copy(node, lambda a: env[a])
        graph.output([env[r.args[0]] for r in self.results] + [env[s.args[0]] for s in loop.stacks])
        self.module = GraphModule(module, graph)

    def run(self, env: dict) -> None:
        xs = [env[i.args[0]] for i in self.loop.inputs]
        carries = [env[c.args[0]] for c in self.carries]
        externals = [env[e] for e in self.externals]
        stacked: list[list[torch.Tensor]] = [[] for _ in self.loop.stacks]
        for t in range(xs[0].shape[0]):
            outputs = self.module(*(x[t] for x in xs), *carries, *externals)
            carries = outputs[:len(self.results)]
            for values, value in zip(stacked, outputs[len(self.results):], strict=True):
                values.append(value)
        for result, value in zip(self.results, carries, strict=True):
            env[result] = value
        for stack, values in zip(self.loop.stacks, stacked, strict=True):
            env[stack] = torch.stack(values)


def run_loops(module: GraphModule, *args):
    """``module(*args)``, with every loop run for its steps (``module``'s own forward runs one step)."""
    if not has_loops(module.graph):
        return module(*args)
    return _LoopRunner(module).run(*args)


def _is_quantize(node: Node) -> bool:
    name = str(getattr(node, "target", ""))
    return node.op == "call_function" and "quantize_per_tensor" in name and "dequantize" not in name


def roll_loops(module: GraphModule, aten: bool = False) -> int:
    """Each loop of a lowered (edge) or quantized (aten) graph becomes one ``torch.ops.higher_order.scan``
    whose body is its step's nodes; returns how many. A carry whose marker feeds a quantize (an int8 state)
    is carried in int8: the quantize of its initial value runs once, before the loop. The markers are gone
    afterwards. ``aten``: an aten graph (``eager_program``), whose body reads module attributes (weights) as
    scan inputs, as ``torch.export`` wants them; on the edge graph they move into the body (a lowered NPU
    partition)."""
    graph = module.graph
    loops = find_loops(graph)
    for loop in loops:
        _roll(module, loop, aten)
    if loops:
        graph.eliminate_dead_code()
        graph.lint()
        module.recompile()
    return len(loops)


def _roll(module: GraphModule, loop: Loop, aten: bool) -> None:
    graph = module.graph
    ends = [*(loop.results[k] for k in sorted(loop.results)), *loop.stacks]
    first_end = min(ends, key=lambda n: _order(graph)[n])
    carried: dict[int, Node] = {}  # index -> the node the step reads the carry as
    initial: dict[int, Node] = {}
    with graph.inserting_before(first_end):
        for k, carry in sorted(loop.carries.items()):
            users = list(carry.users)
            if len(users) == 1 and _is_quantize(users[0]):  # an int8 carry
                carried[k] = users[0]
                initial[k] = graph.call_function(users[0].target, (carry.args[0], *users[0].args[1:]),
                                                 dict(users[0].kwargs))
                initial[k].meta.update({key: value for key, value in users[0].meta.items()})
            else:
                carried[k] = carry
                initial[k] = carry.args[0]
    replaced = set(carried.values()) | set(loop.inputs) | set(loop.carries.values())
    inner = [n for n in loop.body if n not in replaced]
    inner_set = set(inner)
    externals: list[Node] = []
    for node in inner:
        for arg in node.all_input_nodes:
            if arg not in inner_set and arg not in replaced and arg not in externals:
                externals.append(arg)

    body = Graph()
    env: dict[Node, Node] = {}
    for k in sorted(carried):
        env[carried[k]] = _placeholder(body, f"carry_{k}", carried[k])
    for i, marker in enumerate(loop.inputs):
        env[marker] = _placeholder(body, f"x_{i}", marker)
    moved = [] if aten else [node for node in externals if node.op == "get_attr"]
    for node in externals:  # a module attribute (an NPU partition's lowered module) moves with the body
        env[node] = body.get_attr(node.target) if node in moved else _placeholder(body, node.name, node)
    externals = [node for node in externals if node not in moved]
    for node in inner:
        env[node] = body.node_copy(node, lambda a: env[a])
    next_values = {k: _next_value(result, carried[k]) for k, result in loop.results.items()}
    outputs = [env[next_values[k]] for k in sorted(loop.results)] + [env[s.args[0]] for s in loop.stacks]
    body.output(outputs)
    for k in sorted(loop.results):
        carry_value, next_value = carried[k].meta["val"], next_values[k].meta["val"]
        if carry_value.dtype != next_value.dtype or carry_value.shape != next_value.shape:
            raise RuntimeError(f"loop {loop.id}: carry {k} is {carry_value.dtype}{list(carry_value.shape)} but its "
                               f"next value {next_value.dtype}{list(next_value.shape)}")

    name = f"loop_body_{loop.id}"
    module.add_submodule(name, GraphModule(module, body, class_name=name))
    with graph.inserting_before(first_end):
        attr = graph.get_attr(name)
        scan = graph.call_function(torch.ops.higher_order.scan,
                                   (attr, [initial[k] for k in sorted(initial)], [m.args[0] for m in loop.inputs],
                                    list(externals)))
        scan.meta.update({key: value for key, value in first_end.meta.items() if key not in ("val", "tensor_meta")})
        scan.meta["val"] = tuple(output.meta["val"] for output in (*(next_values[k] for k in sorted(next_values)),
                                                                     *(s.args[0] for s in loop.stacks)))
        for index, end in enumerate(ends):
            item = graph.call_function(operator.getitem, (scan, index))
            item.meta["val"] = end.meta["val"]
            if end in loop.results.values() and next_values[end.args[2]] is not end.args[0]:
                # an int8 carry the graph reads dequantized after the loop: dequantize its last value
                item.meta["val"] = next_values[end.args[2]].meta["val"]
                dequantize = end.args[0]
                item = graph.call_function(dequantize.target, (item, *dequantize.args[1:]), dict(dequantize.kwargs))
                item.meta["val"] = end.meta["val"]
            if not aten and end in loop.stacks and any(is_view_copy(user) for user in end.users):
                # ExecuTorch plans a stacked output as a tensor that grows each step; a view of it would be
                # planned as a fixed one: read it through a copy
                item = graph.call_function(exir_ops.edge.aten.clone.default, (item,))
                item.meta["val"] = end.meta["val"]
            end.replace_all_uses_with(item)
    for end in ends:
        graph.erase_node(end)
    for node in reversed(loop.body):
        graph.erase_node(node)


def _next_value(result: Node, carried: Node) -> Node:
    """The step's value of a carry: the result marker's input, or the int8 tensor it dequantizes when the carry
    is int8 (a state nothing outside reads after the loop keeps its dequantize)."""
    value = result.args[0]
    if carried.meta["val"].dtype != value.meta["val"].dtype and "dequantize" in str(value.target):
        return value.args[0]
    return value


def _order(graph: Graph) -> dict[Node, int]:
    return {node: index for index, node in enumerate(graph.nodes)}


def _placeholder(graph: Graph, name: str, like: Node) -> Node:
    node = graph.placeholder(name)
    if "val" in like.meta:
        node.meta["val"] = like.meta["val"]
    return node


def eager_program(template: ExportedProgram, example_inputs: tuple) -> ExportedProgram:
    """The quantized program with each loop rolled into a ``scan`` (``template``'s own ``forward`` runs one
    step of each): what the host runtime's ``.pte`` is compared against, and what evaluates the quantized
    model in PyTorch."""
    module = template.module(check_guards=False)
    roll_loops(module, aten=True)
    return torch.export.export(module, tuple(example_inputs), strict=False)


def is_scan(node: Node) -> bool:
    return node.op == "call_function" and node.target is torch.ops.higher_order.scan


def scan_steps(node: Node) -> int:
    """How many times a scan runs its body: the length of its first ``xs`` along dim 0."""
    return int(node.args[2][0].meta["val"].shape[0])


def scan_body(module: GraphModule, node: Node) -> GraphModule:
    return getattr(module, node.args[0].target)


def walk(module: GraphModule, repeats: int = 1):
    """``(node, owning module, times it runs per inference)`` for every node, in execution order, a scan's
    body nodes in place of the scan (after it, as ``("scan", node)`` entries mark: what the reports and the
    cost model count)."""
    for node in module.graph.nodes:
        if is_scan(node):
            yield node, module, repeats
            yield from walk(scan_body(module, node), repeats * scan_steps(node))
        else:
            yield node, module, repeats
