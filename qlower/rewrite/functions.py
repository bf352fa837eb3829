"""Where plugins have imported `Function` from: the types now live in qlower.lang.functions.

Kept as a re-export for one release so plugin code keeps working.
"""

from __future__ import annotations

from qlower.lang.builtins import builtin_functions
from qlower.lang.functions import EvalError, Function, FunctionTable, RangeEncoding

__all__ = ["EvalError", "Function", "FunctionTable", "RangeEncoding", "builtin_functions"]
