"""report.html: one well-formed, self-contained page with every op, the memory timeline and the budgets;
model-provided strings stay text; `imxrt report` writes it from report.json or says in one line why not."""

from __future__ import annotations

import copy
import json
from html.parser import HTMLParser

import pytest

from imxrt.cli import EXIT_USER_ERROR, main
from imxrt.memory import packing
from imxrt.memory.lifetimes import Buffer, peak
from imxrt.memory.planning_pass import MemoryPlan
from imxrt.memory.report import _memory_entry
from imxrt.pipeline import CompileResult
from imxrt.report.html import render

HOSTILE = '<script>alert("x")</script>'
VOID = {"meta", "br", "wbr", "img", "input", "link", "hr", "col"}


def _op(name, op, execution, partition=None, macs=0, cycles=0, **extra):
    return {"name": name, "op": op, "execution": execution, "placement": "npu" if execution == "npu" else "cpu",
            "partition": partition, "kernel": "NeutronBackend" if execution == "npu" else f"cortex_m.{op}",
            "reason": f"reason of {name}", "macs": macs, "estimated_cycles": cycles, "debug_handle": 1, **extra}


def _report() -> dict:
    """A small report of the layout `imxrt compile` writes: NPU, int8 CPU and float CPU ops, one node whose
    name is markup, one arena of four planned tensors (one a view)."""
    ops = [_op("quantize", "quantize_per_tensor", "cpu int8", cycles=900),
           _op("conv", "aten.convolution.default", "npu", 0, macs=1000, cycles=400),
           _op(HOSTILE, "aten.hardtanh.default", "npu", 0),
           _op("softplus & co", "aten.softplus.default", "cpu float", cycles=3000, cpu_reason="no int8 <kernel>"),
           _op("dequantize", "dequantize_per_tensor", "cpu int8", cycles=300)]
    latency_ops = [{"name": op["name"], "partition": op["partition"], "device": "npu" if op["partition"] is not None
                    else "cpu", "cycles": op["estimated_cycles"], "us": op["estimated_cycles"] / 100} for op in ops]
    buffers = [{"name": "x", "role": "input", "dtype": "float32", "bytes": 4096, "offset": 0, "first": 0, "last": 3,
                "view_of": None},
               {"name": "quantize.out", "role": "activation", "dtype": "int8", "bytes": 1024, "offset": 4096,
                "first": 3, "last": 5, "view_of": None},
               {"name": "softplus.scratch", "role": "scratch", "dtype": "int8", "bytes": 512, "offset": 0,
                "first": 6, "last": 6, "view_of": None},
               {"name": "view_of_x", "role": "activation", "dtype": "int8", "bytes": 256, "offset": 256, "first": 2,
                "last": 3, "view_of": "x"}]
    return {
        "version": 1, "target": "imxrt700", "neutron_compiler": "reference", "ops": ops,
        "partitions": [{"index": 0, "tflite": "npu/partition_0.tflite", "ops": ["CONV_2D"], "nodes": ["conv", HOSTILE],
                        "macs": 1000, "payload": "reference", "payload_bytes": 2048}],
        "summary": {"macs_total": 1000, "macs_npu": 1000, "npu_mac_fraction": 1.0, "partitions": 1, "transposes": 0,
                    "ops_npu": 2, "ops_cpu": 3, "ops_cpu_int8": 2, "ops_cpu_float": 1, "layout_copies": 0},
        "latency": {"estimate": True, "model": "cost model", "clock_hz": {"cpu": 100_000_000, "npu": 100_000_000},
                    "ops": latency_ops,
                    "partitions": [{"index": 0, "cycles": 900, "us": 9.0, "overhead_cycles": 400,
                                    "unattributed_cycles": 100, "basis": "LiteRT ops", "kernels": []}],
                    "cpu": {"cycles": 5200, "us": 52.0, "overhead_cycles": 1000},
                    "total": {"cycles": 6100, "us": 61.0}},
        "memory": {
            "arenas": [{"memory_id": 1, "arena_bytes": 5120, "lower_bound_bytes": 5120, "ratio_to_bound": 1.0,
                        "algorithm": "first-fit by size", "executorch_default_bytes": 6144, "candidates": [],
                        "tensors": 4, "peak_step": 3,
                        "peak_tensors": [{"name": "x", "bytes": 4096, "role": "input"}], "buffers": buffers}],
            "npu_scratch_bytes": [800], "method_allocator_bytes": 300,
            "sram": {"arena_bytes": 5120, "temp_allocator_bytes": 800, "method_allocator_bytes": 300,
                     "total_bytes": 6220, "budget_bytes": 65536, "budget_from": "target", "fits": True},
            "flash": {"pte_bytes": 9000, "constant_bytes": 4000, "delegate_bytes": 2048, "budget_bytes": None,
                      "fits": None}},
    }


class Page(HTMLParser):
    """Checks nesting as it parses; keeps every element, all text, and the placement table's name cells."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.elements: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.names: list[str] = []
        self._in_name = False
        self.feed(text)
        self.close()
        assert not self.stack, f"unclosed elements: {self.stack}"

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.elements.append((tag, attrs))
        if tag == "td" and attrs.get("class") == "name" and self._table_class == "ops":
            self._in_name = True
            self.names.append("")
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1] if self.stack else None}>"
        self.stack.pop()
        if tag == "td":
            self._in_name = False

    def handle_data(self, data):
        self.text.append(data)
        if self._in_name:
            self.names[-1] += data

    @property
    def _table_class(self) -> str | None:
        tables = [attrs.get("class") for tag, attrs in self.elements if tag == "table"]
        return tables[-1] if tables else None

    def having(self, tag: str, css_class: str) -> list[dict]:
        return [attrs for t, attrs in self.elements if t == tag and css_class in (attrs.get("class") or "").split()]


@pytest.fixture(scope="module")
def page() -> Page:
    return Page(render(_report()))


def test_page_is_well_formed_and_self_contained(page):
    tags = {tag for tag, _ in page.elements}
    assert {"html", "head", "style", "body", "svg", "table"} <= tags
    assert not tags & {"script", "link", "iframe", "img", "object"}
    references = [value for _, attrs in page.elements for key, value in attrs.items() if key in ("src", "href")]
    assert references and all(value.startswith("#") for value in references)  # in-page anchors only
    assert "url(" not in render(_report()) and "http" not in render(_report())


def test_every_op_is_a_row_in_execution_order(page):
    assert page.names == [op["name"] for op in _report()["ops"]]


def test_model_strings_stay_text(page):
    assert HOSTILE in "".join(page.text)  # shown as the node is named...
    assert "script" not in {tag for tag, _ in page.elements}  # ...never run
    assert "no int8 <kernel>" in "".join(page.text) and "softplus & co" in "".join(page.text)


def test_memory_timeline_has_a_bar_per_tensor_and_the_peak(page):
    bars = page.having("rect", "tensor")
    assert len(bars) == len(_report()["memory"]["arenas"][0]["buffers"])
    assert sorted(bar["data-role"] for bar in bars) == ["activation", "activation", "input", "scratch"]
    assert len(page.having("g", "peak")) == 1
    assert "peak: 5,120 B live at step 3" in "".join(page.text)


def test_a_bar_spans_its_lifetime_and_its_bytes():
    """The scratch tensor lives at one step, the input at four: widths follow their step counts (x is even
    over the steps where a tensor starts or ends: 0, 2, 3, 4, 6, 7); heights follow the bytes."""
    bars = {bar["data-role"]: bar for bar in Page(render(_report())).having("rect", "tensor") if "stroke" not in bar}
    step = float(bars["scratch"]["width"])
    assert float(bars["input"]["width"]) == pytest.approx(3 * step)  # 0..4 covers three evenly spaced edges
    assert float(bars["input"]["height"]) == pytest.approx(4 * float(bars["activation"]["height"]))


def test_budget_bars_show_the_same_numbers_as_the_json(page):
    heads = ["".join(page.text).count(text) for text in ("6,220 B", "65,536 B", "9,000 B")]
    assert all(heads), heads
    budgets = page.having("div", "budget")
    assert len(budgets) == 3  # SRAM, flash, the latency split
    text = "".join(page.text)
    assert "SRAM 6,220 B (6.1 KiB) of 65,536 B (64.0 KiB): 9.5%, fits" in text
    assert "no flash size is known for this target" in text


def test_summary_leads_with_target_coverage_latency_and_sram(page):
    titles = [text for text in page.text if text in ("Target", "NPU coverage", "Estimated latency", "SRAM")]
    assert titles[:4] == ["Target", "NPU coverage", "Estimated latency", "SRAM"]  # the cards come first
    assert "1 op(s) run in float on the CPU" in "".join(page.text)


def test_over_budget_sram_is_marked():
    report = _report()
    report["memory"]["sram"]["budget_bytes"] = 4096
    page = Page(render(report))
    assert page.having("div", "budget-mark") and page.having("div", "bad")
    assert "over budget" in "".join(page.text)


def test_cpu_only_report_without_plan_details_still_renders():
    report = _report()
    report["partitions"] = []
    report["summary"].update(partitions=0, macs_npu=0, npu_mac_fraction=0.0)
    del report["memory"]["arenas"][0]["buffers"]
    report["memory"]["sram"]["budget_bytes"] = None
    text = "".join(Page(render(report)).text)
    assert "0.0% of MACs" in text and "recompile to see the timeline" in text and "pass --sram-budget" in text
    del report["latency"]["clock_hz"]["npu"]  # a target without an NPU
    assert "no NPU" in "".join(Page(render(report)).text)


def test_memory_entry_carries_each_tensor_offset_and_lifetime():
    buffers = [Buffer(0, "x", 64, 0, 2, role="input"), Buffer(1, "conv.out", 32, 2, 4),
               Buffer(2, "conv.scratch", 16, 2, 2, role="scratch"), Buffer(3, "view", 8, 3, 4, base=1, base_offset=8)]
    chosen, tried = packing.plan(buffers)
    plan = MemoryPlan(memory_id=1, buffers=tuple(buffers), chosen=chosen, tried=tuple((p.label, p.size) for p in tried),
                      bound=peak(buffers), start=0, executorch_bytes=chosen.size)
    entry = _memory_entry(plan)
    assert [(b["name"], b["first"], b["last"], b["bytes"], b["offset"]) for b in entry["buffers"]] == \
        [(b.name, b.first, b.last, b.nbytes, chosen.offsets[b.index]) for b in buffers]
    assert [b["view_of"] for b in entry["buffers"]] == [None, None, None, "conv.out"]
    assert entry["buffers"][3]["offset"] == entry["buffers"][1]["offset"] + 8


def test_save_writes_the_html_beside_the_json(tmp_path):
    CompileResult(pte=b"pte", partitions=[], report=_report()).save(tmp_path / "out")
    assert json.loads((tmp_path / "out" / "report.json").read_text())["target"] == "imxrt700"
    assert Page((tmp_path / "out" / "report.html").read_text(encoding="utf-8")).names[0] == "quantize"


def test_cli_report_writes_the_page(tmp_path, capsys):
    (tmp_path / "report.json").write_text(json.dumps(_report()))
    assert main(["report", str(tmp_path)]) == 0
    assert (tmp_path / "report.html").read_text(encoding="utf-8") == render(_report())
    assert "report.html" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "report.json"]  # nothing left aside


def _broken(report: dict) -> dict:
    report = copy.deepcopy(report)
    report["memory"]["sram"]["total_bytes"] = "<b>many</b>"
    return report


BAD_REPORTS = {
    "missing": (None, "report.json: no such file; give the folder imxrt compile -o wrote"),
    "not_json": ("{", "report.json: is not readable JSON"),
    "too_deep": ("[" * 100_000, "report.json: is not readable JSON"),  # deeper than Python's stack
    "not_a_report": (json.dumps({"hello": 1}), "is not an imxrt report (no target, neutron_compiler, ops"),
    "a_list": (json.dumps([1, 2]), "is not an imxrt report"),
    "wrong_layout": (json.dumps(_broken(_report())), "does not have the layout this imxrt writes"),
}


@pytest.mark.parametrize("case", BAD_REPORTS)
def test_cli_report_errors_are_one_line(case, tmp_path, capsys):
    content, message = BAD_REPORTS[case]
    if content is not None:
        (tmp_path / "report.json").write_text(content)
    (tmp_path / "report.html").write_text("previous")
    assert main(["report", str(tmp_path)]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert (tmp_path / "report.html").read_text() == "previous"  # the old page stays whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"] + (["report.json"] if content else [])


_LAYER = {"path": "features.3<b>", "op": "conv2d", "sqnr_db": 21.0, "own_sqnr_db": 18.0, "output_sqnr_db": 19.0,
          "weight_sqnr_db": 30.0, "scale": 0.1, "range": [-12.8, 12.7], "p9999": 1.0, "saturated": 0.0,
          "weight_levels": 127}


@pytest.mark.parametrize("layers", [[_LAYER], []], ids=["ranked", "none"])
def test_an_evaluated_report_shows_its_ranked_layers_and_accuracy_advice(layers):
    accuracy = {"samples": 4, "metric": "top-1", "float": 1.0, "int8": 0.75, "agreement": 0.75,
                "output_sqnr_db": [20.0], "layer_sqnr_db": {}, "layers": layers}
    advice = [{"kind": "layer_sqnr", "cause": "outlier_range", "layer": "features.3<b>", "title": "features.3<b> loses",
               "change": "a clipped range", "why": "outliers", "figure": "own SQNR 18.0 dB"}]
    parsed = Page(render(_report() | {"accuracy": accuracy, "advice": advice}))
    text = "".join(parsed.text)
    assert "own SQNR 18.0 dB" in text  # the advice item's figure
    assert bool(parsed.having("section", "accuracy")) == bool(layers)
    if layers:
        assert "features.3<b>" in text and "18.0" in text and "[-12.8, 12.7]" in text
