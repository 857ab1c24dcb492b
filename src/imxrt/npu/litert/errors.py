"""The one error of the LiteRT lowering: an edge node no converter can express."""

from __future__ import annotations

from torch.fx import Node

from imxrt.errors import ImxrtError


class UnsupportedForLiteRT(ImxrtError):
    """A partition holds a node the LiteRT lowering cannot convert.

    The partitioner should not have delegated it, so this is a compiler bug; the message names the node,
    its op and what is wrong, so the capability table can be fixed.
    """

    def __init__(self, node: Node, problem: str):
        op = getattr(node.target, "__name__", str(node.target))
        super().__init__(f"LiteRT lowering: node {node.name} ({op}): {problem}")
        self.node_name = node.name
        self.problem = problem
