"""The graph IR: ops and values over networkx, JSON I/O and well-formedness checks."""

from qlower.graph.core import Graph, GraphError, Op, Provenance, Value
from qlower.graph.types import Quant

__all__ = ["Graph", "GraphError", "Op", "Provenance", "Quant", "Value"]
