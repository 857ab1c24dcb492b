"""Profiling map of a microcode delegate: Neutron kernel index -> the edge debug handles it runs.

On the board the runtime records one event per Neutron kernel call, numbered in call order, then one
"profiling dump" event. The converter says which kernels it generated for which TFLite operators in its
per-kernel dump (asked for with ``useProfiling``); our own LiteRT ops carry exact edge provenance. Two
sections of the dump are read:

- the kernels, in call order, after ``= Extract Graphs =``:
  ``NeutronOperator "subgraph_001": Operators: PAD CONV_2D Kernels: Pad Conv2DStandardV2`` (one per line,
  up to the next operator or an empty line);
- the generated graph, after the last ``Graphs:``: per ``Name: subgraph_001``, its TFLite operators with
  ``Type:``, ``Inputs:``, ``Outputs:`` (``[0]: tensor_name``) and ``Location:``.

A Neutron operator is tied to our LiteRT ops by its operators' output tensor names (ours, or the
converter's ``ours/suffix``): exact, since our tensor names are unique. Where the converter merged ops (one
operator for several LiteRT ops), split one (several kernels, or several operators, for one op), inserted
operators of its own, or dropped ops, the row's ``note`` says so; nothing is matched by guesswork.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_OPERATOR = re.compile(
    r'NeutronOperator\s+"subgraph_(?P<num>\d+)"\s*:\s*Operators:(?P<operators>.*?)Kernels:(?P<kernels>.*?)'
    r'(?=NeutronOperator|NeutronGraph|^[ \t]*$|^\s*=|\Z)', re.S | re.M)
_NODE = re.compile(r"Type:\s+(?P<type>\w+)\s+Inputs:(?P<inputs>.*?)Outputs:(?P<outputs>.*?)Location:\s+\d+", re.S)
_TENSOR = re.compile(r"\[\d+\]:\s+(?P<name>\S+)")
_SUBGRAPH = re.compile(r"Name:\s+subgraph_(?P<num>\d+)")


@dataclass(frozen=True)
class KernelRow:
    """One Neutron kernel call (``index`` is the runtime's profiling event number)."""

    index: int
    kernel: str  # the converter's kernel name; "" for the runtime's final profiling-dump event
    litert_ops: tuple[int, ...]  # our LiteRT op indices the kernel runs
    debug_handles: tuple[int, ...]
    note: str  # merged / split / converter-inserted / dump event; "" for a one-to-one kernel


@dataclass(frozen=True)
class KernelMap:
    rows: tuple[KernelRow, ...]
    ops_in_no_kernel: tuple[int, ...]  # LiteRT ops no kernel names (the converter removed or renamed them)
    note: str  # why the map is empty, if it is

    def debug_handle_map(self) -> dict[int, tuple[int, ...]]:
        return {row.index: row.debug_handles for row in self.rows}

    def to_json(self) -> dict:
        return {
            "kernels": [{"index": r.index, "kernel": r.kernel, "litert_ops": list(r.litert_ops),
                         "debug_handles": list(r.debug_handles), "note": r.note} for r in self.rows],
            "litert_ops_in_no_kernel": list(self.ops_in_no_kernel),
            "note": self.note,
        }


@dataclass(frozen=True)
class _Operator:
    num: int
    operators: tuple[str, ...]  # TFLite op types, as the dump lists them
    kernels: tuple[str, ...]


def _lines(text: str) -> tuple[str, ...]:
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def _operators(log: str) -> list[_Operator]:
    section = log.partition("= Extract Graphs =")[2].partition("Generate code for NeutronGraph")[0]
    return [_Operator(int(m["num"]), _lines(m["operators"]), _lines(m["kernels"])) for m in _OPERATOR.finditer(section)]


def _generated_outputs(log: str) -> dict[int, list[tuple[str, list[str]]]]:
    """Per generated subgraph number: its TFLite operators as (type, output tensor names)."""
    dump = log.rpartition("Graphs:")[2]
    starts = list(_SUBGRAPH.finditer(dump))
    result: dict[int, list[tuple[str, list[str]]]] = {}
    for i, start in enumerate(starts):
        body = dump[start.end():starts[i + 1].start() if i + 1 < len(starts) else len(dump)]
        result[int(start["num"])] = [(m["type"], _TENSOR.findall(m["outputs"])) for m in _NODE.finditer(body)]
    return result


def kernel_map(log: str, op_outputs: Sequence[Sequence[str]], op_types: Sequence[str],
               op_handles: Sequence[Sequence[int]]) -> KernelMap:
    """The profiling map of one partition from the converter's ``log`` and our LiteRT ops (per op: output
    tensor names, builtin name, edge debug handles, in subgraph order)."""
    operators = _operators(log)
    if not operators:
        return KernelMap((), tuple(range(len(op_types))), "the converter printed no per-kernel dump (this SDK "
                         "release does not list kernels per operator); no profiling map")
    producer = {name: index for index, names in enumerate(op_outputs) for name in names}
    generated = _generated_outputs(log)

    def ours(tensor: str) -> int | None:
        if tensor in producer:
            return producer[tensor]
        base = tensor.split("/", 1)[0]  # the converter's "ours/suffix" for a tensor it derived from ours
        return producer.get(base) if "/" in tensor else None

    matched: list[tuple[_Operator, tuple[int, ...], list[str]]] = []
    for op in operators:
        found: set[int] = set()
        inserted: list[str] = []
        for op_type, outputs in generated.get(op.num, []):
            indices = {i for i in (ours(t) for t in outputs) if i is not None}
            found |= indices
            if not indices:
                inserted.append(op_type)
        matched.append((op, tuple(sorted(found)), inserted))

    kernels_of: dict[int, list[int]] = {}
    index = 0
    for op, litert_ops, _ in matched:
        for litert in litert_ops:
            kernels_of.setdefault(litert, []).extend(range(index, index + len(op.kernels)))
        index += len(op.kernels)

    rows: list[KernelRow] = []
    index = 0
    for op, litert_ops, inserted in matched:
        handles = tuple(sorted({h for i in litert_ops for h in op_handles[i]}))
        own = range(index, index + len(op.kernels))
        elsewhere = sorted({k for i in litert_ops for k in kernels_of[i]} - set(own))
        note = _note(op, litert_ops, inserted, op_types, elsewhere)
        rows.extend(KernelRow(k, kernel, litert_ops, handles, note) for k, kernel in zip(own, op.kernels, strict=True))
        index += len(op.kernels)
    rows.append(KernelRow(index, "", (), (), "the runtime's final profiling-dump event"))
    covered = {i for _, litert_ops, _ in matched for i in litert_ops}
    return KernelMap(tuple(rows), tuple(i for i in range(len(op_types)) if i not in covered), "")


def _note(op: _Operator, litert_ops: tuple[int, ...], inserted: list[str], op_types: Sequence[str],
          elsewhere: list[int]) -> str:
    def named(indices) -> str:
        return ", ".join(f"{i} {op_types[i]}" for i in indices)

    notes = []
    if not litert_ops:
        listed = ", ".join(inserted or op.operators) or "nothing"
        notes.append(f"unmapped: the converter's operator subgraph_{op.num:03d} ({listed}) produces no tensor of "
                     "the partition")
    elif len(litert_ops) > 1:
        notes.append(f"merged: LiteRT ops {named(litert_ops)} run as one Neutron operator")
    if litert_ops and inserted:
        notes.append(f"converter-inserted: {', '.join(inserted)}")
    if len(op.kernels) > 1:
        notes.append(f"split: its operator runs as {len(op.kernels)} kernels ({', '.join(op.kernels)})")
    if elsewhere:
        notes.append(f"split: the same LiteRT op(s) also run in kernel(s) {', '.join(map(str, elsewhere))}")
    return "; ".join(notes)
