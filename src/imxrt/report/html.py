"""The HTML report: ``report.json`` rendered as one self-contained page (``report.html``).

One file, inline CSS and SVG, no script and no fetch, so it opens from disk, in a mail attachment or a CI
artifact alike. Every figure is read from the report dict and formatted as the CLI prints it; nothing is
recomputed here but shares and sums for the charts. Every string that came from the model (node names, op
names, reasons) is HTML-escaped.
"""

from __future__ import annotations

import html
from collections import Counter

from imxrt.report.names import label as op_label

# Devices, as report.json's ``execution`` says: NPU green, int8 CPU blue, float CPU orange (the one to fix).
DEVICE_COLOURS = {"npu": "#17946e", "cpu int8": "#3568b8", "cpu float": "#e0672a"}
OVERHEAD_COLOUR = "#9aa3ad"
# Memory roles of planned tensors (lifetimes.Buffer.role).
ROLE_COLOURS = {"input": "#8a63c2", "output": "#c2407e", "activation": "#4c9ed9", "scratch": "#e2a21b"}
BUDGET_COLOURS = {"arena": "#4c9ed9", "temp allocator (NPU scratch)": "#17946e", "method allocator": "#8a63c2",
                  "constants": "#4c9ed9", "NPU payloads": "#17946e", "program": "#8a63c2"}

CHART_WIDTH = 1000  # SVG user units; the charts scale to the page width
LABEL_WIDTH = 330  # the latency chart's name column
ROW_HEIGHT = 20
TIMELINE_HEIGHT = 360


def _e(value: object) -> str:
    """Escaped text of anything the model or the report provides."""
    return html.escape(str(value), quote=True)


def _bytes(n: float) -> str:
    return f"{int(n):,} B"


def _kib(n: float) -> str:
    """KiB, or MiB from 1 MiB on."""
    return f"{n / 1024:,.1f} KiB" if n < 1024 * 1024 else f"{n / (1024 * 1024):,.1f} MiB"


def _us(us: float) -> str:
    return f"{float(us):,.1f} µs"


def _pct(fraction: float) -> str:
    return f"{100 * float(fraction):.1f}%"


def _num(value: object) -> float:
    """A number from the report, never a string that could reach markup unescaped."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number, found {value!r:.40}")
    return float(value)


def _fmt(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _ident(value: object) -> str:
    """An escaped identifier that may wrap after ``_`` and ``.`` (node and op names are long)."""
    return _e(value).replace("_", "_<wbr>").replace(".", ".<wbr>")


def _chip(execution: str) -> str:
    return f'<span class="chip" style="background:{_colour(execution)}">{_e(execution)}</span>'


def _legend(items: dict[str, str]) -> str:
    keys = "".join(f'<span><i style="background:{colour}"></i>{_e(name)}</span>' for name, colour in items.items())
    return f'<div class="legend">{keys}</div>'


# --- summary -------------------------------------------------------------------------------------------------

def _card(title: str, value: str, detail: str, tone: str = "", unit: str = "") -> str:
    unit = f' <span class="unit">{unit}</span>' if unit else ""
    return (f'<div class="card {tone}"><div class="card-title">{title}</div><div class="card-value">{value}{unit}</div>'
            f'<div class="card-detail">{detail}</div></div>')


def _summary(report: dict) -> str:
    s = report["summary"]
    ops = report["ops"]
    payloads = sorted({str(p.get("payload", "?")) for p in report["partitions"]})
    target_detail = f"Neutron compiler: {_e(report['neutron_compiler'])}"
    if payloads:
        target_detail += f"<br>NPU payload: {_e(', '.join(payloads))}"
    cards = [_card("Target", _e(report["target"]), target_detail)]
    if s["partitions"]:
        cards.append(_card("NPU coverage", _pct(s["npu_mac_fraction"]), unit="of MACs", detail=
                           f"{int(_num(s['ops_npu']))} of {len(ops)} ops in {int(_num(s['partitions']))} partition(s)"
                           f"<br>{int(_num(s['macs_npu'])):,} of {int(_num(s['macs_total'])):,} MACs"))
    else:  # a target with an NPU has its clock in the latency estimate
        has_npu = "npu" in (report.get("latency") or {}).get("clock_hz", {})
        cards.append(_card("NPU coverage", _pct(0) if has_npu else "no NPU", unit="of MACs" if has_npu else "",
                           detail=f"all {len(ops)} ops on the CPU ({int(_num(s['ops_cpu_int8']))} int8, "
                                  f"{int(_num(s['ops_cpu_float']))} float)"))
    latency = report.get("latency")
    if latency:
        total = _num(latency["total"]["us"])
        clock = _num(latency["clock_hz"]["cpu"]) / 1e6
        cards.append(_card("Estimated latency", f"{total:,.0f}", f"{total / 1000:,.2f} ms per inference at "
                           f"{_fmt(clock)} MHz<br>an estimate, not a measurement", unit="µs"))
    memory = report.get("memory")
    if memory:
        sram = memory["sram"]
        used = _num(sram["total_bytes"])
        if sram.get("budget_bytes") is not None:
            budget = _num(sram["budget_bytes"])
            tone = "" if used <= budget else "bad"
            cards.append(_card("SRAM", _pct(used / budget), f"{_bytes(used)} of {_bytes(budget)}<br>"
                               f"({_kib(used)} of {_kib(budget)})", tone, unit="of budget"))
        else:
            cards.append(_card("SRAM", _kib(used), f"{_bytes(used)}; no budget known for this target"))
        flash = memory["flash"]
        cards.append(_card("Flash (.pte)", _kib(_num(flash["pte_bytes"])), f"{_bytes(_num(flash['pte_bytes']))}" + (
            f" of {_kib(_num(flash['budget_bytes']))}" if flash.get("budget_bytes") is not None else "")))
    floats = [op for op in ops if op.get("execution") == "cpu float"]
    warning = ""
    if floats:
        names = ", ".join(_e(op["name"]) for op in floats[:5]) + (" ..." if len(floats) > 5 else "")
        warning = (f'<p class="warn">{len(floats)} op(s) run in float on the CPU (no int8 kernel): {names}. '
                   "See the reasons in the placement table.</p>")
    return f'<section class="cards">{"".join(cards)}</section>{warning}'


# --- budgets -------------------------------------------------------------------------------------------------

def _budget_bar(title: str, parts: list[tuple[str, float]], budget: float | None, no_budget: str) -> str:
    """A bar of ``parts`` stacked against ``budget`` (the track's full width), or against their total when
    no budget is known."""
    used = sum(value for _, value in parts)
    scale = max(budget or 0, used) or 1
    segments = "".join(
        f'<div class="seg" style="width:{100 * value / scale:.3f}%;background:{BUDGET_COLOURS[name]}" '
        f'title="{_e(name)}: {_bytes(value)}"></div>' for name, value in parts if value > 0)
    marker = ""
    if budget is not None and used > budget:
        marker = f'<div class="budget-mark" style="left:{100 * budget / scale:.3f}%"></div>'
    head = f"{_bytes(used)} ({_kib(used)})"
    if budget is not None:
        state = "fits" if used <= budget else "over budget"
        head += f" of {_bytes(budget)} ({_kib(budget)}): {_pct(used / budget)}, {state}"
    else:
        head += f": {no_budget}"
    items = " · ".join(f'<i style="background:{BUDGET_COLOURS[name]}"></i>{_e(name)} {_bytes(value)}'
                       for name, value in parts)
    return (f'<div class="budget"><div class="budget-head"><b>{title}</b> {head}</div>'
            f'<div class="track">{segments}{marker}</div><div class="budget-parts">{items}</div></div>')


def _budgets(report: dict) -> str:
    memory = report["memory"]
    sram, flash = memory["sram"], memory["flash"]
    sram_parts = [("arena", _num(sram["arena_bytes"])),
                  ("temp allocator (NPU scratch)", _num(sram["temp_allocator_bytes"])),
                  ("method allocator", _num(sram["method_allocator_bytes"]))]
    budget = sram.get("budget_bytes")
    source = {"--sram-budget": " (from --sram-budget)",
              "target": " (the target's SRAM)"}.get(sram.get("budget_from"), "")
    pte = _num(flash["pte_bytes"])
    constants, delegates = _num(flash["constant_bytes"]), _num(flash["delegate_bytes"])
    flash_parts = [("constants", constants), ("NPU payloads", delegates),
                   ("program", max(pte - constants - delegates, 0))]
    return ('<section id="budgets"><h2>SRAM and flash budgets</h2>'
            f'<p class="note">SRAM = the planned arena(s) + each NPU partition\'s own scratch + the runtime\'s method '
            f'allocator (an estimate). Budget{_e(source)}.</p>'
            + _budget_bar("SRAM", sram_parts, None if budget is None else _num(budget),
                          "no SRAM size is known for this target; pass --sram-budget to check one")
            + _budget_bar("Flash", flash_parts,
                          None if flash.get("budget_bytes") is None else _num(flash["budget_bytes"]),
                          "no flash size is known for this target")
            + "</section>")


# --- placement -----------------------------------------------------------------------------------------------

def _latency_by_op(report: dict) -> dict[tuple, dict]:
    latency = report.get("latency") or {}
    return {(op.get("partition"), op["name"]): op for op in latency.get("ops", [])}


def _advice(report: dict) -> str:
    """The advice first: each change with the estimate before and after it (``report/advice.py``)."""
    items = report.get("advice") or []
    if not items:
        return ""
    rows = []
    for number, item in enumerate(items, start=1):
        if "figure" in item:  # an accuracy item: what the measurement showed
            figure = f'<b>{_e(item["figure"])}</b>'
        elif "saves_us" in item:
            bound = "at most " if item.get("at_most") else ""
            figure = (f'saves {bound}<b>{_us(_num(item["saves_us"]))}</b><div class="sub">'
                      f'{_us(_num(item["before_us"]))} → {_us(_num(item["after_us"]))}</div>')
        else:
            figure = f'arena <b>{_bytes(_num(item.get("arena_bytes", 0)))}</b>'
        rows.append(f'<tr><td class="n">{number}</td><td class="name">{_e(item.get("title", ""))}</td>'
                    f'<td class="n">{figure}</td><td class="reason">{_e(item.get("change", ""))}'
                    f'<div class="sub">{_e(item.get("why", ""))}</div></td></tr>')
    return ('<section id="advice"><h2>Advice: what would save the most</h2>'
            '<p class="note">Accuracy items first, with what was measured. Each saving is read off this program\'s '
            "estimate: the time of the kernels the change removes (for an op the NPU would take over, its CPU time: "
            "a bound).</p>"
            '<div class="scroll"><table class="ops advice"><thead><tr><th>#</th><th>change</th><th>estimate</th>'
            f'<th>how, and why</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div></section>')


def _accuracy(report: dict) -> str:
    """The layers that lose the most SQNR themselves, worst first (``report.json`` ``accuracy.layers``)."""
    accuracy = report.get("accuracy") or {}
    layers = accuracy.get("layers") or []
    if not layers:
        return ""
    db = lambda v: "-" if v is None else f"{_num(v):.1f}"  # noqa: E731
    rows = "".join(
        f'<tr><td class="name">{_e(row["path"])}</td><td>{_e(row["op"])}</td><td class="n">{db(row["sqnr_db"])}</td>'
        f'<td class="n"><b>{db(row["own_sqnr_db"])}</b></td><td class="n">{db(row["output_sqnr_db"])}</td>'
        f'<td class="n">{db(row["weight_sqnr_db"])}</td><td class="n">{db(row.get("input_sqnr_db"))}</td>'
        f'<td class="n">{_num(row["scale"]):.4g}</td>'
        f'<td class="n">[{_num(row["range"][0]):.4g}, {_num(row["range"][1]):.4g}]</td>'
        f'<td class="n">{_num(row["p9999"]):.4g}</td></tr>' for row in layers)
    return ('<section id="accuracy" class="accuracy"><h2>Accuracy: the layers that lose the most</h2>'
            f'<p class="note">{_e(accuracy.get("samples", "?"))} evaluation samples. SQNR is cumulative (a layer '
            "inherits its inputs' noise); own SQNR is the layer alone, on the float value of its input: its "
            "output's rounding and its int8 weights' combined; input is its output on the int8 value of its "
            "input against it on the float value, the input's rounding as its weights see it. dB.</p>"
            '<div class="scroll"><table class="layers"><thead><tr><th>layer</th><th>op</th><th>SQNR</th>'
            "<th>own</th><th>output</th><th>weights</th><th>input</th><th>scale</th><th>range</th>"
            "<th>99.99% |x|</th></tr>"
            f"</thead><tbody>{rows}</tbody></table></div></section>")


def _placement(report: dict) -> str:
    by_op = _latency_by_op(report)
    fused: dict[tuple, list[dict]] = {}  # an op's row also shows the ops fused into its kernel
    for op in report["ops"]:
        if op.get("fused_into"):
            fused.setdefault((op.get("partition"), op["fused_into"]), []).append(op)
    rows = []
    for position, op in enumerate(report["ops"]):
        if op.get("fused_into"):
            continue
        execution = str(op.get("execution", op.get("placement", "")))
        reason = _ident(op.get("reason", ""))
        if op.get("cpu_reason"):
            reason += f'<br><span class="why">float: {_e(op["cpu_reason"])}</span>'
        # The NPU's kernel is the delegate (its partition says more); the CPU's is the kernel that runs.
        where = (_e(f"{op.get('kernel', '')} partition {int(_num(op['partition']))}") if op.get("partition") is not None
                 else _ident(op.get("kernel", "")))
        timing = by_op.get((op.get("partition"), op["name"]))
        us = _us(_num(timing["us"])) if timing else ""
        macs = int(_num(op.get("macs", 0)))
        cycles = int(_num(op.get("estimated_cycles", 0)))
        riders = fused.get((op.get("partition"), op["name"]), [])
        node = f'<div class="sub">{_ident(op["name"])}</div>' if op.get("module_type") else ""  # else the label
        kind = " + ".join([str(op.get("op", ""))] + [str(r.get("op", "")) for r in riders])
        rows.append(
            f'<tr class="{_e(execution.replace(" ", "-"))}"><td class="n">{position}</td>'
            f'<td class="name">{_ident(op_label(op))}{"".join(f" + {_ident(op_label(r))}" for r in riders)}'
            f'{node}</td><td class="op">{_ident(kind)}</td>'
            f'<td class="device">{_chip(execution)}<div class="sub">{where}</div></td><td class="reason">{reason}</td>'
            f'<td class="n">{macs:,}</td><td class="n">{cycles:,}</td><td class="n">{us}</td></tr>')
    counts = Counter(str(op.get("execution", "")) for op in report["ops"])
    tally = ", ".join(f"{count} {_e(name)}" for name, count in sorted(counts.items()))
    return ('<section id="placement"><h2>Placement: what runs where, and why</h2>'
            f'<p class="note">{len(report["ops"])} ops in execution order ({tally}), named by the PyTorch module '
            "they came from (the compiler's node name below); an op fused into another's NPU kernel shares its row. "
            "Cycles and µs are estimates at each device's clock.</p>"
            + _legend(DEVICE_COLOURS) +
            '<div class="scroll"><table class="ops"><thead><tr><th>#</th><th>module</th><th>op</th>'
            "<th>device and kernel</th><th>reason</th><th>MACs</th><th>est. cycles</th><th>est. time</th></tr></thead>"
            f'<tbody>{"".join(rows)}</tbody></table></div></section>')


def _partitions(report: dict) -> str:
    if not report["partitions"]:
        return ""
    latency = {p["index"]: p for p in (report.get("latency") or {}).get("partitions", [])}
    scratch = (report.get("memory") or {}).get("npu_scratch_bytes", [])
    rows = []
    for p in report["partitions"]:
        index = int(_num(p["index"]))
        kinds = Counter(str(op) for op in p.get("ops", []))
        litert = ", ".join(f"{_e(kind)} ×{count}"
                           for kind, count in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
        time = _us(_num(latency[index]["us"])) if index in latency else ""
        npu_scratch = _bytes(_num(scratch[index])) if index < len(scratch) else ""
        rows.append(f'<tr><td class="n">{index}</td><td>{_e(p.get("payload", ""))}</td>'
                    f'<td class="n">{len(p.get("nodes", []))}</td><td class="reason">{litert}</td>'
                    f'<td class="n">{int(_num(p.get("macs", 0))):,}</td>'
                    f'<td class="n">{_bytes(_num(p.get("payload_bytes", 0)))}</td>'
                    f'<td class="n">{npu_scratch}</td><td class="n">{time}</td><td>{_e(p.get("tflite", ""))}</td></tr>')
    return ('<section id="partitions"><h2>NPU partitions</h2><div class="scroll"><table class="ops"><thead><tr>'
            "<th>#</th><th>payload</th><th>edge ops</th><th>LiteRT ops</th><th>MACs</th><th>payload</th>"
            "<th>NPU scratch</th><th>est. time</th><th>LiteRT file</th></tr></thead>"
            f'<tbody>{"".join(rows)}</tbody></table></div></section>')


# --- latency -------------------------------------------------------------------------------------------------

def _colour(device: str) -> str:
    return DEVICE_COLOURS.get(device, OVERHEAD_COLOUR)


def _latency_rows(report: dict) -> list[tuple[str, str, str, float]]:
    """(label, detail, device, µs) per bar, in execution order: every op with time of its own, each NPU
    partition's call overhead and cycles no op owns, and the CPU's per-inference overhead."""
    latency = report["latency"]
    execution = {(op.get("partition"), op["name"]): (str(op.get("execution", "")), str(op.get("op", "")), op_label(op))
                 for op in report["ops"]}
    partitions = {p["index"]: p for p in latency.get("partitions", [])}
    npu_clock = _num(latency["clock_hz"].get("npu", latency["clock_hz"]["cpu"]))
    cpu_clock = _num(latency["clock_hz"]["cpu"])
    rows: list[tuple[str, str, str, float]] = []
    cpu_overhead = _num(latency["cpu"]["overhead_cycles"]) * 1e6 / cpu_clock
    rows.append(("per-inference overhead", "CPU", "overhead", cpu_overhead))
    done: set = set()
    for op in latency["ops"]:
        part = op.get("partition")
        device, kind, name = execution.get((part, op["name"]), (str(op.get("device", "")), "", str(op["name"])))
        if part is not None and part not in done and part in partitions:
            done.add(part)
            entry = partitions[part]
            cycles = _num(entry["overhead_cycles"]) + _num(entry.get("unattributed_cycles", 0))
            rows.append((f"partition {int(_num(part))} call", "NPU overhead and ops no edge op owns",
                         "overhead", cycles * 1e6 / npu_clock))
        if _num(op["cycles"]) > 0:
            rows.append((name, kind, device if device in DEVICE_COLOURS else "overhead", _num(op["us"])))
    return rows


def _latency(report: dict) -> str:
    latency = report["latency"]
    rows = _latency_rows(report)
    total = _num(latency["total"]["us"])
    longest = max((us for *_, us in rows), default=0) or 1
    bar_space = CHART_WIDTH - LABEL_WIDTH - 90
    height = ROW_HEIGHT * len(rows) + 10
    bars = []
    for row, (label, detail, device, us) in enumerate(rows):
        y = 5 + row * ROW_HEIGHT
        width = max(bar_space * us / longest, 0.5)
        shown = label if len(label) <= 44 else label[:21] + "…" + label[-22:]  # the end tells ops apart
        tip = f"{label} ({detail}): {_us(us)}, {_pct(us / total) if total else ''} of the total"
        bars.append(
            f'<g class="bar"><title>{_e(tip)}</title>'
            f'<text x="{LABEL_WIDTH - 8}" y="{y + 14}" text-anchor="end" class="lbl">{_e(shown)}</text>'
            f'<rect x="{LABEL_WIDTH}" y="{y + 3}" width="{width:.2f}" height="{ROW_HEIGHT - 6}" rx="2" '
            f'fill="{_colour(device)}"/>'
            f'<text x="{LABEL_WIDTH + width + 6:.2f}" y="{y + 14}" class="val">{_e(_us(us))}</text></g>')
    svg = (f'<svg class="chart" viewBox="0 0 {CHART_WIDTH} {height}" role="img" '
           f'aria-label="estimated time per op">'
           f'<line x1="{LABEL_WIDTH}" x2="{LABEL_WIDTH}" y1="0" y2="{height}" class="axis"/>{"".join(bars)}</svg>')
    # The share of each device in the total, as one stacked bar.
    shares: dict[str, float] = {}
    for _, _, device, us in rows:
        shares[device] = shares.get(device, 0.0) + us
    stack = "".join(
        f'<div class="seg" style="width:{100 * us / sum(shares.values()):.3f}%;'
        f'background:{_colour(name)}" title="{_e(name)}: {_us(us)}"></div>'
        for name, us in shares.items() if us > 0) if sum(shares.values()) else ""
    split = " · ".join(f'<i style="background:{_colour(name)}"></i>{_e(name)} {_us(us)}'
                       for name, us in shares.items())
    partitions = latency.get("partitions", [])
    npu_us = sum(_num(p["us"]) for p in partitions)
    clocks = ", ".join(f"{_e(name)} {_fmt(_num(hz) / 1e6)} MHz" for name, hz in latency["clock_hz"].items())
    return ('<section id="latency"><h2>Estimated latency per op</h2>'
            f'<p class="note">Total {total:,.0f} µs ({total / 1000:,.2f} ms): CPU {_num(latency["cpu"]["us"]):,.0f} µs'
            + (f" + NPU {npu_us:,.0f} µs in {len(partitions)} partition(s)" if partitions else "")
            + f"; clocks: {clocks}. {_e(latency.get('model', 'an estimate'))}.</p>"
            f'<div class="budget"><div class="track">{stack}</div><div class="budget-parts">{split}</div></div>'
            + svg + "</section>")


# --- memory --------------------------------------------------------------------------------------------------

def _axis_step(span: float, ticks: int = 6) -> float:
    """A round tick spacing (1, 2 or 5 x 10^n) giving about ``ticks`` ticks over ``span``."""
    raw = max(span / ticks, 1e-9)
    power = 10 ** len(str(int(raw))) / 10 if raw >= 1 else 1
    return next((m * power for m in (1, 2, 5, 10) if m * power >= raw), 10 * power)


def _timeline(arena: dict, op_kinds: dict[str, str]) -> str:
    """Each planned tensor as a bar: x = its lifetime in steps, y = its bytes at its arena offset; the peak
    step and the arena's size marked. Only steps where a tensor starts or ends get width (evenly spaced):
    the planned graph's leading constant placeholders would otherwise take half the chart."""
    buffers = arena["buffers"]
    left, right, top, bottom = 80, 20, 24, 36
    width, height = CHART_WIDTH - left - right, TIMELINE_HEIGHT - top - bottom
    peak_step = int(_num(arena["peak_step"]))
    edges = sorted({int(_num(b["first"])) for b in buffers} | {int(_num(b["last"])) + 1 for b in buffers}
                   | {peak_step, peak_step + 1})
    rank = {step: position for position, step in enumerate(edges)}
    size = max(_num(arena["arena_bytes"]), max((_num(b["offset"]) + _num(b["bytes"]) for b in buffers), default=0), 1)

    def x(step: int) -> float:
        return left + width * rank[step] / max(len(edges) - 1, 1)

    def y(offset: float) -> float:
        return top + height * (1 - offset / size)

    parts = [f'<rect x="{left}" y="{top}" width="{width}" height="{height}" class="plot"/>']
    tick = _axis_step(size / 1024)
    value = 0.0
    while value * 1024 <= size + 1e-6:
        parts.append(f'<line x1="{left}" x2="{left + width}" y1="{y(value * 1024):.2f}" y2="{y(value * 1024):.2f}" '
                     f'class="grid"/><text x="{left - 6}" y="{y(value * 1024) + 4:.2f}" text-anchor="end" '
                     f'class="tick">{_fmt(value)} KiB</text>')
        value += tick
    every = -(-len(edges) // 12)  # at most 12 step labels
    for step in edges[::every]:
        parts.append(f'<text x="{x(step):.2f}" y="{top + height + 16}" text-anchor="middle" class="tick">{step}</text>')
    parts.append(f'<text x="{left + width / 2}" y="{TIMELINE_HEIGHT - 4}" text-anchor="middle" class="axis-title">'
                 "step of the planned graph, in execution order (steps where a tensor starts or ends)</text>")
    peak_names = {str(t["name"]) for t in arena.get("peak_tensors", [])}
    for b in sorted(buffers, key=lambda b: b.get("view_of") is not None):
        first, last = int(_num(b["first"])), int(_num(b["last"]))
        offset, nbytes = _num(b["offset"]), _num(b["bytes"])
        role = str(b.get("role", "activation"))
        x0, x1 = x(first), x(last + 1)
        y0, y1 = y(offset + nbytes), y(offset)
        name = str(b["name"])
        kind = op_kinds.get(name.rsplit(".", 1)[0], "")
        tip = (f"{name}{f' ({kind})' if kind else ''}: {role} {b.get('dtype', '')}, {_bytes(nbytes)} at offset "
               f"{int(offset):,}, steps {int(first)}–{int(last)}")
        if b.get("view_of") is not None:
            tip += f", inside {b['view_of']}"
        style = ('fill="none" stroke-dasharray="4 2" stroke="#333"' if b.get("view_of") is not None
                 else f'fill="{ROLE_COLOURS.get(role, OVERHEAD_COLOUR)}"')
        peak = " at-peak" if name in peak_names else ""
        parts.append(f'<rect class="tensor{peak}" data-role="{_e(role)}" x="{x0:.2f}" y="{y0:.2f}" '
                     f'width="{max(x1 - x0, 1):.2f}" height="{max(y1 - y0, 2):.2f}" {style}>'
                     f"<title>{_e(tip)}</title></rect>")
        if x1 - x0 > 90 and y1 - y0 > 14 and b.get("view_of") is None:
            chars = int((x1 - x0 - 8) / 6.2)
            label = name if len(name) <= chars else name[:max(chars - 1, 1)] + "…"
            parts.append(f'<text x="{x0 + 4:.2f}" y="{(y0 + y1) / 2 + 4:.2f}" class="in-bar">{_e(label)}</text>')
    # The arena's size, and the peak step with the lower bound (the bytes live there).
    arena_y = y(_num(arena["arena_bytes"]))
    parts.append(f'<line x1="{left}" x2="{left + width}" y1="{arena_y:.2f}" y2="{arena_y:.2f}" class="arena-line"/>'
                 f'<text x="{left + width - 4}" y="{arena_y - 6:.2f}" text-anchor="end" class="mark-text">'
                 f'arena {_bytes(_num(arena["arena_bytes"]))}</text>')
    peak_x = (x(peak_step) + x(peak_step + 1)) / 2
    anchor = "start" if peak_x < left + width * 0.6 else "end"
    shift = 6 if anchor == "start" else -6
    parts.append(f'<g class="peak"><line x1="{peak_x:.2f}" x2="{peak_x:.2f}" y1="{top - 6}" y2="{top + height}"/>'
                 f'<text x="{peak_x + shift:.2f}" y="{top - 10}" text-anchor="{anchor}">peak: '
                 f'{_bytes(_num(arena["lower_bound_bytes"]))} live at step {peak_step}</text></g>')
    return (f'<svg class="chart timeline" viewBox="0 0 {CHART_WIDTH} {TIMELINE_HEIGHT}" role="img" '
            f'aria-label="memory timeline of arena {int(_num(arena["memory_id"]))}">{"".join(parts)}</svg>')


def _memory(report: dict) -> str:
    memory = report["memory"]
    op_kinds = {str(op["name"]): str(op.get("op", "")) for op in report["ops"]}
    blocks = []
    for arena in memory["arenas"]:
        ratio = _num(arena["ratio_to_bound"])
        head = (f'<h3>Arena of memory id {int(_num(arena["memory_id"]))}: {_bytes(_num(arena["arena_bytes"]))} '
                f'({_kib(_num(arena["arena_bytes"]))})</h3><p class="note">{int(_num(arena["tensors"]))} planned '
                f'tensors, placed by <b>{_e(arena["algorithm"])}</b>; lower bound (most bytes live at one step) '
                f'{_bytes(_num(arena["lower_bound_bytes"]))}, ×{ratio:.3f} of it; ExecuTorch\'s default plan '
                f'{_bytes(_num(arena["executorch_default_bytes"]))}. Hover a bar for its tensor.</p>')
        chart = _timeline(arena, op_kinds) + _legend(ROLE_COLOURS) if "buffers" in arena else \
            '<p class="note">This report has no per-tensor plan (written by an older imxrt): recompile to see ' \
            "the timeline.</p>"
        peak_rows = "".join(f'<tr><td class="name">{_ident(t["name"])}</td><td>{_e(t.get("role", ""))}</td>'
                            f'<td class="n">{_bytes(_num(t["bytes"]))}</td></tr>'
                            for t in arena.get("peak_tensors", []))
        peak = ('<h4>Largest tensors live at the peak</h4><table class="ops small"><thead><tr><th>tensor</th>'
                f"<th>role</th><th>bytes</th></tr></thead><tbody>{peak_rows}</tbody></table>") if peak_rows else ""
        blocks.append(head + chart + peak)
    return ('<section id="memory"><h2>Memory timeline</h2><p class="note">Each bar is one planned tensor: its '
            "lifetime from left to right, its bytes at its offset in the arena from bottom to top. Tensors whose "
            "bars do not overlap in time may share bytes.</p>" + "".join(blocks) + "</section>")


STYLE = """
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
color:#1d232a;background:#f3f5f7}
main{max-width:1240px;margin:0 auto;padding:24px 28px 48px}
header h1{margin:0;font-size:26px}
header p{margin:4px 0 0;color:#5b6673}
nav{margin:12px 0 4px;font-size:13px}
nav a{color:#3568b8;margin-right:14px;text-decoration:none}
section{background:#fff;border:1px solid #dde2e8;border-radius:8px;padding:16px 20px;margin-top:18px}
h2{font-size:19px;margin:0 0 8px}
h3{font-size:15px;margin:18px 0 4px}
h4{font-size:13px;margin:14px 0 4px;color:#39434e}
.note{color:#5b6673;margin:4px 0 10px;font-size:13px}
.warn{background:#fff3ea;border:1px solid #f2b48f;border-radius:6px;padding:8px 12px;margin:14px 0 0}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(200px,1fr));gap:12px;background:none;border:0;
padding:0}
.card{background:#fff;border:1px solid #dde2e8;border-left:4px solid #3568b8;border-radius:8px;padding:12px 14px}
.card.bad{border-left-color:#d23c3c}
.card-title{font-size:12px;text-transform:uppercase;letter-spacing:.05em;color:#5b6673}
.card-value{font-size:26px;font-weight:650;margin:2px 0;white-space:nowrap}
.unit{font-size:14px;font-weight:500;color:#5b6673}
.card-detail{font-size:12.5px;color:#5b6673}
.legend{display:flex;gap:16px;flex-wrap:wrap;font-size:12.5px;margin:6px 0 8px}
.legend i,.budget-parts i{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:5px;
vertical-align:-1px}
.budget{margin:10px 0 14px}
.budget-head{margin-bottom:4px}
.track{position:relative;display:flex;height:22px;background:#e9edf1;border-radius:5px;overflow:hidden}
.seg{height:100%;min-width:3px}
.budget-mark{position:absolute;top:0;bottom:0;width:3px;background:#d23c3c}
.budget-parts{font-size:12.5px;color:#39434e;margin-top:4px}
.scroll{overflow-x:auto}
table.ops{border-collapse:collapse;width:100%;font-size:12.5px}
table.ops th{position:sticky;top:0;background:#eef1f4;text-align:left;padding:6px 8px;border-bottom:1px solid #cfd6de;
white-space:nowrap}
table.ops td{padding:5px 7px;border-bottom:1px solid #edf0f3;vertical-align:top}
table.ops tr:nth-child(even) td{background:#fafbfc}
table.ops tr.cpu-float td{background:#fff5ee}
table.small{width:auto}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.name,td.op{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
td.name{min-width:200px}
td.op{min-width:120px}
td.device{min-width:170px}
td.device .sub{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
td.reason{min-width:200px}
.why{color:#b34d17}
.sub{font-size:11px;color:#5b6673;margin-top:2px}
.chip{display:inline-block;color:#fff;border-radius:10px;padding:1px 8px;font-size:11.5px;white-space:nowrap}
svg.chart{width:100%;height:auto;display:block}
svg .lbl{font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;fill:#1d232a}
svg .val,svg .tick{font-size:11.5px;fill:#39434e}
svg .axis-title{font-size:12px;fill:#5b6673}
svg .axis{stroke:#9aa3ad}
svg .plot{fill:#fbfcfd;stroke:#cfd6de}
svg .grid{stroke:#e6eaee}
svg rect.tensor{stroke:#fff;stroke-width:.6}
svg rect.at-peak{stroke:#1d232a;stroke-width:1}
svg .in-bar{font:11px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;fill:#fff;pointer-events:none}
svg .arena-line{stroke:#1d232a;stroke-dasharray:6 3}
svg .mark-text{font-size:12px;fill:#1d232a}
svg .peak line{stroke:#d23c3c;stroke-width:2;stroke-dasharray:5 3}
svg .peak text{font-size:12.5px;font-weight:600;fill:#d23c3c}
footer{color:#5b6673;font-size:12px;margin-top:20px}
"""


def render(report: dict) -> str:
    """``report.json`` (as a dict) as one self-contained HTML page."""
    sections = [_advice(report), _summary(report), _accuracy(report)]
    if report.get("memory"):
        sections.append(_budgets(report))
    if report.get("latency"):
        sections.append(_latency(report))
    sections.append(_placement(report))
    sections.append(_partitions(report))
    if report.get("memory"):
        sections.append(_memory(report))
    links = [("advice", "Advice", "advice"), ("accuracy", "Accuracy", "accuracy"), ("budgets", "Budgets", "memory"),
             ("latency", "Latency", "latency"),
             ("placement", "Placement", None),
             ("partitions", "NPU partitions", "partitions"), ("memory", "Memory timeline", "memory")]
    ranked = bool((report.get("accuracy") or {}).get("layers"))  # the accuracy section shows the ranked layers
    nav = "".join(f'<a href="#{anchor}">{text}</a>' for anchor, text, key in links
                  if key is None or (ranked if key == "accuracy" else report.get(key)))
    title = f"imxrt report: {_e(report['target'])}"
    return ("<!DOCTYPE html>\n"
            f'<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">'
            f"<title>{title}</title><style>{STYLE}</style></head><body><main>"
            f"<header><h1>{title}</h1><p>What runs where, how long it should take and how much memory it needs "
            f"(report version {_e(report.get('version', '?'))}).</p><nav>{nav}</nav></header>"
            + "".join(sections)
            + '<footer>Written by imxrt from report.json, which carries the same numbers. Latency figures are '
            "estimates of the cost model, not measurements.</footer></main></body></html>\n")
