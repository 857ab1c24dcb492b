"""ETDump synthesis: the profile events one run would record on the device, timed by the cost model.

ExecuTorch's runtime records, per run, a ``Method::execute`` event, one event per kernel instruction
(``native_call_<op>``, as the generated kernel wrappers name it), one ``DELEGATE_CALL`` per delegate
instruction and, inside it, one event per delegate kernel (its delegate debug identifier is a key of the
delegate's ``debug_handle_map``, here the LiteRT op index). Inspector maps instruction events to debug
handles with the ETRecord's instruction map and delegate events with its delegate map.

Times are nanoseconds (ExecuTorch's default, so Inspector's defaults convert them): every event boundary
is the cost model's running total, in seconds at each device's clock, rounded to the nanosecond once, so
durations add up exactly to the rounded total. ``Method::execute`` spans the run: the CPU's per-inference
overhead, then every instruction in chain order. A ``DELEGATE_CALL`` spans the partition: its call
overhead, then its kernels; kernels without provenance (model-boundary transposes) have no event of their
own and are the gaps inside it. An eIQ microcode partition has no LiteRT ops to time: one ``DELEGATE_CALL``.
"""

from __future__ import annotations

import json
import os
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

from executorch.devtools.etdump.schema_flatcc import ETDumpFlatCC, Event, ProfileEvent, RunData
from executorch.devtools.etdump.serialize import serialize_to_etdump_flatcc
from executorch.exir import schema

from imxrt import writer
from imxrt.errors import BadFile
from imxrt.files import JSON_LIMIT, read_text
from imxrt.npu import reference_payload
from imxrt.profiling.instructions import operator_name

if TYPE_CHECKING:
    from imxrt.pte.reader import ProgramFile

RUN_NAME = "Execute"  # the event block ExecuTorch's runners record a method's execution under
NS_PER_SECOND = 1_000_000_000
_UNSET = -1  # ExecuTorch's value for an event field that does not apply


class StaleReport(ValueError):
    """The report's instruction table does not describe this program (another compile wrote it)."""


def _event(name: str, start: int, end: int, instruction: int = _UNSET, chain: int = _UNSET,
           delegate_id: int = _UNSET) -> Event:
    return Event(profile_event=ProfileEvent(name=name, chain_index=chain, instruction_id=instruction,
                                            delegate_debug_id_int=delegate_id, delegate_debug_id_str=None,
                                            delegate_debug_metadata=None, start_time=start, end_time=end),
                 allocation_event=None, debug_event=None)


class _Clock:
    """The running total of estimated time, in exact seconds; ``ns`` rounds it once per boundary."""

    def __init__(self) -> None:
        self.seconds = Fraction(0)

    def ns(self) -> int:
        return round(self.seconds * NS_PER_SECOND)

    def advance(self, cycles: int, clock_hz: int) -> int:
        self.seconds += Fraction(cycles, clock_hz)
        return self.ns()


def _check(table: dict, plan: schema.ExecutionPlan) -> None:
    instructions = plan.chains[table["chain"]].instructions
    for row in table["instructions"]:
        index = row["instruction"]
        call = instructions[index].instr_args if 0 <= index < len(instructions) else None
        if "delegate" in row:
            found = plan.delegates[call.delegate_index].id if isinstance(call, schema.DelegateCall) else None
            expected = row["delegate"]
        else:
            found = operator_name(plan.operators[call.op_index]) if isinstance(call, schema.KernelCall) else None
            expected = row["op"]
        if found != expected:
            raise StaleReport(f"instruction {index} is {found or 'not a call'} in the program, {expected} in the "
                              "report")


def estimated_events(plan: schema.ExecutionPlan, delegate_data: list[bytes], report: dict) -> list[Event]:
    """The events of one run of ``plan``, timed by ``report["latency"]`` through ``report["profiling"]``
    (``StaleReport`` if that table does not describe ``plan``)."""
    latency, table = report["latency"], report["profiling"]
    _check(table, plan)
    cpu_hz = latency["clock_hz"]["cpu"]
    npu_hz = latency["clock_hz"].get("npu")
    cpu_cycles = {op["name"]: op["cycles"] for op in latency["ops"] if op["device"] == "cpu"}
    instructions = plan.chains[table["chain"]].instructions
    clock = _Clock()
    events: list[Event] = []
    run_start = clock.ns()
    clock.advance(latency["cpu"]["overhead_cycles"], cpu_hz)
    for row in table["instructions"]:
        index = row["instruction"]
        start = clock.ns()
        if "delegate" not in row:
            end = clock.advance(cpu_cycles.get(row.get("node"), 0), cpu_hz)
            op = row["op"].split("::", 1)[-1]
            events.append(_event(f"native_call_{op}", start, end, index, table["chain"]))
            continue
        partition = latency["partitions"][row["partition"]]
        blob = delegate_data[plan.delegates[instructions[index].instr_args.delegate_index].processed.index]
        kernels: list[Event] = []
        clock.advance(partition["overhead_cycles"], npu_hz)
        if reference_payload.is_reference(blob):
            ops = reference_payload.unpack(blob).metadata["ops"]
            for kernel_id, (op, kernel) in enumerate(zip(ops, partition["kernels"], strict=True)):
                kernel_start = clock.ns()
                kernel_end = clock.advance(kernel["cycles"], npu_hz)
                if op["debug_handles"]:  # a key of the delegate's debug_handle_map
                    kernels.append(_event(op["litert"], kernel_start, kernel_end, index, table["chain"], kernel_id))
        else:
            clock.advance(partition["cycles"] - partition["overhead_cycles"], npu_hz)
        events.append(_event("DELEGATE_CALL", start, clock.ns(), index, table["chain"]))
        events.extend(kernels)
    return [_event("Method::execute", run_start, clock.ns()), *events]


def estimated_etdump(plan: schema.ExecutionPlan, delegate_data: list[bytes], report: dict) -> bytes:
    """ETDump bytes (size-prefixed, as the device writes them) with one run of ``estimated_events``."""
    run = RunData(name=RUN_NAME, bundled_input_index=_UNSET, allocators=[],
                  events=estimated_events(plan, delegate_data, report))
    data = serialize_to_etdump_flatcc(ETDumpFlatCC(version=0, run_data=[run]))
    return len(data).to_bytes(4, "little") + data


def write_etdump(path: str | os.PathLike, program: ProgramFile, report_path: str | os.PathLike) -> None:
    """Write the estimated ETDump of ``program`` to ``path``, timed by the ``report.json`` compiled with it.
    The file appears whole, never written through a link at ``path`` (``imxrt.writer``); a missing, unreadable
    or foreign report is a ``BadFile``."""
    report_path, path = Path(report_path), Path(path)
    try:
        report = json.loads(read_text(report_path, JSON_LIMIT, "a report.json", "the ETDump's times come from the "
                                      "report.json imxrt compile wrote beside the .pte (or pass --report)"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise BadFile(str(report_path), f"is not readable JSON ({str(e).strip().splitlines()[0]})") from None
    if not isinstance(report, dict) or "profiling" not in report or "latency" not in report:
        raise BadFile(str(report_path), "has no latency estimate or instruction table; recompile with this "
                                        "imxrt (imxrt compile)")
    try:
        data = estimated_etdump(program.plan, program.delegate_data, report)
    except StaleReport as e:
        raise BadFile(str(report_path), f"does not describe {program.name} ({e}); give the report compiled "
                                        "with it") from None
    writer.write_whole(path, data)
