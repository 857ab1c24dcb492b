"""Layers kept in float (``CompileOptions(float_layers=...)``, ``--float-layer NAME``): the named modules run
in float on the Cortex-M, the data movement from the model's input to them too, the rest int8."""

import pytest
import torch
import torch.nn as nn
from program_checks import check_case, program_sqnr_db
from sensor_front_end import Detector, signals

from imxrt.cli import EXIT_USER_ERROR, main
from imxrt.errors import BadOption
from imxrt.pipeline import CompileOptions, compile
from imxrt.placement import FLOAT_LAYER_KEPT


@pytest.mark.parametrize("target", ["imxrt700", "imxrt700-cpu"])
def test_a_float_front_end_keeps_what_int8_input_rounds_away(target):
    model = Detector().eval()
    calibration, evaluation = signals(16, 1), signals(16, 2)
    plain = compile(model, calibration[0], target, calibration, CompileOptions(show_progress=False))
    kept = compile(model, calibration[0], target, calibration,
                   CompileOptions(show_progress=False, float_layers=("front",)))
    assert kept.report["summary"]["ops_cpu_float"] > plain.report["summary"]["ops_cpu_float"]
    assert program_sqnr_db(model, kept, evaluation) > program_sqnr_db(model, plain, evaluation) + 10
    check_case(kept, evaluation[0])


def test_the_report_says_the_layer_was_kept_float_not_a_cell_state():
    """Both are tagged for the quantizer to leave float; the report named every such op an LSTM's cell state
    and advised --cell-state int8 for a model without one."""
    model = Detector().eval()
    samples = signals(4, 1)
    result = compile(model, samples[0], "imxrt700", samples,
                     CompileOptions(show_progress=False, float_layers=("front",)))
    (convolution,) = [op for op in result.report["ops"] if op["op"].startswith("aten.convolution")
                      and op["execution"] == "cpu float"]
    assert convolution["reason"].startswith(FLOAT_LAYER_KEPT) and "'front'" in convolution["reason"]
    assert not any(item["kind"] == "cell_state" or item.get("op") == convolution["name"]
                   for item in result.report["advice"])


def test_the_movement_into_a_float_layer_is_reported_as_kept_for_it():
    """The unsqueeze and pad between the model's input and a float front end stay float with it; they were
    reported as ops with no int8 rule, and the advice asked to move them to the NPU."""
    model = Detector().eval()
    samples = signals(4, 1)
    result = compile(model, samples[0], "imxrt700", samples,
                     CompileOptions(show_progress=False, float_layers=("front",)))
    floats = {op["op"]: op["reason"] for op in result.report["ops"] if op["execution"] == "cpu float"}
    assert {"aten.unsqueeze_copy.default", "aten.reflection_pad2d.default"} <= floats.keys()
    assert all(reason.startswith(FLOAT_LAYER_KEPT) for reason in floats.values()), floats
    assert not [item for item in result.report["advice"] if item["kind"] == "cpu_op"]


def test_a_name_that_is_no_module_is_refused_with_the_names():
    model = Detector().eval()
    sample = signals(1, 1)
    with pytest.raises(BadOption, match=r"--float-layer: 'frontend'.*front, encoder"):
        compile(model, sample[0], "imxrt700", sample, CompileOptions(show_progress=False, float_layers=("frontend",)))


def test_the_cli_refuses_an_unknown_layer_in_one_line(tmp_path, capsys):
    source = tmp_path / "source.py"
    source.write_text("import torch\n"
                      "def model():\n"
                      "    return torch.nn.Sequential(torch.nn.Linear(4, 4)).eval()\n"
                      "def example_inputs():\n"
                      "    return (torch.randn(1, 4),)\n")
    status = main(["compile", str(source), "--target", "imxrt700", "-o", str(tmp_path / "out"), "--quiet",
                   "--float-layer", "encoder"])
    assert status == EXIT_USER_ERROR
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "--float-layer" in error[0] and "'encoder'" in error[0]
    assert not (tmp_path / "out" / "model.pte").exists()


class _ThreeLinear(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c = nn.Linear(8, 16), nn.Sequential(nn.Linear(16, 16), nn.ReLU()), nn.Linear(16, 2)

    def forward(self, x):
        return self.c(self.b(torch.relu(self.a(x))))


@pytest.mark.parametrize("target", ["imxrt700", "imxrt700-cpu"])
@pytest.mark.parametrize("names", [("b",), ("b.0",), ("a", "c")], ids=["a-block", "nested", "first-and-last"])
def test_any_layer_may_stay_float_between_int8_ones(target, names):
    model = _ThreeLinear().eval()
    generator = torch.Generator().manual_seed(1)
    samples = [(torch.randn(1, 8, generator=generator),) for _ in range(8)]
    plain = compile(model, samples[0], target, samples, CompileOptions(show_progress=False))
    kept = compile(model, samples[0], target, samples, CompileOptions(show_progress=False, float_layers=names))
    assert kept.report["summary"]["ops_cpu_float"] > plain.report["summary"]["ops_cpu_float"]
    check_case(kept, samples[1])
