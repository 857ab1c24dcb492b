"""FunctionalizeInPlacePass: every in-place op becomes its functional form.

    %y = sub_(%x, %w)          →  %y = sub(%x, %w)
    %z = add(%x, %y)           →  %z = add(%y, %y)   (later readers of %x read the new value)
    return (%y,)

``torch.export`` keeps in-place ops in the graph it captures (``x.sub_(y)``, ``nn.SiLU(inplace=True)``,
``x.log_()``). Left there, a write into a model input made the quantized re-export return the mutated
input as an extra output (two outputs where the model has one), calibration modified the caller's samples
in place, and the memory planner was asked to place the output over the live input it overwrites. The
compiled program computes the model's outputs and leaves the caller's tensors alone.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import finish


def functional_form(op: object) -> torch._ops.OpOverload | None:
    """The functional overload of an in-place aten op (``sub_.Tensor`` -> ``sub.Tensor``), else None."""
    if not isinstance(op, torch._ops.OpOverload):
        return None
    schema = op._schema
    namespace, _, name = schema.name.partition("::")
    if namespace != "aten" or not name.endswith("_") or name.startswith("_") or not schema.arguments:
        return None
    first = schema.arguments[0].alias_info
    if first is None or not first.is_write:
        return None
    packet = getattr(torch.ops.aten, name[:-1], None)
    overload = getattr(packet, op._overloadname, None) if packet is not None else None
    return overload if isinstance(overload, torch._ops.OpOverload) and not overload._schema.is_mutable else None


class FunctionalizeInPlacePass(PassBase):
    """Ensures: no in-place aten op with a functional form remains; readers after it read its result."""

    def call(self, gm: GraphModule) -> PassResult:
        order = {node: i for i, node in enumerate(gm.graph.nodes)}
        modified = False
        for node in list(gm.graph.nodes):
            functional = functional_form(node.target) if node.op == "call_function" else None
            if functional is None:
                continue
            node.target = functional
            written = node.args[0]
            if isinstance(written, Node):
                written.replace_all_uses_with(
                    node, delete_user_cb=lambda user, position=order[node]: order.get(user, -1) > position)
            modified = True
        return PassResult(finish(gm) if modified else gm, modified)
