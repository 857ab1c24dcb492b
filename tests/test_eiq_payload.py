"""The stock runtime's Neutron payload, byte for byte against the layout table of reference/neutron.md, and the
NeutronGraph op it is cut from (``npu/microcode_payload.py``, ``npu/compilers/eiq.extract_neutron_graph``)."""

from __future__ import annotations

import struct

import pytest
from neutron_graph_double import MAGIC, Io, LeftOut, microcode, neutron_graph_model

from imxrt.npu import microcode_payload
from imxrt.npu.compilers import eiq
from imxrt.npu.microcode_payload import MicrocodePayload


def table_bytes(n_args, in_flags, out_flags, in_map, out_map, version, code, weights, kernels) -> bytes:
    """The payload written field by field at the offsets of the layout table (independent of ``compose``)."""
    n_in, n_out = len(in_map), len(out_map)
    header = bytearray(3 + 2 * n_in + 2 * n_out + 1)
    header[0], header[1], header[2] = n_in, n_out, n_args
    header[3:3 + n_in] = bytes(in_flags)
    header[3 + n_in:3 + n_in + n_out] = bytes(out_flags)
    header[3 + n_in + n_out:3 + 2 * n_in + n_out] = bytes(in_map)
    header[3 + 2 * n_in + n_out:3 + 2 * n_in + 2 * n_out] = bytes(out_map)
    header[3 + 2 * n_in + 2 * n_out] = version
    blob = bytearray()
    for block in (bytes(header), code, weights, kernels):
        blob += block + bytes(-len(block) % 16)  # zeros to a 16-byte multiple
    return bytes(blob)


CASES = {
    # n_args, input flags, output flags, input map, output map, version, microcode body, weights, kernels
    "one_input_one_output_v0": (1, (0,), (0,), (0,), (0,), 0, b"\x01\x02\x03", b"w" * 7, b"k" * 3),
    "several_inputs_and_outputs_mapped": (3, (0, 0, 0), (0, 0), (2, 0, 1), (1, 0), 0, b"\x05" * 9, b"w" * 33,
                                          b"k" * 17),
    "channels_last_input_v1": (1, (1,), (0,), (0,), (0,), 1, b"\x07", b"w" * 5, b"k"),
    "header_longer_than_16_bytes": (5, (1, 0, 1, 0, 0), (0, 1, 0, 0), (4, 3, 2, 1, 0), (0, 1, 2, 3), 1, b"", b"w",
                                    b"k" * 31),
    "aligned_blocks_need_no_padding": (1, (0,), (0,), (0,), (0,), 0, b"\x09" * 16, b"w" * 32, b"k" * 16),
    "no_weights": (2, (0,), (0, 0), (1,), (1, 0), 0, b"\x0b" * 5, b"", b"k" * 2),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_payload_bytes_follow_the_layout_table(case):
    n_args, in_flags, out_flags, in_map, out_map, version, body, weights, kernels = CASES[case]
    code = microcode(len(in_map), len(out_map), version, body, weights_bytes=len(weights))
    fields = MicrocodePayload(n_args, in_flags, out_flags, in_map, out_map, version, code, weights, kernels)
    blob = microcode_payload.compose(fields)
    assert blob == table_bytes(n_args, in_flags, out_flags, in_map, out_map, version, code, weights, kernels)
    assert len(blob) % 16 == 0
    # Where the runtime looks: microcode after the padded header, weights and kernels by header words 6 and 7.
    start = -(-(4 + 2 * len(in_map) + 2 * len(out_map)) // 16) * 16
    words = struct.unpack_from("<16I", blob, start)
    assert words[0] == MAGIC
    weights_at = start + -(-words[6] // 16) * 16
    kernels_at = weights_at + -(-words[7] // 16) * 16
    assert blob[weights_at:weights_at + len(weights)] == weights
    assert blob[kernels_at:kernels_at + len(kernels)] == kernels
    counts = (words[11], words[12]) if version == 0 else (words[13], words[14])
    assert counts == (blob[0], blob[1])


@pytest.mark.parametrize("case", sorted(CASES))
def test_parse_reads_back_what_compose_wrote(case):
    n_args, in_flags, out_flags, in_map, out_map, version, body, weights, kernels = CASES[case]
    code = microcode(len(in_map), len(out_map), version, body, weights_bytes=len(weights))
    fields = MicrocodePayload(n_args, in_flags, out_flags, in_map, out_map, version, code, weights, kernels)
    parsed = microcode_payload.parse(microcode_payload.compose(fields))
    assert parsed.kernels[:len(kernels)] == kernels and not any(parsed.kernels[len(kernels):])
    assert parsed == MicrocodePayload(n_args, in_flags, out_flags, in_map, out_map, version, code, weights,
                                      parsed.kernels)


def test_header_words_are_read_per_payload_version():
    v0 = microcode(2, 3, 0, b"", weights_bytes=10, scratch=100, sram_scratch=20)
    v1 = microcode(2, 3, 1, b"", weights_bytes=10, scratch=100, sram_scratch=20, profile=0x80000040, debug=8)
    header0 = microcode_payload.read_microcode_header(v0, 0)
    header1 = microcode_payload.read_microcode_header(v1, 1)
    assert (header0.num_inputs, header0.num_outputs, header0.sram_scratch_bytes, header0.profile_bytes) == (2, 3, 20, 0)
    assert (header1.num_inputs, header1.num_outputs, header1.sram_scratch_bytes) == (2, 3, 20)
    assert (header1.profile_bytes, header1.debug_bytes) == (0x40, 8)  # the profile word's top bit is a flag


def _fields(**changes) -> MicrocodePayload:
    fields = dict(n_args=1, input_flags=(0,), output_flags=(0,), input_map=(0,), output_map=(0,), version=0,
                  microcode=microcode(1, 1, 0, b"abc", weights_bytes=4), weights=b"wwww", kernels=b"k")
    fields.update(changes)
    return MicrocodePayload(**fields)


REFUSED = {
    "counts_disagree_with_the_microcode": (dict(microcode=microcode(2, 1, 0, b"abc", weights_bytes=4)),
                                           "the microcode says 2 inputs and 1 outputs, its NeutronGraph has 1 and 1"),
    "microcode_size_word_wrong": (dict(microcode=microcode(1, 1, 0, b"abc", weights_bytes=4) + b"x" * 16),
                                  "the microcode header says 67 bytes of microcode, the buffer holds 83"),
    "weights_size_word_wrong": (dict(weights=b"w" * 20), "says 4 bytes of weights, the buffer holds 20"),
    "no_magic": (dict(microcode=b"\0" * 80), "not the Neutron magic 0x64434D6E"),
    "unknown_version": (dict(version=2), "payload version 2 is unknown to the runtime"),
    "input_map_outside_the_arguments": (dict(input_map=(1,)), "input map (1,) points outside the partition's 1"),
    "format_flag_not_0_or_1": (dict(input_flags=(2,)), "format flags are 0 or 1"),
    "more_than_255_inputs": (dict(n_args=256, input_flags=(0,) * 256, input_map=tuple(range(256)),
                                  microcode=microcode(256, 1, 0, b"", weights_bytes=4)), "at most 255 of each"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_compose_refuses_what_the_runtime_would_reject(case):
    changes, words = REFUSED[case]
    with pytest.raises(ValueError, match="") as error:
        microcode_payload.compose(_fields(**changes))
    assert words in str(error.value)


def test_a_reference_payload_does_not_parse_as_microcode():
    from imxrt.npu import reference_payload

    blob = reference_payload.pack({"kind": "reference"}, b"TFL3" * 100)
    assert not microcode_payload.is_microcode_payload(blob)
    assert microcode_payload.is_microcode_payload(microcode_payload.compose(_fields()))


# -- the NeutronGraph op of the converter's output ----------------------------------------------------------

IN = [Io("x", (1, 8, 8, 3)), Io("y", (1, 4))]
OUT = [Io("a", (1, 8, 8, 4)), Io("b", (1, 2)), Io("c", (1, 1))]


@pytest.mark.parametrize("version", [0, 1])
def test_extraction_finds_blobs_data_io_and_version(version):
    code = microcode(2, 3, version, b"body", weights_bytes=5)
    model = neutron_graph_model(IN, OUT, code, b"w" * 5, b"kernels", version, op_inputs=[1, 0], op_outputs=[2, 0, 1])
    graph = eiq.extract_neutron_graph(model)
    assert (graph.microcode, graph.weights, graph.kernels, graph.version) == (code, b"w" * 5, b"kernels", version)
    assert graph.input_names == ("y", "x") and graph.output_names == ("c", "a", "b")


def test_an_op_left_beside_the_neutron_graph_is_named():
    code = microcode(2, 3, 0, b"", weights_bytes=0)
    model = neutron_graph_model(IN, OUT, code, b"", b"k", left_out=[LeftOut("SOFTMAX", "probabilities")])
    with pytest.raises(ValueError) as error:
        eiq.extract_neutron_graph(model)
    assert "1 NeutronGraph op(s) and 1 op(s) it did not convert: SOFTMAX -> probabilities" in str(error.value)


def test_bytes_that_are_no_model_are_refused():
    with pytest.raises(ValueError, match="the converter returned no TFLite model"):
        eiq.extract_neutron_graph(b"\x00\x01 not a flatbuffer")
