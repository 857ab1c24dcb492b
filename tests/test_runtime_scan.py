"""The loop ExecuTorch's emitter writes for ``torch.ops.higher_order.scan`` (``_emit_scan``) runs on the host
runtime as on the stock one, and a file that bends it is refused by the stock kernels' own checks.

The loop: ``aten::sym_size.int`` takes the trip count from xs and ``aten::copy_`` puts the initial carry in place;
then per iteration ``select_copy`` takes x[t], the body runs, ``aten::copy_`` carries its new state,
``executorch_prim::et_copy_index.tensor`` writes row t of each stacked output (planned DYNAMIC_BOUND and resized to
t + 1 rows), ``add`` / ``eq`` step the index and a JumpFalseCall jumps back; ``sub`` resets the index for the
next forward. Before, loading it failed: "calls operator aten::sym_size.int, which the host runtime does not have".

Oracle: ExecuTorch's pybind runtime on the same bytes. Bodies of exact ops (elementwise float ops, int8 / int16
adds and copies) equal eager PyTorch as well; a Linear's addmm sums in the portable kernel's order, which is the
stock runtime's and not torch's blocked one.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from edited_programs import edited
from executorch.exir import EdgeCompileConfig, schema, to_edge
from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer
from torch._higher_order_ops.scan import scan
from torch.utils._pytree import tree_leaves

import imxrt.runtime
from imxrt.errors import BadFile
from imxrt.runtime.plan_check import Access, Region, poison_schedule


class LinearRelu(torch.nn.Module):
    """h = relu(x_t + linear(h)); the ys are every h."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, xs, h0):
        def body(h, x):
            h = torch.relu(x + self.linear(h))
            return h, h.clone()
        return scan(body, h0, xs)


class LinearTanh(LinearRelu):
    """The reported program: h = tanh(x_t + linear(h))."""

    def forward(self, xs, h0):
        def body(h, x):
            h = torch.tanh(x + self.linear(h))
            return h, h.clone()
        return scan(body, h0, xs)


class Elementwise(torch.nn.Module):
    """h = relu(x_t + h * w) - 0.5: exact float ops, so eager PyTorch gives the stock runtime's bits too."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(1, 8))

    def forward(self, xs, h0):
        def body(h, x):
            h = torch.relu(x + h * self.weight) - 0.5
            return h, h.clone()
        return scan(body, h0, xs)


class TwoCarries(torch.nn.Module):
    """An LSTM-like (h, c) carry and two stacked outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.recur, self.gate = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, xs, h0, c0):
        def body(carry, x):
            h, c = carry
            c = c + torch.relu(self.gate(x) * h)
            h = torch.relu(x + self.recur(h)) - c
            return (h, c), (h * 2, c.clone())
        return scan(body, (h0, c0), xs)


class Integers(torch.nn.Module):
    """An int8 carry plus an int8 x_t (aten.add wraps at 8 bits) and an int16 carry copied through."""

    def forward(self, xs, h0, n0):
        def body(carry, x):
            h, n = carry
            h = torch.ops.aten.add.Tensor(h, x)
            return (h, n.clone()), (h.clone(), n.clone())
        return scan(body, (h0, n0), xs)


class StackOnly(Elementwise):
    """Only the stacked ys leave, doubled by an op after the loop: the carry lives in the loop alone, and a
    kernel reads the output et_copy_index grew."""

    def forward(self, xs, h0):
        return super().forward(xs, h0)[1] * 2


def _float(*shapes):
    return lambda: tuple(torch.randn(*shape) for shape in shapes)


def _integers():
    return (torch.randint(-128, 128, (7, 2, 3), dtype=torch.int8), torch.randint(-128, 128, (2, 3), dtype=torch.int8),
            torch.randint(-30000, 30000, (4,), dtype=torch.int16))


# name -> (model, inputs, whether eager PyTorch computes the stock runtime's bits)
CASES = {
    "linear_relu": lambda: (LinearRelu(), _float((5, 1, 8), (1, 8)), False),
    "one_step": lambda: (LinearRelu(), _float((1, 1, 8), (1, 8)), False),
    "400_steps": lambda: (LinearRelu(), _float((400, 1, 8), (1, 8)), False),
    "elementwise": lambda: (Elementwise(), _float((5, 1, 8), (1, 8)), True),
    "two_carries_two_ys": lambda: (TwoCarries(), _float((6, 1, 8), (1, 8), (1, 8)), False),
    "int8_int16": lambda: (Integers(), _integers, True),
    "stacked_output_read_after": lambda: (StackOnly(), _float((5, 1, 8), (1, 8)), True),
}


@functools.cache
def _compiled(case: str) -> tuple[bytes, tuple[torch.Tensor, ...], list[np.ndarray] | None]:
    """The case's .pte (plain ExecuTorch, no imxrt passes), its inputs and, if exact, eager PyTorch's outputs."""
    torch.manual_seed(0)
    model, inputs, exact = CASES[case]()
    model, inputs = model.eval(), inputs()
    return _pte(model, inputs), inputs, [t.detach().numpy() for t in tree_leaves(model(*inputs))] if exact else None


def _pte(model: torch.nn.Module, inputs: tuple) -> bytes:
    exported = torch.export.export(model, inputs)
    return bytes(to_edge(exported, compile_config=EdgeCompileConfig(_check_ir_validity=False)).to_executorch().buffer)


def _stock(module, inputs) -> list[np.ndarray]:
    return [t.numpy() for t in module.forward(tuple(inputs))]


@pytest.mark.parametrize("check_plan", [False, True], ids=["plain", "check_plan"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_scan_runs_as_on_the_stock_runtime(case, check_plan):
    """Twice in a row on one loaded program: the index is reset, the stacked outputs grow again from one row.
    With ``check_plan``, what the loop carries is never poisoned between its iterations."""
    pte, inputs, eager = _compiled(case)
    stock = _load_for_executorch_from_buffer(pte)
    program = imxrt.runtime.load(pte, check_plan=check_plan)
    for _ in range(2):
        got, expected = program.forward(*inputs), _stock(stock, inputs)
        assert [(g.shape, g.dtype) for g in got] == [(e.shape, e.dtype) for e in expected]
        assert all(np.array_equal(g, e) for g, e in zip(got, expected, strict=True))
        if eager is not None:
            assert all(np.array_equal(g, e) for g, e in zip(got, eager, strict=True))


def test_the_reported_tanh_scan_runs():
    """The program of the report. Its loop is exact (the last row of ys is the final carry, bit for bit); its
    tanh is torch's on the host and the C library's tanhf on the stock runtime, which differ in the last bits
    (like any float tanh program, scan or not): here within 4 float ULPs of 1, over five steps."""
    model, xs, h0 = LinearTanh().eval(), torch.randn(5, 1, 8), torch.zeros(1, 8)
    pte = _pte(model, (xs, h0))
    carry, ys = imxrt.runtime.load(pte).forward(xs, h0)
    assert ys.shape == (5, 1, 8) and np.array_equal(ys[-1], carry)
    for got, expected in zip((carry, ys), _stock(_load_for_executorch_from_buffer(pte), (xs, h0)), strict=True):
        np.testing.assert_allclose(got, expected, rtol=0, atol=4 * np.finfo(np.float32).eps)


def test_a_loop_keeps_what_it_carries_alive_until_it_ends():
    """Poisoned after the loop (step 5), not at its jump back: the input 0 and the carry 1, which the body reads
    before writing, and the stacked output 3, of which each iteration writes one row. The body's temporary 2,
    written before it is read, dies at the jump. (Before, all four died at the jump: the second iteration read
    poison.)"""
    regions = {v: Region(1, 16 * v, 16) for v in range(4)}
    accesses = [
        Access(reads=frozenset({0}), writes=frozenset({1})),  # carry = init(x)
        Access(reads=frozenset({0, 1}), writes=frozenset({2})),  # loop: t = f(x, carry)
        Access(reads=frozenset({2}), writes=frozenset({1})),  # carry = t
        Access(reads=frozenset({2, 3}), writes=frozenset({3}), updates=frozenset({3})),  # row i of 3 = t
        Access(reads=frozenset(), writes=frozenset(), jump_to=1),
        Access(reads=frozenset(), writes=frozenset()),
    ]
    assert poison_schedule(regions, accesses, inputs=[0], outputs=[]) == [[], [], [], [], [2], [0, 1, 3]]


# -- hostile files: the linear_relu program with one value or argument changed


def _calls(plan: schema.ExecutionPlan, name: str) -> list[schema.KernelCall]:
    ops = {i for i, op in enumerate(plan.operators) if f"{op.name}.{op.overload or 'default'}" == name}
    return [i.instr_args for i in plan.chains[0].instructions
            if isinstance(i.instr_args, schema.KernelCall) and i.instr_args.op_index in ops]


def _copy_index(plan: schema.ExecutionPlan) -> schema.KernelCall:
    return _calls(plan, "executorch_prim::et_copy_index.tensor")[0]


def _stacked(plan: schema.ExecutionPlan) -> schema.Tensor:
    return plan.values[_copy_index(plan).args[0]].val


def _shrink_stacked(plan):
    _stacked(plan).sizes = [3, 1, 8]  # DYNAMIC_BOUND with room for 3 rows, written 5


def _static_stacked(plan):
    _stacked(plan).shape_dynamism = schema.TensorShapeDynamism.STATIC


def _int8_stacked(plan):
    _stacked(plan).scalar_type = schema.ScalarType.CHAR  # 5 x 8 bytes for rows of 8 floats


def _start_index_at_minus_one(plan):
    plan.values[_copy_index(plan).args[2]].val.int_val = -1


def _copy_from_xs(plan):
    _copy_index(plan).args[1] = plan.inputs[0]  # (5, 1, 8), as copy_to


def _copy_index_with_a_result(plan):
    _copy_index(plan).args.append(_copy_index(plan).args[0])


def _copy_index_into_the_weight(plan):
    _copy_index(plan).args[0] = next(i for i, v in enumerate(plan.values) if isinstance(v.val, schema.Tensor)
                                     and v.val.allocation_info is None and v.val.sizes == [8, 8])


def _sym_size_of_dim(dim: int):
    def edit(plan):
        plan.values[_calls(plan, "aten::sym_size.int")[0].args[1]].val.int_val = dim
    return edit


def _non_blocking_copy(plan):
    plan.values[_calls(plan, "aten::copy_.default")[0].args[2]].val.bool_val = True


def _step_by_a_bool(plan):
    plan.values[_calls(plan, "executorch_prim::add.Scalar")[0].args[1]].val = schema.Bool(True)


# name -> (edit of the plan, the one line's reason, whether the stock runtime fails it too; the others would
# abort its process: an ET_CHECK, or a write into constant memory)
HOSTILE = {
    "row_past_the_capacity": (_shrink_stacked, "instruction 9 calls executorch_prim::et_copy_index.tensor but writing "
                              "row 3 of copy_to would resize it to (4, 1, 8), past the 24 elements it is planned for",
                              True),
    "static_stacked_output": (_static_stacked, "writing row 0 of copy_to would resize the static (5, 1, 8) tensor to "
                              "(1, 1, 8)", True),
    "row_past_the_bytes": (_int8_stacked, "row 0 of copy_to would end at byte 32, past its 8 bytes", True),
    "negative_index": (_start_index_at_minus_one, "index -1 is negative", True),
    "copy_from_of_the_same_rank": (_copy_from_xs, "copy_to has 3 dims and copy_from 3; copy_to must have one more",
                                   True),
    "copy_index_with_a_result_value": (_copy_index_with_a_result, "passes 4 values, its schema takes 3", True),
    "copy_index_into_a_constant": (_copy_index_into_the_weight,
                                   "writes 'copy_to' into a value that is not planned memory", False),
    "sym_size_dim_out_of_range": (_sym_size_of_dim(3), "instruction 0 calls aten::sym_size.int but dim 3 is not a "
                                  "dim of the (5, 1, 8) tensor (0..2)", False),
    "sym_size_negative_dim": (_sym_size_of_dim(-1), "dim -1 is not a dim of the (5, 1, 8) tensor", False),
    "non_blocking_carry_copy": (_non_blocking_copy, "instruction 1 calls aten::copy_.default but non_blocking is True",
                                True),
    "index_stepped_by_a_bool": (_step_by_a_bool, "calls executorch_prim::add.Scalar but its operands are int, bool; "
                                "it takes ints and floats", True),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_bent_scan_loop_is_one_bad_file(case):
    edit, reason, stock_fails = HOSTILE[case]
    pte, inputs, _ = _compiled("linear_relu")
    bad = edited(pte, lambda program: edit(program.execution_plan[0]))
    with pytest.raises(BadFile) as refused:
        imxrt.runtime.load(bad).forward(*inputs)
    assert reason in str(refused.value) and "\n" not in str(refused.value)
    if stock_fails:  # the check is the stock kernel's: the stock runtime refuses the file too
        with pytest.raises(RuntimeError, match="Failed to execute method forward"):
            _load_for_executorch_from_buffer(bad).forward(tuple(inputs))
