"""Hostile inputs to `imxrt compile` and `imxrt run`: each is one line naming what is wrong, exit status 1.

NaN/Inf weights and data, a calibration iterable that raises, user code that calls sys.exit, .npy files
that are not one plain numeric array, and paths that are not regular files of a sensible size (a device that
never ends, a FIFO that blocks, a sparse file of a gigabyte). NaN/Inf inputs to a compiled program run, with a
warning.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
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
from imxrt.pte.reader import HOST_MEMORY_CAP

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


class _MeanIn(torch.nn.Module):
    """ExecuTorch's backend suite: ``x.mean(dtype=...)`` of a float32 input."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype

    def forward(self, x):
        return x.mean(dim=1, dtype=self.dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16], ids=str)
def test_a_node_computing_in_another_float_dtype_is_refused_at_export_naming_it(dtype):
    """A float64 (or float16) tensor inside the model was an internal error in the quantizer; it is a data type no
    int8 program carries, refused naming the node."""
    with pytest.raises(BadModel, match=rf"node mean: .*makes a {dtype} tensor.*compute in float32"):
        imxrt.compile(_MeanIn(dtype), (torch.randn(5, 10),), "imxrt700-cpu",
                      options=imxrt.CompileOptions(show_progress=False))


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


# -- paths that are not regular files, or are too big: refused before a byte is read

_CLI_CHILD = textwrap.dedent("""
    import contextlib, io, json, resource, signal, sys
    import imxrt.runtime  # every module loaded before the address space is capped
    from imxrt.cli import main

    class Hung(BaseException):  # not an OSError: a blocked open or read must not pass as one
        pass

    def alarm(*_):
        raise Hung("still running after 30 s")

    with open("/proc/self/statm") as statm:
        in_use = int(statm.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (in_use + (2 << 30), resource.RLIM_INFINITY))
    signal.signal(signal.SIGALRM, alarm)
    outcomes = {}
    for name, argv in json.loads(sys.argv[1]).items():
        err = io.StringIO()
        signal.alarm(30)
        try:
            with contextlib.redirect_stderr(err):
                status = main(argv)
        except BaseException as e:
            status = f"{type(e).__name__}: {e}"
        finally:
            signal.alarm(0)
        outcomes[name] = [status, err.getvalue()]
    print(json.dumps(outcomes))
""")

_DOUBLE_IO = {"inputs": [{"name": "x", "shape": [2, 3], "dtype": "float32", "dim_order": [0, 1], "scale": None,
                          "zero_point": None}],
              "outputs": [{"name": "mul", "shape": [2, 3], "dtype": "float32", "dim_order": [0, 1], "scale": None,
                           "zero_point": None}]}


@pytest.fixture(scope="module")
def unbounded(pte, tmp_path_factory) -> dict[str, tuple[list[str], object, str]]:
    """Each command given a path that is no regular file or a huge one, run once in a child with 2 GiB of
    address space to spare and 30 s each: (its arguments, its exit status or the exception it ended in, what
    it printed on stderr). The child keeps a missing check from hanging or exhausting the test run."""
    folder = tmp_path_factory.mktemp("unbounded")
    fifo = folder / "fifo"
    os.mkfifo(fifo)
    np.save(folder / "x.npy", X)
    huge = folder / "huge.pte"
    with open(huge, "wb") as f:
        f.truncate(HOST_MEMORY_CAP + 1)  # sparse: no disk, but a gigabyte to whoever reads it
    (folder / "report").mkdir()
    os.mkfifo(folder / "report" / "report.json")
    (folder / "paired").mkdir()
    (folder / "paired" / "model.pte").write_bytes(pte.read_bytes())
    (folder / "paired" / "report.json").write_text(json.dumps({"io": _DOUBLE_IO}))
    os.mkfifo(folder / "paired" / ".imxrt-manifest.json")
    x = str(folder / "x.npy")
    runs = {
        "device_program": ["run", "/dev/zero"],
        "fifo_program": ["run", str(fifo)],
        "huge_program": ["run", str(huge)],
        "fifo_input": ["run", str(pte), "--input", str(fifo)],
        "device_input": ["run", str(pte), "--input", "/dev/zero"],
        "fifo_report": ["run", str(pte), "--input", x, "--quantize-inputs", "--report", str(fifo)],
        "fifo_report_folder": ["report", str(folder / "report")],
        "fifo_header": ["header", str(fifo)],
        "fifo_manifest": ["run", str(folder / "paired" / "model.pte"), "--input", x, "--quantize-inputs"],
    }
    child = subprocess.run([sys.executable, "-c", _CLI_CHILD, json.dumps(runs)], capture_output=True, text=True,
                           timeout=600)
    assert child.returncode == 0, child.stderr[-3000:]
    outcomes = json.loads(child.stdout.strip().splitlines()[-1])
    return {name: (runs[name], *outcomes[name]) for name in runs}


@pytest.mark.slow
@pytest.mark.parametrize("case, path, words", [
    ("device_program", "/dev/zero", "is a character device, not a .pte program or .bpte bundle"),
    ("fifo_program", "fifo", "is a FIFO (named pipe), not a .pte program or .bpte bundle"),
    ("huge_program", "huge.pte", f"is {HOST_MEMORY_CAP + 1:,} bytes, more than the {HOST_MEMORY_CAP:,} imxrt "
                                 "reads for a .pte program"),
    ("fifo_input", "fifo", "is a FIFO (named pipe), not a .npy file"),
    ("device_input", "/dev/zero", "is a character device, not a .npy file"),
    ("fifo_report", "fifo", "is a FIFO (named pipe), not a report.json"),
    ("fifo_report_folder", "report.json", "is a FIFO (named pipe), not a report.json"),
    ("fifo_header", "fifo", "is a FIFO (named pipe), not a .pte program"),
])
def test_a_path_that_is_no_regular_file_or_too_big_is_one_line_before_reading(unbounded, case, path, words):
    argv, status, err = unbounded[case]
    line = _error_line(status, err)
    assert f"{path}: {words}" in line, line


def test_a_fifo_beside_the_program_where_its_manifest_would_be_does_not_block(unbounded):
    """`imxrt run --quantize-inputs` reads the manifest beside the report: a FIFO there is not a manifest of
    ours, so the report is taken as the user's and the program runs."""
    argv, status, err = unbounded["fifo_manifest"]
    assert status == 0, err
