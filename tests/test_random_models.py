"""The random-model run of `benchmarks/random_models.py` on a few seeds, through its worker processes.

A seed is one model: the same recipe and weights every time. Each case compiles and passes the suite's
checks (TFLM on every partition, dim orders, the .pte against the quantized program), and a worker that
dies is recorded as that case's crash, the cases after it running in a fresh worker.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import _random_models  # noqa: E402
import _random_sequences  # noqa: E402
import random_models  # noqa: E402


@pytest.mark.parametrize("family", [_random_models, _random_sequences])
def test_a_seed_is_one_model(family):
    (first, recipe), (again, same) = family.build(7), family.build(7)
    assert recipe.describe() == same.describe()
    x = torch.randn(recipe.shape)
    with torch.no_grad():
        assert torch.equal(first(x), again(x))
    assert family.build(8)[1].describe() != recipe.describe()


@pytest.mark.slow
def test_random_models_compile_and_match_tflm():
    rows = random_models.run_batch(0, 3, "imxrt700", timeout=300)
    assert [row["seed"] for row in rows] == [0, 1, 2]
    assert [row["outcome"] for row in rows] == ["ok"] * 3, rows


@pytest.mark.slow
@pytest.mark.parametrize("target", ["imxrt700", "imxrt700-cpu"])
def test_random_sequence_models_compile_and_match_tflm(target):
    """Recurrent layers, attention, layer norms and token-wise layers in random order and sizes (seeds 7 and 8:
    a 1-D conv, linear layers and a layer norm; a token mean, attention and an LSTM)."""
    rows = random_models.run_batch(7, 2, target, timeout=300, family="sequence")
    assert [row["outcome"] for row in rows] == ["ok"] * 2, rows


@pytest.mark.slow
def test_movement_chains_that_vanish_in_a_row_leave_no_dangling_tensor():
    """Seed 2118: a gated value (also a model output) shuffled twice, 2 channels in 2 groups, then padded and
    max-pooled. The LiteRT lowering drops a movement chain that does nothing and renames its output to its
    input; the second shuffle's chain started at the first one's dropped output, so the PADV2 read a tensor no
    operator wrote, and the host runtime failed on the file."""
    rows = random_models.run_batch(2118, 1, "imxrt700", timeout=300)
    assert [row["outcome"] for row in rows] == ["ok"], rows


@pytest.mark.slow
def test_a_crashing_case_is_recorded_and_the_rest_run(monkeypatch):
    """Case 1 aborts its worker (os.abort, as an oracle's TFLITE_CHECK does): it is that case's crash, and
    case 2 runs in a new worker."""
    monkeypatch.setenv("IMXRT_RANDOM_MODELS_ABORT_AT", "1")
    rows = random_models.run_batch(0, 3, "imxrt700", timeout=300)
    assert [(row["seed"], row["outcome"]) for row in rows] == [(0, "ok"), (1, "crashed"), (2, "ok")]
