"""A snapshot of the source graph, taken before lowering rewrites it in place.

The report draws the graph the user gave, so the names and edges are copied
out first (a few strings per op: cheap next to lowering itself).
"""

from __future__ import annotations

import attrs

from qlower.graph.core import Graph, GraphError


@attrs.frozen
class SourceNode:
    name: str
    type: str
    inputs: tuple[str, ...]  # value names (absent optional operands left out)
    outputs: tuple[str, ...]
    shapes: tuple[tuple[int, ...] | None, ...]  # of the outputs


@attrs.frozen
class SourceGraph:
    name: str
    nodes: tuple[SourceNode, ...]  # in topological order
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    constants: frozenset[str]  # value names holding constant data (weights): not drawn as edges' sources


def snapshot(graph: Graph) -> SourceGraph:
    """Copy the names, types and edges of `graph` (call before `qlower.lower`)."""
    try:
        order = graph.topo_order()
    except GraphError:  # a cycle: lowering reports it; draw the ops as stored
        order = list(graph.ops)
    nodes = tuple(SourceNode(op.name, op.type, tuple(v.name for v in op.operands if v is not None),
                             tuple(v.name for v in op.results), tuple(v.shape for v in op.results))
                  for op in order)
    consts = frozenset(v.name for v in graph.values if v.is_const)
    return SourceGraph(graph.name, nodes, tuple(v.name for v in graph.inputs), tuple(v.name for v in graph.outputs),
                       consts)
