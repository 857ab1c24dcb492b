"""The planned memory: one byte buffer per memory id, sized as the program says, and tensors as views into it.

Every planned tensor is a torch view at its planned offset with the strides of its ``dim_order``, so a
kernel writing its output writes the very bytes the device would write, and two tensors the plan places
on the same bytes really share them (which is what lets plan checking see a bad plan).
"""

from __future__ import annotations

import numpy as np
import torch
from executorch.exir import schema

from imxrt.pte.reader import TORCH_DTYPES, allocation_offset, tensor_nbytes

# A fixed pseudo-random byte pattern: poisoned bytes are implausible in every dtype (huge or NaN floats,
# scattered ints), and the same on every run.
_POISON_SEED = 0x1A5


def dim_order_strides(sizes: list[int], dim_order: list[int]) -> list[int]:
    """Element strides of a dense tensor whose dimensions are laid out outermost-first in ``dim_order``.

    ``dim_order`` [0, 2, 3, 1] on sizes [N, C, H, W] gives the NHWC bytes of a channels_last tensor."""
    strides = [0] * len(sizes)
    step = 1
    for dim in reversed(dim_order):
        strides[dim] = step
        step *= max(sizes[dim], 1)
    return strides


class Arena:
    """The program's planned buffers (``non_const_buffer_sizes``; memory id 0 is reserved and unused)."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = list(sizes)
        self.buffers = [bytearray(size) for size in sizes]
        # One uint8 tensor over each buffer: views are slices of it, so they share the bytearray's memory.
        self._bytes = [torch.frombuffer(buffer, dtype=torch.uint8) if buffer else torch.empty(0, dtype=torch.uint8)
                       for buffer in self.buffers]
        self._poison = None

    def view(self, tensor: schema.Tensor) -> torch.Tensor:
        """The planned tensor as a torch tensor over its bytes in the arena."""
        allocation = tensor.allocation_info
        offset = allocation_offset(allocation)
        return _typed_view(self._bytes[allocation.memory_id], offset, tensor)

    def poison(self, memory_id: int, offset: int, nbytes: int) -> None:
        """Overwrite bytes with the poison pattern (plan checking: a dead tensor's bytes hold garbage)."""
        if self._poison is None:
            rng = np.random.default_rng(_POISON_SEED)
            self._poison = torch.from_numpy(rng.integers(0, 256, max(self.sizes, default=0), dtype=np.uint8))
        self._bytes[memory_id][offset:offset + nbytes] = self._poison[offset:offset + nbytes]


def constant_tensor(data: bytes, tensor: schema.Tensor) -> torch.Tensor:
    """A constant as a torch tensor over a private copy of its bytes (torch wants writable memory)."""
    raw = torch.frombuffer(bytearray(data[:tensor_nbytes(tensor)]) or bytearray(1), dtype=torch.uint8)
    return _typed_view(raw, 0, tensor)


def unplanned_tensor(tensor: schema.Tensor) -> torch.Tensor:
    """A tensor the plan leaves to the runtime (no allocation): private zeroed memory with its dim order."""
    raw = torch.zeros(max(tensor_nbytes(tensor), 1), dtype=torch.uint8)
    return _typed_view(raw, 0, tensor)


def _typed_view(raw: torch.Tensor, offset: int, tensor: schema.Tensor) -> torch.Tensor:
    dtype = TORCH_DTYPES[tensor.scalar_type]
    nbytes = tensor_nbytes(tensor)
    chunk = raw[offset:offset + nbytes]
    if nbytes == 0:
        return torch.empty(tensor.sizes, dtype=dtype)
    assert offset % dtype.itemsize == 0, "the program reader refuses misaligned tensors"
    flat = chunk.view(dtype)
    return flat.as_strided(tensor.sizes, dim_order_strides(tensor.sizes, tensor.dim_order))
