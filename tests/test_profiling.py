"""Profiling: ``imxrt compile`` writes model.etrecord, ``imxrt run --etdump`` an ETDump timed by the cost model,
and ExecuTorch's own Inspector, given both, attributes every estimated event to the source ops.

Times are nanoseconds; each event boundary is the cost model's running total rounded once, so the events
add up exactly to the total in nanoseconds (``_total_ns``), which is ``report["latency"]["total"]`` in the
report's units (microseconds to 3 decimals, CPU cycles).
"""

from __future__ import annotations

import json
import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from compiled_examples import compiled_example
from executorch.devtools import Inspector
from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc
from executorch.devtools.inspector import TimeScale

import imxrt.runtime
from imxrt.cli import EXIT_USER_ERROR, main
from imxrt.pipeline import CompileOptions, compile
from imxrt.profiling.etdump import write_etdump

pytestmark = pytest.mark.slow  # every test here compiles models


class NpuCpuNpu(nn.Module):
    """conv + relu (NPU) -> elu (no Neutron kernel: cortex_m table lookup) -> conv + add + linear (NPU)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        y = F.elu(F.relu(self.conv(x)))
        return self.fc((self.conv2(y) + y).flatten(1))


def _compile(model: nn.Module, x: torch.Tensor):
    return compile(model.eval(), (x,), "imxrt700", [(x,)], CompileOptions(show_progress=False))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(report, the ETDump's events, Inspector events in ns) of one compile and one `imxrt run --etdump`."""
    torch.manual_seed(0)
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    folder = tmp_path_factory.mktemp("profiled")
    _compile(NpuCpuNpu(), x).save(folder)
    np.save(folder / "x.npy", x.numpy())
    assert main(["run", str(folder / "model.pte"), "--input", str(folder / "x.npy"),
                 "--etdump", str(folder / "run.etdump")]) == 0
    report = json.loads((folder / "report.json").read_text())
    (dump,) = deserialize_from_etdump_flatcc((folder / "run.etdump").read_bytes()).run_data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no debug buffer: this ETDump holds times only
        inspector = Inspector(etdump_path=str(folder / "run.etdump"), etrecord=str(folder / "model.etrecord"),
                              source_time_scale=TimeScale.NS, target_time_scale=TimeScale.NS)
    (block,) = inspector.event_blocks
    return folder, report, [e.profile_event for e in dump.events], block.events


def _total_ns(latency: dict) -> int:
    seconds = Fraction(latency["cpu"]["cycles"], latency["clock_hz"]["cpu"])
    seconds += sum((Fraction(p["cycles"], latency["clock_hz"]["npu"]) for p in latency["partitions"]), Fraction(0))
    return round(seconds * 1_000_000_000)


def _ns(event) -> int:
    (duration,) = event.perf_data.raw
    assert duration == int(duration)
    return int(duration)


def test_inspector_attributes_an_npu_kernel_event_to_every_delegated_edge_node(run):
    _, report, _, events = run
    delegated = {(op["debug_handle"], op["op"]) for op in report["ops"] if op["placement"] == "npu"}
    assert len(delegated) >= 6 and report["summary"]["partitions"] == 2
    kernels = [e for e in events if e.is_delegated_op]
    assert kernels and all(e.delegate_backend_name == "NeutronBackend" for e in kernels)
    shown = {(handle, op) for e in kernels for handle in e.debug_handles for op in e.op_types}
    assert delegated <= shown, sorted(delegated - shown)


def test_each_cpu_instruction_is_one_event_named_by_its_kernel_and_mapped_to_its_source_op(run):
    _, report, _, events = run
    cpu = [op for op in report["ops"] if op["placement"] == "cpu"]
    by_handle = {e.debug_handles: e for e in events if e.name.startswith("native_call_")}
    for op in cpu:
        event = by_handle[op["debug_handle"]]
        assert event.name == f"native_call_{op['kernel'].split('.', 1)[1].rsplit('.', 1)[0]}.out"
        assert not event.is_delegated_op
        if op["op"].startswith("aten."):  # the model-boundary Q/DQ are cortex_m ops from the start
            assert op["op"] in event.op_types
    assert "native_call_quantized_activation.out" in {e.name for e in events}  # the elu between partitions


def test_event_times_add_up_to_the_cost_models_total(run):
    _, report, raw, events = run
    latency = report["latency"]
    total = _total_ns(latency)
    assert abs(total - latency["total"]["us"] * 1000) <= 1  # the report rounds to the nanosecond too
    assert round(total * latency["clock_hz"]["cpu"] / 1e9) == latency["total"]["cycles"]
    (execute,) = [e for e in events if e.name == "Method::execute"]
    assert _ns(execute) == total
    # Method::execute = the CPU's per-inference overhead + every instruction, back to back
    instructions = [e for e in events if e._instruction_id is not None and e._instruction_id >= 0
                    and not e.is_delegated_op]
    overhead = round(Fraction(latency["cpu"]["overhead_cycles"], latency["clock_hz"]["cpu"]) * 10**9)
    assert overhead + sum(_ns(e) for e in instructions) == total
    table = report["profiling"]["instructions"]
    assert [e._instruction_id for e in instructions] == [row["instruction"] for row in table]
    # and each event is its op's estimate, at most 1 ns off from rounding the running total
    cpu_cycles = {op["name"]: op["cycles"] for op in latency["ops"] if op["device"] == "cpu"}
    for row, event in zip(table, instructions, strict=True):
        if "delegate" in row:
            partition = latency["partitions"][row["partition"]]
            cycles, hz = partition["cycles"], latency["clock_hz"]["npu"]
            kernels = [e for e in events if e.is_delegated_op and e._instruction_id == row["instruction"]]
            inside = sum(_ns(e) for e in kernels)
            assert inside < _ns(event) and len(kernels) <= len(partition["kernels"])
        else:
            cycles, hz = cpu_cycles.get(row.get("node"), 0), latency["clock_hz"]["cpu"]
        assert abs(_ns(event) - cycles * 1e9 / hz) <= 1
    # the raw events are back to back in time: start of each instruction = end of the previous
    top = [e for e in raw if e.delegate_debug_id_int == -1 and e.instruction_id >= 0]
    assert all(a.end_time == b.start_time for a, b in zip(top, top[1:], strict=False))


def test_npu_kernel_events_carry_the_delegates_debug_map_keys_and_fill_the_partition(run):
    _, report, raw, _ = run
    latency = report["latency"]
    hz = latency["clock_hz"]["npu"]
    for row in (r for r in report["profiling"]["instructions"] if "delegate" in r):
        partition = latency["partitions"][row["partition"]]
        call = next(e for e in raw if e.name == "DELEGATE_CALL" and e.instruction_id == row["instruction"])
        kernels = [e for e in raw if e.instruction_id == row["instruction"] and e.delegate_debug_id_int >= 0]
        ids = [e.delegate_debug_id_int for e in kernels]
        assert ids == sorted(ids) and [e.name for e in kernels] == [partition["kernels"][i]["litert"] for i in ids]
        without_event = sum(k["cycles"] for i, k in enumerate(partition["kernels"]) if i not in ids)
        seconds = Fraction(partition["overhead_cycles"] + without_event, hz)
        seconds += sum((Fraction(partition["kernels"][i]["cycles"], hz) for i in ids), Fraction(0))
        assert abs((call.end_time - call.start_time) - seconds * 10**9) <= 1
        assert call.start_time <= kernels[0].start_time and kernels[-1].end_time <= call.end_time


def test_a_report_from_another_compile_is_one_line_and_writes_nothing(run, tmp_path, capsys):
    folder, report, _, _ = run
    stale = json.loads(json.dumps(report))
    row = next(r for r in stale["profiling"]["instructions"] if "op" in r)
    row["op"] = "cortex_m::quantized_conv2d.out"
    (tmp_path / "report.json").write_text(json.dumps(stale))
    args = ["run", str(folder / "model.pte"), "--input", str(folder / "x.npy"), "--etdump", str(tmp_path / "e.etdump")]
    assert main([*args, "--report", str(tmp_path / "report.json")]) == EXIT_USER_ERROR
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "does not describe" in error and "quantized_conv2d" in error
    assert main([*args, "--report", str(tmp_path / "missing.json")]) == EXIT_USER_ERROR
    assert "no such file" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [tmp_path / "report.json"]


@pytest.mark.parametrize("name", ["ds_cnn", "mobilenet_v1", "resnet8", "autoencoder"])
def test_every_delegated_edge_node_of_the_mlperf_examples_is_in_a_delegate_map(name):
    """100% coverage by construction: the delegate maps (LiteRT op -> edge debug handles) the ETRecord
    holds name every edge node the NPU runs, and every instruction is in the profiling table."""
    _, _, result = compiled_example(name)
    delegated = {op["debug_handle"] for op in result.report["ops"] if op["placement"] == "npu"}
    assert delegated and None not in delegated
    maps = result.etrecord._delegate_map["forward"].values()
    assert all(m["name"] == "NeutronBackend" for m in maps)
    mapped = {h for m in maps for handles in m["delegate_map"].values() for h in handles}
    assert delegated <= mapped, sorted(delegated - mapped)
    table = result.report["profiling"]["instructions"]
    assert sum("delegate" in row for row in table) == len(result.report["latency"]["partitions"]) == len(maps)


def test_inspector_reads_the_etrecord_and_etdump_of_an_mlperf_example(tmp_path):
    _, _, result = compiled_example("ds_cnn")
    result.save(tmp_path)
    program = imxrt.runtime.load(tmp_path / "model.pte")
    write_etdump(tmp_path / "run.etdump", program.file, tmp_path / "report.json")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inspector = Inspector(etdump_path=str(tmp_path / "run.etdump"), etrecord=str(tmp_path / "model.etrecord"),
                              source_time_scale=TimeScale.NS, target_time_scale=TimeScale.NS)
    (block,) = inspector.event_blocks
    delegated = {op["debug_handle"] for op in result.report["ops"] if op["placement"] == "npu"}
    shown = {handle for e in block.events if e.is_delegated_op for handle in e.debug_handles}
    assert delegated <= shown, sorted(delegated - shown)
    (execute,) = [e for e in block.events if e.name == "Method::execute"]
    assert _ns(execute) == _total_ns(result.report["latency"])
