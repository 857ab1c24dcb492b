"""The output folder: a compile writes, replaces and removes only the files its manifest says it wrote, refuses
dangerous or unwritable folders before compiling, and replaces a previous set whole or not at all."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from compiled_examples import tiny
from edited_programs import SMALL_CONV_NET_SOURCE

import imxrt.output_folder
import imxrt.pipeline
from imxrt.cli import EXIT_USER_ERROR, main
from imxrt.errors import BadFile, BadOption
from imxrt.npu.compilers.eiq import NeutronConverterFailed
from imxrt.pipeline import CompileResult, keep_failed_partition

MANIFEST = ".imxrt-manifest.json"

TINY = SMALL_CONV_NET_SOURCE


def two_partitions() -> CompileResult:
    """TINY with a second partition .tflite and a converter dump: a compile with more outputs than TINY's."""
    result = tiny()
    return dataclasses.replace(result, partitions=[*result.partitions, b"second"],
                               npu_files={"partition_1_kernel_selection.c": b"/* dump */\n"})


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by its relative path, with its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _source(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.py"
    path.write_text(TINY)
    return path


@pytest.fixture
def no_compile(monkeypatch):
    """Fail the test if the CLI reaches the compiler."""
    def compile_(*args, **kwargs):
        pytest.fail("compile() was called: the output folder should have been refused first")

    monkeypatch.setattr(imxrt.pipeline, "compile", compile_)


# What a compile owns


def test_the_manifest_lists_every_file_written_with_its_size_and_sha256(tmp_path):
    out = tmp_path / "out"
    two_partitions().save(out, c_header=True)
    manifest = json.loads((out / MANIFEST).read_text())
    written = _files(out)
    del written[MANIFEST]
    assert sorted(manifest["files"]) == sorted(written)
    for name, data in written.items():
        assert manifest["files"][name] == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}, name


@pytest.mark.slow
def test_user_files_in_the_folder_and_in_npu_survive_a_compile_and_a_recompile(tmp_path):
    """Before: `npu/` was removed whole, and `partition_*` and `model_pte.h/.c` even when this compile did not
    write them."""
    out = tmp_path / "out"
    (out / "npu").mkdir(parents=True)
    mine = {"notes.txt": b"mine", "npu/mine.tflite": b"mine too", "partition_plan.md": b"my plan",
            "model_pte.h": b"/* my header */"}
    for name, data in mine.items():
        (out / name).write_bytes(data)
    for _ in range(2):
        assert main(["compile", str(_source(tmp_path)), "-o", str(out), "--quiet"]) == 0
        files = _files(out)
        assert {name: files.get(name) for name in mine} == mine
        assert "model.pte" in files and "npu/partition_0.tflite" in files


def test_our_stale_files_of_the_previous_compile_are_removed(tmp_path):
    """2 partitions, a converter dump and a C header, then 1 partition and none: the extra files go."""
    out = tmp_path / "out"
    two_partitions().save(out, c_header=True)
    assert {"npu/partition_1.tflite", "partition_1_kernel_selection.c", "model_pte.h"} <= set(_files(out))
    tiny().save(out)
    files = _files(out)
    assert sorted(files) == [MANIFEST, "model.etrecord", "model.pte", "npu/partition_0.tflite", "report.html",
                             "report.json"]
    assert files["model.pte"] == tiny().pte
    assert sorted(json.loads(files[MANIFEST])["files"]) == sorted(set(files) - {MANIFEST})


def test_stale_files_go_beside_user_files_and_npu_goes_only_when_empty_and_ours(tmp_path, caplog):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_bytes(b"mine")
    two_partitions().save(out)
    (out / "npu" / "partition_1.tflite").write_bytes(b"edited by the user")
    no_npu = dataclasses.replace(tiny(), partitions=[])
    with caplog.at_level(logging.WARNING, logger="imxrt"):
        no_npu.save(out)
    assert "npu/partition_1.tflite" in caplog.text and "kept" in caplog.text
    files = _files(out)
    assert files["notes.txt"] == b"mine" and files["npu/partition_1.tflite"] == b"edited by the user"
    assert "npu/partition_0.tflite" not in files and "partition_1_kernel_selection.c" not in files
    assert "npu/partition_1.tflite" not in json.loads(files[MANIFEST])["files"], "an edited file is the user's"
    (out / "npu" / "partition_1.tflite").unlink()
    tiny().save(out)
    no_npu.save(out)
    assert not (out / "npu").exists(), "our npu/ folder, empty, is removed"
    (out / "npu").mkdir()
    tiny().save(out)  # into the user's npu/: theirs, kept even when empty
    no_npu.save(out)
    assert (out / "npu").is_dir()


@pytest.mark.parametrize("name", ["model.pte", "report.json", "npu/partition_0.tflite"])
def test_one_of_our_names_in_a_folder_without_manifest_is_refused_and_untouched(name, tmp_path):
    out = tmp_path / "out"
    (out / "npu").mkdir(parents=True)
    (out / name).write_bytes(b"an older compile, or the user's")
    with pytest.raises(BadOption, match=f"remove {name} ") as error:
        tiny().save(out)
    assert "empty folder" in str(error.value)
    assert _files(out) == {name: b"an older compile, or the user's"}


def test_an_edited_output_of_ours_is_not_overwritten(tmp_path):
    out = tmp_path / "out"
    tiny().save(out)
    (out / "report.json").write_text("{}\n")
    with pytest.raises(BadOption, match="remove report.json "):
        tiny(1).save(out)
    assert (out / "report.json").read_text() == "{}\n" and (out / "model.pte").read_bytes() == tiny().pte


# Folders refused before compiling


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


@pytest.mark.parametrize("where", ["root", "home", "above_home"])
def test_root_and_home_are_refused_before_compiling(where, tmp_path, monkeypatch, capsys, no_compile):
    home = tmp_path / "users" / "me"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    folder = {"root": Path("/"), "home": home, "above_home": home.parent}[where]
    before = sorted(os.listdir(folder))
    assert main(["compile", str(_source(tmp_path)), "-o", str(folder), "--quiet"]) == EXIT_USER_ERROR
    line = _one_error_line(capsys)
    assert line.startswith("imxrt: error: -o: ") and "home folder" in line, line
    assert sorted(os.listdir(folder)) == before
    with pytest.raises(BadOption, match="home folder"):
        CompileResult(pte=b"pte", partitions=[], report={}).save(folder)


def test_a_folder_under_a_file_is_refused_before_compiling(tmp_path, capsys, no_compile):
    (tmp_path / "a_file").write_text("x")
    assert main(["compile", str(_source(tmp_path)), "-o", str(tmp_path / "a_file" / "out")]) == EXIT_USER_ERROR
    line = _one_error_line(capsys)
    assert line.startswith("imxrt: error: -o: ") and "a_file is a file" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "tiny.py"]


def test_an_unwritable_folder_is_refused_before_compiling(tmp_path, monkeypatch, capsys, no_compile):
    """Simulated (permission bits do not stop root): creating a file in the nearest existing folder fails."""
    def mkstemp(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    status = main(["compile", str(_source(tmp_path)), "-o", str(tmp_path / "new" / "out")])
    monkeypatch.undo()
    assert status == EXIT_USER_ERROR
    line = _one_error_line(capsys)
    assert line.startswith("imxrt: error: -o: ") and "cannot be written (Permission denied)" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.py"]


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="permission bits do not stop root")
def test_a_read_only_folder_is_refused_before_compiling(tmp_path, capsys, no_compile):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        assert main(["compile", str(_source(tmp_path)), "-o", str(locked / "out")]) == EXIT_USER_ERROR
    finally:
        locked.chmod(0o755)
    assert "cannot be written" in _one_error_line(capsys)
    assert list(locked.iterdir()) == []


# Replacing a previous set: all or nothing


def test_an_interrupted_exchange_leaves_the_old_set_whole_and_no_staging_folder(tmp_path, monkeypatch):
    out = tmp_path / "out"
    two_partitions().save(out)
    before = _files(out)

    def exchange(a, b):
        raise KeyboardInterrupt

    monkeypatch.setattr(imxrt.output_folder, "exchange", exchange)
    with pytest.raises(KeyboardInterrupt):
        tiny(1).save(out)
    assert _files(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


@pytest.mark.parametrize("interrupted_call", [1, 2, 6, 8, 11])
def test_an_interrupted_replacement_beside_user_files_leaves_the_old_set_whole(interrupted_call, tmp_path,
                                                                               monkeypatch):
    """With a user file in the folder, our files are replaced one by one; an interrupt puts the old ones back."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_bytes(b"mine")
    two_partitions().save(out, c_header=True)
    before = _files(out)
    real_replace, calls = os.replace, []

    def replace(source, destination):
        calls.append(destination)
        if len(calls) == interrupted_call:
            raise KeyboardInterrupt
        real_replace(source, destination)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        tiny(1).save(out)
    monkeypatch.undo()
    assert _files(out) == before
    assert sorted(p.name for p in out.iterdir()) == sorted({name.split("/")[0] for name in before}), "staging left"


@pytest.mark.parametrize("renameat2", ["linux", "unavailable"])
def test_exchange_swaps_two_folders(renameat2, tmp_path, monkeypatch):
    if renameat2 == "unavailable":
        monkeypatch.setattr(imxrt.output_folder, "_renameat2", None)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x").write_text("a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x").write_text("b")
    imxrt.output_folder.exchange(tmp_path / "a", tmp_path / "b")
    assert (tmp_path / "a" / "x").read_text() == "b" and (tmp_path / "b" / "x").read_text() == "a"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


# Readers that pair model.pte with report.json


@pytest.mark.slow
def test_run_refuses_a_report_that_belongs_to_another_program(tmp_path, capsys):
    """A model.pte beside the report.json of another compile (a copy, or a replacement under way)."""
    out = tmp_path / "out"
    tiny(0, "int8").save(out)
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 3, 6, 6), np.float32))
    run = ["run", str(out / "model.pte"), "--input", str(x), "--quantize-inputs"]
    assert main(run) == 0
    capsys.readouterr()
    (out / "model.pte").write_bytes(tiny(1, "int8").pte)
    assert main(run) == EXIT_USER_ERROR
    line = _one_error_line(capsys)
    assert line.startswith(f"imxrt: error: {out / 'report.json'}: belongs to another program than ") and \
        "--report" in line, line
    assert main(["header", str(out / "model.pte")]) == EXIT_USER_ERROR
    assert "belongs to another program" in _one_error_line(capsys)
    assert main([*run, "--report", str(out / "report.json")]) == 0, "the user's explicit pairing is taken"


def test_a_reader_during_a_replacement_beside_user_files_is_refused_exactly_while_the_pair_is_mixed(tmp_path,
                                                                                                     monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_bytes(b"mine")
    tiny(0, "int8").save(out)
    new = tiny(1, "int8")
    new_report = (json.dumps(new.report, indent=2, sort_keys=True) + "\n").encode()
    real_replace, seen = os.replace, []

    def replace(source, destination):
        real_replace(source, destination)
        mixed = ((out / "model.pte").read_bytes() == new.pte) != ((out / "report.json").read_bytes() == new_report)
        try:
            imxrt.output_folder.check_pair(out / "model.pte", out / "report.json")
            seen.append((mixed, "paired"))
        except BadFile:
            seen.append((mixed, "refused"))

    monkeypatch.setattr(os, "replace", replace)
    new.save(out)
    assert (True, "refused") in seen and (False, "paired") in seen
    assert all(verdict == ("refused" if mixed else "paired") for mixed, verdict in seen), seen


def test_a_copy_of_the_program_pairs_with_its_report(tmp_path):
    out = tmp_path / "out"
    tiny(0, "int8").save(out)
    (out / "copy.pte").write_bytes((out / "model.pte").read_bytes())
    imxrt.output_folder.check_pair(out / "copy.pte", out / "report.json")


# The converter's failed input, kept for a bug report


def test_a_kept_failed_partition_does_not_overwrite_a_user_file(tmp_path):
    out = tmp_path / "out"
    (out / "npu").mkdir(parents=True)
    (out / "npu" / "failed_neutron_0.tflite").write_bytes(b"mine")
    error = NeutronConverterFailed("neutron_0 [conv]", "the converter crashed", b"TFL3 input")
    kept = keep_failed_partition(error, out)
    assert (out / "npu" / "failed_neutron_0.tflite").read_bytes() == b"mine"
    assert kept.parent == out / "npu" and kept.read_bytes() == b"TFL3 input"
    assert keep_failed_partition(error, out) not in (kept, out / "npu" / "failed_neutron_0.tflite")


@pytest.mark.slow
def test_imxrt_header_in_a_compiles_folder_is_that_compiles_own(tmp_path, capsys):
    """`imxrt header OUT/model.pte` wrote model_pte.h/.c that no manifest listed: a later `--c-header` compile
    into OUT refused them as the user's, and a plain one left a header of another program beside the new one."""
    out = tmp_path / "out"
    tiny(0).save(out)
    assert main(["header", str(out / "model.pte")]) == 0
    tiny(1).save(out, c_header=True)  # replaces them: they are ours
    assert b"model_pte" in (out / "model_pte.h").read_bytes()
    tiny(2).save(out)  # a compile without a header removes the stale one
    assert not (out / "model_pte.h").exists() and not (out / "model_pte.c").exists()
    capsys.readouterr()


def test_imxrt_header_never_overwrites_a_users_file_in_a_compiles_folder(tmp_path, capsys):
    out = tmp_path / "out"
    tiny(0).save(out)
    (out / "model_pte.h").write_text("/* mine */\n")
    assert main(["header", str(out / "model.pte")]) == EXIT_USER_ERROR
    assert "remove model_pte.h" in _one_error_line(capsys)
    assert (out / "model_pte.h").read_text() == "/* mine */\n" and not (out / "model_pte.c").exists()
