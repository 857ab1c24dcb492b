"""The cost model: its formulas at their boundaries, its tables, and the published latencies it was calibrated on.

The NPU formulas are checked on hand-built LiteRT ops (channels against the 8 x 8 array, the overhead
terms, the bus bound); the CPU ones on single nodes; the calibration points compile their example and must
land within 25% of the published figure.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.fx import Graph

from imxrt.cpu.isa import Isa
from imxrt.perf import cpu, npu, published_latencies
from imxrt.perf.estimate import latency_line
from imxrt.pipeline import CompileOptions, compile
from imxrt.source import load_source
from imxrt.targets import get_target
from tests.compiled_examples import EXAMPLES

OP = npu.tfl.BuiltinOperator
N3 = get_target("imxrt700").npu  # 8 pipes x 8 MACs


def _t(*shape: int, constant: bool = False, item: int = 1) -> npu.Tensor:
    return npu.Tensor(tuple(shape), math.prod(shape) * item, constant)


def _conv(c_in: int, c_out: int, k: int = 1, pixels: int = 16) -> npu.LiteRTOp:
    return npu.LiteRTOp(OP.CONV_2D, (_t(1, pixels, 1, c_in), _t(c_out, k, k, c_in, constant=True),
                                     _t(c_out, constant=True, item=4)), (_t(1, pixels, 1, c_out),))


# (C_in, C_out, utilisation): the last value that fills a pipeline's MACs or the pipelines, and the first
# that needs one more pass.
@pytest.mark.parametrize("c_in, c_out, utilisation", [
    (8, 8, 1.0), (9, 8, 9 / 16), (8, 9, 9 / 16), (1, 64, 1 / 8), (3, 32, 3 / 8), (64, 64, 1.0), (16, 10, 10 / 16),
])
def test_conv_channels_against_the_array(c_in, c_out, utilisation):
    cost = npu.kernel_cost(_conv(c_in, c_out, k=3, pixels=100), N3)
    assert cost.macs == 100 * 9 * c_in * c_out
    assert cost.utilisation == pytest.approx(utilisation)
    assert cost.compute_cycles == 100 * 9 * math.ceil(c_in / 8) * math.ceil(c_out / 8)


def test_depthwise_uses_one_mac_per_pipeline():
    op = npu.LiteRTOp(OP.DEPTHWISE_CONV_2D, (_t(1, 25, 5, 64), _t(1, 3, 3, 64, constant=True)), (_t(1, 25, 5, 64),))
    cost = npu.kernel_cost(op, N3)
    assert cost.utilisation == pytest.approx(1 / 8)
    assert cost.compute_cycles == 125 * 9 * 64 // 8


def test_fully_connected_rows_and_channels():
    op = npu.LiteRTOp(OP.FULLY_CONNECTED, (_t(2, 64), _t(12, 64, constant=True)), (_t(2, 12),))
    cost = npu.kernel_cost(op, N3)
    assert (cost.macs, cost.compute_cycles) == (2 * 12 * 64, 2 * 2 * 8)


def test_kernel_is_overhead_plus_the_larger_of_compute_and_bus():
    compute_bound = npu.kernel_cost(_conv(64, 64, k=3, pixels=100), N3)
    assert compute_bound.compute_cycles > compute_bound.bus_cycles
    assert compute_bound.cycles == npu.KERNEL_OVERHEAD + compute_bound.compute_cycles
    pad = npu.LiteRTOp(OP.PAD, (_t(1, 49, 10, 1),), (_t(1, 59, 12, 1),))
    bus_bound = npu.kernel_cost(pad, N3)
    assert bus_bound.compute_cycles == 0
    assert bus_bound.bus_cycles == math.ceil((490 + 708) / npu.BUS_BYTES_PER_CYCLE)
    assert bus_bound.cycles == npu.KERNEL_OVERHEAD + bus_bound.bus_cycles


def test_reshape_is_no_kernel_and_transpose_moves_bytes():
    reshape = npu.LiteRTOp(OP.RESHAPE, (_t(1, 1, 1, 64),), (_t(1, 64),))
    assert npu.kernel_cost(reshape, N3).cycles == 0
    transpose = npu.LiteRTOp(OP.TRANSPOSE, (_t(1, 3, 32, 32),), (_t(1, 32, 32, 3),))
    assert npu.kernel_cost(transpose, N3).bus_cycles == 3072 // npu.TRANSPOSE_BYTES_PER_CYCLE


def test_pool_reads_every_tap():
    pool = npu.LiteRTOp(OP.MAX_POOL_2D, (_t(1, 32, 32, 64),), (_t(1, 16, 16, 64),), window=(2, 2))
    assert npu.kernel_cost(pool, N3).compute_cycles == 16 * 16 * 64 * 4 // 64


def test_unknown_litert_op_has_no_silent_cost():
    with pytest.raises(KeyError, match="CUSTOM"):
        npu.kernel_cost(npu.LiteRTOp(OP.CUSTOM, (_t(4),), (_t(4),)), N3)


def test_partition_adds_one_call_overhead():
    kernels = [npu.kernel_cost(_conv(8, 8), N3)] * 3
    assert npu.partition_cycles(kernels) == npu.INFERENCE_OVERHEAD + 3 * kernels[0].cycles
    assert npu.partition_cycles([]) == npu.INFERENCE_OVERHEAD


def test_every_cortex_m_op_has_a_cost_row():
    from imxrt.cortex_m.ops import OPS

    names = {f"cortex_m.{op.name}.default" for op in OPS}
    rows = {name for name in cpu.KERNEL_WORK if name.startswith("cortex_m.")}
    assert names == rows


class _Op:
    def __init__(self, name: str) -> None:
        self.__name__ = name

    def __call__(self, *args):  # an fx call_function target is a callable
        raise NotImplementedError


def _node(op: str, out_shape: tuple[int, ...], macs: int = 0, args=()):
    graph = Graph()
    node = graph.call_function(_Op(op), tuple(args))
    node.meta["val"] = torch.empty(out_shape, dtype=torch.int8)
    if macs:
        node.meta["edge_macs"] = macs
    return node


def test_cpu_mac_kernel_is_overhead_plus_macs_at_its_rate():
    node = _node("cortex_m.quantized_conv2d.default", (1, 16, 32, 32), macs=2_359_296)
    for isa in Isa:
        rates = cpu.RATES[isa]
        cost = cpu.kernel_cost(node, isa)
        assert cost.work is cpu.Work.CONV
        assert cost.cycles == rates.kernel_overhead + math.ceil(2_359_296 / rates.conv_macs_per_cycle)
    by_path = [cpu.kernel_cost(node, isa).cycles for isa in (Isa.SCALAR, Isa.DSP, Isa.MVE)]
    assert by_path == sorted(by_path, reverse=True)


def test_cpu_pool_counts_window_taps_and_view_is_free():
    pool = _node("cortex_m.quantized_max_pool2d.default", (1, 32, 16, 16), args=(None, [2, 2]))
    cost = cpu.kernel_cost(pool, Isa.DSP)
    assert cost.elements == 32 * 16 * 16 * 4
    assert cost.cycles == cpu.RATES[Isa.DSP].kernel_overhead + math.ceil(
        cost.elements * cpu.RATES[Isa.DSP].cycles_per_element[cpu.Work.POOL])
    assert cpu.kernel_cost(_node("aten.view_copy.default", (1, 64)), Isa.DSP).cycles == 0


def test_anchor_error_is_zero_inside_the_published_range():
    anchor = published_latencies.ANCHORS[0]
    assert anchor.error(580.0) == 0.0
    assert anchor.error(595.0 * 1.1) == pytest.approx(0.1)
    assert anchor.error(576.0 * 0.9) == pytest.approx(-0.1)


def _estimate(anchor: published_latencies.Anchor) -> dict:
    source = load_source(str(EXAMPLES / f"{anchor.model}.py"))
    result = compile(source.model, source.example_inputs, anchor.target_at_clock(), list(source.calibration),
                     CompileOptions(show_progress=False))
    return result.report


CALIBRATION_POINTS = [a for a in published_latencies.ANCHORS if a.calibrates and a.target != "cortex-m85"]


@pytest.mark.slow
@pytest.mark.parametrize("anchor", CALIBRATION_POINTS, ids=lambda a: f"{a.model}-{a.target}")
def test_calibration_point_within_tolerance(anchor):
    report = _estimate(anchor)
    latency = report["latency"]
    assert latency["estimate"] is True
    assert abs(anchor.error(latency["total"]["us"])) <= published_latencies.TOLERANCE, latency["total"]
    # the total is the CPU time plus every partition call, and each op's share appears in the op table
    clock = latency["clock_hz"]["cpu"]
    assert latency["total"]["us"] == pytest.approx(
        latency["cpu"]["us"] + sum(p["cycles"] * 1e6 / latency["clock_hz"]["npu"] for p in latency["partitions"]),
        abs=1e-2)
    assert latency["total"]["cycles"] == round(latency["total"]["us"] * clock / 1e6)
    assert all("estimated_cycles" in op for op in report["ops"])
    npu_ops = sum(op["estimated_cycles"] for op in report["ops"] if op["placement"] == "npu")
    attributed = sum(p["cycles"] - p["overhead_cycles"] - p["unattributed_cycles"] for p in latency["partitions"])
    assert npu_ops == attributed
    assert "estimated latency" in latency_line(latency) and "estimate" in latency_line(latency).split(";")[1]


@pytest.mark.slow
def test_estimate_is_deterministic():
    anchor = published_latencies.ANCHORS[0]
    assert _estimate(anchor)["latency"] == _estimate(anchor)["latency"]
