"""Which entry of the cost model each instruction of a program stands for: ``report.json``'s ``profiling``.

The cost model (``perf/``) estimates the lowered edge graph, by node name and NPU partition;
``to_executorch`` then emits its graph in node order, one instruction per operator, free or delegate call
and per view it does not elide (none for tuple reads and planned allocations). Following that order links
each instruction to its node; the operator or delegate each instruction calls checks the link. The table is
what ``imxrt run --etdump`` needs beside the ``.pte`` to lay the estimates out per instruction.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator

from executorch.exir import ExecutorchProgramManager, memory, schema
from torch.fx import Node

from imxrt.passes.recurrent_loops import is_scan, scan_body
from imxrt.report.names import module_of

CHAIN = 0  # programs have one chain; ExecuTorch's runtime records its index in every event
EDGE_NAME = "imxrt_edge_name"  # node meta: the node's name in the lowered edge graph the report describes


def operator_name(operator: schema.Operator) -> str:
    """``cortex_m::quantized_conv2d.out``: the operator an instruction calls, as the ``.pte`` names it."""
    return f"{operator.name}.{operator.overload}" if operator.overload else operator.name


def _emits_instruction(node) -> bool:
    """Whether the emitter turns ``node`` into exactly one instruction. A static, planned view emits none
    (the emitter elides it), but the caller cannot tell that from here: ``_VIEW`` is matched against the
    chain. A scan emits several (``_emitted``)."""
    return node.op == "call_function" and node.target not in (operator.getitem, memory.alloc)


def _emitted(module) -> Iterator[tuple[Node, Node | None]]:
    """``(node, None)`` per instruction-emitting node of ``module`` in emission order, and ``(node, scan)``
    for each instruction a scan writes itself around its body (ExecuTorch's ``_emit_scan``: the step count,
    a copy per carry, then per step a select per sequence input, the body, a copy per carry, a copy per
    stacked output, counter add, test and jump back, and the counter's reset)."""
    for node in module.graph.nodes:
        if is_scan(node):
            _, initial, xs, _ = node.args
            stacked = len(node.meta["val"]) - len(initial)
            yield from [(node, node)] * (1 + len(initial) + len(xs))
            yield from _emitted(scan_body(module, node))
            yield from [(node, node)] * (len(initial) + stacked + 4)
        elif _emits_instruction(node):
            yield node, None


_VIEW = "executorch_prim::et_view.default"  # what a view that is not elided calls


def instruction_table(program: ExecutorchProgramManager, latency: dict) -> dict:
    """``{"chain": 0, "instructions": [...]}``: per instruction of the chain that calls a kernel or a
    delegate, its operator (or delegate id) and the ``latency`` entry that estimates it: ``node`` (an op of
    ``latency["ops"]`` on the CPU) or ``partition`` (an index of ``latency["partitions"]``); instructions the
    cost model has no entry for name neither.

    Invariant: every CPU op the cost model gives time and every partition is one instruction."""
    plan = program.executorch_program.execution_plan[0]
    instructions = plan.chains[CHAIN].instructions
    cpu_ops = {op["name"] for op in latency["ops"] if op["device"] == "cpu"}
    graph_module = program.exported_program().graph_module
    rows, mapped, partitions, index = [], set(), 0, 0
    for node, loop in _emitted(graph_module):
        call = instructions[index].instr_args if index < len(instructions) else None
        if loop is not None:  # a scan's own instruction: its slicing, copies, counter and jump
            row = {"instruction": index, "loop": loop.name}
            if isinstance(call, schema.KernelCall):
                row["op"] = operator_name(plan.operators[call.op_index])
            if loop.name in cpu_ops and loop.name not in mapped:
                row["node"] = loop.name
                mapped.add(loop.name)
            rows.append(row)
            index += 1
            continue
        if node.target is memory.view and not (isinstance(call, schema.KernelCall)
                                               and operator_name(plan.operators[call.op_index]) == _VIEW):
            continue  # elided: the next node takes this instruction (a delegate call's too)
        if isinstance(call, schema.DelegateCall):
            assert getattr(node.target, "__name__", "") == "executorch_call_delegate", (index, node.name)
            rows.append({"instruction": index, "delegate": plan.delegates[call.delegate_index].id,
                         "partition": partitions})
            partitions += 1
        elif isinstance(call, schema.KernelCall):
            name = operator_name(plan.operators[call.op_index])
            assert node.target is memory.view or node.target.name() == name, (index, node.name, name)
            row = {"instruction": index, "op": name, **module_of(node)}
            edge_name = node.meta.get(EDGE_NAME, node.name)
            if edge_name in cpu_ops:
                row["node"] = edge_name
                mapped.add(edge_name)
            rows.append(row)
        elif node.target is memory.view:
            continue
        index += 1
    assert index == len(instructions), (index, len(instructions))
    timed = {op["name"] for op in latency["ops"] if op["device"] == "cpu" and op["cycles"]}
    assert timed <= mapped, f"CPU ops without an instruction: {sorted(timed - mapped)}"
    assert partitions == len(latency["partitions"]), (partitions, len(latency["partitions"]))
    return {"chain": CHAIN, "instructions": rows}
