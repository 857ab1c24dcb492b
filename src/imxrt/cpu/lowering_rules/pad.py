"""CPU lowering, padding: constant_pad_nd -> cortex_m pad. (Reflection and replication pads stay on their
portable kernels, on the int8 values: ``shape.lower_portable``.)"""

from __future__ import annotations

from torch.fx import Node

from imxrt.cpu.lowering_rules.common import NotLowered, Rewrite, cortex_m, node_arg, shape_of
from imxrt.kernels.requantize import INT8_MAX, INT8_MIN, quantize_value


def lower_pad(rw: Rewrite) -> Node:
    """constant_pad_nd -> cortex_m pad; pads are listed per dim of the rank-4 view of the tensor, in
    logical order here (the layout stage reorders them for channels_last inputs)."""
    x_dq, pads = rw.anchor.args[:2]
    value = float(node_arg(rw.anchor, 2, "value", 0.0) or 0.0)
    q = rw.shared_qparams(x_dq)
    rank = len(shape_of(x_dq))
    if rank > 4 or len(pads) > 2 * rank:
        raise NotLowered(f"pad of a rank-{rank} tensor (the kernel takes rank <= 4)")
    pre, post = [0, 0, 0, 0], [0, 0, 0, 0]
    for i in range(len(pads) // 2):
        pre[3 - i], post[3 - i] = int(pads[2 * i]), int(pads[2 * i + 1])
    if min(pre + post) < 0:
        raise NotLowered("negative padding (cropping)")
    pad_value = min(max(quantize_value(value, q.scale, q.zero_point), INT8_MIN), INT8_MAX)
    return rw.emit(cortex_m("pad"), (rw.int8(x_dq), pre, post, pad_value))
