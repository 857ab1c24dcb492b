"""Helpers shared by converters: schema option objects and TFLite's padding arithmetic."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ai_edge_litert import schema_py_generated as schema

from imxrt.kernels.pooling import pool_output_size

Padding = schema.Padding


def options(cls: type, **fields: object) -> object:
    """A schema ``*OptionsT`` object with ``fields`` set; an unknown field name is our bug."""
    obj = cls()
    for name, value in fields.items():
        assert hasattr(obj, name), f"{cls.__name__} has no field {name}"
        setattr(obj, name, value)
    return obj


def conv_out_size(size: int, kernel: int, stride: int, dilation: int, pad_before: int, pad_after: int) -> int:
    """PyTorch's output size of a conv / pool window along one dim (floor mode)."""
    return (size + pad_before + pad_after - dilation * (kernel - 1) - 1) // stride + 1


def same_pad_before(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """TFLite SAME padding along one dim: (output size, padding before). TFLite puts the odd extra
    padding after."""
    out = math.ceil(size / stride)
    total = max((out - 1) * stride + dilation * (kernel - 1) + 1 - size, 0)
    return out, total // 2


def window_padding(
    sizes: Sequence[int], kernels: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
    pads: Sequence[int],
) -> int | None:
    """VALID or SAME if TFLite's implicit padding reads exactly the positions PyTorch's symmetric
    ``pads`` do (same output size, same padding before), else None (pad explicitly, then VALID)."""
    if all(p == 0 for p in pads):
        return Padding.VALID
    for size, kernel, stride, dilation, pad in zip(sizes, kernels, strides, dilations, pads, strict=True):
        out, before = same_pad_before(size, kernel, stride, dilation)
        if before != pad or out != conv_out_size(size, kernel, stride, dilation, pad, pad):
            return None
    return Padding.SAME


def ceil_mode_windows(sizes: Sequence[int], kernels: Sequence[int], strides: Sequence[int], pads: Sequence[int],
                      ) -> tuple[bool, int | None]:
    """For a ceil-mode pool: (whether ceil mode adds a window, the TFLite padding whose windows are PyTorch's
    when only the input's own taps count: SAME when TFLite's SAME windows are as many and start where
    PyTorch's do, else None)."""
    ceil = [pool_output_size(n, k, s, p, 1, True) for n, k, s, p in zip(sizes, kernels, strides, pads, strict=True)]
    floor = [pool_output_size(n, k, s, p, 1, False) for n, k, s, p in zip(sizes, kernels, strides, pads, strict=True)]
    if ceil == floor:
        return False, None
    same = [same_pad_before(n, k, s, 1) for n, k, s in zip(sizes, kernels, strides, strict=True)]
    matches = all(out == c and before == p for (out, before), c, p in zip(same, ceil, pads, strict=True))
    return True, Padding.SAME if matches else None

