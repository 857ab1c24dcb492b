"""Shared pieces of the regression tests (tests/test_regressions_*.py): the two targets every case runs on, a
seeded compile, one-function modules, and the report check for an op kept in int8 on the CPU."""

from __future__ import annotations

import torch
import torch.nn as nn

from imxrt.pipeline import CompileOptions, compile

TARGETS = ("imxrt700", "imxrt700-cpu")


def compile_seeded(model, shapes, target, seed=0):
    """Compile ``model`` with 8 seeded N(0, 1) calibration samples of ``shapes``; return the result and them."""
    generator = torch.Generator().manual_seed(seed)
    cal = [tuple(torch.randn(s, generator=generator) for s in shapes) for _ in range(8)]
    result = compile(model.eval(), cal[0], target, cal, CompileOptions(show_progress=False))
    return result, cal


def int8_on_the_cpu(result, op: str, target: str, *reason_words: str) -> dict:
    """The report row of ``op``: in int8 on the CPU, and on imxrt700 (where it could have been delegated) for a
    reason holding every one of ``reason_words``, a rule of the capability table (not the LiteRT lowering's
    refusal, the safety net behind it)."""
    [row] = [row for row in result.report["ops"] if row["op"] == op]
    assert row["placement"] == "cpu" and row["execution"] == "cpu int8"
    if target == "imxrt700":
        for words in reason_words:
            assert words in row["reason"]
        assert "the LiteRT lowering refused it" not in row["reason"]
    return row


class Elementwise(nn.Module):
    def __init__(self, function):
        super().__init__()
        self.function = function

    def forward(self, x):
        return self.function(x)


class Binary(nn.Module):
    def __init__(self, function):
        super().__init__()
        self.function = function

    def forward(self, x, y):
        return self.function(x, y)
