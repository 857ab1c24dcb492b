"""The imxrt command: outputs on success; on bad input one line, exit status 1, nothing half-written."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from edited_programs import SMALL_CONV_NET_SOURCE

from imxrt.cli import EXIT_USER_ERROR, main

pytestmark = pytest.mark.slow  # every test here compiles models

TINY = SMALL_CONV_NET_SOURCE

BAD_SOURCES = {
    "no_model": ("def example_inputs():\n    return ()\n", "defines no model() function"),
    "float64_model": (TINY.replace(".eval()", ".double().eval()").replace(
                          "generator=torch.Generator().manual_seed(1))", "generator=torch.Generator().manual_seed(1),"
                                                                         " dtype=torch.float64)"),
                      "example input 0 is torch.float64; imxrt quantizes float32 models"),
    "float16_weights": (TINY.replace(".eval()", ".half().eval()"),
                        "parameter 0.weight is torch.float16; imxrt quantizes float32 models"),
    "integer_input": (TINY.replace("torch.randn(1, 3, 6, 6, generator=torch.Generator().manual_seed(1))",
                                   "torch.ones(1, 3, 6, 6, dtype=torch.int32)"),
                      "example input 0 is torch.int32"),
    "data_dependent_shape": (textwrap.dedent("""
        import torch
        class M(torch.nn.Module):
            def forward(self, x):
                return torch.nonzero(x).float().sum(0)
        def model():
            return M()
        def example_inputs():
            return (torch.randn(4, 4),)
        """), "node nonzero: dynamic shapes are not supported"),
    "control_flow_on_data": (textwrap.dedent("""
        import torch
        class M(torch.nn.Module):
            def forward(self, x):
                return x * 2 if x.sum() > 0 else x
        def model():
            return M()
        def example_inputs():
            return (torch.ones(4, 4),)
        """), "torch.export could not capture the model"),
    "raises_on_import": ("raise RuntimeError('broken model file')\n", "RuntimeError: broken model file"),
}


def _write(tmp_path, text):
    path = tmp_path / "source.py"
    path.write_text(text)
    return path


@pytest.mark.parametrize("case", sorted(BAD_SOURCES))
def test_bad_source_is_one_line_exit_1_and_no_output(case, tmp_path, capsys):
    text, words = BAD_SOURCES[case]
    out = tmp_path / "out"
    status = main(["compile", str(_write(tmp_path, text)), "--target", "imxrt700", "-o", str(out), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == EXIT_USER_ERROR
    assert err[-1].startswith("imxrt: error: ") and words in err[-1], err
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["source.py"], "a staging folder was left behind"


@pytest.mark.parametrize(("target", "isa"), [("cortex-m0", "mve"), ("imxrt700", "mve"), ("cortex-m4", "scalar")])
def test_an_isa_the_core_cannot_run_is_one_line_naming_the_core(target, isa, tmp_path, capsys):
    out = tmp_path / "out"
    status = main(["compile", str(_write(tmp_path, TINY)), "--target", target, "--isa", isa, "-o", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == EXIT_USER_ERROR and not out.exists()
    assert err[-1].startswith("imxrt: error: --isa") and "cannot run the" in err[-1], err


def test_unknown_target_lists_valid_ones(tmp_path, capsys):
    status = main(["compile", str(_write(tmp_path, TINY)), "--target", "rt1170", "-o", str(tmp_path / "o")])
    assert status == EXIT_USER_ERROR
    assert "imxrt700" in capsys.readouterr().err


def test_missing_source_file(tmp_path, capsys):
    status = main(["compile", str(tmp_path / "nope.py"), "-o", str(tmp_path / "o")])
    assert status == EXIT_USER_ERROR
    assert "nope.py: no such file" in capsys.readouterr().err


def test_a_folder_as_source_is_said_to_be_a_folder(tmp_path, capsys):
    (tmp_path / "models").mkdir()
    status = main(["compile", str(tmp_path / "models"), "-o", str(tmp_path / "o")])
    assert status == EXIT_USER_ERROR and not (tmp_path / "o").exists()
    assert f"{tmp_path / 'models'}: is a folder, not a Python file defining model()" in capsys.readouterr().err


def test_an_empty_output_path_is_refused_not_taken_as_the_current_folder(tmp_path, capsys, monkeypatch):
    source = _write(tmp_path, TINY)
    monkeypatch.chdir(tmp_path)
    status = main(["compile", str(source), "-o", "", "--quiet"])
    err = capsys.readouterr().err
    assert status == EXIT_USER_ERROR and err.count("\n") == 1
    assert err.startswith("imxrt: error: -o/--output: '' is not valid; use a folder"), err
    assert [p.name for p in tmp_path.iterdir()] == ["source.py"]


def test_data_dependent_control_flow_is_one_line_without_torchs_graph(tmp_path):
    """torch.export prints the graph it traced so far (twice) and torch's symbolic shapes log a warning before
    it raises: the command prints only the line naming the problem."""
    text, words = BAD_SOURCES["control_flow_on_data"]
    run = subprocess.run([sys.executable, "-m", "imxrt.cli", "compile", str(_write(tmp_path, text)),
                          "-o", str(tmp_path / "o"), "--quiet"], capture_output=True, text=True, timeout=300)
    assert run.returncode == EXIT_USER_ERROR
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("imxrt: error: ") and words in run.stderr, \
        run.stderr


def test_compile_writes_pte_report_and_partition_and_says_it_calibrated_on_examples(tmp_path, caplog):
    out = tmp_path / "out"
    status = main(["compile", str(_write(tmp_path, TINY)), "--target", "imxrt700", "-o", str(out), "--quiet"])
    assert status == 0
    assert "calibrating on the example inputs" in caplog.text
    assert sorted(p.name for p in out.iterdir()) == [".imxrt-manifest.json", "model.etrecord", "model.pte", "npu",
                                                     "report.html", "report.json"]
    assert [p.name for p in (out / "npu").iterdir()] == ["partition_0.tflite"]
    report = json.loads((out / "report.json").read_text())
    assert report["summary"]["partitions"] == 1 and report["summary"]["npu_mac_fraction"] == 1.0
    assert (out / "model.pte").read_bytes()[4:8] == b"ET12"


def test_command_line_prints_no_traceback(tmp_path):
    """The installed entry point, as a user runs it."""
    run = subprocess.run([sys.executable, "-m", "imxrt.cli", "compile", str(_write(tmp_path, "x = 1\n")),
                          "-o", str(tmp_path / "o")], capture_output=True, text=True, timeout=300)
    assert run.returncode == EXIT_USER_ERROR
    assert "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith("imxrt: error: ")


def test_targets_command(capsys):
    assert main(["targets"]) == 0
    assert "Neutron N3-64" in capsys.readouterr().out


def test_module_function_source_with_calibration_cap(tmp_path, monkeypatch, caplog):
    (tmp_path / "tiny_models.py").write_text(TINY + textwrap.dedent("""
        CALLS = []
        def calibration_inputs():
            generator = torch.Generator().manual_seed(2)
            for _ in range(100):
                CALLS.append(1)
                yield (torch.randn(1, 3, 6, 6, generator=generator),)
        def build():
            return model(), example_inputs(), calibration_inputs()
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out"
    status = main(["compile", "tiny_models:build", "-o", str(out), "--calibration-samples", "3", "--quiet"])
    assert status == 0
    import tiny_models

    assert len(tiny_models.CALLS) == 3, "the calibration cap stops consuming the user's iterable"
    assert "calibrating on the example inputs" not in caplog.text
    assert (out / "model.pte").exists()


@pytest.mark.parametrize("source, words", [("no_such_module:build", "cannot import no_such_module"),
                                           ("json:no_such_function", "json has no function no_such_function"),
                                           ("json:dumps", "dumps() raised")])
def test_bad_module_function_source(source, words, tmp_path, capsys):
    assert main(["compile", source, "-o", str(tmp_path / "o")]) == EXIT_USER_ERROR
    assert words in capsys.readouterr().err


def test_non_positive_calibration_samples_is_an_option_error(tmp_path, capsys):
    path = tmp_path / "source.py"
    path.write_text(TINY)
    assert main(["compile", str(path), "-o", str(tmp_path / "o"), "--calibration-samples", "0"]) == EXIT_USER_ERROR
    assert "--calibration-samples" in capsys.readouterr().err


def test_a_tensor_larger_than_the_target_sram_is_one_line_naming_its_node(tmp_path, capsys):
    """A 1x3x1400x1400 float input is 23.5 MB: more than the RT700's 7.5 MiB before anything is planned."""
    text = textwrap.dedent("""
        import torch
        def model():
            return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3)).eval()
        def example_inputs():
            return (torch.randn(1, 3, 1400, 1400),)
        """)
    out = tmp_path / "out"
    status = main(["compile", str(_write(tmp_path, text)), "--target", "imxrt700-cpu", "-o", str(out), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == EXIT_USER_ERROR and not out.exists()
    assert err[-1].startswith("imxrt: error: model: node ") and "more than the 7,864,320 bytes of SRAM" in err[-1], err


def test_workers_below_one_is_an_option_error_before_compiling(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["compile", str(_write(tmp_path, TINY)), "-o", str(out), "--workers", "0"]) == EXIT_USER_ERROR
    assert capsys.readouterr().err.strip() == ("imxrt: error: --workers: 0 is not valid; use a positive number of "
                                               "processes")
    assert not out.exists()


def test_the_accuracy_report_with_workers_is_the_one_of_one_process(tmp_path):
    text = TINY + textwrap.dedent("""
        def evaluation_data():
            generator = torch.Generator().manual_seed(2)
            return ((torch.randn(1, 3, 6, 6, generator=generator), i % 2) for i in range(24))
        """)
    source = _write(tmp_path, text)
    accuracy = []
    for workers in ("1", "2"):
        out = tmp_path / f"out{workers}"
        assert main(["compile", str(source), "-o", str(out), "--quiet", "--workers", workers]) == 0
        accuracy.append(json.loads((out / "report.json").read_text())["accuracy"])
    assert accuracy[0]["samples"] == 24 and accuracy[1] == accuracy[0]


def test_equalize_scales_the_convolution_ahead_of_the_classifier(tmp_path):
    """conv → ReLU → flatten → linear: --equalize evens the conv's channels, the classifier takes the inverse."""
    plain, equalized = tmp_path / "plain", tmp_path / "equalized"
    source = str(_write(tmp_path, TINY))
    assert main(["compile", source, "--target", "imxrt700", "-o", str(plain), "--quiet"]) == 0
    assert main(["compile", source, "--target", "imxrt700", "-o", str(equalized), "--quiet", "--equalize"]) == 0
    assert (plain / "model.pte").read_bytes() != (equalized / "model.pte").read_bytes()
