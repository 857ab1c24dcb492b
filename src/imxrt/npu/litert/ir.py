"""LiteRT IR: the tensors and operators a lowered partition is made of, before serialization.

Tensors and operators are plain objects that refer to each other; indices exist only in the written
flatbuffer (``writer``). Shapes are LiteRT shapes (NHWC for rank-4 activations, see ``layout``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class PerTensor:
    """One scale and zero point for the whole tensor: r = scale * (q - zero_point)."""

    scale: float
    zero_point: int


@dataclass(frozen=True)
class PerChannel:
    """One symmetric scale per slice along ``axis`` (weights, biases); zero points are all 0."""

    scales: tuple[float, ...]
    axis: int


Quantization = PerTensor | PerChannel | None


@dataclass(eq=False)
class Tensor:
    """A LiteRT tensor. ``data`` (little-endian bytes of ``dtype``) makes it a constant."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    quantization: Quantization = None
    data: bytes | None = None

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    def __repr__(self) -> str:
        return f"Tensor({self.name}, {self.shape}, {np.dtype(self.dtype).name}, {self.quantization})"


@dataclass(eq=False)
class Operator:
    """A builtin operator. ``None`` in ``inputs`` is an omitted optional input (index -1)."""

    builtin: str  # a ``BuiltinOperator`` member name, e.g. "CONV_2D"
    inputs: tuple[Tensor | None, ...]
    outputs: tuple[Tensor, ...]
    options: object | None  # a schema ``*OptionsT`` object, or None
    debug_handles: tuple[int, ...]  # sorted edge-node debug handles this operator came from


@dataclass
class Graph:
    """One subgraph: its inputs, outputs and operators in execution order."""

    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[Tensor] = field(default_factory=list)
    operators: list[Operator] = field(default_factory=list)
