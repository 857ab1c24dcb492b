"""RescaleBatchMatmulOperandsPass: a fixed-range bmm operand (attention's softmax) gets a ``mul`` by 1 that
requantizes it to zero point 0, on targets with an NPU.

Neutron's BATCH_MATMUL takes operands at zero point 0 (the quantizer makes every computed bmm operand
symmetric), but softmax and sigmoid write TFLite's fixed output qparams (scale 1/256, zero point -128), the
only ones TFLM's kernels accept. A ``mul`` by 1 between them is an op of its own, so it gets its own observer,
symmetric because a bmm reads it: the requantization is in the quantized program, the NPU runs it as a MUL
(one rounding), and the calibrated range (the largest attention weight seen, often well below 1) sets its
scale:

    %p = softmax(%s, -1); %o = bmm(%p, %v)  →  %o = bmm(mul(softmax(%s, -1), 1.0), %v)

A CPU-only target skips it: CMSIS-NN's batch matmul takes any zero point.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import call, calls_to, finish
from imxrt.quantization.rules import NPU_RULES, FixedOutput, SharedWithInput

aten = torch.ops.aten


def _fixed_range_origin(value: Node) -> tuple[Node, Node] | None:
    """Follow a bmm operand back through ops that share qparams; (the fixed-range op with a non-zero zero
    point it comes from, the node on the path that reads it), or None."""
    reader = None
    while value.op == "call_function":
        rule = NPU_RULES.get(value.target)
        if isinstance(rule, FixedOutput):
            return (value, reader) if rule.zero_point != 0 else None
        if not isinstance(rule, SharedWithInput) or not isinstance(value.args[0], Node):
            return None
        reader, value = value, value.args[0]
    return None


class RescaleBatchMatmulOperandsPass(PassBase):
    """Requires: an aten graph (matmuls of activations already ``bmm``). Ensures: no bmm operand has a
    fixed-range producer with a non-zero zero point."""

    def call(self, gm: GraphModule) -> PassResult:
        modified = False
        for node in calls_to(gm, aten.bmm.default):
            for operand in node.args[:2]:
                found = _fixed_range_origin(operand) if isinstance(operand, Node) else None
                if found is None:
                    continue
                origin, reader = found
                reader = reader or node
                with gm.graph.inserting_after(origin):
                    rescaled = call(gm, aten.mul.Tensor, (origin, 1.0), like=origin)
                reader.replace_input_with(origin, rescaled)
                modified = True
        return PassResult(finish(gm) if modified else gm, modified)
