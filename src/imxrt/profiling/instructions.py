"""Which entry of the cost model each instruction of a program stands for: ``report.json``'s ``profiling``.

The cost model (``perf/``) estimates the lowered edge graph, by node name and NPU partition;
``to_executorch`` then emits one instruction per kernel or delegate call. Its emitter replaces each emitted
node's ``debug_handle`` with the index of the instruction it became, which links the two. The table is
what ``imxrt run --etdump`` needs beside the ``.pte`` to lay the estimates out per instruction.
"""

from __future__ import annotations

from executorch.exir import ExecutorchProgramManager, schema
from executorch.exir.lowered_backend_module import LoweredBackendModule

CHAIN = 0  # programs have one chain; ExecuTorch's runtime records its index in every event


def operator_name(operator: schema.Operator) -> str:
    """``cortex_m::quantized_conv2d.out``: the operator an instruction calls, as the ``.pte`` names it."""
    return f"{operator.name}.{operator.overload}" if operator.overload else operator.name


def instruction_table(program: ExecutorchProgramManager, latency: dict) -> dict:
    """``{"chain": 0, "instructions": [...]}``: per instruction of the chain that calls a kernel or a
    delegate, its operator (or delegate id) and the ``latency`` entry that estimates it: ``node`` (an op of
    ``latency["ops"]`` on the CPU) or ``partition`` (an index of ``latency["partitions"]``); instructions the
    cost model has no entry for (zero-cost views) name neither.

    Invariant: every CPU op and every partition of ``latency`` is one instruction."""
    plan = program.executorch_program.execution_plan[0]
    instructions = plan.chains[CHAIN].instructions
    cpu_ops = {op["name"] for op in latency["ops"] if op["device"] == "cpu"}
    graph_module = program.exported_program().graph_module
    rows: dict[int, dict] = {}
    partitions = 0
    for node in graph_module.graph.nodes:
        delegate = node.op == "call_function" and getattr(node.target, "__name__", "") == "executorch_call_delegate"
        if not delegate and node.name not in cpu_ops:
            continue
        index = node.meta.get("debug_handle")  # the emitter's instruction index for emitted nodes
        assert isinstance(index, int) and 0 <= index < len(instructions) and index not in rows, (node.name, index)
        call = instructions[index].instr_args
        if delegate:
            module = getattr(graph_module, node.args[0].target)
            assert isinstance(module, LoweredBackendModule) and isinstance(call, schema.DelegateCall), node.name
            backend = plan.delegates[call.delegate_index].id
            rows[index] = {"instruction": index, "delegate": backend, "partition": partitions}
            partitions += 1
        else:
            assert isinstance(call, schema.KernelCall), node.name
            name = operator_name(plan.operators[call.op_index])
            expected = node.target.name() if hasattr(node.target, "name") else str(node.target)
            assert name == expected, (node.name, name, expected)
            rows[index] = {"instruction": index, "op": name, "node": node.name}
    for index, instruction in enumerate(instructions):
        call = instruction.instr_args
        if index not in rows and isinstance(call, schema.KernelCall):
            rows[index] = {"instruction": index, "op": operator_name(plan.operators[call.op_index])}
    mapped = {row["node"] for row in rows.values() if "node" in row}
    assert mapped == cpu_ops, f"CPU ops without an instruction: {sorted(cpu_ops - mapped)}"
    assert partitions == len(latency["partitions"]), (partitions, len(latency["partitions"]))
    return {"chain": CHAIN, "instructions": [rows[index] for index in sorted(rows)]}
