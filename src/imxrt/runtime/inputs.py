"""Float data for a program with int8 inputs (``--io int8``): quantized with each input's scale and zero point.

The arithmetic is the program's own input quantize (``cortex_m::quantize_per_tensor``): float32 product by
1/scale, rounded half to even, plus the zero point. A value beyond the int8 range saturates, with a warning
naming the input, rather than wrapping around.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from imxrt.errors import BadInput

log = logging.getLogger("imxrt")

INT8_MIN, INT8_MAX = -128, 127


def quantize_input(array: np.ndarray, scale: float, zero_point: int, name: str) -> np.ndarray:
    """``array`` (float) as int8 with ``scale`` and ``zero_point``; out-of-range values saturate."""
    values = np.asarray(array, dtype=np.float32)
    if np.isnan(values).any():
        raise BadInput(f"input {name} has NaN values: give finite float data to --quantize-inputs")
    q = np.rint(values * (np.float32(1.0) / np.float32(scale))) + np.float32(zero_point)
    outside = int(np.count_nonzero((q < INT8_MIN) | (q > INT8_MAX)))
    if outside:
        log.warning("input %s: %d of %d value(s) are outside the int8 range with scale %g and zero point %d; "
                    "saturated to [%d, %d]", name, outside, q.size, scale, zero_point, INT8_MIN, INT8_MAX)
    return np.clip(q, INT8_MIN, INT8_MAX).astype(np.int8)


def quantize_inputs(arrays: Sequence[np.ndarray], described: Sequence[dict]) -> list[np.ndarray]:
    """Each float array whose input (``report["io"]["inputs"]``) is int8, quantized; the others unchanged."""
    if len(arrays) != len(described):
        raise BadInput(f"the program takes {len(described)} input(s), got {len(arrays)}")
    result = []
    for position, (array, info) in enumerate(zip(arrays, described, strict=True)):
        name = f"{position} ({info['name']})"
        if info["dtype"] != "int8" or not np.issubdtype(np.asarray(array).dtype, np.floating):
            result.append(array)
            continue
        if info.get("scale") is None:
            raise BadInput(f"input {name} has no scale and zero point in the report: give int8 data")
        result.append(quantize_input(array, info["scale"], info["zero_point"], name))
    return result
