"""The roles file (`roles.json`: which operands of which ops are weights, biases, tables, ...) and
what is read from it about a graph, for calibration and the rewrite both."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from qlower.graph.core import Graph, Op


@cache
def roles() -> dict[str, Any]:
    return json.loads(resources.files("qlower.quantize").joinpath("roles.json").read_text())


def axis_of(spec: Any, op: Op) -> int:
    """An axis the roles file gives as a number, or as {"attr", "if", "else", "default"}: the first
    value when the op's attribute is true."""
    if isinstance(spec, dict):
        on = bool(op.attrs.get(spec["attr"], spec["default"]))
        return int(spec["if"] if on else spec["else"])
    return int(spec)


def softmax_axis(op: Any) -> int | None:
    """The axis of a softmax op (the roles file's `softmax`), non-negative; None for other ops."""
    spec = roles()["softmax"].get(op.type)
    x = op.operands[0] if spec is not None and op.operands else None
    if x is None or x.shape is None or not x.shape:
        return None
    axis = int(op.attrs.get(spec["attr"], spec["default"]))
    return axis % len(x.shape) if -len(x.shape) <= axis < len(x.shape) else None


def softmax_rows(graph: Graph) -> dict[int, int]:
    """id → softmax axis of every non-constant value whose every reader is a softmax along that one
    axis: the values whose encodings may drop what weighs nothing in any row (see `RangeObserver.update_rows`)."""
    out = {}
    for v in graph.values:
        if v.is_const or not v.users or v.is_output:
            continue
        axes = {softmax_axis(op) if i == 0 else None for op, i in v.users}
        if len(axes) == 1 and None not in axes:
            out[id(v)] = axes.pop()
    return out
