"""Hostile inputs to `imxrt compile` and `imxrt run`: each is one line naming what is wrong, exit status 1.

NaN/Inf weights and data, a calibration iterable that raises, user code that calls sys.exit, and .npy files
that are not one plain numeric array. NaN/Inf inputs to a compiled program run, with a warning.
"""

from __future__ import annotations

import io
import os
import tempfile
import textwrap

import numpy as np
import pytest
import torch
from executorch.exir import to_edge

import imxrt
import imxrt.runtime
from imxrt.accuracy import evaluate
from imxrt.cli import EXIT_USER_ERROR, main
from imxrt.errors import BadInput, BadModel

LINEAR = """
import sys
import torch
def model():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.BatchNorm1d(4)).eval()
    {model}
    return m
def example_inputs():
    return (torch.randn(2, 8, generator=torch.Generator().manual_seed(1)),)
"""


def _source(tmp_path, model="", extra=""):
    path = tmp_path / "source.py"
    path.write_text(LINEAR.format(model=model) + textwrap.dedent(extra))
    return path


def _error_line(status: int, err: str) -> str:
    """The one error line of a command that failed with a user error (warnings and notes aside)."""
    lines = [line for line in err.splitlines() if not line.startswith(("imxrt: WARNING", "note: "))]
    assert status == EXIT_USER_ERROR, err
    assert len(lines) == 1 and lines[0].startswith("imxrt: error: ") and "internal" not in lines[0], err
    return lines[0]


def _compile_error(tmp_path, capsys, path) -> str:
    """Compile ``path`` expecting a user error; the line it printed."""
    out = tmp_path / "out"
    status = main(["compile", str(path), "-o", str(out), "--quiet"])
    line = _error_line(status, capsys.readouterr().err)
    assert not out.exists()
    return line


# -- weights and calibration data


@pytest.mark.parametrize("assign, words", [
    ("m[0].weight[1, 2] = float('nan')", "parameter 0.weight holds 1 NaN"),
    ("m[0].bias[3] = float('-inf')", "parameter 0.bias holds 1 Inf"),
    ("m[1].running_var[0] = float('inf')", "buffer 1.running_var holds 1 Inf"),
], ids=["nan_weight", "inf_bias", "inf_running_var"])
def test_a_non_finite_weight_is_refused_naming_it(tmp_path, capsys, assign, words):
    line = _compile_error(tmp_path, capsys, _source(tmp_path, model=f"with torch.no_grad(): {assign}"))
    assert words in line, line


def test_api_refuses_non_finite_weights_and_example_inputs_before_export(monkeypatch):
    def no_export(*args, **kwargs):
        raise AssertionError("exported a model with non-finite values")

    monkeypatch.setattr(torch.export, "export", no_export)
    model = torch.nn.Linear(4, 2)
    with torch.no_grad():
        model.weight[0, 0] = float("nan")
    with pytest.raises(BadModel, match="parameter weight holds 1 NaN"):
        imxrt.compile(model, (torch.ones(1, 4),))
    with pytest.raises(BadModel, match=r"example input 1 holds 2 Inf"):
        imxrt.compile(torch.nn.Bilinear(4, 4, 2), (torch.ones(1, 4), torch.tensor([[1.0, np.inf, -np.inf, 0.0]])))


@pytest.mark.parametrize("value, words", [("float('nan')", "calibration sample 2, input 1 holds 1 NaN"),
                                          ("float('inf')", "calibration sample 2, input 1 holds 1 Inf")],
                         ids=["nan", "inf"])
def test_non_finite_calibration_data_is_refused_naming_sample_and_input(tmp_path, capsys, value, words):
    source = tmp_path / "source.py"
    source.write_text(textwrap.dedent(f"""
        import torch
        def model():
            return torch.nn.Bilinear(4, 4, 2).eval()
        def example_inputs():
            return (torch.ones(1, 4), torch.ones(1, 4))
        def calibration_inputs():
            for index in range(4):
                y = torch.randn(1, 4)
                if index == 2:
                    y[0, 1] = {value}
                yield (torch.randn(1, 4), y)
        """))
    line = _compile_error(tmp_path, capsys, source)
    assert words in line, line


def test_a_calibration_iterable_that_raises_names_the_sample_and_the_exception(tmp_path, capsys):
    path = _source(tmp_path, extra="""
        def calibration_inputs():
            for index in range(4):
                if index == 2:
                    raise OSError("dataset file went away")
                yield (torch.randn(2, 8),)
        """)
    line = _compile_error(tmp_path, capsys, path)
    assert "calibration sample 2" in line and "OSError: dataset file went away" in line, line


# -- user code that calls sys.exit


@pytest.mark.parametrize("model, extra, words", [
    ("", """
        class Exits(torch.nn.Module):
            def forward(self, x):
                sys.exit(0)
        def model():
            return Exits()
        """, "model(...) called sys.exit(0) while"),
    ("sys.exit(2)", "", "model() called sys.exit(2)"),
    ("", "sys.exit(0)\n", "importing the file called sys.exit(0)"),
    ("", """
        def calibration_inputs():
            yield (torch.randn(2, 8),)
            sys.exit()
        """, "calibration sample 1: the calibration data called sys.exit() while"),
], ids=["forward", "model_function", "import", "calibration"])
def test_sys_exit_in_user_code_is_one_line_exit_1(tmp_path, capsys, model, extra, words):
    line = _compile_error(tmp_path, capsys, _source(tmp_path, model=model, extra=extra))
    assert words in line, line


# -- imxrt run


class Double(torch.nn.Module):
    def forward(self, x):
        return x * 2


X = np.arange(6, dtype=np.float32).reshape(2, 3) - 2


@pytest.fixture(scope="module")
def pte(tmp_path_factory):
    path = tmp_path_factory.mktemp("run") / "model.pte"
    path.write_bytes(to_edge(torch.export.export(Double(), (torch.from_numpy(X),))).to_executorch().buffer)
    return path


def _huge_header() -> bytes:
    """A .npy whose header claims 2**40 float32 values (4 TiB) followed by 16 bytes."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (2 ** 40,)})
    return header.getvalue() + bytes(16)


def _npz(path):
    np.savez(path, x=X)
    os.replace(str(path) + ".npz", path)


BAD_NPY = {
    "strings": (lambda path: np.save(path, np.array([["a", "b", "c"]] * 2)), "holds strings (<U1)"),
    "objects": (lambda path: np.save(path, np.array([[1, 2, 3]] * 2, dtype=object), allow_pickle=True),
                "holds Python objects (object)"),
    "complex": (lambda path: np.save(path, X.astype(np.complex64)), "holds complex numbers (complex64)"),
    "npz": (_npz, "is a .npz archive; save one array per .npy file"),
    "huge_header": (lambda path: path.write_bytes(_huge_header()),
                    "its header claims shape (1099511627776,) float32 (4,398,046,511,104 bytes) but the file holds "
                    "16 bytes of data"),
    "truncated": (lambda path: path.write_bytes(_huge_header()[:-16] + bytes(3)), "holds 3 bytes of data"),
    "folder": (lambda path: path.mkdir(), "is a folder, not a .npy file"),
}


@pytest.mark.parametrize("case", sorted(BAD_NPY))
def test_a_bad_npy_input_is_one_line_exit_1(pte, tmp_path, capsys, case):
    write, words = BAD_NPY[case]
    path = tmp_path / "x.npy"
    write(path)
    out = tmp_path / "outputs"
    status = main(["run", str(pte), "--input", str(path), "--output-dir", str(out)])
    line = _error_line(status, capsys.readouterr().err)
    assert line.startswith(f"imxrt: error: {path}: ") and words in line, line
    assert not out.exists()


def test_a_big_endian_npy_runs_as_its_native_values(pte, tmp_path, capsys):
    np.save(tmp_path / "big.npy", X.astype(">f4"))
    status = main(["run", str(pte), "--input", str(tmp_path / "big.npy"), "--output-dir", str(tmp_path / "o")])
    assert status == 0, capsys.readouterr().err
    assert np.array_equal(np.load(tmp_path / "o" / "output_0.npy"), X * 2)


def test_an_output_dir_that_is_a_file_is_refused_before_running(pte, tmp_path, capsys, monkeypatch):
    np.save(tmp_path / "x.npy", X)
    (tmp_path / "taken").write_text("not a folder")
    monkeypatch.setattr(imxrt.runtime.Program, "forward", lambda *a: pytest.fail("ran before checking --output-dir"))
    status = main(["run", str(pte), "--input", str(tmp_path / "x.npy"), "--output-dir", str(tmp_path / "taken")])
    line = _error_line(status, capsys.readouterr().err)
    assert "--output-dir" in line and "taken is a file" in line, line


@pytest.mark.parametrize("how", [
    pytest.param("permissions", marks=pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only "
                                                                                   "folders")),
    "simulated"])
def test_a_read_only_output_dir_is_refused_before_running(pte, tmp_path, capsys, monkeypatch, how):
    np.save(tmp_path / "x.npy", X)
    locked = tmp_path / "locked"
    locked.mkdir()
    if how == "permissions":
        locked.chmod(0o500)
    else:  # what a write into a read-only folder (or mount) raises
        def refused(*args, **kwargs):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(tempfile, "TemporaryFile", refused)
    monkeypatch.setattr(imxrt.runtime.Program, "forward", lambda *a: pytest.fail("ran before checking --output-dir"))
    try:
        status = main(["run", str(pte), "--input", str(tmp_path / "x.npy"), "--output-dir", str(locked / "o")])
    finally:
        locked.chmod(0o700)
    line = _error_line(status, capsys.readouterr().err)
    assert "--output-dir" in line and "locked cannot be written" in line, line


def test_non_finite_inputs_run_with_a_warning_naming_the_input(pte, tmp_path, caplog):
    x = X.copy()
    x[0, 1], x[1, 2] = np.nan, -np.inf
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(pte), "--input", str(tmp_path / "x.npy")]) == 0
    assert "input 0: 1 NaN and 1 Inf of 6 value(s)" in caplog.text
    caplog.clear()
    imxrt.runtime.load(pte).forward(torch.from_numpy(x))
    assert "input 0: 1 NaN and 1 Inf of 6 value(s)" in caplog.text
    caplog.clear()
    imxrt.runtime.load(pte).forward(X)
    assert "NaN" not in caplog.text


def test_api_calibration_errors_are_user_errors():
    def broken():
        yield (torch.ones(1, 4),)
        raise KeyError("label")

    with pytest.raises(BadInput, match=r"calibration sample 1: .*KeyError: 'label'"):
        imxrt.compile(torch.nn.Linear(4, 2), (torch.ones(1, 4),), calibration=broken())


class ExitsWhenNotExported(torch.nn.Module):
    def forward(self, x):
        if not torch.compiler.is_exporting():
            raise SystemExit(0)
        return x


def test_evaluation_that_exits_or_raises_is_a_user_error():
    x = torch.ones(1, 4)
    with pytest.raises(BadModel, match=r"model\(\.\.\.\) called sys.exit\(0\) while evaluating on evaluation "
                                       "sample 0"):
        evaluate(ExitsWhenNotExported(), None, [((x,), 0)], (x,))

    def broken():
        raise ValueError("labels.csv is empty")
        yield

    with pytest.raises(BadInput, match="evaluation sample 0: reading the evaluation data raised ValueError: "
                                       "labels.csv is empty"):
        evaluate(torch.nn.Identity(), None, broken(), (x,))
