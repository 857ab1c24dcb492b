"""Smoke tests of the sequence benchmarks (`benchmarks/sequence.py`, the sequence task of
`benchmarks/accuracy.py`): the models build and run, a row comes out for a model the compiler takes and for one
it refuses, and the digits-rows models train to a useful float accuracy."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import _sequence_models  # noqa: E402
import sequence  # noqa: E402
import zoo  # noqa: E402

from imxrt.errors import BadModel  # noqa: E402


@pytest.mark.parametrize("name", list(_sequence_models.MODELS))
def test_each_sequence_model_builds_the_same_weights_and_runs_on_its_input_shape(name):
    model, shape = _sequence_models.build(name)
    again, _ = _sequence_models.build(name)
    with torch.no_grad():
        output = model(torch.randn(shape))
    classes = 10 if name.startswith("vit") else _sequence_models.KWS_CLASSES
    assert output.shape == (1, classes)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values(),
                                                 strict=True))


def test_time_major_and_batch_first_layers_compute_the_same_function():
    """The same weights in a batch-first and a time-major GRU give the same output: the time-major model's
    own transpose puts its input in the layer's order."""
    batch_first, shape = _sequence_models.build("gru2")
    time_major, _ = _sequence_models.build("gru2_time_major")
    time_major.load_state_dict(batch_first.state_dict())
    x = torch.randn(shape)
    with torch.no_grad():
        torch.testing.assert_close(time_major(x), batch_first(x))


@pytest.mark.slow
def test_a_compiled_model_is_a_row_with_every_column(capsys):
    assert sequence.main(["--models", "vit_matmul", "--side", "ours", "--inputs", "1"]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("vit_matmul")]
    assert "failed" not in row
    assert row.split()[1:2] == ["imxrt"] and row.split()[-2] == "1/1"


def test_a_model_the_compiler_refuses_is_a_row_with_its_error(monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise BadModel("this model cannot be compiled")

    monkeypatch.setattr(zoo, "compile", refuse)
    model, shape = _sequence_models.build("gru1")
    rows = zoo.compare(model, shape, "ours", 1)
    assert rows["imxrt"]["error"] == "compile: BadModel: model: this model cannot be compiled"
    zoo.print_rows("gru1", rows)
    assert "gru1                 imxrt     failed after" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["GRU", "LSTM", "transformer"])
def test_the_digits_rows_models_train_to_over_90_percent_held_out_top1(name):
    import accuracy

    model = accuracy.train_sequence_model(name)
    data = [(accuracy._as_rows(sample), label) for sample, label in accuracy.digits.evaluation_data()]
    with torch.no_grad():
        correct = sum(int(model(*inputs).argmax()) == label for inputs, label in data)
    assert correct / len(data) >= 0.90
