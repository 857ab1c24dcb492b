"""The flatbuffer writer, the public result, and the lowering's errors and provenance."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from ai_edge_litert import schema_py_generated as schema
from litert_harness import check_lowering, lower_single, quantize_and_capture, run_litert, run_tflm
from torch import nn

from imxrt.npu.litert import UnsupportedForLiteRT
from imxrt.npu.litert.ir import Graph, Operator, PerTensor, Tensor
from imxrt.npu.litert.writer import write_model


def _add_graph(with_unused: bool) -> Graph:
    """y = x + c with an int8 constant c = 3 at scale 0.5, zero point 0 (so r = 1.5)."""
    q = PerTensor(0.5, 0)
    x = Tensor("x", (1, 4), np.dtype(np.int8), q)
    c = Tensor("c", (1,), np.dtype(np.int8), q, np.array([3], np.int8).tobytes())
    y = Tensor("y", (1, 4), np.dtype(np.int8), q)
    graph = Graph(inputs=[x], outputs=[y])
    graph.operators.append(Operator("ADD", (x, c), (y,), None, (1,)))
    if with_unused:
        Tensor("unused", (100,), np.dtype(np.int8), q, bytes(100))  # created but read by no operator
    return graph


def test_written_model_is_schema_v3_and_runs():
    """x = [0, 1, -2, 10] at scale 0.5 plus 1.5 is [1.5, 2, 0.5, 6.5]: int8 [3, 4, 1, 13]."""
    tflite = write_model(_add_graph(with_unused=True))
    assert tflite[4:8] == b"TFL3"
    model = schema.ModelT.InitFromPackedBuf(bytearray(tflite), 0)
    assert model.version == 3 and len(model.subgraphs) == 1
    assert model.buffers[0].data is None or len(model.buffers[0].data) == 0  # the empty sentinel
    assert [t.name.decode() for t in model.subgraphs[0].tensors] == ["x", "c", "y"]  # no unused tensor

    from tflite_micro.python.tflite_micro import runtime

    interpreter = runtime.Interpreter.from_bytes(tflite, arena_size=16 * 1024)
    interpreter.set_input(np.array([[0, 1, -2, 10]], np.int8), 0)
    interpreter.invoke()
    assert interpreter.get_output(0).tolist() == [[3, 4, 1, 13]]


def test_operator_codes_above_127_use_the_extended_field():
    q = PerTensor(0.5, 0)
    x, y = (Tensor(n, (4,), np.dtype(np.int8), q) for n in "xy")
    graph = Graph(inputs=[x], outputs=[y], operators=[Operator("RELU_0_TO_1", (x,), (y,), None, ())])
    (code,) = schema.ModelT.InitFromPackedBuf(bytearray(write_model(graph)), 0).operatorCodes
    assert code.builtinCode == schema.BuiltinOperator.RELU_0_TO_1 == 152
    assert code.deprecatedBuiltinCode == schema.BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES


def test_same_graph_same_bytes():
    assert write_model(_add_graph(False)) == write_model(_add_graph(False))


class ConvBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return F.relu(self.conv(x)).mean((2, 3))


def test_every_op_carries_the_debug_handles_of_its_edge_nodes():
    torch.manual_seed(0)
    q = quantize_and_capture(ConvBlock(), (torch.randn(1, 3, 8, 8),))
    subgraph = lower_single(q)
    (program,) = q.partitions
    handles = {
        n.target.__name__: n.meta.get("debug_handle") for n in program.graph.nodes if n.op == "call_function"
    }
    conv = next(op for op in subgraph.ops if op.builtin == "CONV_2D")
    assert handles["aten.convolution.default"] in conv.debug_handles
    assert handles["aten.relu.default"] in conv.debug_handles  # fused into the conv
    mean = next(op for op in subgraph.ops if op.builtin == "AVERAGE_POOL_2D")  # a mean over H and W
    assert handles["aten.mean.dim"] in mean.debug_handles
    assert all(op.debug_handles for op in subgraph.ops)
    assert all(list(op.debug_handles) == sorted(op.debug_handles) for op in subgraph.ops)


def test_two_lowerings_in_one_process_give_the_same_bytes():
    torch.manual_seed(0)
    model, inputs = ConvBlock(), (torch.randn(1, 3, 8, 8),)
    first = lower_single(quantize_and_capture(model, inputs))
    second = lower_single(quantize_and_capture(model, inputs))
    assert first.tflite == second.tflite and first.ops == second.ops


def test_partition_io_describes_the_subgraph_tensors():
    torch.manual_seed(0)
    result = check_lowering(ConvBlock(), (torch.randn(1, 3, 8, 8),))
    model = schema.ModelT.InitFromPackedBuf(bytearray(result.subgraph.tflite), 0)
    graph = model.subgraphs[0]
    for io, index in zip(
        result.subgraph.inputs + result.subgraph.outputs, [*graph.inputs, *graph.outputs], strict=True
    ):
        tensor = graph.tensors[index]
        assert tuple(tensor.shape) == io.tflite_shape
        assert (
            np.isclose(tensor.quantization.scale[0], io.scale)
            and tensor.quantization.zeroPoint[0] == io.zero_point
        )


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def test_unconvertible_node_is_named_in_the_error():
    torch.manual_seed(0)
    q = quantize_and_capture(Fn(F.elu), (torch.randn(1, 4, 8, 8),), partitioner="all")
    with pytest.raises(UnsupportedForLiteRT) as error:
        lower_single(q)
    assert "(aten.elu.default)" in str(error.value) and "no LiteRT converter" in str(error.value)


def test_a_node_past_a_table_rule_fails_the_converters_assertion_naming_the_rule():
    """The capability table keeps such a node off the NPU; lowered anyway (a partitioner that takes every
    node), the converter's assertion names the rule it relies on."""
    torch.manual_seed(0)
    pool = Fn(lambda x: F.avg_pool2d(x, 3, 2, padding=1, ceil_mode=True))
    q = quantize_and_capture(pool, (torch.randn(1, 4, 8, 8),), partitioner="all")
    with pytest.raises(AssertionError, match="support.avg_pool_options"):
        lower_single(q)


@pytest.mark.parametrize("fn, builtin", [(torch.exp, "EXP"), (torch.log, "LOG")])
def test_exp_and_log_lower_for_litert_but_tflm_has_no_int8_kernel(fn, builtin):
    """TFLM implements EXP and LOG for float only: the NPU partitioner must not rely on TFLM for them."""
    torch.manual_seed(0)
    x = torch.rand(1, 4, 8, 8) + 0.1
    q = quantize_and_capture(Fn(fn), (x,), [(x,), (x * 1.2,)], partitioner="all")
    subgraph = lower_single(q)
    assert builtin in [op.builtin for op in subgraph.ops]
    (io_in,), (io_out,) = subgraph.inputs, subgraph.outputs
    x_q = np.clip(np.round(x.numpy() / io_in.scale) + io_in.zero_point, -128, 127).astype(np.int8)
    x_dq = torch.from_numpy((x_q.astype(np.float32) - io_in.zero_point) * io_in.scale)
    expected = np.clip(np.round(q.reference(x_dq).numpy() / io_out.scale) + io_out.zero_point, -128, 127)
    (got,) = run_litert(subgraph, [x_q])
    assert np.abs(got.astype(np.int32) - expected.astype(np.int32)).max() <= 1
    with pytest.raises(RuntimeError):
        run_tflm(subgraph, [x_q])


class FoldsAway(nn.Module):
    """conv -> pool -> flatten -> view back -> pool: the flatten and the view fold to no operator at all."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        y = F.max_pool2d(torch.relu(self.conv(x)), 2)
        y = y.flatten(1).view(1, 8, 4, 4)
        return F.avg_pool2d(y, 2)


def test_a_chain_that_folds_to_nothing_keeps_its_nodes_in_the_profiling_map():
    """Every delegated edge node's debug handle is on some LiteRT op, views that vanished included."""
    torch.manual_seed(0)
    q = quantize_and_capture(FoldsAway(), (torch.randn(1, 3, 8, 8),))
    subgraph = lower_single(q)
    (program,) = q.partitions
    delegated = {n.meta["debug_handle"] for n in program.graph.nodes
                 if n.op == "call_function" and n.meta.get("debug_handle") is not None
                 and "quantize" not in n.target.__name__}
    views = {n.meta["debug_handle"] for n in program.graph.nodes if n.op == "call_function"
             and n.target.__name__ == "aten.view_copy.default"}
    assert views, "the model must keep its views in the partition for this test to mean anything"
    covered = {h for op in subgraph.ops for h in op.debug_handles}
    assert delegated <= covered, sorted(delegated - covered)
