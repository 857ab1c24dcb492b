"""What kind of computation an aten node is, read off the graph: facts the passes and the quantizer share.

Device-neutral and free of imports from any stage, so that graph passes and quantization (which runs the
passes) can both ask. The CPU lowering's ``is_pointwise_unary`` (``cpu/lowering_rules.py``) is a different
question on a different graph: whether an edge op of one tensor argument can be a lookup table, asked of
int8 clusters whose operand is a dequantize.
"""

from __future__ import annotations

import torch


def is_elementwise_map(node: torch.fx.Node) -> bool:
    """``y[i] = f(x[i])``: a deterministic elementwise aten op (torch's pointwise tag) of exactly one float
    tensor, its first argument, whose result has that tensor's shape and dtype."""
    op = node.target
    if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload):
        return False
    if torch.Tag.pointwise not in op.tags or torch.Tag.nondeterministic_seeded in op.tags:
        return False
    tensors = [a for a in (*node.args, *node.kwargs.values()) if isinstance(a, torch.fx.Node)]
    if len(tensors) != 1 or not node.args or node.args[0] is not tensors[0]:
        return False
    before, after = tensors[0].meta.get("val"), node.meta.get("val")
    return (isinstance(before, torch.Tensor) and isinstance(after, torch.Tensor)
            and before.dtype.is_floating_point and after.dtype == before.dtype and after.shape == before.shape)


# Edge ops that only re-describe their input's bytes: ExecuTorch's memory planning makes them views (no kernel).
_VIEW_COPIES = ("view_copy", "squeeze_copy", "unsqueeze_copy", "alias_copy")


def is_view_copy(node: torch.fx.Node) -> bool:
    """An edge ``view_copy`` / ``squeeze_copy`` / ``unsqueeze_copy`` / ``alias_copy`` call (by the op's name, so
    the aten op or the edge dialect's wrapper of it)."""
    return node.op == "call_function" and any(name in str(node.target) for name in _VIEW_COPIES)
