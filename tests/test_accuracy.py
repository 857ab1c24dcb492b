"""Accuracy report and QAT on real data: scikit-learn's handwritten digits (examples/digits.py)."""

from __future__ import annotations

import functools
import itertools
import json
import multiprocessing
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from compiled_examples import EXAMPLES
from oracles import run_tflm, tflite_io

import imxrt.runtime
from imxrt.accuracy import evaluate
from imxrt.cli import main
from imxrt.errors import BadFile, BadInput, BadModel, BadOption, BadSource, CompilerBug
from imxrt.pipeline import CompileOptions, compile
from imxrt.source import import_file, load_source

pytestmark = pytest.mark.slow  # every test here compiles, trains or evaluates models, some in worker processes

DIGITS = str(EXAMPLES / "digits.py")


@functools.cache
def digits():
    return load_source(DIGITS)


@functools.cache
def digits_module():
    return import_file(DIGITS, Path(DIGITS))


@functools.cache
def ptq():
    source = digits()
    return compile(source.model, source.example_inputs, "imxrt700", source.calibration,
                   CompileOptions(show_progress=False))


def _short_qat(module):
    """A few QAT steps on the first training images: enough to move the fake-quant observers and weights."""
    images, labels, _, _ = digits_module()._split()
    optimizer = torch.optim.SGD(module.parameters(), lr=1e-3)
    for start in range(0, 96, 32):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(module(images[start:start + 32]), labels[start:start + 32]).backward()
        optimizer.step()
    _short_qat.steps += 1


_short_qat.steps = 0


def test_ptq_int8_top1_is_within_one_point_of_float_on_the_held_out_digits():
    source = digits()
    report = evaluate(source.model, imxrt.runtime.load(ptq().pte), source.evaluation, source.example_inputs,
                      quantized=ptq().quantized)
    assert report.samples == 449
    assert report.float_score > 0.95
    assert abs(report.int8_score - report.float_score) <= 0.01
    assert report.agreement >= 0.98
    assert 25 < report.output_sqnr_db[0] < 80
    # every conv block, the pooling and the classifier: conv+BN+ReLU observed after the ReLU
    assert {"features.2", "features.5", "features.9", "classifier"} <= set(report.layer_sqnr_db)
    assert all(v > 20 for v in report.layer_sqnr_db.values())
    assert "int8" in report.lines()[0] and "agreement" in report.lines()[0]


def test_a_user_metric_replaces_top1():
    source = digits()
    data = list(source.evaluation)[:20]

    def always_half(output, label):
        return 0.5

    report = evaluate(source.model, imxrt.runtime.load(ptq().pte), data, source.example_inputs, metric=always_half)
    assert (report.metric, report.float_score, report.int8_score) == ("always_half", 0.5, 0.5)


@pytest.mark.parametrize("sample, problem", [
    (((torch.zeros(1, 1, 4, 4),), 3), "shape"),
    (((torch.zeros(1, 1, 8, 8),), 10), "label 10"),
    (((torch.zeros(1, 1, 8, 8),), -1), "label -1"),
    (((torch.zeros(1, 1, 8, 8),), 2.5), "label 2.5"),
    ((torch.zeros(1, 1, 8, 8),), "pair"),
])
def test_evaluation_data_with_a_wrong_shape_or_label_is_a_clear_error(sample, problem):
    source = digits()
    with pytest.raises(BadInput, match=problem) as error:
        evaluate(source.model, imxrt.runtime.load(ptq().pte), [sample], source.example_inputs)
    assert "\n" not in str(error.value)


def test_cli_prints_the_accuracy_and_writes_it_to_report_json(tmp_path, capsys):
    assert main(["compile", DIGITS, "-o", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "accuracy (449 samples, top-1): float" in printed and "output SQNR" in printed
    accuracy = json.loads((tmp_path / "out" / "report.json").read_text())["accuracy"]
    assert accuracy["samples"] == 449 and abs(accuracy["int8"] - accuracy["float"]) <= 0.01


def test_qat_compiles_to_a_program_that_runs_bit_exactly_against_tflm():
    source = digits()
    before = _short_qat.steps
    result = compile(digits().model, source.example_inputs, "imxrt700", options=CompileOptions(
        show_progress=False, io="int8"), qat=_short_qat)
    assert _short_qat.steps == before + 1
    # BN folded into the conv weights at convert: no batch norm is left in the int8 program
    targets = {str(n.target) for n in result.quantized.graph.nodes}
    assert not any("batch_norm" in t for t in targets)
    assert result.report["summary"]["partitions"] == len(result.partitions) == 1
    program = imxrt.runtime.load(result.pte)
    (shape, _, _, _), = tflite_io(result.partitions[0])[0]
    images = [x for (x,), _ in list(source.evaluation)[:8]]
    for image in images:
        scale, zero_point = result.io["inputs"][0]["scale"], result.io["inputs"][0]["zero_point"]
        q = np.clip(np.round(image.numpy() / scale) + zero_point, -128, 127).astype(np.int8)
        got = program.forward(q)[0]
        expected = run_tflm(result.partitions[0], [q.reshape(shape)])[0]
        np.testing.assert_array_equal(np.asarray(got).reshape(expected.shape), expected)


def test_a_qat_train_fn_that_raises_is_a_user_error():
    def broken(module):
        raise RuntimeError("out of data")

    source = digits()
    with pytest.raises(BadModel, match="train_fn raised RuntimeError: out of data"):
        compile(source.model, source.example_inputs, "imxrt700", options=CompileOptions(show_progress=False),
                qat=broken)


@pytest.mark.parametrize("target", ["imxrt700", "imxrt700-cpu"])
def test_the_recipe_with_a_train_fn_is_executorch_qat_with_the_same_rules(target):
    from imxrt.recipes import recipe_for

    recipe = recipe_for(target, train_fn=_short_qat).quantization_recipe
    assert recipe.is_qat and recipe.train_fn is _short_qat and recipe.calibration_inputs_fn is None
    assert recipe.quantizers and all(q.qat for q in recipe.quantizers)
    assert not any(q.qat for q in recipe_for(target).quantization_recipe.quantizers)


class _Residual(torch.nn.Module):
    """A layer whose inner value has its output's shape but not its values: x + relu(linear(x)) * 0.1."""

    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(16, 16, bias=False)

    def forward(self, x):
        h = x @ self.inner.weight.t() * 4.0  # a value inside the layer, not a submodule's output
        return x + torch.relu(h) * 0.1


class _TwoLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block, self.head = _Residual(), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.block(x))


def test_a_layers_sqnr_compares_its_own_output_not_the_values_inside_it():
    """Every int8 value whose op sits inside a module was compared with the module's output when the shapes
    matched: a residual block read 12 dB because its inner product counted as its output."""
    torch.manual_seed(0)
    model = _TwoLayers().eval()
    generator = torch.Generator().manual_seed(1)
    samples = [(torch.randn(1, 16, generator=generator),) for _ in range(16)]
    result = compile(model, samples[0], "imxrt700-cpu", samples, CompileOptions(show_progress=False))
    data = [(inputs, 0) for inputs in samples]
    report = evaluate(model, imxrt.runtime.load(result.pte), data, samples[0], quantized=result.quantized)
    assert report.layer_sqnr_db["block"] > 25, report.layer_sqnr_db


# -- evaluate(..., workers=N): the host runtime in worker processes, the report of one process


def _first(count: int) -> list:
    return list(digits().evaluation)[:count]


def _no_workers_left() -> bool:
    return multiprocessing.active_children() == []


def test_workers_give_the_report_of_one_process():
    """Scores, agreement and SQNR sums are summed in sample order, so equal means bit for bit. The data is a
    generator, read a bounded window ahead; 40 samples are three chunks, the last one short."""
    source, samples = digits(), _first(40)
    program = imxrt.runtime.load(ptq().pte)
    one = evaluate(source.model, program, iter(samples), source.example_inputs, quantized=ptq().quantized,
                   show_progress=False)
    two = evaluate(source.model, program, (sample for sample in samples), source.example_inputs,
                   quantized=ptq().quantized, workers=2, show_progress=False)
    assert two.as_dict() == one.as_dict()
    assert two.samples == 40 and {"features.2", "classifier"} <= set(two.layer_sqnr_db)
    assert _no_workers_left()


def _bad_shape(samples: list, index: int) -> list:
    samples = list(samples)
    samples[index] = ((torch.zeros(1, 1, 4, 4),), samples[index][1])
    return samples


def _bad_label(samples: list, index: int) -> list:
    samples = list(samples)
    samples[index] = (samples[index][0], 10)
    return samples


@pytest.mark.parametrize("make_data, words", [
    # sample 40 is read (chunks ahead) before sample 20 is evaluated; 20's own error still comes first
    (lambda s: _bad_shape(_bad_label(s, 20), 40), "evaluation sample 20: label 10"),
    # read ahead, raised once samples 0..39 are evaluated (an error reading the data takes the same path)
    (lambda s: _bad_shape(s, 40), "evaluation sample 40: inputs of shape"),
], ids=["label-before-shape", "shape"])
def test_a_bad_sample_is_the_same_error_with_workers(make_data, words):
    source = digits()
    program = imxrt.runtime.load(ptq().pte)
    with pytest.raises(BadInput) as alone:
        evaluate(source.model, program, make_data(_first(48)), source.example_inputs, show_progress=False)
    with pytest.raises(BadInput) as in_workers:
        evaluate(source.model, program, make_data(_first(48)), source.example_inputs, workers=2,
                 show_progress=False)
    assert words in str(alone.value)
    assert str(in_workers.value) == str(alone.value)
    assert _no_workers_left()


def test_workers_read_an_endless_generator_a_bounded_window_ahead():
    """The data is read as the workers need it, not to its end: a label error at sample 20 of an endless
    generator is raised having read a window of chunks ahead (2 workers x 3 chunks x 16 samples)."""
    source, samples = digits(), _first(16)
    produced = []

    def endless():
        for index in itertools.count():
            produced.append(index)
            inputs, label = samples[index % len(samples)]
            yield inputs, 10 if index == 20 else label

    with pytest.raises(BadInput, match="evaluation sample 20: label 10"):
        evaluate(source.model, imxrt.runtime.load(ptq().pte), endless(), source.example_inputs, workers=2,
                 show_progress=False)
    assert 20 < len(produced) <= 20 + 2 * 3 * 16
    assert _no_workers_left()


def test_a_program_failing_in_a_worker_is_the_error_of_one_process():
    """An int8-input program given the float samples: the runtime's BadInput, raised in a worker, comes back
    as that error (pickled whole), and the workers end."""
    source = digits()
    int8_io = compile(source.model, source.example_inputs, "imxrt700", source.calibration,
                      CompileOptions(show_progress=False, io="int8"))
    program = imxrt.runtime.load(int8_io.pte)
    with pytest.raises(BadInput) as alone:
        evaluate(source.model, program, _first(4), source.example_inputs, show_progress=False)
    with pytest.raises(BadInput) as in_workers:
        evaluate(source.model, program, _first(4), source.example_inputs, workers=2, show_progress=False)
    assert "it takes int8 data" in str(alone.value)
    assert str(in_workers.value) == str(alone.value)
    assert _no_workers_left()


@pytest.mark.parametrize("workers", [0, -1, "2", 2.0, True, None])
def test_workers_must_be_a_whole_number_from_one(workers):
    source = digits()
    with pytest.raises(BadOption, match=r"^workers: .* is not valid; use a whole number of processes, 1 or more$"):
        evaluate(source.model, imxrt.runtime.load(ptq().pte), _first(2), source.example_inputs, workers=workers)
    assert _no_workers_left()


class _NotARuntimeProgram:
    def __init__(self, program):
        self.program = program

    def forward(self, *inputs):
        return self.program.forward(*inputs)


def test_workers_need_a_loaded_program_and_one_process_takes_any():
    """Workers load the program's .pte bytes; a wrapper with forward() has none, and runs in this process."""
    source = digits()
    program = _NotARuntimeProgram(imxrt.runtime.load(ptq().pte))
    assert evaluate(source.model, program, _first(2), source.example_inputs, show_progress=False).samples == 2
    with pytest.raises(BadOption, match="workers: 2 is not valid; use 1 for a program that imxrt.runtime.load did "
                                        "not load \\(got _NotARuntimeProgram\\)"):
        evaluate(source.model, program, _first(2), source.example_inputs, workers=2)
    assert _no_workers_left()


@pytest.mark.parametrize("show", [True, False])
def test_the_progress_bar_counts_to_the_datas_length(show, capsys):
    source = digits()
    evaluate(source.model, imxrt.runtime.load(ptq().pte), _first(5), source.example_inputs, show_progress=show)
    err = capsys.readouterr().err
    assert ("evaluating:" in err and "0/5 [" in err) if show else err == "", repr(err)


@pytest.mark.parametrize("error", [
    BadOption("workers", 0, "1 or more"), BadFile("model.pte", "is truncated"), BadInput("sample 3: bad"),
    BadModel("cannot export", node="conv"), BadSource("m.py", "defines no model()"),
    CompilerBug("lower", ValueError("boom")),
], ids=lambda e: type(e).__name__)
def test_errors_pickle_whole_for_worker_processes(error):
    """Their constructors take fields, not the message: the default pickle called them with the message alone."""
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error) and vars(copy) == vars(error)
