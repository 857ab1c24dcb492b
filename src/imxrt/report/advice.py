"""Advice: the few changes that would save the most estimated time, each with its figures (``report.json``
``advice``; the CLI prints the first three, the HTML page shows them first).

Every item is read off this program's own estimate, never guessed: its ``saves_us`` is the estimated time of
the kernels the change removes, ``before_us`` the program's estimate and ``after_us`` the estimate without
them. Where the change removes work whose replacement the estimate cannot know (an op the NPU would run
instead of the CPU), ``saves_us`` is that op's CPU time, and the item says it is a bound (``at_most``).

    io_int8              the CPU converts float model inputs to int8 and int8 outputs to float: --io int8
    channels_last_input  the NPU transposes an NCHW model input to NHWC first: a channels_last model input
    cpu_op               an op runs on the CPU (in float, or in int8 between partitions): the rule it failed
    cell_state           an LSTM's cell update runs in float (the default): --cell-state int8, less accurate
    sram_peak            the tensors live at the arena's peak, the largest first

Accuracy items come first, each with a ``figure``: a decision closer than its int8 step
(``report/logit_steps.py``) and, after an evaluation, the layer that loses the most SQNR itself with the
remedy its figures point to (``layer_advice``, ``LAYER_REMEDIES``).
"""

from __future__ import annotations

from imxrt.perf import loop_placement
from imxrt.placement import FLOAT_CELL_STATE, FLOAT_LAYER_KEPT
from imxrt.report.names import label

SHOWN = 3  # items the CLI prints
MOST = 5  # time-saving items kept: the few that save the most


def advise(report: dict, has_npu: bool) -> list[dict]:
    """The advice for a finished report (placement, latency and memory): the ``MOST`` time-saving items,
    largest first, then the SRAM peak. Ops left on the CPU are advice only where an NPU could take them."""
    latency = report["latency"]
    total = float(latency["total"]["us"])
    items = [_io_int8(report, total), _channels_last_input(report, total), _cell_state(report, total)]
    if has_npu:
        items += _cpu_ops(report, total)
    ranked = sorted((item for item in items if item is not None), key=lambda item: -item["saves_us"])[:MOST]
    peak = _sram_peak(report)
    return ranked + ([peak] if peak else [])


def _timed(item: dict, total: float, saves_us: float) -> dict:
    return item | {"saves_us": round(saves_us, 3), "before_us": round(total, 3),
                   "after_us": round(total - saves_us, 3)}


def _cpu_us(report: dict) -> dict[str, float]:
    return {op["name"]: float(op["us"]) for op in report["latency"]["ops"] if op["device"] == "cpu"}


def _io_int8(report: dict, total: float) -> dict | None:
    conversions = [op for op in report["ops"] if op.get("model_io")]
    us = _cpu_us(report)
    saves = sum(us.get(op["name"], 0.0) for op in conversions)
    if not conversions or saves <= 0:
        return None
    inputs = [op for op in conversions if op["model_io"] == "input"]
    what = " and ".join(part for part in (
        f"quantizes the float model input{'s' if len(inputs) > 1 else ''}" if inputs else "",
        f"dequantizes the int8 output{'s' if len(conversions) - len(inputs) > 1 else ''}"
        if len(inputs) < len(conversions) else "") if part)
    return _timed({
        "kind": "io_int8",
        "title": "--io int8",
        "change": "compile with --io int8 and give the program int8 inputs (quantized in the pre-processing, with "
                  "the scale and zero point report.json's io lists)",
        "why": f"the CPU {what}",
    }, total, saves)


def _channels_last_input(report: dict, total: float) -> dict | None:
    partitions = {p["index"]: p for p in report["latency"]["partitions"]}
    npu_hz = float(report["latency"]["clock_hz"].get("npu") or report["latency"]["clock_hz"]["cpu"])
    saves, names = 0.0, []
    for partition in report["partitions"]:
        for transpose in partition.get("input_transposes", []):
            kernel = partitions[partition["index"]]["kernels"][transpose["kernel"]]
            saves += kernel["cycles"] * 1e6 / npu_hz
            names.append(transpose["input"])
    if not names:
        return None
    listed = ", ".join(dict.fromkeys(names))
    return _timed({
        "kind": "channels_last_input",
        "title": f"channels_last input {listed}",
        "change": f"give the model {listed} in channels_last memory format (example inputs and calibration "
                  "samples as x.to(memory_format=torch.channels_last)), and feed NHWC bytes at run time",
        "why": f"the NPU first transposes the NCHW input {listed} to NHWC",
    }, total, saves)


_CHOSEN_ON_THE_CPU = (loop_placement.CHOSEN, FLOAT_CELL_STATE, FLOAT_LAYER_KEPT)  # how such ops' reasons start


def _cpu_ops(report: dict, total: float) -> list[dict]:
    us = _cpu_us(report)
    items = []
    for op in report["ops"]:
        if op["placement"] != "cpu" or op.get("model_io") or op.get("execution") not in ("cpu float", "cpu int8") \
                or us.get(op["name"], 0.0) <= 0 or "converts" in op.get("reason", "") \
                or op.get("reason", "").startswith(_CHOSEN_ON_THE_CPU):
            continue
        how = "in float" if op["execution"] == "cpu float" else "in int8 on the CPU, outside the NPU partitions"
        why = op.get("cpu_reason") if op["execution"] == "cpu float" else None
        items.append(_timed({
            "kind": "cpu_op",
            "op": op["name"],
            "title": f"{op['op'].split('.')[-2]} in {label(op)}",
            "change": f"make {label(op)} ({op['op']}) pass the NPU's rule: {op['reason']}",
            "why": f"it runs {how}" + (f" ({why})" if why else ""),
            "at_most": True,  # the NPU would run it in some time of its own, which the estimate cannot know
        }, total, us[op["name"]]))
    return items


def _cell_state(report: dict, total: float) -> dict | None:
    """An LSTM's float cell update: an int8 one saves at most its float ops' time, at some accuracy."""
    us = _cpu_us(report)
    ops = [op for op in report["ops"] if op.get("reason", "").startswith(FLOAT_CELL_STATE)]
    saves = sum(us.get(op["name"], 0.0) for op in ops)
    if saves <= 0:
        return None
    return _timed({
        "kind": "cell_state",
        "title": "an LSTM's float cell state",
        "change": "--cell-state int8 (CompileOptions(cell_state=\"int8\")): the cell update in int8 too, one "
                  "scale across its steps; check the accuracy it costs (imxrt evaluate)",
        "why": f"{len(ops)} float op(s) per step update the cell state on the CPU",
        "at_most": True,  # the int8 ops take some time of their own
    }, total, saves)


def _sram_peak(report: dict) -> dict | None:
    arenas = (report.get("memory") or {}).get("arenas") or []
    if not arenas:
        return None
    arena = max(arenas, key=lambda a: a["arena_bytes"])
    tensors = sorted(arena.get("peak_tensors", []), key=lambda t: -t["bytes"])
    if not tensors:
        return None
    largest = tensors[0]
    return {
        "kind": "sram_peak",
        "title": "SRAM peak",
        "change": f"make {largest['name']} ({largest['role']}, {largest['bytes']:,} B) smaller: it is the largest "
                  "tensor live at the arena's peak",
        "why": "live at the arena's peak: " + ", ".join(f"{t['name']} ({t['bytes']:,} B)" for t in tensors[:3]),
        "arena_bytes": arena["arena_bytes"],
        "peak_bytes": [t["bytes"] for t in tensors],
    }


# The remedy for the layer that loses the most SQNR itself, by what its figures show (``accuracy.layers``):
# the first cause that holds names the remedy.
SATURATED = 1e-3  # share of its evaluated values outside the calibrated range that make calibration the cause
STRETCHED = 4.0  # calibrated range over the 99.99th percentile of |x| beyond which rare outliers stretch it
DOMINATES_DB = 3.0  # one rounding dominates the other with twice its noise power
WORTH_FIXING_DB = 30.0  # an own SQNR below which a layer's rounding is a visible share of its signal (3% RMS)
FEW_LEVELS = 32.0  # int8 steps (5 bits) a quarter of a convolution's output channels span, below which to equalize


def _weights_dominate(row: dict) -> str | None:
    """Its int8 weights' rounding costs more than its output's: a per-tensor weight whose channels' ranges
    differ leaves its narrow channels few levels."""
    weights, output = row["weight_sqnr_db"], row["output_sqnr_db"]
    if weights is None or (output is not None and weights > output - DOMINATES_DB):
        return None
    levels = f"; its narrowest channel uses ±{row['weight_levels']} of int8's ±127 levels" \
        if row["weight_levels"] is not None and row["weight_levels"] < 127 else ""
    return f"its weights' rounding ({weights:.1f} dB) costs more than its output's ({_db(output)}){levels}"


def _saturates(row: dict) -> str | None:
    """The evaluated values leave the calibrated range: they saturate."""
    if row["saturated"] <= SATURATED:
        return None
    low, high = row["range"]
    return (f"{row['saturated']:.2%} of its evaluated output values lie outside the calibrated range "
            f"[{low:.4g}, {high:.4g}] and saturate")


def _stretched(row: dict) -> str | None:
    """Rare outliers stretch the calibrated range far beyond where the values are."""
    half = max(abs(v) for v in row["range"])
    if row["p9999"] <= 0 or half < STRETCHED * row["p9999"]:
        return None
    return (f"its calibrated range reaches {half:.4g} but 99.99% of its evaluated |values| lie below "
            f"{row['p9999']:.4g} ({half / row['p9999']:.1f}x): outliers stretch its int8 step to {row['scale']:.4g}")


def _otherwise(row: dict) -> str | None:
    """Neither range nor weights stand out: int8 itself is too coarse for this layer."""
    return (f"its own rounding leaves {_db(row['own_sqnr_db'])} with no outlier, saturation or weight rounding "
            "standing out")


def _db(value: float | None) -> str:
    return "nothing" if value is None else f"{value:.1f} dB"


LAYER_REMEDIES = (  # (cause, kind, remedy)
    (_weights_dominate, "weight_rounding",
     "--bias-correction (CompileOptions(bias_correction=True)), or QAT (imxrt.prepare_qat / compile_qat)"),
    (_saturates, "saturation", "calibration data that covers what is evaluated (calibration_inputs() drawn "
                               "like evaluation_data())"),
    (_stretched, "outlier_range", "a clipped range: --activation-ranges mse (CompileOptions(activation_ranges="
                                  "\"mse\"))"),
    (_otherwise, "int8_rounding", "QAT (imxrt.prepare_qat / compile_qat): training that learns int8's steps"),
)


def layer_advice(accuracy: dict) -> list[dict]:
    """The advice items of the evaluation: the layer that loses the most SQNR itself (``_worst_layer``), the
    layer an int8 model input costs the most (``_rounded_model_input``) and the convolution whose output
    channels' ranges lie furthest apart (``_spread_channels``)."""
    return _worst_layer(accuracy) + _rounded_model_input(accuracy) + _spread_channels(accuracy)


def _spread_channels(accuracy: dict) -> list[dict]:
    """The convolution a quarter of whose output channels span the fewest int8 steps (``channel_levels``), when
    under ``FEW_LEVELS``: one scale for all its channels is set by the widest, and the others are rounded
    coarsely. An SQNR over the whole tensor hides it (the quiet channels carry little of its energy) though the
    layers reading them may weigh them heavily; cross-layer equalization gives the channels comparable ranges."""
    row = _lowest(accuracy.get("layers") or [], "channel_levels", FEW_LEVELS)
    if row is None:
        return []
    return [{
        "kind": "layer_sqnr",
        "cause": "channel_spread",
        "layer": row["path"],
        "title": f"{row['path']} ({row['op']}) has output channels of far apart ranges",
        "change": "--equalize (CompileOptions(equalization=True)): cross-layer equalization scales each channel "
                  f"of {row['path']} and the layers reading it (where only ReLU-like ops lie between)",
        "why": f"a quarter of its output channels span at most {row['channel_levels']:.1f} int8 steps, "
               f"{row['channel_spread']:.1f}x narrower than its widest one, which sets the scale",
        "figure": f"a quarter of its channels in {row['channel_levels']:.1f} int8 steps or fewer",
    }]


def _rounded_model_input(accuracy: dict) -> list[dict]:
    """The layer reading a model input whose output the input's int8 rounding costs the most, when it costs
    enough to matter (``input_sqnr_db`` below ``WORTH_FIXING_DB``): kept in float, it reads the float input.
    A waveform's 255 steps span its loudest calibration frame, so a frame 20 dB quieter gets some 25."""
    row = _lowest([row for row in accuracy.get("layers") or [] if row.get("reads_model_input")], "input_sqnr_db",
                  WORTH_FIXING_DB)
    if row is None:
        return []
    return [{
        "kind": "layer_sqnr",
        "cause": "model_input_rounding",
        "layer": row["path"],
        "title": f"{row['path']} ({row['op']}) reads an int8 model input",
        "change": f"--float-layer {row['path']} (CompileOptions(float_layers=(\"{row['path']}\",))): it then reads "
                  "the float input, and runs in float on the Cortex-M",
        "why": f"the input's int8 rounding ({_db(row['input_rounding_db'])}) leaves its output "
               f"{_db(row['input_sqnr_db'])}",
        "figure": f"SQNR {_db(row['input_sqnr_db'])} from its int8 input",
    }]


def _lowest(rows: list[dict], key: str, below: float) -> dict | None:
    """The row of ``rows`` whose figure ``key`` is lowest, when it is below ``below`` (ties by path)."""
    rows = [row for row in rows if row.get(key) is not None and row[key] < below]
    return min(rows, key=lambda row: (row[key], row["path"]), default=None)


def _worst_layer(accuracy: dict) -> list[dict]:
    """The advice item for the layer that loses the most SQNR itself (the first of ``accuracy["layers"]``), when
    it loses enough to matter (own SQNR below ``WORTH_FIXING_DB``), with the remedy of the first cause of
    ``LAYER_REMEDIES`` its figures show."""
    rows = accuracy.get("layers") or []
    if not rows or (rows[0]["own_sqnr_db"] is not None and rows[0]["own_sqnr_db"] >= WORTH_FIXING_DB):
        return []
    row = rows[0]
    why, kind, remedy = next((why, kind, remedy) for cause, kind, remedy in LAYER_REMEDIES
                             if (why := cause(row)) is not None)  # the last cause always holds
    cumulative = f", {_db(row['sqnr_db'])} at its output" if row["sqnr_db"] is not None else ""
    return [{
        "kind": "layer_sqnr",
        "cause": kind,
        "layer": row["path"],
        "title": f"{row['path']} ({row['op']}) loses the most SQNR",
        "change": f"{remedy}, for {row['path']}",
        "why": why,
        "figure": f"own SQNR {_db(row['own_sqnr_db'])}{cumulative}",
    }]


def advice_lines(advice: list[dict]) -> list[str]:
    """The CLI's lines, one per item: every accuracy item (few, and a wrong answer outweighs a slow one), then
    the first ``SHOWN`` of the others (report.json and report.html say how)."""
    accuracy = [item for item in advice if "figure" in item]
    lines = []
    for number, item in enumerate(accuracy + [item for item in advice if "figure" not in item][:SHOWN], start=1):
        if "figure" in item:
            figure = item["figure"]
        elif "saves_us" in item:
            bound = "at most " if item.get("at_most") else ""
            figure = f"saves {bound}{item['saves_us']:,.1f} µs ({item['before_us']:,.1f} -> {item['after_us']:,.1f} µs)"
        else:
            figure = f"arena {item['arena_bytes']:,} B"
        lines.append(f"  {number}. {item['title']}: {figure}; {item['why']}")
    return (["advice (from the estimate and the measured accuracy; report.html says how):"] + lines) if lines else []
