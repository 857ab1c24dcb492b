"""The output folder (``imxrt compile -o``): which files a compile owns, and how a new set replaces the old.

A compile writes ``.imxrt-manifest.json`` beside its outputs: each file's relative path, size and sha256, and the
folders it created. A later compile into the folder replaces or removes only the files that manifest lists and whose
content still matches it; anything else is the user's and is never touched (a listed file the user has edited is
theirs too: kept with a warning, or, when this compile writes that name, refused). A reader sees the old set or the
new one, never a mix: a folder holding only our files is exchanged whole for a staged copy; beside the user's files
ours are replaced one by one under a manifest naming both sets (so ``check_pair`` sees a mix), and an interrupt puts
the old ones back.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import itertools
import json
import logging
import os
import secrets
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from imxrt.errors import BadFile, BadOption
from imxrt.files import JSON_LIMIT, read_text

log = logging.getLogger("imxrt")

MANIFEST = ".imxrt-manifest.json"
_FORMAT = 1
_STAGING = ".imxrt-staging-"  # inside the folder, while our files are replaced beside the user's


@dataclass(frozen=True)
class Manifest:
    """What one compile wrote: relative path -> ``{"size", "sha256"}``, and the folders it created. ``replacing``
    holds the previous set's entries while a replacement beside the user's files is under way."""

    files: dict[str, dict]
    folders: frozenset[str] = frozenset()
    replacing: dict[str, dict] = field(default_factory=dict)

    def sets(self) -> list[dict[str, dict]]:
        return [entries for entries in (self.files, self.replacing) if entries]


def check_writable(folder: str | Path) -> Path:
    """``folder`` resolved, once it is known to be a place for a compile's outputs: not the filesystem root, the
    home folder or a folder above it, not a file or under one, and writable (a file can be created and removed in
    it or, when it does not exist yet, in its nearest existing ancestor). Raises ``BadOption``; leaves nothing."""
    folder = Path(folder).resolve()
    if _dangerous(folder):
        raise BadOption("-o", str(folder), "a folder for the outputs, not the filesystem root, your home folder or a "
                                           "folder above it")
    existing = folder
    while not os.path.lexists(existing):
        existing = existing.parent
    if not existing.is_dir():
        what = "it names an existing file" if existing == folder else \
            f"{existing} is {'a file' if existing.is_file() else 'not a folder'}"
        raise BadOption("-o", str(folder), f"a folder path ({what})")
    try:
        handle, probe = tempfile.mkstemp(prefix=".imxrt-probe-", dir=existing)
    except OSError as e:
        raise BadOption("-o", str(folder), f"a folder you can write to: {existing} cannot be written "
                                           f"({e.strerror or e})") from None
    os.close(handle)
    os.unlink(probe)
    return folder


def _dangerous(folder: Path) -> bool:
    if folder.parent == folder:  # a filesystem root
        return True
    try:
        home = Path.home().resolve()
    except (RuntimeError, KeyError):  # no home folder known
        return False
    return folder == home or folder in home.parents


def write(folder: str | Path, files: dict[str, bytes]) -> None:
    """Write ``files`` (relative POSIX path -> bytes) and their manifest into ``folder``; see the module docstring.

    Refuses (``BadOption``, before writing anything) when one of the names exists and is not a file of the previous
    manifest, unchanged: we do not overwrite what we do not know we wrote."""
    folder = check_writable(folder)
    for name in files:
        _relative(name)
    entries = {name: _entry(data) for name, data in files.items()}
    if not os.path.lexists(folder):
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = _staging_beside(folder)
        try:
            _fill(staging, files, Manifest(entries, _folders_of(files)))
            staging.rename(folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return
    previous = read_manifest(folder)
    ours = _ours(folder, previous)
    _refuse_conflicts(folder, files, ours)
    listed = set(previous.files) | set(previous.replacing) if previous else set()
    edited = sorted(name for name in listed - set(ours) - set(files) if os.path.lexists(folder / name))
    if previous is not None and _exchangeable(folder, ours, previous.folders):
        try:
            staging = _staging_beside(folder)
        except OSError:  # the parent cannot be written: replace file by file instead
            staging = None
        if staging is not None:
            try:
                _fill(staging, files, Manifest(entries, _folders_of(files)))
                exchange(staging, folder)
            finally:
                shutil.rmtree(staging, ignore_errors=True)  # after the exchange: the previous set
            return
    _replace_beside_user_files(folder, files, entries, previous, ours)
    for name in edited:
        log.warning("%s: changed since imxrt wrote it, so it is yours: kept, and no longer in %s", folder / name,
                    MANIFEST)


def check_overwrite(folder: str | Path, names: list[str]) -> None:
    """Before another imxrt command (``imxrt header``) writes ``names`` into a compile's output folder: refuse
    (``BadOption``) a name that exists there and is not a file of the manifest, unchanged. No manifest: a folder
    of the user's own, where the command overwrites its own outputs as before."""
    folder = Path(folder).resolve()
    manifest = read_manifest(folder)
    if manifest is not None:
        _refuse_conflicts(folder, dict.fromkeys(names, b""), _ours(folder, manifest))


def adopt(folder: str | Path, names: list[str]) -> None:
    """Add files another imxrt command wrote into a compile's output folder to its manifest, so the next compile
    there replaces or removes them as its own (a C header of another program must not stay beside the new one)."""
    folder = Path(folder).resolve()
    manifest = read_manifest(folder)
    if manifest is None or manifest.replacing:
        return
    files = dict(manifest.files)
    for name in names:
        files[_relative(name)] = _entry((folder / name).read_bytes())
    _write_manifest(folder, Manifest(files, manifest.folders))


def read_manifest(folder: Path) -> Manifest | None:
    """The manifest in ``folder``, or None when there is none. ``BadFile`` when it is not one we wrote."""
    path = folder / MANIFEST
    if not path.exists():
        return None
    try:
        data = json.loads(read_text(path, JSON_LIMIT, "a manifest imxrt wrote"))  # not a FIFO, device or huge
        if data.get("imxrt_output") != _FORMAT:
            raise ValueError("unknown format")
        return Manifest(files=_entries(data["files"]), folders=frozenset(_relative(f) for f in data["folders"]),
                        replacing=_entries(data.get("replacing", {})))
    except (BadFile, OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise BadFile(str(path), "is not a manifest this imxrt wrote; use an empty folder, or remove it and the "
                                 "outputs it lists") from None


def check_pair(program: Path, report: Path) -> None:
    """``BadFile`` when the manifest beside ``report`` says it was written with another program than ``program``:
    a ``.pte`` copied in, or a replacement under way. No claim (no error) when there is no manifest or the report
    is not as that manifest lists it (it is then the user's)."""
    try:
        manifest = read_manifest(report.parent)
    except BadFile:
        return
    if manifest is None:
        return
    sets = [entries for entries in manifest.sets() if report.name in entries and
            _matches(report, entries[report.name])]
    if not sets:
        return
    try:
        digest = _sha256(program)
    except OSError:
        return  # the program's own reader says what is wrong with it
    if not any(entry["sha256"] == digest for entries in sets for name, entry in entries.items()
               if name.endswith(".pte")):
        raise BadFile(str(report), f"belongs to another program than {program} ({MANIFEST} beside it says so); "
                                   "recompile, or give the report.json compiled with it (--report)")


def write_new(folder: Path, stem: str, suffix: str, data: bytes) -> Path:
    """Write ``data`` to ``folder/<stem><suffix>``, or to the first free ``<stem>-<n><suffix>``, never over an
    existing file, and return its path. The file appears whole (written aside, then linked under its name)."""
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(prefix=f".{stem}.", suffix=".partial", dir=folder)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        for number in itertools.count(1):
            path = folder / (f"{stem}{suffix}" if number == 1 else f"{stem}-{number}{suffix}")
            try:
                os.link(partial, path)  # fails on an existing name: no overwrite, even racing another writer
                return path
            except FileExistsError:
                continue
            except OSError:  # a file system without hard links
                if os.path.lexists(path):
                    continue
                os.replace(partial, path)
                return path
        raise AssertionError("unreachable")
    finally:
        Path(partial).unlink(missing_ok=True)


# Exchanging two folders at once


_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def _load_renameat2():
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2  # glibc >= 2.28
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_renameat2 = _load_renameat2()


def exchange(a: Path, b: Path) -> None:
    """Swap the folders ``a`` and ``b`` (same parent). On Linux one step (``renameat2(RENAME_EXCHANGE)``): a reader
    of ``b`` sees the old or the new folder. Elsewhere, or on a file system without it, two renames: ``b`` is
    missing for a moment, never mixed."""
    if _renameat2 is not None:
        if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise OSError(code, os.strerror(code), str(b))
    aside = a.with_name(f"{a.name}.previous")
    os.rename(b, aside)
    try:
        os.rename(a, b)
    except BaseException:
        os.rename(aside, b)
        raise
    os.rename(aside, a)


# Helpers


def _relative(name: object) -> str:
    """``name`` if it is a plain relative POSIX path inside the folder (a manifest could be edited to name
    ``../x``), else ValueError."""
    if not isinstance(name, str) or not name or str(PurePosixPath(name)) != name:
        raise ValueError(f"not a relative path: {name!r}")
    path = PurePosixPath(name)
    if path.is_absolute() or any(part in ("", ".", "..") for part in path.parts) or "\\" in name:
        raise ValueError(f"not a relative path: {name!r}")
    return name


def _entries(data: object) -> dict[str, dict]:
    if not isinstance(data, dict):
        raise ValueError("files is not an object")
    entries = {}
    for name, entry in data.items():
        size, digest = entry["size"], entry["sha256"]
        if not isinstance(size, int) or not isinstance(digest, str) or len(digest) != 64:
            raise ValueError(f"bad entry for {name!r}")
        entries[_relative(name)] = {"size": size, "sha256": digest}
    return entries


def _entry(data: bytes) -> dict:
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _matches(path: Path, entry: dict) -> bool:
    """Whether ``path`` is a regular file (not a link: it could point anywhere) with the content of ``entry``."""
    try:
        info = path.lstat()
        return stat.S_ISREG(info.st_mode) and info.st_size == entry["size"] and _sha256(path) == entry["sha256"]
    except OSError:
        return False


def _parents(name: str) -> list[str]:
    """The folders ``name`` is in, outermost first: ``a/b/c`` -> ``a``, ``a/b``."""
    return [parent.as_posix() for parent in reversed(PurePosixPath(name).parents) if parent.as_posix() != "."]


def _folders_of(files: dict[str, bytes]) -> frozenset[str]:
    return frozenset(parent for name in files for parent in _parents(name))


def _real_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def _ours(folder: Path, manifest: Manifest | None) -> dict[str, dict]:
    """The files of ``manifest`` still as we wrote them, each with its entry (either set's, mid-replacement)."""
    ours: dict[str, dict] = {}
    for entries in manifest.sets() if manifest else []:
        for name, entry in entries.items():
            if name not in ours and all(_real_folder(folder / p) for p in _parents(name)) and \
                    _matches(folder / name, entry):
                ours[name] = entry
    return ours


def _refuse_conflicts(folder: Path, files: dict[str, bytes], ours: dict[str, dict]) -> None:
    for name in sorted(files):
        for parent in _parents(name):
            if os.path.lexists(folder / parent) and not _real_folder(folder / parent):
                raise BadOption("-o", str(folder), f"an empty folder, or remove {parent} (imxrt writes files into a "
                                                   f"folder {parent}/ there)")
        if os.path.lexists(folder / name) and name not in ours:
            raise BadOption("-o", str(folder), f"an empty folder, or remove {name} (imxrt did not write it, or it was "
                                               "changed since)")


def _exchangeable(folder: Path, ours: dict[str, dict], folders: frozenset[str]) -> bool:
    """Whether ``folder`` holds nothing of the user's (only our manifest, files and folders) and can be swapped
    with a sibling: not a mount point, and not a folder this process works in (it would be left in the old one)."""
    try:
        cwd = Path.cwd().resolve()
    except OSError:
        cwd = None
    if os.path.ismount(folder) or cwd is not None and (cwd == folder or folder in cwd.parents):
        return False

    def only_ours(directory: Path, prefix: str) -> bool:
        with os.scandir(directory) as entries:
            for item in entries:
                name = prefix + item.name
                if item.is_dir(follow_symlinks=False):
                    if name not in folders or not only_ours(Path(item.path), name + "/"):
                        return False
                elif name not in ours and name != MANIFEST:
                    return False
        return True

    return only_ours(folder, "")


def _staging_beside(folder: Path) -> Path:
    """A new hidden sibling of ``folder``, with the mode ``folder`` has (or a new folder would get)."""
    while True:
        staging = folder.with_name(f".{folder.name}.imxrt-{secrets.token_hex(4)}")
        try:
            staging.mkdir()  # the umask applies, as for any new folder
            break
        except FileExistsError:
            continue
    if folder.is_dir():
        staging.chmod(stat.S_IMODE(folder.stat().st_mode))
    return staging


def _fill(root: Path, files: dict[str, bytes], manifest: Manifest | None = None) -> None:
    for name, data in sorted(files.items()):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    if manifest is not None:
        _write_manifest(root, manifest)


def _write_manifest(folder: Path, manifest: Manifest) -> None:
    data = {"imxrt_output": _FORMAT, "files": manifest.files, "folders": sorted(manifest.folders)}
    if manifest.replacing:
        data["replacing"] = manifest.replacing
    write_whole(folder / MANIFEST, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())


def write_whole(path: Path, data: bytes) -> None:
    """Write ``path`` aside and rename it into place: an interrupt leaves the old file or none, never half."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_bytes(data)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def _replace_beside_user_files(folder: Path, files: dict[str, bytes], entries: dict[str, dict],
                               previous: Manifest | None, ours: dict[str, dict]) -> None:
    """Replace our files one by one (``os.replace``: each whole), remove our stale ones, write the manifest last.
    Meanwhile the manifest lists both sets (``replacing``: a reader can tell a mix, a later compile knows both as
    ours); on any exception, the previous files and manifest are put back."""
    manifest_path = folder / MANIFEST
    old_manifest = manifest_path.read_bytes() if previous is not None else None
    our_folders = {f for f in previous.folders if _real_folder(folder / f)} if previous else set()
    needed = _folders_of(files)
    created = sorted(f for f in needed if not os.path.lexists(folder / f))  # outermost first
    staging = Path(tempfile.mkdtemp(prefix=_STAGING, dir=folder))
    new, backup = staging / "new", staging / "previous"
    replaced: list[str] = []
    removed: list[str] = []
    removed_folders: list[str] = []
    done = False
    try:
        _fill(new, files)
        folders = frozenset(our_folders | set(created))
        _write_manifest(folder, Manifest(entries, folders, replacing=dict(ours)))
        for name in created:
            (folder / name).mkdir()
        for name in sorted(files):
            if name in ours:
                _keep_copy(folder / name, backup / name)
            os.replace(new / name, folder / name)
            replaced.append(name)
        for name in sorted(set(ours) - set(files)):
            (backup / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(folder / name, backup / name)
            removed.append(name)
        for name in sorted(our_folders - needed, reverse=True):  # innermost first
            if not any((folder / name).iterdir()):  # only an empty folder of ours goes
                (folder / name).rmdir()
                removed_folders.append(name)
        _write_manifest(folder, Manifest(entries, folders - set(removed_folders)))
        done = True
    finally:
        if not done:
            for name in reversed(removed_folders):
                (folder / name).mkdir(parents=True, exist_ok=True)
            for name in removed:
                os.replace(backup / name, folder / name)
            for name in reversed(replaced):
                if (backup / name).exists():
                    os.replace(backup / name, folder / name)
                else:
                    (folder / name).unlink(missing_ok=True)
            for name in reversed(created):
                try:
                    (folder / name).rmdir()
                except OSError:
                    pass
            if old_manifest is None:
                manifest_path.unlink(missing_ok=True)
            else:
                write_whole(manifest_path, old_manifest)
        shutil.rmtree(staging, ignore_errors=True)


def _keep_copy(path: Path, copy: Path) -> None:
    """``copy`` = ``path``'s file, for putting it back: a hard link (no bytes copied) where the file system has them."""
    copy.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(path, copy)
    except OSError:
        shutil.copy2(path, copy)
