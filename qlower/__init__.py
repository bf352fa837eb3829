"""qlower: declarative lowering of model graphs to Qualcomm QNN op configs.

The public API is small: load rules, build or load a graph, lower it, save the
QNN artifacts. Everything raises `QlowerError` (with structured diagnostics)
for problems in the user's input.
"""

from qlower.api import BACKENDS, LowerResult, Rules, load_registry, load_rules, lower, rules_from_text
from qlower.diagnostics import Diagnostic, QlowerError, Severity, Span
from qlower.graph import Graph, Op, Quant, Value
from qlower.graph.io import load_graph, save_graph

__version__ = "0.1.0"

__all__ = [
    "BACKENDS", "Diagnostic", "Graph", "LowerResult", "Op", "QlowerError", "Quant", "Rules", "Severity", "Span",
    "Value", "load_graph", "load_registry", "load_rules", "lower", "rules_from_text", "save_graph",
]
