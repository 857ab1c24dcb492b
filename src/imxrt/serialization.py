"""Serialize stage: the lowered edge program through ExecuTorch's ``to_executorch`` (memory planned with our
packing, ``memory.planning_pass``) to the sealed ``.pte`` bytes; a program calling an operator the stock runtime
has no kernel for, or with arguments its kernel refuses, is refused (``check_stock_kernels``)."""

from __future__ import annotations

from executorch.exir import EdgeProgramManager, ExecutorchBackendConfig, ExecutorchProgramManager

from imxrt import integrity
from imxrt.cortex_m import ops as cortex_m_ops
from imxrt.errors import BadModel
from imxrt.memory.planning_pass import ImxrtMemoryPlanner, memory_planning_pass
from imxrt.passes.recurrent_loops import walk
from imxrt.profiling.instructions import EDGE_NAME


def check_stock_kernels(program: ExecutorchProgramManager) -> None:
    """Every operator the program calls is one the stock runtime has a kernel for (the host runtime's
    allowlist), called with arguments the kernel's own checks accept (``stock_rules``, the rules the host
    runtime loads a file by): a program the board cannot run is refused here, not written."""
    from imxrt.runtime import allowlist, stock_rules
    from imxrt.runtime.ops import OWN_OPERATORS, qualified_name

    known = allowlist.allowed_operators() | OWN_OPERATORS
    missing = sorted({qualified_name(op) for plan in program.executorch_program.execution_plan
                      for op in plan.operators} - known)
    if missing:
        raise BadModel(f"the program would call {', '.join(missing)} on the CPU, which the stock ExecuTorch "
                       "runtime has no kernel for (an op left in float that imxrt cannot express with the portable "
                       "kernels); please report it with the model")
    for name in program.methods:  # the kernels' own argument checks, loop bodies too
        for node, _owner, _calls in walk(program.exported_program(name).graph_module):
            refused = stock_rules.node_refusal(node)
            if refused is not None:
                raise BadModel(refused, node=node.meta.get(EDGE_NAME, node.name))


def serialize(edge: EdgeProgramManager, memory_planner: ImxrtMemoryPlanner | None = None) -> bytes:
    """The ``.pte`` bytes of ``to_executorch``, sealed (``integrity.seal``)."""
    return integrity.seal(bytes(to_executorch(edge, memory_planner).buffer))


def to_executorch(edge: EdgeProgramManager, memory_planner: ImxrtMemoryPlanner | None = None
                  ) -> ExecutorchProgramManager:
    """Memory planning (ExecuTorch's pass with our placement, ``memory.planning_pass``) and flatbuffer
    serialization with ExecuTorch's own ``to_executorch``; a program calling an operator the stock runtime
    lacks is refused (``check_stock_kernels``)."""
    # The out variants of quantize/dequantize (the model-I/O conversions on the CPU) are registered with
    # torch by this import; to_executorch needs them to emit the kernel calls.
    import executorch.kernels.quantized  # noqa: F401
    # to_executorch's passes retrace the graph and name nodes afresh; the report (cost model, profiling)
    # knows them by their edge names, kept here in the metadata the passes carry over.
    for name in edge.methods:
        for node, _owner, _calls in walk(edge.exported_program(name).graph_module):  # loop bodies too
            node.meta.setdefault(EDGE_NAME, node.name)
    planning = memory_planning_pass(memory_planner or ImxrtMemoryPlanner())
    with cortex_m_ops.own_fakes():  # the retrace must lay the cortex_m results out as the lowering did
        program = edge.to_executorch(ExecutorchBackendConfig(extract_delegate_segments=True,
                                                             memory_planning_pass=planning))
    check_stock_kernels(program)
    return program
