"""Memory planning on real programs: smaller than ExecuTorch's default where lifetimes allow, correct
(bit-identical outputs with every dead tensor poisoned), reported, and over-budget plans refused.

The model is a stem conv and two inverted-residual blocks (expand 1x1, depthwise 3x3, project 1x1, add):
ExecuTorch's greedy plan for its lifetimes is 11,520 B, the lower bound 10,368 B.
"""

from __future__ import annotations

import copy
import textwrap

import numpy as np
import pytest
import torch
from torch import nn

import imxrt.runtime
from imxrt.cli import main
from imxrt.memory.budget import OverBudget
from imxrt.memory.packing import InvalidPacking, verify
from imxrt.memory.planning_pass import EXECUTORCH_GREEDY, ImxrtMemoryPlanner
from imxrt.memory.report import memory_report
from imxrt.npu import reference_payload
from imxrt.pipeline import CompileOptions, compile, export, lower, quantize, serialize
from imxrt.placement import PlacementLog
from imxrt.pte.reader import read_program
from imxrt.targets import get_target

pytestmark = pytest.mark.slow  # every test here compiles models


class Block(nn.Module):
    def __init__(self, channels: int, expansion: int):
        super().__init__()
        wide = channels * expansion
        self.expand = nn.Conv2d(channels, wide, 1)
        self.dw = nn.Conv2d(wide, wide, 3, padding=1, groups=wide)
        self.project = nn.Conv2d(wide, channels, 1)

    def forward(self, x):
        return x + self.project(torch.relu(self.dw(torch.relu(self.expand(x)))))


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.b1, self.b2 = Block(8, 4), Block(8, 4)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.b2(self.b1(torch.relu(self.stem(x)))).mean((2, 3)))


def _model() -> nn.Module:
    torch.manual_seed(0)
    return Residual().eval()


INPUTS = (torch.rand(1, 3, 12, 12, generator=torch.Generator().manual_seed(1)),)


@pytest.fixture(scope="module")
def programs():
    """(ours .pte, ExecuTorch's default .pte, our planner) from one lowered program."""
    target, options = get_target("imxrt700-cpu"), CompileOptions(show_progress=False)
    edge = lower(quantize(export(_model(), INPUTS), INPUTS, [INPUTS], options, target), target, options,
                 PlacementLog())
    default_edge = copy.deepcopy(edge)
    planner = ImxrtMemoryPlanner()
    ours = serialize(edge, planner)
    from executorch.exir import ExecutorchBackendConfig
    default = bytes(default_edge.to_executorch(ExecutorchBackendConfig(extract_delegate_segments=True)).buffer)
    return ours, default, planner


def _arena(pte: bytes) -> int:
    return sum(read_program(pte).plan.non_const_buffer_sizes[1:])


def test_plan_beats_executorchs_default_and_reaches_the_bound(programs):
    ours, default, planner = programs
    (plan,) = planner.plans
    assert plan.executorch_bytes == _arena(default) == 11520
    assert _arena(ours) == plan.arena_bytes == plan.bound.nbytes == 10368
    assert plan.chosen.label != EXECUTORCH_GREEDY


def test_outputs_are_bit_identical_with_poisoning_and_to_the_default_plan(programs):
    ours, default, _ = programs
    x = INPUTS[0].numpy()
    reference = imxrt.runtime.load(default).forward(x)[0]
    assert np.array_equal(imxrt.runtime.load(ours).forward(x)[0], reference)
    assert np.array_equal(imxrt.runtime.load(ours, check_plan=True).forward(x)[0], reference)


def test_verifier_catches_a_buffer_moved_onto_one_live_with_it(programs):
    """Put the largest buffer at the offset of another one live at the same step: the verifier names both."""
    (plan,) = programs[2].plans
    largest = max(plan.buffers, key=lambda b: (b.nbytes, -b.index))
    other = next(b for b in plan.buffers if b is not largest and b.nbytes and b.lives_with(largest))
    verify(plan.buffers, plan.chosen.offsets)
    with pytest.raises(InvalidPacking, match="overlap"):
        verify(plan.buffers, plan.chosen.offsets | {largest.index: plan.chosen.offsets[other.index]})


def test_report_adds_arena_npu_scratch_and_method_allocator_and_names_the_peak(programs):
    ours, _, planner = programs
    memory = memory_report(planner.plans, ours, get_target("imxrt700-cpu"), sram_budget=None)
    (arena,) = memory["arenas"]
    sram = memory["sram"]
    assert arena["arena_bytes"] == _arena(ours) and arena["ratio_to_bound"] == 1.0
    assert sram["temp_allocator_bytes"] == 0  # no delegate on the CPU target
    assert sram["total_bytes"] == sram["arena_bytes"] + sram["method_allocator_bytes"]
    assert 0 < sram["method_allocator_bytes"] < 64 * 1024 and sram["budget_from"] == "target"
    assert memory["flash"]["pte_bytes"] == len(ours) > memory["flash"]["constant_bytes"] > 0
    sizes = [t["bytes"] for t in arena["peak_tensors"]]
    assert sizes == sorted(sizes, reverse=True) and sum(sizes) <= arena["lower_bound_bytes"]
    assert all(t["name"] in {b.name for b in planner.plans[0].buffers} for t in arena["peak_tensors"])


def test_npu_scratch_is_each_partitions_own(tmp_path):
    """On imxrt700 the whole model is one NPU partition: the report's NPU scratch is its payload's."""
    result = compile(_model(), INPUTS, "imxrt700", [INPUTS], CompileOptions(show_progress=False))
    program = read_program(result.pte)
    blobs = [program.delegate_data[d.processed.index] for d in program.plan.delegates]
    expected = [reference_payload.unpack(blob).metadata["scratch_bytes"] for blob in blobs]
    assert result.report["memory"]["npu_scratch_bytes"] == expected and sum(expected) > 0



class TwoPartitions(nn.Module):
    """Two NPU partitions around a float op the NPU does not run."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.b(torch.sin(torch.relu(self.a(x))))


def test_sram_counts_the_largest_delegate_calls_temp_allocation_not_the_sum_of_npu_scratch():
    """The stock NeutronBackend takes each call's scratch from the temp allocator, which the runtime resets
    after every instruction: two partitions need the larger call's bytes. A call with one input and one
    output takes 4 + 16 bytes of pointer tables, then its scratch at the next 16-byte boundary."""
    torch.manual_seed(0)
    result = compile(TwoPartitions().eval(), INPUTS, "imxrt700", [INPUTS], CompileOptions(show_progress=False))
    memory = result.report["memory"]
    scratch, temp = memory["npu_scratch_bytes"], memory["delegate_temp_bytes"]
    assert len(scratch) == 2 and min(scratch) > 0
    assert temp == [32 + s for s in scratch]
    sram = memory["sram"]
    assert sram["temp_allocator_bytes"] == max(temp) < sum(scratch)
    assert sram["total_bytes"] == sram["arena_bytes"] + max(temp) + sram["method_allocator_bytes"]


def test_npu_scratch_is_the_lower_bound_of_the_partitions_intermediate_tensors():
    """The reference compiler places the partition's intermediate tensors with the memory stage's planner:
    for these blocks it reaches the most bytes live at one LiteRT op, computed here from the .tflite alone
    (each tensor from its writer to its last reader, 16-byte aligned)."""
    from ai_edge_litert import schema_py_generated as tfl

    result = compile(_model(), INPUTS, "imxrt700", [INPUTS], CompileOptions(show_progress=False))
    (tflite,) = result.partitions
    graph = tfl.ModelT.InitFromPackedBuf(tflite, 0).subgraphs[0]
    io = set(graph.inputs.tolist()) | set(graph.outputs.tolist())
    lives = {}
    for step, op in enumerate(graph.operators):
        for t in op.outputs.tolist():
            lives[t] = [step, step]
        for t in op.inputs.tolist():
            if t in lives:
                lives[t][1] = step
    size = {t: -(-int(np.prod(graph.tensors[t].shape)) // 16) * 16 for t in lives if t not in io}
    bound = max(sum(n for t, n in size.items() if lives[t][0] <= step <= lives[t][1])
                for step in range(len(graph.operators)))
    (scratch,) = result.report["memory"]["npu_scratch_bytes"]
    assert scratch == bound > 0


SOURCE = textwrap.dedent("""
    import torch
    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                                   torch.nn.Conv2d(16, 16, 3, padding=1)).eval()
    def example_inputs():
        return (torch.rand(1, 3, 16, 16, generator=torch.Generator().manual_seed(1)),)
""")


def test_over_budget_is_one_line_naming_the_peak_tensors_and_writes_nothing(tmp_path, capsys):
    """Peak: at the model output, the float 16x16x16 output of the dequantize (16,384 B) beside its copy
    into the output's layout (16,384 B); 4K cannot hold it."""
    source, out = tmp_path / "model.py", tmp_path / "out"
    source.write_text(SOURCE)
    status = main(["compile", str(source), "--target", "imxrt700-cpu", "--sram-budget", "4K", "-o", str(out),
                   "--quiet"])
    error = capsys.readouterr().err.strip()
    assert status == 1 and not out.exists() and len(error.splitlines()) == 1
    assert "more than the 4,096 bytes of --sram-budget" in error
    assert "peak: cortex_m_dequantize_per_tensor_default.out (16,384 B), " in error


def test_over_budget_from_python_is_overbudget():
    with pytest.raises(OverBudget, match="largest tensors live at the peak"):
        compile(_model(), INPUTS, "imxrt700-cpu", [INPUTS], CompileOptions(show_progress=False, sram_budget=1024))
