"""What the LiteRT lowering can express, as functions on plain numbers (ranks, axes, pads, slopes).

Each is a rule of the capability table (``imxrt.npu.support`` refuses a node that breaks one, so it stays on
the CPU with the rule as its reason) and an invariant of a converter, which asserts it naming that rule.
TFLM's own limits on the operators the lowering writes are ``tflm_limits``; Neutron's are in the table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

SPATIAL_DIMS = 2  # CONV_2D and its kin: (height, width)


def conv_weight_axis_ok(axis: int, transposed: bool) -> bool:
    """A conv weight is quantized per output channel: its axis 0 (C_out of OIHW), or 1 for a transposed conv
    (C_out of its (C_in, C_out, kH, kW) weight). A per-tensor weight counts as axis 0."""
    return axis == (1 if transposed else 0)


def fully_connected_weight_axis_ok(per_tensor: bool, axis: int) -> bool:
    """A FULLY_CONNECTED filter [out, in] is per tensor, or per channel along ``out`` (axis 0)."""
    return per_tensor or axis == 0


def slope_is_a_number(slope: float) -> bool:
    """A leaky_relu slope has an int8 meaning unless it is NaN (an infinite one saturates:
    ``activations.saturating_leaky_alpha``)."""
    return not math.isnan(slope)


def padding_pairs_ok(flat: Sequence[int], rank: int) -> bool:
    """PyTorch's flat pad list (last dim first) is whole (before, after) pairs, at most one per dim, none
    negative (a negative pad crops: no PAD does that)."""
    return len(flat) % 2 == 0 and len(flat) // 2 <= rank and all(int(p) >= 0 for p in flat)


def reflection_fits(shape: Sequence[int], flat: Sequence[int]) -> bool:
    """MIRROR_PAD (REFLECT) pads each dim by less than its size: a reflection repeats no edge value, so it
    has at most ``size - 1`` values to mirror."""
    pairs = [(int(flat[2 * i]), int(flat[2 * i + 1])) for i in range(len(flat) // 2)]
    pairs += [(0, 0)] * (len(shape) - len(pairs))  # an empty dim has nothing to mirror either
    sizes = list(shape)[::-1]  # the pad list starts at the last dim
    return all(max(pair) < size for pair, size in zip(pairs, sizes, strict=True))
