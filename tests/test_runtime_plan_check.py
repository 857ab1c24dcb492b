"""Plan checking: poisoning dead tensors catches an overlapping memory plan that runs silently right.

The broken plan: ExecuTorch's own plan for `relu(x + 1) * 2`, with relu's output moved onto relu's
input (its bytes are live while relu reads them). An elementwise op overlapping its own input happens to
compute the right values, so without checking the broken plan's outputs equal the correct plan's. With
checking, relu's input dies after relu and is poisoned, which poisons relu's output too: the outputs
change. On the correct plan, checking changes nothing.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from edited_programs import edited
from executorch.exir import schema, to_edge
from executorch.exir._serialize._program import deserialize_pte_binary

import imxrt.runtime
from imxrt.runtime import plan_check
from imxrt.runtime.plan_check import Access, PlanConflict, Region, poison_schedule


class AddReluMul(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x + 1) * 2


INPUTS = (torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(0)),)


@pytest.fixture(scope="module")
def correct() -> bytes:
    return to_edge(torch.export.export(AddReluMul(), INPUTS)).to_executorch().buffer


def _relu_in_place(pte: bytes) -> bytes:
    def onto_its_input(program):
        plan = program.execution_plan[0]
        relu = next(i for i, op in enumerate(plan.operators) if op.name == "aten::relu")
        call = next(ins.instr_args for ins in plan.chains[0].instructions
                    if isinstance(ins.instr_args, schema.KernelCall) and ins.instr_args.op_index == relu)
        source, out = call.args[0], call.args[1]
        assert plan.values[source].val.allocation_info != plan.values[out].val.allocation_info
        plan.values[out].val.allocation_info = copy.deepcopy(plan.values[source].val.allocation_info)

    return edited(pte, onto_its_input)


def _run(pte: bytes, check_plan: bool) -> np.ndarray:
    return imxrt.runtime.load(pte, check_plan=check_plan).forward(*INPUTS)[0]


def test_correct_plan_unchanged_by_poisoning(correct):
    expected = (torch.relu(INPUTS[0] + 1) * 2).numpy()
    assert np.array_equal(_run(correct, False), expected)
    assert np.array_equal(_run(correct, True), expected)


def test_broken_plan_is_silently_right_without_checking(correct):
    """The premise: without poisoning, the overlap goes unnoticed."""
    assert np.array_equal(_run(_relu_in_place(correct), False), _run(correct, False))


def test_broken_plan_is_named_before_anything_runs(correct):
    """The overlap is a PlanConflict naming both tensors, their bytes and lifetimes, not just other outputs."""
    plan = deserialize_pte_binary(_relu_in_place(correct)).program.execution_plan[0]
    relu = next(i for i, op in enumerate(plan.operators) if op.name == "aten::relu")
    step, call = next((step, ins.instr_args) for step, ins in enumerate(plan.chains[0].instructions)
                      if isinstance(ins.instr_args, schema.KernelCall) and ins.instr_args.op_index == relu)
    with pytest.raises(PlanConflict) as error:
        _run(_relu_in_place(correct), True)
    pair = next(c for c in error.value.conflicts if set(c.values) == {call.args[0], call.args[1]})
    assert pair.regions[0] == pair.regions[1]
    assert any(life[1] == step for life in pair.lives) and any(life[0] == step for life in pair.lives)
    assert f"value {call.args[0]} (buffer 1 bytes 0..1023, live from instruction" in str(error.value)


def test_poisoning_catches_the_broken_plan_too(correct, monkeypatch):
    """Poisoning stays behind the static check, for overlaps it cannot see."""
    monkeypatch.setattr(plan_check, "conflicts", lambda *args: [])
    broken = _run(_relu_in_place(correct), True)
    assert not np.array_equal(broken, _run(correct, False))


def test_conflicts_of_a_plan():
    regions = {0: Region(1, 0, 64), 1: Region(1, 32, 64), 2: Region(1, 64, 64), 3: Region(2, 0, 64)}
    accesses = [
        Access(reads=frozenset({0}), writes=frozenset({1})),  # 1 = f(0): 0 and 1 overlap, both live here
        Access(reads=frozenset({1}), writes=frozenset({3})),
        Access(reads=frozenset({3}), writes=frozenset({2})),  # 2 overlaps 1, but 1 died at step 1
    ]
    found = plan_check.conflicts(regions, accesses, inputs=[0], outputs=[2])
    assert [c.values for c in found] == [(0, 1)]
    assert found[0].lives == ((-1, 0), (0, 1))


def test_a_view_keeps_its_base_alive():
    """A planned tensor no instruction writes (a static reshape) aliases the latest earlier writer of its
    bytes: the base is poisoned only after the view's last reader, and the view itself never."""
    regions = {0: Region(1, 0, 64), 1: Region(1, 64, 64), 2: Region(1, 64, 64), 3: Region(1, 0, 64),
               4: Region(1, 128, 64)}
    accesses = [
        Access(reads=frozenset({0, 1}), writes=frozenset({1})),  # 1 = f(0)
        Access(reads=frozenset({2, 3}), writes=frozenset({3})),  # 3 = g(2), 2 is a view of 1
        Access(reads=frozenset({1, 3, 4}), writes=frozenset({4})),  # 4 = h(1, 3)
    ]
    schedule = poison_schedule(regions, accesses, inputs=[0], outputs=[4])
    assert schedule == [[0], [], [1, 3]]


def test_outputs_and_loop_bodies_stay_alive():
    """1 is written before it is read in each iteration: it dies at the jump. The input 0 is read again by the
    next iteration: it dies only after the loop, one step past the jump."""
    regions = {0: Region(1, 0, 16), 1: Region(1, 16, 16), 2: Region(1, 32, 16)}
    accesses = [
        Access(reads=frozenset({0}), writes=frozenset({1})),
        Access(reads=frozenset({1}), writes=frozenset({2})),
        Access(reads=frozenset({2}), writes=frozenset(), jump_to=0),  # loops back over steps 0..2
        Access(reads=frozenset(), writes=frozenset()),
    ]
    assert poison_schedule(regions, accesses, inputs=[0], outputs=[2]) == [[], [], [1], [0]]
