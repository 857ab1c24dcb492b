"""Integrity seal (serialize stage): a SHA-256 of the whole ``.pte``, inside the file, checked before it runs.

Without it a damaged weight, scale or payload byte is a valid program that gives other outputs. The seal
detects accidental damage (a bad copy, a flipped bit, a cut-off download), not tampering: it has no key, so
whoever edits a file can compute its seal again. The host runtime therefore checks everything behind a
matching seal as it checks an unsealed file. ``seal``
makes the digest part of the program; ``verify`` (run by ``imxrt.runtime.load``) tells a sealed file that is
whole from one that is damaged and from a plain ExecuTorch ``.pte``, which has no digest to check.

Where the digest lives, and why there:

- not in the extended header: its layout is fixed (``eh00``, its length, program size, segment offset and
  segment size: 32 bytes), ExecuTorch's serializer writes no other field and has no room for one;
- not as bytes after the last segment: the runtime never checks a file's length, so the board would load
  it, but nothing in the program would say a digest exists: a cut-off trailer would read as an unsealed
  file, and ExecuTorch's own deserialize / serialize would drop it silently;
- as a named data entry ``imxrt.sha256`` (ExecuTorch's ``NamedDataStore``): part of the format, written and
  read back by ExecuTorch's serializer. The stock runtime's ``Program::load`` only indexes named data; it
  loads an entry's bytes when a backend asks for that key (``PteDataMap::get_data``), and NeutronBackend and
  the Cortex-M kernels ask for none. So the board's runtime loads a sealed file as it is (ExecuTorch's own
  runtime in its Python wheel is tested to), and the key in the flatbuffer says the file is sealed even
  when its digest is gone. A program edited and serialized again by ExecuTorch keeps the entry, and its
  stale digest refuses it, unless it is serialized without its named data: then it is unsealed.

``seal`` serializes the program again with ExecuTorch's serializer and the entry as the last named data, so
its segment is the file's last 48 bytes: ``RECORD_MARKER`` then the digest, the SHA-256 of every byte before
the digest (header, program, constants, delegate payloads, padding, marker). Serializing again changes the
flatbuffer's byte layout, not the program: ``seal`` checks that the sealed file reads back as the same program,
constants, payloads and named data. ``verify``: the marker at the end and a matching digest is ``Sealed``; a
digest that differs, or the key in the file without the marker at its end (cut off, appended to, marker
damaged), is ``Mismatch``; neither is ``Unsealed``. Any one damaged byte is therefore refused.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import ClassVar

from executorch.exir import ExecutorchBackendConfig
from executorch.exir._serialize._named_data_store import NamedDataStore
from executorch.exir._serialize._program import (
    PTEFile,
    _get_extended_header,
    _restore_segments,
    deserialize_pte_binary,
    serialize_pte_binary,
)

from imxrt.errors import BadFile

KEY = "imxrt.sha256"  # the named data entry
RECORD_MARKER = b"imxrt seal v1\0\0\0"  # starts the entry's 48 bytes: a sealed file ends with marker + digest
DIGEST_BYTES = 32
RECORD_BYTES = len(RECORD_MARKER) + DIGEST_BYTES
_FIX = "recompile the model (imxrt compile) or copy the file again"
_SERIALIZER = ExecutorchBackendConfig()  # the segment and tensor alignments to_executorch writes with


@dataclass(frozen=True)
class Sealed:
    """The digest matches: no byte before it was damaged by accident. Anyone can compute a SHA-256, so this
    does not tell a file the compiler wrote from one crafted and sealed again."""

    covered: int  # bytes the digest covers: the whole file but the digest itself


@dataclass(frozen=True)
class Unsealed:
    """No ``imxrt.sha256`` entry (a plain ExecuTorch ``.pte``): damage cannot be detected."""

    covered: ClassVar[int] = 0


@dataclass(frozen=True)
class Mismatch:
    """The file is sealed, but its bytes are not the ones the digest was made of."""

    covered: int  # bytes the digest would cover (0 when the digest itself is missing)
    detail: str  # what differs, for the message


Status = Sealed | Unsealed | Mismatch


def seal(pte: bytes) -> bytes:
    """``pte`` with the ``imxrt.sha256`` entry holding the SHA-256 of the file before the digest.

    The same bytes in give the same bytes out, and sealing a sealed file gives it back unchanged (its old
    entry is replaced).
    """
    original = deserialize_pte_binary(pte)
    if _get_extended_header(pte) is None:
        # Without the header every segment is empty (ExecuTorch writes one whenever there is segment data), but
        # the reader leaves their references as they are; restore them as it does for a file with segments, or
        # the references would point at the new segments.
        original = _restore_segments(original.program, b"")
    store = NamedDataStore()
    kept = original.named_data.pte_data if original.named_data is not None else {}
    for key, entry in kept.items():
        if key != KEY:
            store.add_named_data(key, bytes(original.named_data.buffers[entry.buffer_index]), entry.alignment)
    store.add_named_data(KEY, RECORD_MARKER + bytes(DIGEST_BYTES))  # added last: its segment ends the file
    reserved = bytes(serialize_pte_binary(
        PTEFile(program=original.program, mutable_data=original.mutable_data,
                named_data=store.get_named_data_store_output()),
        extract_delegate_segments=True, segment_alignment=_SERIALIZER.segment_alignment,
        constant_tensor_alignment=_SERIALIZER.constant_tensor_alignment,
        delegate_alignment=_SERIALIZER.delegate_alignment))
    assert reserved.endswith(RECORD_MARKER + bytes(DIGEST_BYTES)), "the seal entry is not the last segment"
    body = reserved[:-DIGEST_BYTES]
    sealed = body + hashlib.sha256(body).digest()
    _check_same_program(original, deserialize_pte_binary(sealed))  # the serializer copies, never edits, its input
    return sealed


def verify(pte: bytes) -> Status:
    """Whether ``pte`` is sealed and whole (``Sealed``), sealed and damaged (``Mismatch``) or not sealed."""
    data = memoryview(pte)
    if len(data) >= RECORD_BYTES and data[-RECORD_BYTES:-DIGEST_BYTES] == RECORD_MARKER:
        recorded, actual = bytes(data[-DIGEST_BYTES:]), hashlib.sha256(data[:-DIGEST_BYTES]).digest()
        covered = len(data) - DIGEST_BYTES
        if recorded == actual:
            return Sealed(covered)
        return Mismatch(covered, f"the SHA-256 of its first {covered:,} bytes is {actual.hex()[:16]}..., the file "
                                 f"records {recorded.hex()[:16]}...")
    if KEY.encode() in pte:  # the program says it is sealed, but its record is not where it must be
        return Mismatch(0, f"it names an {KEY} checksum, but does not end with one: it was cut off, added to or "
                           "damaged at its end")
    return Unsealed()


def check(name: str, pte: bytes) -> Sealed | Unsealed:
    """``verify``, with a damaged file raised as ``BadFile`` naming ``name``."""
    status = verify(pte)
    if isinstance(status, Mismatch):
        raise BadFile(name, f"is damaged: its checksum does not match ({status.detail}); {_FIX}")
    return status


def note(name: str, status: Sealed | Unsealed) -> str | None:
    """The line ``imxrt run`` prints about a program it cannot check, or ``None``."""
    if isinstance(status, Unsealed):
        return f"note: {name} has no imxrt checksum; damage cannot be detected"
    return None


def _check_same_program(before: PTEFile, after: PTEFile) -> None:
    """Sealing serializes the program again; it must read back as the same program, data and payloads."""
    assert after.program == before.program, "the sealed program differs from the one sealed"
    assert after.mutable_data == before.mutable_data, "the sealed program's mutable data differs"
    named_before = _named_data(before)
    named_after = _named_data(after)
    assert named_after.pop(KEY, b"")[:len(RECORD_MARKER)] == RECORD_MARKER, "the seal entry did not survive"
    named_before.pop(KEY, None)
    assert named_after == named_before, "the sealed program's named data differs"


def _named_data(pte_file: PTEFile) -> dict[str, bytes]:
    if pte_file.named_data is None:
        return {}
    buffers = pte_file.named_data.buffers
    return {key: bytes(buffers[entry.buffer_index]) for key, entry in pte_file.named_data.pte_data.items()}
