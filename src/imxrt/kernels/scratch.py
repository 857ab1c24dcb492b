"""Work buffers a prepared kernel reuses from call to call (matmul results, float64 output stages).

Allocating a fresh multi-hundred-kilobyte array per call costs more than the arithmetic that fills it
(BLAS writes into newly mapped pages); a prepared layer keeps one buffer per shape and dtype instead.
Results handed back to callers never live in a scratch buffer, so a prepared kernel is reusable but not
reentrant: one call at a time.
"""

from __future__ import annotations

import numpy as np


class Scratch:
    """Buffers keyed by (use, shape, dtype): two uses never share one, created on first use."""

    def __init__(self) -> None:
        self._buffers: dict[tuple, np.ndarray] = {}

    def get(self, use: str, shape: tuple[int, ...], dtype, fill=None) -> np.ndarray:
        """The buffer; a new one holds ``fill`` everywhere when given (callers that never overwrite part
        of it, such as a padding border, rely on that)."""
        key = (use, shape, dtype)
        buffer = self._buffers.get(key)
        if buffer is None:
            buffer = self._buffers[key] = np.empty(shape, dtype) if fill is None else np.full(shape, fill, dtype)
        return buffer

    def __repr__(self) -> str:
        return f"Scratch({len(self._buffers)} buffers)"
