"""`imxrt run`: outputs as .npy plus one line per output; a user error is one line and exit status 1."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch
from executorch.exir import to_edge

import imxrt.runtime
from imxrt.cli import EXIT_USER_ERROR, main

pytestmark = pytest.mark.slow  # every test here compiles models


class TwoInTwoOut(torch.nn.Module):
    def forward(self, x, y):
        return x + y, torch.relu(x).permute(0, 2, 3, 1)


X = np.arange(2 * 3 * 4 * 4, dtype=np.float32).reshape(2, 3, 4, 4) / 7 - 4
Y = np.ones((2, 3, 4, 4), np.float32)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run")
    pte = to_edge(torch.export.export(TwoInTwoOut(), (torch.from_numpy(X), torch.from_numpy(Y)))).to_executorch()
    (folder / "model.pte").write_bytes(pte.buffer)
    np.save(folder / "x.npy", X)
    np.save(folder / "y.npy", Y)
    np.save(folder / "small.npy", X[:1])
    return folder


def test_writes_outputs_and_prints_shape_dtype_checksum(files, tmp_path, capsys):
    out = tmp_path / "outputs"
    status = main(["run", str(files / "model.pte"), "--input", str(files / "x.npy"), "--input", str(files / "y.npy"),
                   "--output-dir", str(out)])
    lines = capsys.readouterr().out.splitlines()
    assert status == 0
    expected = imxrt.runtime.load(files / "model.pte").forward(X, Y)
    for index, array in enumerate(expected):
        written = np.load(out / f"output_{index}.npy")
        assert written.dtype == array.dtype and np.array_equal(written, array)
        crc = zlib.crc32(array.tobytes())
        assert lines[index] == f"output {index}: shape {array.shape} float32 crc32 {crc:08x}"
    assert np.array_equal(expected[0], X + Y)


def test_check_plan_prints_the_same_checksums(files, capsys):
    args = ["run", str(files / "model.pte"), "--input", str(files / "x.npy"), "--input", str(files / "y.npy")]
    assert main(args) == 0
    plain = capsys.readouterr().out
    assert main([*args, "--check-plan"]) == 0
    assert capsys.readouterr().out == plain


@pytest.mark.parametrize("inputs, words", [
    (["x.npy"], "the program takes 2 input(s)"),
    (["small.npy", "y.npy"], "input 0: the program expects shape (2, 3, 4, 4) float32, got shape (1, 3, 4, 4)"),
    (["x.npy", "missing.npy"], "missing.npy: no such file"),
    (["x.npy", "model.pte"], "model.pte: is not a .npy array"),
], ids=["count", "shape", "missing_input", "not_npy"])
def test_user_errors_are_one_line_exit_1(files, tmp_path, capsys, inputs, words):
    out = tmp_path / "outputs"
    args = ["run", str(files / "model.pte"), "--output-dir", str(out)]
    for name in inputs:
        args += ["--input", str(files / name)]
    status = main(args)
    captured = capsys.readouterr()
    assert status == EXIT_USER_ERROR
    assert captured.err.count("\n") == 1 and captured.err.startswith("imxrt: error: ") and words in captured.err
    assert not out.exists(), "outputs written despite the error"


def test_bad_program_file(files, capsys):
    status = main(["run", str(files / "x.npy")])
    assert status == EXIT_USER_ERROR
    assert "x.npy: is not an ExecuTorch .pte program" in capsys.readouterr().err


def test_runs_what_imxrt_compile_wrote(tmp_path, capsys):
    """The user's path: `imxrt compile` a model, then `imxrt run` its model.pte on a .npy input."""
    source = tmp_path / "tiny.py"
    source.write_text(
        "import torch\n"
        "def model():\n"
        "    torch.manual_seed(0)\n"
        "    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),\n"
        "                               torch.nn.Linear(4 * 4 * 4, 2)).eval()\n"
        "def example_inputs():\n"
        "    return (torch.randn(1, 3, 6, 6, generator=torch.Generator().manual_seed(1)),)\n")
    assert main(["compile", str(source), "-o", str(tmp_path / "out"), "--quiet"]) == 0
    x = np.random.default_rng(0).standard_normal((1, 3, 6, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    pte = tmp_path / "out" / "model.pte"
    assert main(["run", str(pte), "--input", str(tmp_path / "x.npy"), "--output-dir", str(tmp_path / "o"),
                 "--check-plan"]) == 0
    (expected,) = imxrt.runtime.load(pte).forward(x)
    assert np.array_equal(np.load(tmp_path / "o" / "output_0.npy"), expected)
    assert capsys.readouterr().out.startswith("output 0: shape (1, 2) float32 crc32 ")
