"""What the tests of the host runtime's refusals start from: a small conv net compiled for a target, and a
compiled program edited and serialized again. ExecuTorch's serializer writes it without its named data, so
without the imxrt checksum: an unsealed file, as a crafted or foreign one is."""

from __future__ import annotations

from collections.abc import Callable

import flatbuffers
import numpy as np
import torch
from executorch.exir import schema
from executorch.exir._serialize._program import PTEFile, deserialize_pte_binary, serialize_pte_binary
from executorch.exir._serialize.generated.executorch_flatbuffer.Buffer import BufferT
from executorch.exir._serialize.generated.executorch_flatbuffer.Program import ProgramT

import imxrt

# The same net as a SOURCE file, for the CLI's tests.
SMALL_CONV_NET_SOURCE = """
import torch
def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 4 * 4, 2)).eval()
def example_inputs():
    return (torch.randn(1, 3, 6, 6, generator=torch.Generator().manual_seed(1)),)
"""


def small_conv_net() -> torch.nn.Module:
    """conv, relu, flatten, linear over a [1, 3, 6, 6] input, seeded."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 4 * 4, 2)).eval()


def compile_small_conv_net(target: str) -> bytes:
    """Its .pte for ``target``, calibrated on its one example input."""
    inputs = (torch.randn(1, 3, 6, 6, generator=torch.Generator().manual_seed(1)),)
    return imxrt.compile(small_conv_net(), inputs, target, [inputs], imxrt.CompileOptions(show_progress=False)).pte


def edited(pte: bytes, edit: Callable[[schema.Program], object] = lambda program: None) -> bytes:
    """The program with ``edit(program)`` applied to its deserialized form, serialized again (unsealed)."""
    program = deserialize_pte_binary(pte).program
    edit(program)
    return bytes(serialize_pte_binary(PTEFile(program=program, mutable_data=None, named_data=None)))


class Packed:
    """A table already in the builder: packing it again gives the same offset (a shared table)."""

    def __init__(self, offset: int) -> None:
        self.offset = offset

    def Pack(self, builder) -> int:  # the flatbuffer object API's name
        return self.offset


def shared(pte: bytes, add) -> bytes:
    """``pte`` packed with the object API, after ``add(program, builder)`` appended shared tables to it."""
    program_t = ProgramT.InitFromPackedBuf(bytearray(edited(pte, lambda program: None)), 0)
    builder = flatbuffers.Builder(1 << 20)
    add(program_t, builder)
    builder.Finish(program_t.Pack(builder), file_identifier=pte[4:8])
    return bytes(builder.Output())


def shared_constant(pte: bytes) -> bytes:
    """``pte`` with 20,000 constant buffers that are one 200 KB buffer: 80 KB of offsets, 4 GB once each is
    read."""
    def add(program_t, builder):
        buffer = BufferT()
        buffer.storage = np.zeros(200_000, np.uint8)
        program_t.constantBuffer += [Packed(buffer.Pack(builder))] * 20_000
    return shared(pte, add)
