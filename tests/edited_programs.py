"""What the tests of the host runtime's refusals start from: a small conv net compiled for a target, and a
compiled program edited and serialized again. ExecuTorch's serializer writes it without its named data, so
without the imxrt checksum: an unsealed file, as a crafted or foreign one is."""

from __future__ import annotations

from collections.abc import Callable

import torch
from executorch.exir import schema
from executorch.exir._serialize._program import PTEFile, deserialize_pte_binary, serialize_pte_binary

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
