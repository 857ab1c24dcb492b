"""The reference Neutron payload: what a ``NeutronBackend`` delegate holds when no eIQ SDK compiled it.

It can never be mistaken for device microcode: it starts with its own magic (the stock runtime's payload
starts with small I/O counts and its microcode with 0x64434D6E). Layout, little endian, blocks padded to
16 bytes like the device payload:

| offset | size | field |
|---|---|---|
| 0 | 8 | magic ``IMXRTREF`` |
| 8 | 4 | format version (1) |
| 12 | 4 | metadata length M (UTF-8 JSON, sorted keys) |
| 16 | 4 | LiteRT offset T (16-aligned) |
| 20 | 4 | LiteRT length L |
| 24 | 8 | zeros |
| 32 | M | metadata: target, I/O maps with format flags and qparams, per-op provenance, scratch |
| T | L | the partition's LiteRT flatbuffer (what NXP's converter would receive) |
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

import numpy as np

REFERENCE_MAGIC = b"IMXRTREF"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sIIII8x")
ALIGNMENT = 16
# A payload is read from untrusted files: its metadata is parsed only within these bounds (ours is a few KB
# nested 4 deep; JSON nested thousands deep exhausts Python's recursion instead).
MAX_METADATA_BYTES = 4 << 20
MAX_METADATA_DEPTH = 32
_JSON_SPECIAL = np.frombuffer(b'"\\[]{}', np.uint8)  # all that strings and nesting depend on


def align(size: int, alignment: int = ALIGNMENT) -> int:
    return (size + alignment - 1) // alignment * alignment


@dataclass(frozen=True)
class ReferencePayload:
    metadata: dict
    tflite: bytes


def pack(metadata: dict, tflite: bytes) -> bytes:
    """Serialize a reference payload; identical arguments give identical bytes."""
    meta = json.dumps(metadata, sort_keys=True, separators=(",", ":")).encode()
    tflite_offset = align(_HEADER.size + len(meta))
    header = _HEADER.pack(REFERENCE_MAGIC, FORMAT_VERSION, len(meta), tflite_offset, len(tflite))
    body = header + meta
    body += bytes(tflite_offset - len(body)) + tflite
    return body + bytes(align(len(body)) - len(body))


def is_reference(blob: bytes) -> bool:
    return blob[:8] == REFERENCE_MAGIC


def unpack(blob: bytes) -> ReferencePayload:
    """Parse a reference payload; a blob of another kind or a truncated one raises ``ValueError``."""
    if len(blob) < _HEADER.size or not is_reference(blob):
        raise ValueError("not an imxrt reference Neutron payload (bad magic)")
    magic, version, meta_len, tflite_offset, tflite_len = _HEADER.unpack_from(blob)
    if version != FORMAT_VERSION:
        raise ValueError(f"reference payload format {version} is not supported (expected {FORMAT_VERSION})")
    if _HEADER.size + meta_len > len(blob) or tflite_offset + tflite_len > len(blob):
        raise ValueError("reference payload is truncated")
    metadata = parse_metadata(bytes(blob[_HEADER.size:_HEADER.size + meta_len]))
    return ReferencePayload(metadata, bytes(blob[tflite_offset:tflite_offset + tflite_len]))


def parse_metadata(text: bytes) -> dict:
    """The metadata JSON object, at most ``MAX_METADATA_BYTES`` long and ``MAX_METADATA_DEPTH`` deep (raises
    ``ValueError`` otherwise, as for any malformed metadata)."""
    if len(text) > MAX_METADATA_BYTES:
        raise ValueError(f"reference payload metadata is {len(text):,} bytes, more than {MAX_METADATA_BYTES:,}")
    depth = json_depth(text)
    if depth > MAX_METADATA_DEPTH:
        raise ValueError(f"reference payload metadata nests {depth} deep, more than {MAX_METADATA_DEPTH}")
    metadata = json.loads(text)
    if not isinstance(metadata, dict):
        raise ValueError(f"reference payload metadata is a JSON {type(metadata).__name__}, not an object")
    return metadata


def json_depth(text: bytes) -> int:
    """How deep arrays and objects nest in JSON ``text``; brackets inside strings do not count. In numpy, on
    the quotes, backslashes and brackets only: no Python step per byte. A quote opens or closes a string
    unless an odd run of backslashes right before it escapes it."""
    data = np.frombuffer(text, np.uint8)
    where = np.flatnonzero(np.isin(data, _JSON_SPECIAL)).astype(np.int32)
    kind = data[where]
    after_backslash = np.zeros(len(where), bool)  # the special before is a backslash right before this one
    after_backslash[1:] = (kind[:-1] == ord("\\")) & (where[1:] == where[:-1] + 1)
    run = np.cumsum(after_backslash, dtype=np.int32)
    escapes = run - np.maximum.accumulate(np.where(after_backslash, 0, run))  # backslashes right before
    quotes = (kind == ord('"')) & (escapes % 2 == 0)
    outside = np.cumsum(quotes, dtype=np.int32) % 2 == 0  # outside every string (a closing quote counts)
    opens = outside & ((kind == ord("[")) | (kind == ord("{")))
    closes = outside & ((kind == ord("]")) | (kind == ord("}")))
    return int(np.cumsum(opens.astype(np.int32) - closes, dtype=np.int32).max(initial=0))
