"""CPU lowering, graph editing: the one helper that creates cortex_m nodes, their constants and scratch allocs.

Every node ``Editor.call`` creates carries the provenance of the edge nodes it replaces: the anchor's
``debug_handle`` and ``from_node`` (so ExecuTorch's profiling maps an instruction back to the edge op), the
handles of every replaced node (``replaced_debug_handles``), and the edge op and node names the report
shows (``edge_op``, ``edge_nodes``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from executorch.backends.transforms.utils import create_constant_placeholder, delete_constant_placeholder
from executorch.exir.passes import make_alloc_node
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, TensorArgument
from torch.fx import Node

from imxrt.placement import op_name

# Edge-node metadata a replacement inherits from the node it stands for (what the report and profilers read).
_INHERITED_META = ("stack_trace", "nn_module_stack", "source_fn_stack", "torch_fn", "from_node", "debug_handle")


class Editor:
    """Edits one ``ExportedProgram`` in place: constants, scratch allocs and replacement nodes."""

    def __init__(self, program: ExportedProgram):
        self.program = program
        self.graph = program.graph_module.graph
        self.created_constants: set[str] = set()
        self.created_calls: list[Node] = []  # every node ``call`` made, in order

    # --- constants ---------------------------------------------------------------------------------------

    def constant(self, name: str, data: torch.Tensor) -> Node:
        """A new constant tensor (a parameter of the program) named ``name``; placed before the user inputs."""
        user_inputs = {spec.arg.name for spec in self.program.graph_signature.input_specs
                       if spec.kind == InputKind.USER_INPUT}
        anchor = next((n for n in self.graph.nodes if n.op != "placeholder" or n.name in user_inputs), None)
        with self.graph.inserting_before(anchor):
            node = create_constant_placeholder(self.program, self.graph, name, InputKind.PARAMETER,
                                               data.detach().clone().contiguous())
        self.created_constants.add(node.name)
        return node

    def tensor(self, node: Node) -> torch.Tensor | None:
        """The value of a constant placeholder (parameter, buffer or lifted constant), else None."""
        if node.op != "placeholder":
            return None
        signature = self.program.graph_signature
        if node.name in signature.inputs_to_parameters:
            return self.program.state_dict[signature.inputs_to_parameters[node.name]]
        if node.name in signature.inputs_to_buffers:
            target = signature.inputs_to_buffers[node.name]
            return self.program.state_dict.get(target, self.program.constants.get(target))
        if node.name in signature.inputs_to_lifted_tensor_constants:
            return self.program.constants[signature.inputs_to_lifted_tensor_constants[node.name]]
        return None

    def restride_constants(self) -> None:
        """Store each constant with the strides its placeholder's value has (ExecuTorch serializes the
        dim order of the stored tensor)."""
        signature = self.program.graph_signature
        for node in self.graph.nodes:
            data, value = self.tensor(node), node.meta.get("val")
            if data is None or not isinstance(value, torch.Tensor) or data.stride() == value.stride():
                continue
            restrided = torch.empty_strided(data.shape, value.stride(), dtype=data.dtype).copy_(data)
            if node.name in signature.inputs_to_lifted_tensor_constants:
                self.program.constants[signature.inputs_to_lifted_tensor_constants[node.name]] = restrided
            else:
                target = signature.inputs_to_parameters.get(node.name) or signature.inputs_to_buffers[node.name]
                store = self.program.state_dict if target in self.program.state_dict else self.program.constants
                store[target] = torch.nn.Parameter(restrided, requires_grad=False) \
                    if isinstance(store[target], torch.nn.Parameter) else restrided

    def remove_dead_constants(self) -> list[str]:
        """Delete constant placeholders nothing reads any more (the float-era weights and qparams the
        cortex_m ops replaced), so they are not serialized. Returns their names."""
        removed = []
        for node in list(self.graph.nodes):
            if node.op == "placeholder" and not node.users and self.tensor(node) is not None:
                delete_constant_placeholder(self.program, node)
                removed.append(node.name)
        return removed

    def sync_output_names(self) -> None:
        """The signature names each model output by the node producing it: after replacing those nodes
        (the output dequantize became cortex_m's), point it at the new ones."""
        outputs = self.graph.output_node().args[0]
        outputs = outputs if isinstance(outputs, (list, tuple)) else (outputs,)
        for spec, value in zip(self.program.graph_signature.output_specs, outputs, strict=True):
            if isinstance(spec.arg, TensorArgument) and isinstance(value, Node):
                spec.arg.name = value.name

    # --- nodes -------------------------------------------------------------------------------------------

    def scratch(self, before: Node, nbytes: int) -> Node:
        """A memory-planned ``uint8[nbytes]`` buffer (``exir.memory.alloc``) living for one op."""
        like = before.meta["val"]
        like = like[0] if isinstance(like, (tuple, list)) else like
        with self.graph.inserting_before(before):
            return make_alloc_node(self.program.graph_module, like.new_empty((int(nbytes),), dtype=torch.uint8),
                                   None)

    def call(self, op, args: Sequence, val: torch.Tensor, replaces: Sequence[Node], before: Node) -> Node:
        """A call of ``op`` inserted before ``before`` whose value is ``val`` (a fake tensor), carrying the
        provenance of ``replaces`` (the first is the node it stands for)."""
        with self.graph.inserting_before(before):
            node = self.graph.call_function(op, tuple(args))
        node.meta["val"] = val
        inherit_provenance(node, replaces)
        self.created_calls.append(node)
        return node


def inherit_provenance(node: Node, replaces: Sequence[Node]) -> None:
    """Copy the first replaced node's source metadata onto ``node`` and list every replaced node."""
    primary = replaces[0]
    for key in _INHERITED_META:
        if key in primary.meta:
            node.meta[key] = primary.meta[key]
    node.meta["edge_op"] = primary.meta.get("edge_op", op_name(primary))
    node.meta["edge_nodes"] = tuple(name for n in replaces for name in n.meta.get("edge_nodes", (n.name,)))
    handles = []
    for n in replaces:
        for handle in n.meta.get("replaced_debug_handles", (n.meta.get("debug_handle"),)):
            if handle is not None and handle not in handles:
                handles.append(handle)
    node.meta["replaced_debug_handles"] = tuple(handles)
