"""qlower: declarative lowering of model graphs to Qualcomm QNN op configs.

The public API is small: load rules, build or load a graph, lower it, save the
QNN artifacts. Everything raises `QlowerError` (with structured diagnostics)
for problems in the user's input.

The names below are imported on first use, so that a part of qlower that needs
little (the language server's first answer, `qlower --version`) does not pay
for numpy, lark and the op registry at start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "BACKENDS": "qlower.api", "LowerResult": "qlower.api", "Rules": "qlower.api", "load_registry": "qlower.api",
    "load_rules": "qlower.api", "lower": "qlower.api", "rules_from_text": "qlower.api",
    "Diagnostic": "qlower.diagnostics", "QlowerError": "qlower.diagnostics", "Severity": "qlower.diagnostics",
    "Span": "qlower.diagnostics",
    "Graph": "qlower.graph", "Op": "qlower.graph", "Quant": "qlower.graph", "Value": "qlower.graph",
    "load_graph": "qlower.graph.io", "save_graph": "qlower.graph.io",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from qlower.api import BACKENDS, LowerResult, Rules, load_registry, load_rules, lower, rules_from_text
    from qlower.diagnostics import Diagnostic, QlowerError, Severity, Span
    from qlower.graph import Graph, Op, Quant, Value
    from qlower.graph.io import load_graph, save_graph


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:  # a subpackage, as `qlower.api.load_model` reaches it after a bare `import qlower`
        try:
            return importlib.import_module(f"qlower.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"qlower.{name}":
                raise
            raise AttributeError(f"module 'qlower' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later reads are plain attribute lookups
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
