"""Reading a file the user names: a regular file of bounded size, or one ``BadFile`` line before any byte is read.

A path can name what never ends (``/dev/zero``), what blocks forever (a FIFO no one writes), a folder, or a
sparse file of terabytes. ``open_regular`` opens without blocking (``O_NONBLOCK``: opening a FIFO does not wait
for a writer), checks with ``fstat`` on that same descriptor that it is a regular file within the caller's
limit, and reads from it: a swap of the path between the check and the read cannot slip past. A file another
reader opens (a SOURCE file Python imports, an ETRecord Model Explorer reads) is checked by ``check_regular``
on its path, with the same messages.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

from imxrt.errors import BadFile

# The most imxrt reads of a JSON file it wrote (report.json, the output folder's manifest): a report is a few
# MB for the largest models, and json.loads builds several times the text's size in objects.
JSON_LIMIT = 64 << 20
_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
_CHUNK = 1 << 20
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def check_regular(path: str | os.PathLike, limit: int | None, what: str, missing: str = "") -> None:
    """``BadFile`` unless ``path`` is a regular file (following links) of at most ``limit`` bytes (None: any
    size): ``open_regular``'s checks on a path that another reader opens."""
    try:
        info = os.stat(path)
    except OSError as e:
        raise _unreadable(str(path), e, missing) from None
    _check(str(path), info, limit, what)


def _unreadable(name: str, error: OSError, missing: str) -> BadFile:
    if isinstance(error, FileNotFoundError):
        return BadFile(name, f"no such file; {missing}" if missing else "no such file")
    return BadFile(name, f"cannot be read ({error.strerror or error})")


def _check(name: str, info: os.stat_result, limit: int | None, what: str) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise BadFile(name, f"is {_kind(info.st_mode)}, not {what}")
    if limit is not None and info.st_size > limit:
        raise BadFile(name, f"is {info.st_size:,} bytes, more than the {limit:,} imxrt reads for {what}")


def open_regular(path: str | os.PathLike, limit: int, what: str, missing: str = "") -> BinaryIO:
    """``path`` opened for reading, once checked to be a regular file of at most ``limit`` bytes; ``BadFile``
    naming it otherwise. ``what`` names what the file should be, e.g. ``"a .npy file"``; ``missing`` says what
    to do when there is no such file."""
    name = str(path)
    try:
        descriptor = os.open(path, _FLAGS)
    except OSError as e:
        raise _unreadable(name, e, missing) from None
    try:
        _check(name, os.fstat(descriptor), limit, what)
        os.set_blocking(descriptor, True)  # a regular file never blocks; file objects expect a blocking one
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_regular(path: str | os.PathLike, limit: int, what: str, missing: str = "") -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them (``open_regular``'s checks). A file
    that holds more than its size said (it grew, or it is a ``/proc`` file that says 0) is read on in chunks,
    never past ``limit``."""
    with open_regular(path, limit, what, missing) as file:
        try:
            expected = os.fstat(file.fileno()).st_size
            data = file.read(expected + 1)  # one read of the size fstat gave; the byte after it finds more
            if len(data) > expected:
                parts, total = [data], len(data)
                while total <= limit and (chunk := file.read(min(_CHUNK, limit + 1 - total))):
                    parts.append(chunk)
                    total += len(chunk)
                data = b"".join(parts)
        except OSError as e:
            raise _unreadable(str(path), e, missing) from None
    if len(data) > limit:
        raise BadFile(str(path), f"holds more than the {limit:,} bytes imxrt reads for {what}")
    return data


def read_text(path: str | os.PathLike, limit: int, what: str, missing: str = "") -> str:
    """``read_regular`` as UTF-8 text; ``UnicodeDecodeError`` (a ``ValueError``) for other bytes."""
    return read_regular(path, limit, what, missing).decode("utf-8")

