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

REFERENCE_MAGIC = b"IMXRTREF"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sIIII8x")
ALIGNMENT = 16


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
    metadata = json.loads(blob[_HEADER.size:_HEADER.size + meta_len])
    return ReferencePayload(metadata, bytes(blob[tflite_offset:tflite_offset + tflite_len]))
