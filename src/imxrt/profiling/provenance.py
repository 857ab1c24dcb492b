"""Node provenance (``node.meta["from_node"]``): kept to what ExecuTorch reads, named reproducibly.

torch.fx records, in every node, the chain of nodes it was made from: each pass that retraces the graph
wraps the node's whole history in a new ``NodeSource``, deep-copying it. ExecuTorch reads two things of
that chain, both by following its last entries: the greatest ancestor (``DebugHandleGeneratorPass`` gives
nodes of one ancestor one debug handle) and, in Inspector, the ancestors inside the programs an ETRecord
holds. Before ``to_edge``, the history behind each node of the quantized program is cut to its greatest
ancestor (``trim_history``): debug handles and the ETRecord's ancestry stay the same, and ``to_edge``'s
dozen retraces stop copying a history that has grown with every pass of export and quantization (a tenth
of a recurrent model's compile time).

A ``graph_id`` is a Python object id: an ETRecord written as is differs on every compile.
``canonical_graph_ids`` renumbers them by first appearance, the same number wherever one id appears, so
the ancestry Inspector compares is unchanged and the file is reproducible.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.fx.traceback import NodeSource

FROM_NODE = "from_node"


def _greatest_ancestor(source: NodeSource) -> NodeSource:
    while source.from_node:
        source = source.from_node[-1]
    return source


def trim_history(graph: torch.fx.Graph) -> None:
    """Cut each node's provenance to its greatest ancestor (what its debug handle is made from)."""
    for node in graph.nodes:
        history = node.meta.get(FROM_NODE)
        if not history:
            continue
        ancestor = _greatest_ancestor(history[-1])
        root = NodeSource(None, ancestor.pass_name, ancestor.action)
        root.node_info = ancestor.node_info
        node.meta[FROM_NODE] = [root]


def _sources(graphs: Iterable[torch.fx.Graph]) -> Iterable[NodeSource]:
    """Every NodeSource of the graphs once, depth first in graph order (a deterministic order)."""
    stack: list[NodeSource] = []
    seen: set[int] = set()  # a NodeSource object may be shared by several nodes: visit it once
    for graph in graphs:
        for node in graph.nodes:
            stack.extend(reversed(node.meta.get(FROM_NODE) or []))
            while stack:
                source = stack.pop()
                if id(source) in seen:
                    continue
                seen.add(id(source))
                yield source
                stack.extend(reversed(source.from_node))


def _graphs(program) -> list[torch.fx.Graph]:
    """The graphs of an ExportedProgram, an edge program manager or a dict of them, submodules included."""
    if program is None:
        return []
    if isinstance(program, dict):
        return [graph for name in sorted(program) for graph in _graphs(program[name])]
    if hasattr(program, "exported_program") and hasattr(program, "methods"):  # an EdgeProgramManager
        return [graph for name in sorted(program.methods) for graph in _graphs(program.exported_program(name))]
    return [module.graph for module in program.graph_module.modules() if isinstance(module, torch.fx.GraphModule)]


def canonical_graph_ids(etrecord) -> None:
    """Renumber the graph ids of an ETRecord's programs (and its ``export_graph_id``) 1, 2, ... by first
    appearance, in place. Idempotent: renumbering twice gives the same numbers."""
    numbers: dict[int, int] = {}

    def number(graph_id: int) -> int:
        return numbers.setdefault(graph_id, len(numbers) + 1)

    if etrecord.export_graph_id is not None:
        etrecord.export_graph_id = number(etrecord.export_graph_id)
    programs = [etrecord.exported_program, etrecord.edge_dialect_program,
                *(etrecord.graph_map[name] for name in sorted(etrecord.graph_map or {}))]
    for source in _sources(graph for program in programs for graph in _graphs(program)):
        if source.node_info is not None:
            source.node_info.graph_id = number(source.node_info.graph_id)
        source._dict = None  # NodeSource caches its dict form, which the serializer writes
