"""The delegate contract: id ``NeutronBackend`` in the .pte, a reference payload, our backend even when
another backend class of that name (ExecuTorch's own NXP backend) is loaded in the same process."""

import pytest
import torch
from executorch.exir._serialize._program import deserialize_pte_binary
from executorch.exir.backend.backend_details import BackendDetails

from imxrt.npu import reference_payload
from imxrt.npu.backend import neutron_delegates
from imxrt.pipeline import CompileOptions, compile, export, lower, quantize
from imxrt.placement import PlacementLog, input_format_flags
from imxrt.targets import get_target


class TinyConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))


@pytest.mark.slow
def test_a_foreign_neutron_backend_class_does_not_capture_our_partitions():
    class NeutronBackend(BackendDetails):  # what importing executorch.backends.nxp defines
        @staticmethod
        def preprocess(edge_program, compile_specs):
            raise AssertionError("the foreign NeutronBackend was called")

    x = torch.randn(1, 2, 5, 5, generator=torch.Generator().manual_seed(0))
    result = compile(TinyConv().eval(), (x,), "imxrt700", [(x,)], CompileOptions(show_progress=False))
    program = deserialize_pte_binary(result.pte).program
    (delegate,) = program.execution_plan[0].delegates
    assert delegate.id == "NeutronBackend"
    (blob,) = program.backend_delegate_data
    assert reference_payload.is_reference(bytes(blob.data))
    assert reference_payload.unpack(bytes(blob.data)).tflite == result.partitions[0]
    assert NeutronBackend.__name__ == "NeutronBackend"


@pytest.mark.parametrize("memory_format, flag", [(torch.contiguous_format, 0), (torch.channels_last, 1)])
def test_the_format_flags_the_cpu_lowering_reads_are_the_payloads(memory_format, flag):
    """The backend records each delegate input's format flag as data when it builds the payload; the CPU
    lowering decides dim orders from that record, so it must say what the payload says."""
    x = torch.randn(1, 2, 5, 5, generator=torch.Generator().manual_seed(0)).to(memory_format=memory_format)
    target, options = get_target("imxrt700"), CompileOptions(show_progress=False)
    edge = lower(quantize(export(TinyConv().eval(), (x,)), (x,), [(x,)], options, target), target, options,
                 PlacementLog())
    (module,) = neutron_delegates(edge)
    inputs = reference_payload.unpack(bytes(module.processed_bytes)).metadata["inputs"]
    assert input_format_flags(module) == tuple(io["format_flag"] for io in inputs) == (flag,)


class ConvPoolAdd(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.branch = torch.nn.Conv2d(8, 8, 1)

    def forward(self, x):
        y = torch.nn.functional.relu6(self.conv(x))
        y = y + self.branch(y)
        return torch.nn.functional.avg_pool2d(y, 2).flatten(1)


@pytest.mark.slow
def test_every_npu_op_maps_to_the_edge_nodes_it_came_from_and_back():
    """Provenance is complete by construction: each LiteRT op names edge debug handles, and each delegated
    edge node is named by at least one LiteRT op."""
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    result = compile(ConvPoolAdd().eval(), (x,), "imxrt700", [(x,)], CompileOptions(show_progress=False))
    (blob,) = deserialize_pte_binary(result.pte).program.backend_delegate_data
    ops = reference_payload.unpack(bytes(blob.data)).metadata["ops"]
    mapped = {handle for op in ops for handle in op["debug_handles"]}
    assert all(op["debug_handles"] for op in ops)
    delegated = {op["debug_handle"] for op in result.report["ops"] if op["placement"] == "npu"}
    assert None not in delegated
    assert delegated <= mapped


def test_reference_payload_round_trip_is_16_byte_aligned_and_rejects_other_blobs():
    metadata = {"inputs": [], "outputs": [], "ops": []}
    blob = reference_payload.pack(metadata, b"TFL3" * 5)
    assert len(blob) % 16 == 0
    assert reference_payload.unpack(blob).metadata == metadata and reference_payload.unpack(blob).tflite == b"TFL3" * 5
    for bad in (b"", b"\x01\x01\x01" + bytes(29), blob[:40]):
        try:
            reference_payload.unpack(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad[:8]!r} was accepted")
