"""ShareEqualConstantsPass: constants of equal dtype, shape and bytes become one module constant.

Run on the converted (int8) graph before it is exported again::

    %w_0  = get_attr[_frozen_param0]        # int8 [64, 64], step 1's hidden weight
    %zp_0 = get_attr[_zero_point_0]         # int64 [24] zeros
    %w_1  = get_attr[_frozen_param1]        # the same bytes (step 2)    →  get_attr[_frozen_param0]
    %zp_1 = get_attr[_zero_point_1]         # the same bytes (a conv)    →  get_attr[_zero_point_0]

pt2e's convert registers one constant per node it folds: each per-channel weight's zero points (all zeros,
one tensor per conv and bias), and each step of an unrolled recurrence its own copy of the shared weights.
Every constant is a placeholder that ExecuTorch's passes then carry through each retrace, so ShuffleNetV2
hands ``to_edge`` 224 zero-point and scale tensors for 56 convs, and a 49-step GRU 98 copies of two
weights. Shared, they are one placeholder read by each user; the program computes the same values.

Each user keeps its own ``get_attr`` node (``UnshareParametersPass``'s invariant: one user per node,
which pt2e and the lowering rely on); only the attribute they name is shared, and the duplicates are
deleted from the module so the export does not lift them.
"""

from __future__ import annotations

import hashlib

import torch
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import constant_value, delete_attribute, finish


def _fingerprint(value: torch.Tensor) -> tuple:
    """Equal for tensors of the same dtype, shape and element bytes (-0.0 and 0.0 differ, as in the .pte)."""
    raw = value.detach().contiguous().reshape(-1).view(torch.uint8)
    return value.dtype, tuple(value.shape), hashlib.blake2b(raw.numpy().tobytes(), digest_size=16).digest()


class ShareEqualConstantsPass(PassBase):
    """Ensures: no two module constants the graph reads hold equal tensors (``_fingerprint``)."""

    def call(self, gm: GraphModule) -> PassResult:
        first: dict[tuple, str] = {}  # fingerprint -> the attribute every equal constant now names
        dropped: set[str] = set()
        for node in gm.graph.nodes:
            value = constant_value(gm, node)
            if value is None or value.requires_grad:  # a trainable parameter is its own tensor
                continue
            kept = first.setdefault(_fingerprint(value), node.target)
            if kept != node.target:
                dropped.add(node.target)
                node.target = kept
        for target in dropped:
            delete_attribute(gm, target)
        return PassResult(finish(gm) if dropped else gm, bool(dropped))

