"""RescaleBatchMatmulOperandsPass: a fixed-range bmm operand (attention's softmax) gets a ``mul`` by 1 that
requantizes it to zero point 0, on targets with an NPU.

Neutron's BATCH_MATMUL takes operands at zero point 0 (the quantizer makes every computed bmm operand
symmetric), but softmax and sigmoid write TFLite's fixed output qparams (scale 1/256, zero point -128), the
only ones TFLM's kernels accept. A ``mul`` by 1 between them is an op of its own, so it gets its own observer,
symmetric because a bmm reads it: the requantization is in the quantized program, the NPU runs it as a MUL
(one rounding), and the calibrated range (the largest attention weight seen, often well below 1) sets its
scale:

    %p = softmax(%s, -1); %o = bmm(%p, %v)  →  %o = bmm(mul(softmax(%s, -1), 1.0), %v)

A CPU-only target skips it: CMSIS-NN's batch matmul takes any zero point. Which ops fix their output's
qparams, and which share their input's, is the quantizer's knowledge: its caller passes it in as a
``QparamFlow`` (quantization runs this pass, so the pass cannot import quantization's table).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import call, calls_to, finish

aten = torch.ops.aten


@dataclass(frozen=True)
class QparamFlow:
    """How the quantizer sets the qparams of the ops between a bmm and its operand's origin."""

    fixed_zero_points: Mapping[torch._ops.OpOverload, int]  # op -> the zero point its int8 kernel fixes
    shared_with_input: frozenset[torch._ops.OpOverload]  # ops whose output shares their first input's qparams


def _fixed_range_origin(value: Node, flow: QparamFlow) -> tuple[Node, Node] | None:
    """Follow a bmm operand back through ops that share qparams; (the fixed-range op with a non-zero zero
    point it comes from, the node on the path that reads it), or None."""
    reader = None
    while value.op == "call_function":
        if value.target in flow.fixed_zero_points:
            return (value, reader) if flow.fixed_zero_points[value.target] != 0 else None
        if value.target not in flow.shared_with_input or not isinstance(value.args[0], Node):
            return None
        reader, value = value, value.args[0]
    return None


class RescaleBatchMatmulOperandsPass(PassBase):
    """Requires: an aten graph (matmuls of activations already ``bmm``). Ensures: no bmm operand has a
    fixed-range producer with a non-zero zero point, as ``flow`` tells fixed ranges and shared qparams."""

    def __init__(self, flow: QparamFlow):
        super().__init__()
        self.flow = flow

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in calls_to(gm, aten.bmm.default):
            for operand in node.args[:2]:
                found = _fixed_range_origin(operand, self.flow) if isinstance(operand, Node) else None
                if found is None:
                    continue
                origin, reader = found
                reader = reader or node
                with gm.graph.inserting_after(origin):
                    rescaled = call(gm, aten.mul.Tensor, (origin, 1.0), like=origin)
                reader.replace_input_with(origin, rescaled)
                modified = True
        return PassResult(finish(gm) if modified else gm, modified)
