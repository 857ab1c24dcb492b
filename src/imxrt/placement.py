"""Placement decisions: where each compute node of the edge graph runs and why, written by both lowerings.

The NPU partitioner records the nodes its Neutron runs and why it refuses the others; the CPU lowering then
records what each node it keeps becomes (a cortex_m kernel, an int8 portable op, or float with the cause).
Neither device owns the log or the names it uses, so both import them from here; the report reads the log.

A delegate tells the CPU lowering what it needs of its arguments as data, ``DelegateInfo`` on the lowered
module, recorded by its backend when it builds the payload: the CPU lowering never reads a payload.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from executorch.exir.lowered_backend_module import LoweredBackendModule
from torch.fx import Node

from imxrt.passes.qdq import is_dequantize, is_quantize, tensor_args
from imxrt.passes.unroll_recurrent_layers import FLOAT_LAYER, float_kept_for
from imxrt.quantization.rules import Device, runs_in_int8


def op_name(node: Node) -> str:
    """``aten.convolution.default`` style name of an edge node's op."""
    return getattr(node.target, "__name__", str(node.target))


# How the reason of an LSTM's float cell update, and of an op of a layer kept in float, starts (the advice
# knows a chosen float op by it).
FLOAT_CELL_STATE = "an LSTM's cell state is float (--cell-state float, the default)"
FLOAT_LAYER_KEPT = "kept in float (--float-layer)"


def not_quantized_reason(node: Node) -> str:
    """Why a node is not int8 (the cause only; where it then runs is the lowering's to say): name the PyTorch
    call and module it came from (an LSTM decomposes into dozens of float ops; the user needs to see "LSTM",
    not "sigmoid")."""
    source = node.meta.get("torch_fn")
    call = source[1].rsplit(".", 1)[-1] if source else op_name(node)
    stack = node.meta.get("nn_module_stack") or {}
    path, module_type = list(stack.values())[-1] if stack else ("", "")
    where = f" in {module_type.rsplit('.', 1)[-1]} '{path}'" if path else ""
    kept_for = float_kept_for(node)
    if kept_for == FLOAT_LAYER:
        return f"{FLOAT_LAYER_KEPT}{where}"
    if kept_for is not None:
        return (f"{FLOAT_CELL_STATE}{where}: its update runs in float (--cell-state int8: the step all int8, "
                "less accurate)")
    if runs_in_int8(getattr(node.target, "_op", None), Device.NPU):  # an operand or its result is the cause
        odd = [a.name for a in tensor_args(node) if not is_dequantize(a)]
        if odd:
            return (f"not quantized: {call}{where} reads {', '.join(odd)}, which is neither an int8 tensor nor a "
                    "float constant")
        float_users = [u.name for u in node.users if not is_quantize(u)]
        return f"not quantized: the result of {call}{where} is read in float by {', '.join(float_users) or 'no op'}"
    return f"not quantized: {call}{where} has no int8 rule"


@dataclass(frozen=True)
class Decision:
    """Where one compute node of the edge graph runs, and why."""

    node: str
    op: str
    npu: bool
    reason: str


@dataclass
class PlacementLog:
    """The verdict on every compute node, in graph order (the reporter of STYLE.md item 8): the partitioner
    writes it first, the CPU lowering then adds what each node it keeps becomes."""

    decisions: dict[str, Decision] = field(default_factory=dict)

    def record(self, node: Node, npu: bool, reason: str) -> None:
        self.decisions[node.name] = Decision(node.name, op_name(node), npu, reason)


@dataclass(frozen=True)
class DelegateInfo:
    """What a delegate's backend tells the lowerings after it. ExecuTorch keeps it on the lowered module
    (``meta["_delegate_info_meta"]``), out of the ``.pte``; a backend's own info extends it."""

    # Per input argument of the delegate call: 1 where the partition reads NHWC bytes (the device runtime
    # passes a channels_last tensor as it is and transposes a contiguous one), 0 where it reads the tensor's
    # bytes as they are (a contiguous tensor: the partition transposes, if it must).
    input_format_flags: tuple[int, ...]


def input_format_flags(module: LoweredBackendModule) -> tuple[int, ...]:
    """The format flag of each input argument of ``module``'s delegate call, as its backend recorded it."""
    info = (module.meta or {}).get("_delegate_info_meta")
    assert isinstance(info, DelegateInfo), f"the {module.backend_id} delegate records no DelegateInfo"
    return info.input_format_flags


__all__ = ["Decision", "DelegateInfo", "PlacementLog", "input_format_flags", "not_quantized_reason", "op_name"]
