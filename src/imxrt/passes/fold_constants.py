"""FoldConstantsPass: a value that no model input reaches is computed once, at compile time.

Models compute tensors in ``forward`` from constants alone: EdgeNeXt's and XCiT's Fourier positional encodings
(``zeros -> cumsum -> arange -> pow -> div -> sin / cos -> cat -> conv``), a weight standardized or transposed
on every call. torch.export keeps each of those ops; none of them reads an activation, so the quantizer has
nothing to observe on them and to_edge decomposes what it does not know (``cumsum``, ``arange``, integer
``div``): they ran in float on the CPU, between NPU partitions. Folded here, each such value is one module
constant, which the quantizer treats as it treats weights::

    %e = conv2d(cat([sin(div(cumsum(%ones), %t)), ...]), W, b);  %y = add(%x, %e)
        →  %y = add(%x, %e_folded)            # %e_folded: get_attr, the value of %e

A value is folded where a node that reads a model input (or is impure or random) reads it; what only folded
values read disappears. A fill (``zeros``, ``full``, ``arange``) read directly by such a node stays: it is
already as cheap as a constant, and the recurrent-layer unrolling reads a ``zeros`` initial state by its op.
QAT skips this pass (``PARAMETER_FOLDING_PASSES``): a folded value would freeze the parameters it reads.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule, Node
from torch.fx.node import map_arg
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from imxrt.passes._graph import add_constant, constant_value, delete_attribute, finish

_RANDOM = (torch.Tag.nondeterministic_seeded, torch.Tag.nondeterministic_bitwise)


def _computable(node: Node) -> bool:
    """A call that only its arguments decide: no side effect, no random or uninitialized values."""
    if node.op != "call_function" or node.is_impure():
        return False
    if node.target is operator.getitem:
        return True
    return isinstance(node.target, torch._ops.OpOverload) and not any(tag in node.target.tags for tag in _RANDOM)


class FoldConstantsPass(PassBase):
    """Requires: an aten graph. Ensures: every computed value no model input reaches, and that a node
    reading an input reads, is a module constant (a fill read directly excepted)."""

    def call(self, gm: GraphModule) -> PassResult:
        read_before = _read_attributes(gm)
        values: dict[Node, object] = {}
        for node in gm.graph.nodes:
            constant = constant_value(gm, node)  # a module tensor (a submodule is no value to compute with)
            if constant is not None:
                values[node] = constant
            elif _computable(node) and all(n in values for n in node.all_input_nodes):
                args, kwargs = map_arg((node.args, node.kwargs), lambda n: values[n])
                with torch.no_grad():
                    values[node] = node.target(*args, **kwargs)
        modified = False
        for node in list(gm.graph.nodes):
            value = values.get(node)
            if node.op != "call_function" or not isinstance(value, torch.Tensor) or not node.all_input_nodes:
                continue
            if all(user in values for user in node.users):
                continue  # read only by folded values: it disappears with them
            constant = add_constant(gm, node, f"{node.name}_folded", value)
            constant.meta.update({k: v for k, v in node.meta.items() if k not in ("val", "tensor_meta")})
            node.replace_all_uses_with(constant)
            modified = True
        if modified:
            finish(gm)
            for target in read_before - _read_attributes(gm):
                delete_attribute(gm, target)
        return PassResult(gm, modified)


def _read_attributes(gm: GraphModule) -> set[str]:
    return {node.target for node in gm.graph.nodes if node.op == "get_attr"}
