"""The expression language's standard library: every built-in function in one table."""

from __future__ import annotations

from qlower.lang.backend import BACKEND_FUNCTION
from qlower.lang.functions import _BUILTINS, FunctionTable
from qlower.lang.functions_limit import LIMIT_FUNCTIONS
from qlower.lang.functions_shape import SHAPE_FUNCTIONS
from qlower.lang.functions_spatial import SPATIAL_FUNCTIONS


def builtin_functions() -> FunctionTable:
    """A fresh table of the built-ins; plugins `extend` it."""
    return FunctionTable({f.name: f for f in _BUILTINS + SHAPE_FUNCTIONS + LIMIT_FUNCTIONS + SPATIAL_FUNCTIONS
                                           + (BACKEND_FUNCTION,)})
