"""A `.pte` reaches only the operators a program of ours (or a plain ExecuTorch program on the stock
runtime's kernels) may contain, each called with arguments its schema takes.

Before the allowlist, the host runtime bound any operator name torch knows: `aten::from_file.out` put a
file of the machine into the program's output, and TorchScript internals (`prim::*`) crashed the process.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from edited_programs import compile_small_conv_net, edited
from executorch.exir import schema
from executorch.exir._serialize._program import deserialize_pte_binary

import imxrt
import imxrt.runtime
from imxrt.errors import BadFile
from imxrt.runtime import allowlist, ops


@pytest.fixture(scope="module")
def cpu_program() -> bytes:
    """A program whose every op runs on the CPU: quantize, cortex_m conv / linear, dequantize."""
    return compile_small_conv_net("imxrt700-cpu")


def _edited(pte: bytes, edit) -> bytes:
    return edited(pte, lambda program: edit(program.execution_plan[0]))


def _kernel_calls(plan: schema.ExecutionPlan) -> list[schema.KernelCall]:
    return [i.instr_args for i in plan.chains[0].instructions if isinstance(i.instr_args, schema.KernelCall)]


@pytest.mark.parametrize("name, overload", [
    ("aten::from_file", "out"),  # reads (or, shared, creates) a file of the machine
    ("aten::_save_jit_module", "default"),
    ("prim::NumToTensor", "Scalar"),  # TorchScript internals: segfaulted the process
    ("static_runtime::dequantize_copy", "out"),
    ("aten::add", "Tensor"),  # a functional op: the stock runtime calls only out variants
])
def test_an_operator_outside_the_allowlist_is_refused_by_name(cpu_program, name, overload):
    def rename(plan):
        plan.operators[0].name, plan.operators[0].overload = name, overload

    with pytest.raises(BadFile, match=f"calls operator {name}.{overload}, which the host runtime does not have"):
        imxrt.runtime.load(_edited(cpu_program, rename))


def test_no_registered_torch_operator_outside_the_allowlist_resolves():
    """Every operator torch has registered (a few thousand), other than the allowed ones, is refused."""
    allowed = allowlist.allowed_operators()
    refused = 0
    for qualified in torch._C._dispatch_get_all_op_names():
        name, _, overload = qualified.partition(".")
        operator = schema.Operator(name=name, overload=overload or "default")
        if ops.qualified_name(operator) in allowed | ops.OWN_OPERATORS:
            continue
        with pytest.raises(BadFile, match="does not have"):
            ops.resolve(operator, "model.pte")
        refused += 1
    assert refused > 1000


def test_the_allowlist_is_the_stock_runtimes_kernels():
    allowed = allowlist.allowed_operators()
    assert {"aten::convolution.out", "aten::_softmax.out", "dim_order_ops::_to_dim_order_copy.out",
            "quantized_decomposed::quantize_per_tensor.out", "quantized_decomposed::dequantize_per_channel.out",
            "cortex_m::quantized_conv2d.out"} <= allowed
    assert not {"aten::from_file.out", "aten::convolution.default",
                "quantized_decomposed::embedding_byte.out"} & allowed


def test_a_call_with_the_wrong_number_of_values_is_refused(cpu_program):
    def drop_argument(plan):
        _kernel_calls(plan)[0].args.pop(1)

    with pytest.raises(BadFile, match=r"instruction 0 calls cortex_m::quantize_per_tensor\.out but passes 7 values, "
                                      r"its schema takes 8"):
        imxrt.runtime.load(_edited(cpu_program, drop_argument))


def test_a_value_of_the_wrong_kind_is_refused(cpu_program):
    def scale_as_tensor(plan):
        call = _kernel_calls(plan)[0]
        call.args[1] = call.args[0]  # the input tensor where the float scale goes

    with pytest.raises(BadFile, match=r"passes a Tensor as argument 'scale' \(float\)"):
        imxrt.runtime.load(_edited(cpu_program, scale_as_tensor))


def test_an_op_may_not_write_into_a_constant(cpu_program):
    """Writing the output of a kernel into the weights would change the program for every later run."""
    def out_into_weights(plan):
        calls = _kernel_calls(plan)
        conv = next(c for c in calls if plan.operators[c.op_index].name == "cortex_m::quantized_conv2d")
        weight = conv.args[1]
        assert plan.values[weight].val.data_buffer_idx
        conv.args[-2] = conv.args[-1] = weight

    with pytest.raises(BadFile, match=r"calls cortex_m::quantized_conv2d\.out but writes 'out' into a value that is "
                                      r"not planned memory"):
        imxrt.runtime.load(_edited(cpu_program, out_into_weights))


def test_our_programs_pass_the_checks(cpu_program):
    program = imxrt.runtime.load(cpu_program)
    x = np.random.default_rng(0).standard_normal((1, 3, 6, 6)).astype(np.float32)
    assert program.forward(x)[0].shape == (1, 2)


def test_scalar_arithmetic_wraps_at_64_bits_like_the_device():
    """A loop a file writes cannot grow a Python int without bound; a zero divisor is an error."""
    multiply = ops.resolve(schema.Operator(name="executorch_prim::mul", overload="Scalar"), "model.pte")
    assert multiply.fn(1 << 62, 4) == 0 and multiply.fn(-(1 << 62), 2) == -(1 << 63)
    divide = ops.resolve(schema.Operator(name="executorch_prim::floordiv", overload="Scalar"), "model.pte")
    with pytest.raises(ValueError, match="by zero"):
        divide.fn(7, 0)


class _ProjectedLstm(torch.nn.Module):
    """An LSTM with a projection has no int8 kernel anywhere: it runs in float, its gates as linear layers."""

    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.LSTM(4, 8, batch_first=True, proj_size=2)
        self.fc = torch.nn.Linear(2, 3)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y[:, -1])


@pytest.mark.slow
@pytest.mark.parametrize("target", ["imxrt700", "imxrt700-cpu"])
def test_a_float_linear_on_the_cpu_calls_a_kernel_the_stock_runtime_has(target):
    """A float linear (kept whole through to_edge for the NPU) used to reach the program as aten::linear.out,
    which the stock runtime's portable kernels lack: it is addmm over the flattened input."""
    torch.manual_seed(0)
    data = [(torch.randn(1, 3, 4, generator=torch.Generator().manual_seed(i)),) for i in range(3)]
    result = imxrt.compile(_ProjectedLstm().eval(), data[0], target, data, imxrt.CompileOptions(show_progress=False))
    plan = deserialize_pte_binary(result.pte).program.execution_plan[0]
    names = {ops.qualified_name(op) for op in plan.operators}
    assert "aten::addmm.out" in names
    assert names <= allowlist.allowed_operators() | ops.OWN_OPERATORS, names - allowlist.allowed_operators()
    outputs = imxrt.runtime.load(result.pte).forward(data[1][0].numpy())[0]
    floats = [e for e in result.report["ops"] if e["execution"] == "cpu float"]
    assert outputs.shape == (1, 3) and floats


@pytest.mark.slow
def test_a_program_the_stock_runtime_could_not_load_is_refused_not_written(monkeypatch):
    """The safety net behind the decompositions: an op outside the stock runtime's kernels is a BadModel
    naming it, not a .pte the board would refuse."""
    from imxrt.cpu import lowering

    monkeypatch.setattr(lowering, "_PORTABLE_DECOMPOSITIONS", {})
    data = [(torch.randn(1, 3, 4, generator=torch.Generator().manual_seed(i)),) for i in range(2)]
    with pytest.raises(imxrt.errors.BadModel, match=r"would call aten::linear\.out on the CPU, which the stock "
                                                    r"ExecuTorch runtime has no kernel for"):
        imxrt.compile(_ProjectedLstm().eval(), data[0], "imxrt700-cpu", data, imxrt.CompileOptions(show_progress=False))
