"""An example plugin: the `toy` dialect, lowered by its own rule pack."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from qlower.plugins import Plugin
from qlower.rewrite.functions import Function


def _scale_add(inputs, attrs, outs):
    x, y = inputs
    return [(np.asarray(x, np.float32) * float(attrs.get("alpha", 1.0)) + y).astype(np.float32)]


def _double(inputs, attrs, outs):
    return [(np.asarray(inputs[0], np.float32) * 2).astype(np.float32)]


def plugin() -> Plugin:
    return Plugin(
        name="toy",
        version="0.1.0",
        rule_packs={"toy": Path(__file__).parent / "rules"},
        functions=(Function("toy_half", ("number",), "float", lambda x: float(x) / 2, doc="x / 2"),),
        kernels={"toy": {"ScaleAdd": _scale_add, "Double": _double}},
    )
