"""The user's names for the compiler's ops: the PyTorch module each op came from.

torch.export records, on every node it traces, the stack of modules whose ``forward`` was running
(``nn_module_stack``: ``{key: (path, class)}``, outermost first); the passes, ``to_edge`` and the CPU lowering
carry it over. An op is named by the innermost entry: ``features.3.conv.1 (Conv2d)``, the name the user
wrote. An op of the top-level ``forward`` itself has the path ``""`` and the model's class, and is shown as
``MobileNetV2.forward``. Quantize and
dequantize nodes ``torch.export`` made at the model's boundary have only its wrapper, and no module.
"""

from __future__ import annotations

from torch.fx import Node


def module_of(node: Node) -> dict:
    """``{"module": path, "module_type": class name}`` of the innermost module ``node`` came from, or ``{}``."""
    stack = node.meta.get("nn_module_stack") or {}
    for path, qualified in reversed(list(stack.values())):
        qualified = qualified if isinstance(qualified, str) else getattr(qualified, "__qualname__", str(qualified))
        if "<locals>" in qualified:  # torch.export's own wrapper around the model, not a user module
            continue
        return {"module": path, "module_type": qualified.rsplit(".", 1)[-1]}
    return {}


def module_paths(node: Node) -> list[str]:
    """The paths of every module whose ``forward`` was running when ``node`` was traced, outermost first
    (``""``: the model's own forward); none for a node that is not a call."""
    stack = node.meta.get("nn_module_stack") if node.op == "call_function" else None
    return [path for path, _ in stack.values()] if stack else []


def label(op: dict) -> str:
    """How a report row is shown: ``features.3.conv.1 (Conv2d)``, ``MobileNetV2.forward`` for the model's own
    forward, else the op's node name."""
    if op.get("module_type") is None:
        return str(op["name"])
    return f"{op['module']} ({op['module_type']})" if op["module"] else f"{op['module_type']}.forward"
