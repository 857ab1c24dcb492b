"""Whoever can create a file in an output folder cannot make imxrt write elsewhere: no writer follows a link planted
at a name it uses (its outputs', and the ``.<name>.partial`` names it used to write aside), and no edited manifest
makes a compile replace or remove a file of the user's."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from compiled_examples import tiny

from imxrt.cli import EXIT_USER_ERROR, main
from imxrt.errors import BadFile, BadOption
from imxrt.npu.compilers.eiq import NeutronConverterFailed
from imxrt.pipeline import keep_failed_partition

MANIFEST = ".imxrt-manifest.json"
VICTIM = b"a file of the user's, outside the folder\n"


def _files(folder: Path) -> dict[str, bytes]:
    """Every regular file under ``folder`` by its relative path, with its bytes (links are not followed)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if stat.S_ISREG(p.lstat().st_mode)}


def _plant(link: Path, victim: Path) -> None:
    """A link at ``link`` (replacing a file there) to ``victim``, a file of the user's."""
    victim.parent.mkdir(parents=True, exist_ok=True)
    victim.write_bytes(VICTIM)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(victim)


def _compiled(root: Path) -> Path:
    """``root/out``: a compile's folder (the small conv net), and ``root/x.npy``, an input for its program."""
    tiny().save(root / "out")
    np.save(root / "x.npy", np.zeros((1, 3, 6, 6), np.float32))
    return root / "out"


# Each writer: how it finds its folder, what it writes there, where a link is planted


@dataclass(frozen=True)
class Writer:
    """``write(root)`` prepares ``root``, runs the writer and returns its exit status (0 for a Python call);
    ``folder`` is where it writes ``outputs``, ``planted`` the names a link is planted at before it runs."""

    write: Callable[[Path], int | None]
    folder: Callable[[Path], Path]
    outputs: tuple[str, ...]
    planted: tuple[str, ...]


def _partials(*names: str) -> tuple[str, ...]:
    """The fixed names the writers used to write aside before renaming: ``.<name>.partial``."""
    return tuple(f".{name}.partial" for name in names)


def _recompile_beside_user_files(root: Path) -> None:
    out = root / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "notes.txt").write_bytes(b"mine\n")  # a user's file: ours are replaced one by one, under the manifest
    tiny(1).save(out)


WRITERS = {
    "report": Writer(lambda root: main(["report", str(root / "out")]), lambda root: root / "out",
                     ("report.html",), ("report.html", *_partials("report.html"))),
    "header": Writer(lambda root: main(["header", str(root / "out" / "model.pte"), "-o", str(root / "c")]),
                     lambda root: root / "c", ("model_pte.h", "model_pte.c"),
                     ("model_pte.h", "model_pte.c", *_partials("model_pte.h", "model_pte.c"))),
    # into the compile's folder: a user's file at model_pte.h would be refused (test_output_folder.py), the manifest
    # is rewritten to list the header
    "header_beside_the_program": Writer(lambda root: main(["header", str(root / "out" / "model.pte")]),
                                        lambda root: root / "out", ("model_pte.h", "model_pte.c", MANIFEST),
                                        _partials("model_pte.h", "model_pte.c", MANIFEST)),
    "bundle": Writer(lambda root: main(["bundle", str(root / "out"), "--samples", "1"]), lambda root: root / "out",
                     ("model.bpte", MANIFEST), _partials("model.bpte", MANIFEST)),
    "run_etdump": Writer(lambda root: main(["run", str(root / "out" / "model.pte"), "--input", str(root / "x.npy"),
                                            "--etdump", str(root / "run.etdump")]),
                         lambda root: root, ("run.etdump",), ("run.etdump", *_partials("run.etdump"))),
    "run_output_dir": Writer(lambda root: main(["run", str(root / "out" / "model.pte"), "--input", str(root / "x.npy"),
                                                "--output-dir", str(root / "o")]),
                             lambda root: root / "o", ("output_0.npy",), ("output_0.npy", *_partials("output_0.npy"))),
    "compile_beside_user_files": Writer(_recompile_beside_user_files, lambda root: root / "out",
                                        ("model.pte", "report.json", "report.html", "npu/partition_0.tflite",
                                         MANIFEST), _partials(MANIFEST)),
}


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_link_planted_at_a_name_a_writer_uses_is_never_written_through(name, tmp_path, capsys):
    """Before: each writer wrote ``.<name>.partial`` through whatever was there (and ``imxrt run --output-dir``
    its ``output_<i>.npy``), so the link's target was overwritten and the output left a link to it. Now the
    output is a regular file with the bytes the same writer gives in a clean folder, and the target is as it was."""
    writer = WRITERS[name]
    clean, attacked = tmp_path / "clean", tmp_path / "attacked"
    for root in (clean, attacked):
        _compiled(root)
    assert writer.write(clean) in (0, None), capsys.readouterr().err
    victims = {}
    for index, planted in enumerate(writer.planted):
        victims[planted] = tmp_path / "elsewhere" / f"victim_{index}"
        _plant(writer.folder(attacked) / planted, victims[planted])
    assert writer.write(attacked) in (0, None), capsys.readouterr().err
    for planted, victim in victims.items():
        assert victim.read_bytes() == VICTIM, f"written through the link at {planted}"
    written, expected = _files(writer.folder(attacked)), _files(writer.folder(clean))
    for output in writer.outputs:
        assert stat.S_ISREG((writer.folder(attacked) / output).lstat().st_mode), f"{output} is not a regular file"
        assert written[output] == expected[output], output
    assert not [p for p in written if p.endswith(".partial")], "a file written aside was left behind"


@pytest.mark.parametrize("name", ["model.pte", "report.html", "npu/partition_0.tflite", "npu"])
def test_a_link_at_one_of_a_compiles_own_names_is_refused_and_left_alone(name, tmp_path):
    """A link is not a file a manifest vouches for (it could point anywhere): the compile refuses, as for any file
    of ours it did not write, before writing anything."""
    out = tmp_path / "out"
    tiny().save(out)
    if name == "npu":
        (out / "npu" / "partition_0.tflite").unlink()
        (out / "npu").rmdir()
        (tmp_path / "elsewhere").mkdir()
        (out / "npu").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    else:
        _plant(out / name, tmp_path / "elsewhere" / "victim")
    before = _files(tmp_path)
    with pytest.raises(BadOption, match=f"remove {name} |folder npu/"):
        tiny(1).save(out)
    assert _files(tmp_path) == before and (out / name).is_symlink()


def test_a_manifest_that_is_a_link_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    _plant(out / MANIFEST, tmp_path / "elsewhere" / "victim")
    with pytest.raises(BadFile, match="is not a manifest this imxrt wrote"):
        tiny().save(out)
    assert (tmp_path / "elsewhere" / "victim").read_bytes() == VICTIM and sorted(_files(out)) == []


def test_a_kept_failed_partition_never_writes_through_a_link_at_its_name(tmp_path):
    out = tmp_path / "out"
    _plant(out / "npu" / "failed_neutron_0.tflite", tmp_path / "elsewhere" / "victim")
    error = NeutronConverterFailed("neutron_0 [conv]", "the converter crashed", b"TFL3 input")
    kept = keep_failed_partition(error, out)
    assert (tmp_path / "elsewhere" / "victim").read_bytes() == VICTIM
    assert kept == out / "npu" / "failed_neutron_0-2.tflite" and _files(out) == {"npu/failed_neutron_0-2.tflite":
                                                                                    b"TFL3 input"}


def test_a_folder_at_an_outputs_name_is_one_line_and_leaves_nothing_written_aside(tmp_path, capsys):
    out = _compiled(tmp_path)
    (tmp_path / "e" / "run.etdump").mkdir(parents=True)
    status = main(["run", str(out / "model.pte"), "--input", str(tmp_path / "x.npy"), "--etdump",
                   str(tmp_path / "e" / "run.etdump")])
    error = capsys.readouterr().err.strip()
    assert status == EXIT_USER_ERROR and len(error.splitlines()) == 1 and "is a folder" in error, error
    assert [p.name for p in (tmp_path / "e").iterdir()] == ["run.etdump"]


# What a manifest can claim


def _claim(out: Path, files: dict[str, bytes], folders: list[str]) -> None:
    """Edit the manifest in ``out`` to list ``files`` (with their true size and sha256) and ``folders``."""
    manifest = json.loads((out / MANIFEST).read_text())
    for name, data in files.items():
        manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest["folders"] = sorted({*manifest["folders"], *folders})
    (out / MANIFEST).write_text(json.dumps(manifest))


MINE = {"notes.txt": b"mine\n", "main.c": b"int main(void) { return 0; }\n", "docs/plan.md": b"my plan\n",
        "partition_plan.md": b"my partition plan\n", "npu/mine.tflite": b"my own model\n"}


@pytest.mark.parametrize("beside", ["only_claimed_files", "a_file_not_claimed"])
def test_a_manifest_claiming_user_files_does_not_make_a_compile_remove_them(beside, tmp_path, caplog):
    """Before: an edited manifest listing the user's files with their true digests made the next compile remove
    them (and an empty folder it listed): with nothing else in the folder it was swapped whole, beside another
    file they were removed as our stale outputs."""
    out = tmp_path / "out"
    tiny().save(out)
    for name, data in MINE.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    (out / "build").mkdir()
    if beside == "a_file_not_claimed":
        (out / "unlisted.txt").write_bytes(b"mine too\n")
    _claim(out, MINE, ["build", "docs"])
    with caplog.at_level(logging.WARNING, logger="imxrt"):
        tiny(1).save(out)
    files = _files(out)
    assert {name: files.get(name) for name in MINE} == MINE and (out / "build").is_dir()
    assert files["model.pte"] == tiny(1).pte
    manifest = json.loads(files[MANIFEST])
    assert not set(MINE) & set(manifest["files"]) and manifest["folders"] == ["npu"]
    assert "notes.txt: listed in" in caplog.text and "imxrt does not write such a file" in caplog.text


def test_a_manifest_claiming_a_users_file_of_one_of_our_names_does_not_make_a_compile_replace_it(tmp_path):
    """A C header of the user's named model_pte.h, claimed by an edited manifest: imxrt's own begin with the line
    imxrt gives them, so this one is the user's and a ``--c-header`` compile refuses it instead of replacing it."""
    out = tmp_path / "out"
    tiny().save(out)
    mine = b"/* model_pte: my own header */\n"
    (out / "model_pte.h").write_bytes(mine)
    _claim(out, {"model_pte.h": mine}, [])
    with pytest.raises(BadOption, match="remove model_pte.h "):
        tiny(1).save(out, c_header=True)
    assert (out / "model_pte.h").read_bytes() == mine and (out / "model.pte").read_bytes() == tiny().pte


def test_every_file_imxrt_writes_into_a_compiles_folder_is_one_a_recompile_replaces_or_removes(tmp_path, caplog):
    """The names a compile takes for its own (``output_folder._OUR_NAMES``) cover every file ``CompileResult.save``
    (every option), ``imxrt header`` (any ``--name``) and ``imxrt bundle`` write there."""
    out = tmp_path / "out"
    result = tiny()
    everything = dataclasses.replace(result, partitions=[*result.partitions, b"second"],
                                     npu_files={"partition_1_kernel_selection.c": b"/* dump */\n",
                                                "npu/partition_1.kernels.json": b"{}\n"})
    everything.save(out, c_header=True, bundled=b"a bundle")
    assert main(["header", str(out / "model.pte"), "--name", "kws_model"]) == 0
    assert main(["bundle", str(out), "--samples", "1"]) == 0
    written = set(_files(out)) - {MANIFEST}
    assert written == set(json.loads((out / MANIFEST).read_text())["files"])
    assert {"kws_model.h", "kws_model.c", "model_pte.h", "model.bpte", "model.etrecord",
            "npu/partition_1.kernels.json", "partition_1_kernel_selection.c"} <= written
    with caplog.at_level(logging.WARNING, logger="imxrt"):
        tiny(1).save(out)
    assert sorted(_files(out)) == sorted([MANIFEST, "model.etrecord", "model.pte", "npu/partition_0.tflite",
                                          "report.html", "report.json"])
    assert "kept" not in caplog.text
