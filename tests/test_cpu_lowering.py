"""CPU lowering: int8 clusters become cortex_m ops, bit-exact against TFLM, with ISA-sized scratch.

The oracle: the same quantized program compiled for the NPU target gives one LiteRT partition (a .tflite of
the whole int8 graph); TFLM runs it on a quantized input, and the CPU-lowered .pte runs in the host runtime on
the same input. Outputs must be equal to the bit.
"""

from __future__ import annotations

import copy
import functools

import numpy as np
import pytest
import torch
from compiled_examples import compiled_example
from executorch.exir import EdgeCompileConfig, memory, to_edge
from executorch.exir.dialects._ops import ops as exir_ops
from oracles import run_tflm, tflite_io
from program_checks import check_case
from torch import nn

import imxrt.runtime
from imxrt.cpu import scratch
from imxrt.cpu.isa import Isa
from imxrt.cpu.lowering import lower_to_cortex_m
from imxrt.cpu.lowering_graph import Editor
from imxrt.cpu.lowering_layout import TO_DIM_ORDER_COPY
from imxrt.npu.partitioner import ops_to_keep_whole
from imxrt.passes import EDGE_PASSES
from imxrt.pipeline import CompileOptions, compile, serialize
from imxrt.placement import PlacementLog
from imxrt.report.placement import build_report
from imxrt.targets import get_target

pytestmark = pytest.mark.slow  # every test here compiles models


class Cnn(nn.Module):
    """conv+relu, depthwise+relu6, residual add, max pool, hardswish, avg pool, flatten, linear."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pointwise = nn.Conv2d(8, 8, 1)
        self.fc = nn.Linear(8 * 2 * 2, 5)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        y = y + nn.functional.relu6(self.depthwise(y))
        y = nn.functional.hardswish(self.pointwise(nn.functional.max_pool2d(y, 2)))
        return self.fc(nn.functional.avg_pool2d(y, 2).flatten(1))


class Head(nn.Module):
    """linear+relu, sigmoid, tanh, mul, softmax."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 12)
        self.fc2 = nn.Linear(12, 12)

    def forward(self, x):
        y = torch.relu(self.fc1(x))
        return torch.softmax(torch.sigmoid(y) * torch.tanh(self.fc2(y)), dim=-1)


MODELS = {"cnn": (Cnn, (1, 3, 8, 8)), "head": (Head, (2, 16))}


@functools.cache
def npu_compiled(name: str):
    """(calibration data, CompileResult for imxrt700) of a test model: one NPU partition of the whole graph."""
    build, shape = MODELS[name]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = build().eval()
    generator = torch.Generator().manual_seed(1)
    data = [(torch.randn(shape, generator=generator),) for _ in range(8)]
    return data, compile(model, data[0], "imxrt700", data, CompileOptions(show_progress=False))


def int8_edge(quantized):
    """The pipeline's to_edge of a quantized program, without the NPU partitioner (a CPU-only target)."""
    keep = ops_to_keep_whole(quantized)
    config = EdgeCompileConfig(_check_ir_validity=False, preserve_ops=keep, _core_aten_ops_exception_list=keep)
    return to_edge(quantized, compile_config=config).transform([p() for p in EDGE_PASSES])


@functools.cache
def cpu_lowered(name: str, isa: Isa = Isa.DSP):
    """(edge program, lowered program, placement log) of a test model or a bundled example."""
    result = npu_compiled(name)[1] if name in MODELS else compiled_example(name)[2]
    edge = int8_edge(result.quantized)
    log = PlacementLog()
    return edge, lower_to_cortex_m(edge, isa, log), log


def call_nodes(program, op=None):
    nodes = [n for n in program.exported_program().graph.nodes if n.op == "call_function"]
    return nodes if op is None else [n for n in nodes if n.target == op]


def cortex_m(name: str):
    return getattr(exir_ops.edge.cortex_m, name).default


@pytest.mark.parametrize("isa", [Isa.DSP, Isa.MVE])
@pytest.mark.parametrize("name", ["cnn", "head", "ds_cnn", "mobilenet_v1", "resnet8", "autoencoder"])
def test_cpu_program_equals_tflm_on_the_npu_partition(name, isa):
    """Quantize x with the partition's input qparams, run TFLM on it and the CPU .pte on its exact float
    value (the program's own quantize gives back the same int8), compare the int8 outputs."""
    if name in MODELS:
        data, result = npu_compiled(name)
        inputs = [x for (x,) in data[:4]]
    else:
        source, _, result = compiled_example(name)
        generator = torch.Generator().manual_seed(3)
        inputs = [torch.rand(source.example_inputs[0].shape, generator=generator) * 2 - 1 for _ in range(8)]
    assert len(result.partitions) == 1
    tflite = result.partitions[0]
    (in_shape, _, in_scale, in_zp), = tflite_io(tflite)[0]
    (_, _, out_scale, out_zp), = tflite_io(tflite)[1]
    # to_executorch rewrites the graph it serializes: serialize a copy of the shared program
    program = imxrt.runtime.load(serialize(copy.deepcopy(cpu_lowered(name, isa)[1])))
    for x in inputs:
        q = np.clip(np.round(x.numpy() / np.float32(in_scale)) + in_zp, -128, 127).astype(np.int8)
        expected = run_tflm(tflite, [q if q.shape == in_shape else q.transpose(0, 2, 3, 1)])[0]
        y = program.forward(torch.from_numpy((q.astype(np.float32) - in_zp) * np.float32(in_scale)))[0]
        got = np.clip(np.round(np.asarray(y) / np.float32(out_scale)) + out_zp, -128, 127).astype(np.int8)
        np.testing.assert_array_equal(got, expected.reshape(got.shape))


@pytest.mark.parametrize("name", ["cnn", "head"])
def test_every_int8_compute_op_runs_a_cortex_m_kernel(name):
    """No dequantize -> float op -> quantize is left: only cortex_m ops, scratch allocs, layout copies and
    the flatten (a view on int8 values) remain."""
    _, lowered, log = cpu_lowered(name)
    others = {n.target for n in call_nodes(lowered) if getattr(n.target, "namespace", "") != "cortex_m"}
    assert others <= {memory.alloc, TO_DIM_ORDER_COPY, exir_ops.edge.aten.view_copy.default}
    assert all("runs in int8 on the CPU" in d.reason for d in log.decisions.values())


def test_cnn_lowers_to_the_expected_kernels_and_two_layout_copies():
    """channels_last from the input quantize to the avg pool: one copy in, one before the flatten."""
    _, lowered, _ = cpu_lowered("cnn")
    names = [n.target.__name__.split(".")[1] for n in call_nodes(lowered)
             if getattr(n.target, "namespace", "") == "cortex_m"]
    assert names == ["quantize_per_tensor", "quantized_conv2d", "quantized_depthwise_conv2d", "quantized_add",
                     "quantized_max_pool2d", "quantized_conv2d", "quantized_activation", "quantized_avg_pool2d",
                     "quantized_linear", "dequantize_per_tensor"]
    copies = call_nodes(lowered, TO_DIM_ORDER_COPY)
    assert [c.kwargs["dim_order"] for c in copies] == [[0, 2, 3, 1], [0, 1, 2, 3]]
    for conv in call_nodes(lowered, cortex_m("quantized_conv2d")):
        assert conv.args[0].meta["val"].is_contiguous(memory_format=torch.channels_last)


class GlobalPoolCnn(nn.Module):
    """conv, a global average pool, flatten, linear (MobileNet's head)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))


def test_a_channels_last_input_and_a_global_pool_need_no_layout_copy():
    """The input quantize keeps a channels_last input's order, and [N, C, 1, 1] has the same bytes in both
    orders, so the flatten reads the pool's output as it is; the outputs equal the NCHW-input program's."""
    torch.manual_seed(0)
    model = GlobalPoolCnn().eval()
    generator = torch.Generator().manual_seed(1)
    data = [(torch.randn(1, 3, 8, 8, generator=generator),) for _ in range(4)]
    last = [(x.contiguous(memory_format=torch.channels_last),) for (x,) in data]
    options = CompileOptions(show_progress=False)
    nchw = compile(model, data[0], "imxrt700-cpu", data, options)
    nhwc = compile(model, last[0], "imxrt700-cpu", last, options)
    assert nchw.report["summary"]["layout_copies"] == 1  # the NCHW input into the conv
    assert nhwc.report["summary"]["layout_copies"] == 0
    for (x,), (x_last,) in zip(data, last, strict=True):
        # calibration sums floats in another order for a channels_last input: compare the int8 outputs
        np.testing.assert_array_equal(_int8_output(nhwc, imxrt.runtime.load(nhwc.pte).forward(x_last)[0]),
                                      _int8_output(nchw, imxrt.runtime.load(nchw.pte).forward(x)[0]))


def _int8_output(result, y):
    """The program's float output back on its int8 grid (the qparams of the quantized model's output)."""
    output = result.quantized.graph.output_node().args[0][0]
    scale, zero_point = output.args[1], output.args[2]
    return np.round(np.asarray(y, np.float64) / scale).astype(np.int64) + zero_point


@pytest.mark.parametrize("isa", list(Isa))
def test_scratch_allocs_have_the_cmsis_nn_size_of_the_isa(isa):
    _, lowered, _ = cpu_lowered("cnn", isa)
    conv = call_nodes(lowered, cortex_m("quantized_conv2d"))[0]
    depthwise = call_nodes(lowered, cortex_m("quantized_depthwise_conv2d"))[0]
    pool = call_nodes(lowered, cortex_m("quantized_avg_pool2d"))[0]
    nhwc = (1, 8, 8, 3)
    assert conv.args[-1].target is memory.alloc
    assert conv.args[-1].meta["val"].shape == (scratch.conv2d_scratch_bytes(
        isa, nhwc, (8, 3, 3, 3), (1, 8, 8, 8), (1, 1), (1, 1), (1, 1)),)
    assert depthwise.args[-1].meta["val"].shape == (scratch.depthwise_conv2d_scratch_bytes(
        isa, (1, 8, 8, 8), (1, 3, 3, 8), (1, 8, 8, 8), (1, 1), (1, 1), (1, 1)),)
    assert pool.args[-1].meta["val"].shape == (scratch.avg_pool2d_scratch_bytes(
        isa, (1, 4, 4, 8), (1, 2, 2, 8), (2, 2), (2, 2), (0, 0)),)
    assert pool.args[-1].meta["val"].dtype == torch.uint8


def test_linear_on_mve_takes_a_kernel_sum_instead_of_the_bias():
    """kernel_sum[i] = -zp_in * sum_j w[i, j] + bias[i]; on DSP the bias goes in as is."""
    _, mve, _ = cpu_lowered("head", Isa.MVE)
    _, dsp, _ = cpu_lowered("head", Isa.DSP)
    (linear_mve, _), (linear_dsp, _) = (call_nodes(p, cortex_m("quantized_linear")) for p in (mve, dsp))
    assert linear_mve.args[2] is None and linear_dsp.args[3] is None
    values_mve, values_dsp = Editor(mve.exported_program()), Editor(dsp.exported_program())
    weights = values_dsp.tensor(linear_dsp.args[1]).to(torch.int64)
    bias = values_dsp.tensor(linear_dsp.args[2]).to(torch.int64)
    kernel_sum = values_mve.tensor(linear_mve.args[3])
    assert torch.equal(kernel_sum, (linear_dsp.args[4] * weights.sum(1) + bias).to(torch.int32))


def test_the_float_weights_the_kernels_replaced_are_not_serialized():
    edge, lowered, _ = cpu_lowered("cnn")
    before, after = edge.exported_program(), lowered.exported_program()
    depthwise = call_nodes(lowered, cortex_m("quantized_depthwise_conv2d"))[0]
    assert tuple(Editor(after).tensor(depthwise.args[1]).shape) == (1, 3, 3, 8)  # [1, kh, kw, C_out]
    pytorch_layout = [name for name, t in before.state_dict.items() if tuple(t.shape) == (8, 1, 3, 3)]
    assert pytorch_layout and not any(name in after.state_dict for name in pytorch_layout)
    assert all(n.users for n in after.graph.nodes if n.op == "placeholder")


def test_cortex_m_nodes_keep_the_debug_handles_of_the_edge_nodes_they_replace():
    edge, lowered, _ = cpu_lowered("cnn")
    edge_convs = [n for n in edge.exported_program().graph.nodes
                  if n.target == exir_ops.edge.aten.convolution.default]
    conv = call_nodes(lowered, cortex_m("quantized_conv2d"))[0]
    assert conv.meta["debug_handle"] == edge_convs[0].meta["debug_handle"]
    assert conv.meta["edge_nodes"][0] == edge_convs[0].name and len(conv.meta["edge_nodes"]) == 2  # + relu
    assert edge_convs[0].meta["debug_handle"] in conv.meta["replaced_debug_handles"]


def test_an_op_without_int8_kernel_stays_float_and_says_why():
    class CumSum(nn.Module):
        def forward(self, x):
            return torch.cumsum(torch.relu(x), dim=-1)

    x = torch.randn(1, 8)
    result = compile(CumSum().eval(), (x,), "imxrt700", [(x,)], CompileOptions(show_progress=False))
    _, lowered, log = _lower(result.quantized)
    reasons = {d.op: d.reason for d in log.decisions.values()}
    # each fact once: the NPU's verdict (the cause) and where it runs were both "runs in float on the CPU"
    assert reasons["aten.cumsum.default"].count("runs in float on the CPU") == 1
    assert reasons["aten.cumsum.default"].count("no int8 rule") == 1
    report, _ = build_report(lowered, log, get_target("imxrt700"), "reference")
    by_op = {op["op"]: op for op in report["ops"]}
    assert by_op["aten.cumsum.default"]["execution"] == "cpu float"
    assert by_op["aten.relu.default"]["execution"] == "cpu int8"
    assert by_op["aten.relu.default"]["kernel"] == "cortex_m.quantized_activation.default"


class TokenMean(nn.Module):
    """Means over one dim of a [B, T, F] sequence: its tokens, with and without keepdim, by a positive and a
    negative dim; its features; and over the steps of a [B, T] signal (a streaming VAD's last mean)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 6)

    def forward(self, x):
        y = self.fc(x)
        return torch.relu(y).mean(1), y.mean(-2, keepdim=True), y.mean(-1), torch.sigmoid(y[..., 0]).mean(1)


def test_a_mean_over_one_dim_of_a_sequence_is_an_int8_average_pool():
    """A [B, T, F] tensor holds the bytes of the one-channel image [1, 1, B * T, F] (its NCHW and NHWC orders
    agree), so a mean over T is one quantized_avg_pool2d by a T x 1 window moved by T rows, between two views,
    a batch of one; it had run in float on the CPU. The program is within the rounding bound of the quantized
    one, and its dim orders are the kernels'."""
    generator = torch.Generator().manual_seed(0)
    data = [(torch.randn(2, 7, 8, generator=generator),) for _ in range(8)]
    result = compile(TokenMean().eval(), data[0], "imxrt700-cpu", data, CompileOptions(show_progress=False))
    means = [op for op in result.report["ops"] if op["op"] == "aten.mean.dim"]
    assert means and all(op["execution"] == "cpu int8" for op in means), means
    assert sum(op["kernel"] == "cortex_m.quantized_avg_pool2d.default" for op in means) == 4
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in data[:2]:
        check_case(result, inputs)


class Sums(nn.Module):
    """Sums users write: attention pooling over a sequence's tokens (softmax weights times the states, summed
    over T), a sum over the features of a sequence, over H and W of an image (keepdim), over every dim, and
    over the channels of a rank-5 tensor (a transpose at its collapsed rank first), and over H and W of a
    convolution's channels_last output."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 6)
        self.score = nn.Linear(6, 1)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        h = torch.tanh(self.fc(x))
        pooled = (torch.softmax(self.score(h), dim=1) * h).sum(dim=1)
        image = h.reshape(2, 3, 7, 2)
        return (pooled, torch.relu(h.sum(-1)), image.sum((2, 3), keepdim=True), h.sum(),
                h.reshape(2, 7, 3, 2, 1).sum(2), self.conv(image).sum((2, 3)))


def test_a_sum_is_an_int8_fully_connected_layer_by_a_weight_of_ones():
    """A sum is quantized_linear by ones [1, D] on the summed dims moved last: the exact int32 sum, requantized
    once. It had run in float on the CPU (attention pooling on imxrt700-cpu); the program is within the
    rounding bound of the quantized one."""
    generator = torch.Generator().manual_seed(0)
    data = [(torch.randn(2, 7, 8, generator=generator),) for _ in range(8)]
    result = compile(Sums().eval(), data[0], "imxrt700-cpu", data, CompileOptions(show_progress=False))
    sums = [op for op in result.report["ops"] if op["op"] == "aten.sum.dim_IntList"]
    assert sums and all(op["execution"] == "cpu int8" for op in sums), sums
    assert sum(op["kernel"] == "cortex_m.quantized_linear.default" for op in sums) == 6
    assert sum(op["kernel"] == "cortex_m.transpose.default" for op in sums) == 2  # the tokens; rank 5
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in data[:2]:
        check_case(result, inputs)


class RowAndColumnMeans(nn.Module):
    """Means over W alone and over H alone (keepdim) of an image: what a 1-D net's final mean over time
    becomes once its convolutions are 2-D."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        return y.mean(3), y.mean(-2, keepdim=True)


def test_a_mean_over_the_rows_or_columns_of_an_image_is_an_int8_average_pool():
    """A 1 x W (H x 1) window; it had run in float on the CPU."""
    generator = torch.Generator().manual_seed(0)
    data = [(torch.randn(1, 3, 5, 6, generator=generator),) for _ in range(8)]
    result = compile(RowAndColumnMeans().eval(), data[0], "imxrt700-cpu", data, CompileOptions(show_progress=False))
    means = [op for op in result.report["ops"] if op["op"] == "aten.mean.dim"]
    assert sum(op["kernel"] == "cortex_m.quantized_avg_pool2d.default" for op in means) == 2
    assert result.report["summary"]["ops_cpu_float"] == 0
    for inputs in data[:2]:
        check_case(result, inputs)


def _lower(quantized, isa: Isa = Isa.DSP):
    edge = int8_edge(quantized)
    log = PlacementLog()
    return edge, lower_to_cortex_m(edge, isa, log), log


def test_the_program_it_was_given_is_left_unchanged():
    edge, _, _ = cpu_lowered("head")
    assert not [n for n in edge.exported_program().graph.nodes
                if getattr(n.target, "namespace", "") == "cortex_m"]


def test_plan_checking_treats_cmsis_nn_scratch_as_written():
    """The stock schemas declare ``Tensor scratch`` without (a!); poisoning must still see the kernels
    write it, or it would poison live data through a scratch buffer that shares its bytes."""
    program = serialize(copy.deepcopy(cpu_lowered("ds_cnn")[1]))
    source = compiled_example("ds_cnn")[0]
    x = torch.rand(source.example_inputs[0].shape, generator=torch.Generator().manual_seed(5)) * 2 - 1
    np.testing.assert_array_equal(imxrt.runtime.load(program, check_plan=True).forward(x)[0],
                                  imxrt.runtime.load(program).forward(x)[0])
