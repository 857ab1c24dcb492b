"""Advice: each item's estimate before and after holds when the change is made and the model recompiled."""

from __future__ import annotations

import pytest
import torch
from compiled_examples import EXAMPLES, compiled_example
from torch import nn

from imxrt.pipeline import CompileOptions, compile
from imxrt.report.advice import advice_lines
from imxrt.report.html import render
from imxrt.source import load_source

pytestmark = pytest.mark.slow  # every test here compiles models


def _total_us(result) -> float:
    return result.report["latency"]["total"]["us"]


def _item(result, kind: str) -> dict:
    (item,) = [item for item in result.report["advice"] if item["kind"] == kind]
    return item


def test_mobilenet_v2_advice_matches_the_recompiled_programs():
    _, _, result = compiled_example("mobilenet_v2")
    kinds = [item["kind"] for item in result.report["advice"]]
    assert kinds[:2] == ["io_int8", "channels_last_input"]  # largest saving first
    total = _total_us(result)

    io = _item(result, "io_int8")
    assert io["before_us"] == pytest.approx(total)
    source = load_source(str(EXAMPLES / "mobilenet_v2.py"))
    int8 = compile(source.model, source.example_inputs, "imxrt700", list(source.calibration)[:2],
                   CompileOptions(show_progress=False, io="int8"))
    assert io["after_us"] == pytest.approx(_total_us(int8), rel=0.01)
    assert not any(item["kind"] == "io_int8" for item in int8.report["advice"])  # nothing left to convert

    channels_last = _item(result, "channels_last_input")
    _, _, nhwc = compiled_example("channels_last")  # the same network, given channels_last
    assert channels_last["after_us"] == pytest.approx(_total_us(nhwc), rel=0.01)
    assert channels_last["saves_us"] > 0 and "x" in channels_last["change"]
    assert not any(item["kind"] == "channels_last_input" for item in nhwc.report["advice"])

    lines = advice_lines(result.report["advice"])
    assert lines[1].startswith(f"  1. --io int8: saves {io['saves_us']:,.1f} µs ({total:,.1f} -> ")
    assert len(lines) == 4
    page = render(result.report)
    assert page.index('id="advice"') < page.index('id="placement"') and page.index('id="advice"') < page.index(
        "NPU coverage")


class Cumulative(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x).cumsum(1)


def test_an_op_left_on_the_cpu_is_advice_with_its_cpu_time_as_a_bound():
    torch.manual_seed(0)
    inputs = (torch.randn(1, 8),)
    result = compile(Cumulative().eval(), inputs, "imxrt700", [inputs], CompileOptions(show_progress=False))
    (item,) = [item for item in result.report["advice"] if item["kind"] == "cpu_op"]
    op = next(op for op in result.report["ops"] if op["name"] == item["op"])
    assert op["placement"] == "cpu" and "cumsum" in op["op"]
    cpu_us = next(o["us"] for o in result.report["latency"]["ops"] if o["name"] == op["name"])
    assert item["at_most"] and item["saves_us"] == pytest.approx(cpu_us)
    assert item["after_us"] == pytest.approx(item["before_us"] - cpu_us)
    assert op["reason"] in item["change"]
