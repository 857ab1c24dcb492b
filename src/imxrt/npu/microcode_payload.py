"""The device payload: what a ``NeutronBackend`` delegate holds when the eIQ Neutron SDK compiled it.

The stock ExecuTorch Neutron runtime on the board reads this layout (reference/neutron.md); every block is
zero-padded to 16 bytes, counts and maps are one byte each:

| offset | size | field |
|---|---|---|
| 0 | 1 | n_in: NeutronGraph data inputs (checked against the microcode's own count) |
| 1 | 1 | n_out: NeutronGraph data outputs (checked likewise) |
| 2 | 1 | n_args: user inputs of the partition; output j is written to ``args[n_args + out_map[j]]`` |
| 3 | n_in | input format flags: 1 = the runtime delivers NHWC bytes, 0 = the tensor's bytes as they are |
| 3+n_in | n_out | output format flags |
| 3+n_in+n_out | n_in | input map: NeutronGraph input i <- ``args[in_map[i]]`` |
| 3+2n_in+n_out | n_out | output map |
| 3+2n_in+2n_out | 1 | payload version: 0 (outputs + scratch) or 1 (+ profile and debug buffers) |
| H | M | microcode: uint32 magic 0x64434D6E; word 6 = M, word 7 = W; I/O counts at words 11, 12 (v0) or 13, 14 (v1) |
| H + A16(M) | W | weights |
| ... | K | kernels |

The runtime finds the weights and kernels only through words 6 and 7, so ``compose`` refuses microcode whose
header disagrees with the blocks it is given, and counts the runtime would reject: a bad payload fails here,
with a message, not on the board.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

ALIGNMENT = 16
MICROCODE_MAGIC = 0x64434D6E
PAYLOAD_VERSIONS = (0, 1)
MAX_TENSORS = 255  # counts and map entries are single bytes

_WORD = struct.Struct("<I")
_MICROCODE_SIZE_WORD = 6
_WEIGHTS_SIZE_WORD = 7
_SCRATCH_WORD = 9
# Per payload version: the words holding the SRAM scratch (weights fetched from flash), profile and debug
# buffer sizes (None: that version has none), and the microcode's own input and output counts.
_WORDS = {
    0: {"sram_scratch": 10, "profile": None, "debug": None, "inputs": 11, "outputs": 12},
    1: {"sram_scratch": 12, "profile": 10, "debug": 11, "inputs": 13, "outputs": 14},
}
_PROFILE_SIZE_MASK = 0x7FFFFFFF  # the top bit of the profile word is a flag in newer SDKs


def align(size: int) -> int:
    return (size + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def _padded(block: bytes) -> bytes:
    return block + bytes(align(len(block)) - len(block))


@dataclass(frozen=True)
class MicrocodeHeader:
    """The words of the microcode header the runtime reads."""

    microcode_bytes: int
    weights_bytes: int
    scratch_bytes: int  # the runtime allocates it (and the next two) per inference
    profile_bytes: int
    debug_bytes: int
    sram_scratch_bytes: int  # SRAM for weights fetched from flash (--fetch-constants-to-sram)
    num_inputs: int
    num_outputs: int


def read_microcode_header(microcode: bytes, version: int) -> MicrocodeHeader:
    """Read the header words of ``microcode`` for payload ``version``; ``ValueError`` if it is no microcode."""
    if version not in PAYLOAD_VERSIONS:
        raise ValueError(f"payload version {version} is unknown to the runtime (it reads {PAYLOAD_VERSIONS})")
    at = _WORDS[version]
    if len(microcode) < (at["outputs"] + 1) * _WORD.size:
        raise ValueError(f"the microcode is {len(microcode)} bytes, shorter than its header")
    words = struct.unpack_from(f"<{at['outputs'] + 1}I", microcode)
    if words[0] != MICROCODE_MAGIC:
        raise ValueError(f"the microcode starts with 0x{words[0]:08X}, not the Neutron magic 0x{MICROCODE_MAGIC:08X}")

    def word(name: str) -> int:
        return 0 if at[name] is None else words[at[name]]

    return MicrocodeHeader(microcode_bytes=words[_MICROCODE_SIZE_WORD], weights_bytes=words[_WEIGHTS_SIZE_WORD],
                           scratch_bytes=words[_SCRATCH_WORD], profile_bytes=word("profile") & _PROFILE_SIZE_MASK,
                           debug_bytes=word("debug"), sram_scratch_bytes=word("sram_scratch"),
                           num_inputs=word("inputs"), num_outputs=word("outputs"))


@dataclass(frozen=True)
class MicrocodePayload:
    """The fields of a device payload (``n_in`` and ``n_out`` are the lengths of the maps)."""

    n_args: int
    input_flags: tuple[int, ...]
    output_flags: tuple[int, ...]
    input_map: tuple[int, ...]
    output_map: tuple[int, ...]
    version: int
    microcode: bytes
    weights: bytes
    kernels: bytes  # as parsed from a payload: the rest of the blob, including its zero padding

    @property
    def header(self) -> MicrocodeHeader:
        return read_microcode_header(self.microcode, self.version)


def _check(payload: MicrocodePayload) -> None:
    n_in, n_out = len(payload.input_map), len(payload.output_map)
    if len(payload.input_flags) != n_in or len(payload.output_flags) != n_out:
        raise ValueError(f"{len(payload.input_flags)} input / {len(payload.output_flags)} output format flags for "
                         f"{n_in} inputs / {n_out} outputs")
    if max(n_in, n_out, payload.n_args) > MAX_TENSORS:
        raise ValueError(f"{n_in} inputs, {n_out} outputs, {payload.n_args} arguments: the payload holds at most "
                         f"{MAX_TENSORS} of each")
    if any(flag not in (0, 1) for flag in payload.input_flags + payload.output_flags):
        raise ValueError("format flags are 0 or 1")
    if any(not 0 <= arg < payload.n_args for arg in payload.input_map):
        raise ValueError(f"input map {payload.input_map} points outside the partition's {payload.n_args} inputs")
    if any(not 0 <= arg <= MAX_TENSORS for arg in payload.output_map):
        raise ValueError(f"output map {payload.output_map} does not fit in bytes")
    header = payload.header
    if (header.num_inputs, header.num_outputs) != (n_in, n_out):
        raise ValueError(f"the microcode says {header.num_inputs} inputs and {header.num_outputs} outputs, its "
                         f"NeutronGraph has {n_in} and {n_out}; the runtime refuses such a payload")
    # The runtime places weights and kernels by the header's sizes; the blocks we write must sit there.
    if align(header.microcode_bytes) != align(len(payload.microcode)):
        raise ValueError(f"the microcode header says {header.microcode_bytes} bytes of microcode, the buffer holds "
                         f"{len(payload.microcode)}")
    if align(header.weights_bytes) != align(len(payload.weights)):
        raise ValueError(f"the microcode header says {header.weights_bytes} bytes of weights, the buffer holds "
                         f"{len(payload.weights)}")


def compose(payload: MicrocodePayload) -> bytes:
    """The payload bytes the stock runtime reads; ``ValueError`` for anything it would reject."""
    _check(payload)
    header = bytes([len(payload.input_map), len(payload.output_map), payload.n_args, *payload.input_flags,
                    *payload.output_flags, *payload.input_map, *payload.output_map, payload.version])
    return b"".join(_padded(block) for block in (header, payload.microcode, payload.weights, payload.kernels))


def is_microcode_payload(blob: bytes) -> bool:
    """Whether ``blob`` reads as a device payload (small counts, then the microcode magic at the padded offset)."""
    try:
        parse(blob)
    except ValueError:
        return False
    return True


def parse(blob: bytes) -> MicrocodePayload:
    """Read a payload the way the stock runtime does; ``ValueError`` where the runtime would fail."""
    if len(blob) < 4:
        raise ValueError(f"a {len(blob)}-byte blob is no Neutron payload")
    n_in, n_out, n_args = blob[0], blob[1], blob[2]
    flags_end = 3 + n_in + n_out
    maps_end = flags_end + n_in + n_out
    if len(blob) <= maps_end:
        raise ValueError(f"a {len(blob)}-byte blob ends inside its {maps_end + 1}-byte payload header")
    version = blob[maps_end]
    microcode_offset = align(maps_end + 1)
    if version not in PAYLOAD_VERSIONS:
        raise ValueError(f"payload version {version} is unknown to the runtime (it reads {PAYLOAD_VERSIONS})")
    header = read_microcode_header(bytes(blob[microcode_offset:microcode_offset + 64]), version)
    weights_offset = microcode_offset + align(header.microcode_bytes)
    kernels_offset = weights_offset + align(header.weights_bytes)
    if kernels_offset > len(blob):
        raise ValueError(f"the microcode header places the kernels at byte {kernels_offset}, past the payload's "
                         f"end ({len(blob)} bytes)")
    payload = MicrocodePayload(
        n_args=n_args,
        input_flags=tuple(blob[3:3 + n_in]),
        output_flags=tuple(blob[3 + n_in:flags_end]),
        input_map=tuple(blob[flags_end:flags_end + n_in]),
        output_map=tuple(blob[flags_end + n_in:maps_end]),
        version=version,
        microcode=bytes(blob[microcode_offset:microcode_offset + header.microcode_bytes]),
        weights=bytes(blob[weights_offset:weights_offset + header.weights_bytes]),
        kernels=bytes(blob[kernels_offset:]),
    )
    if (header.num_inputs, header.num_outputs) != (n_in, n_out):
        raise ValueError(f"the microcode says {header.num_inputs} inputs and {header.num_outputs} outputs, the "
                         f"payload header {n_in} and {n_out}")
    return payload
