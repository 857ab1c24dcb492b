"""The one way imxrt writes a file: whole, never through a link, never into a file someone else made.

Every output (the compile's folder, ``imxrt report``/``header``/``bundle``, ``imxrt run --output-dir`` and
``--etdump``, a kept failed partition) goes through here. A file is first written as a new file beside its
destination, created exclusively (``O_CREAT | O_EXCL``: a link or any file already at that name makes the
creation fail instead of being written through) under a name no one can predict, then renamed into place.
A rename replaces the destination's directory entry itself: a symbolic link planted at an output's name is
replaced by the output, and the file it pointed to is left as it was. An existing destination is never
opened for writing. A folder at a destination's name is refused (``BadFile``), as is any failure to write;
either way no partial file is left behind.
"""

from __future__ import annotations

import itertools
import os
import secrets
from pathlib import Path

from imxrt.errors import BadFile

_CREATE = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
           | getattr(os, "O_BINARY", 0))
_NAME_KEPT = 64  # characters of the destination's name kept in the aside name (a name may be at most 255 bytes)


def create(path: Path, data: bytes) -> None:
    """Write ``data`` to the new file ``path``, with the mode a new file gets (the umask applies).
    ``FileExistsError`` when anything, a link included, is already at ``path``: nothing is written through it."""
    handle = os.open(path, _CREATE, 0o666)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
    except BaseException:
        Path(path).unlink(missing_ok=True)
        raise


def write_whole(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path``, replacing whatever file or link is there (see the module docstring)."""
    write_all({Path(path): data})


def write_all(files: dict[Path, bytes]) -> None:
    """Write each ``path -> data`` of ``files`` whole: every file aside first, then each renamed into place, so
    a failure while writing (a full disk) leaves every destination as it was. ``BadFile`` names the destination
    that cannot be written."""
    for path in files:
        if os.path.isdir(path) and not os.path.islink(path):
            raise BadFile(str(path), "is a folder; give the path of a file")
    written: dict[Path, Path] = {}  # destination -> its file aside, until renamed
    path = None
    try:
        for path, data in files.items():
            written[path] = _aside(path, data)
        for path, partial in list(written.items()):
            os.replace(partial, path)  # the entry is replaced: a link there is not followed
            del written[path]
    except OSError as e:
        raise BadFile(str(path), f"cannot be written ({e.strerror or e})") from None
    finally:
        for partial in written.values():
            partial.unlink(missing_ok=True)


def write_new(folder: str | os.PathLike, stem: str, suffix: str, data: bytes) -> Path:
    """Write ``data`` to ``folder/<stem><suffix>``, or to the first free ``<stem>-<n><suffix>``, never over an
    existing file or link, and return its path. The file appears whole (written aside, then linked under its
    name)."""
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    partial = _aside(folder / f"{stem}{suffix}", data)
    try:
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
        partial.unlink(missing_ok=True)


def _aside(path: Path, data: bytes) -> Path:
    """A new file beside ``path`` holding ``data``, named ``.<name>.<random>.partial``."""
    while True:
        partial = path.with_name(f".{path.name[:_NAME_KEPT]}.{secrets.token_hex(8)}.partial")
        try:
            create(partial, data)
            return partial
        except FileExistsError:  # a name someone made in the meantime: draw another
            continue
