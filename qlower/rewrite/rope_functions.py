"""Registered .qpat functions that compute rotary tables at lowering time."""

from __future__ import annotations

import numpy as np

from qlower.lang.functions import Function


def _vision(grid, dims, theta=10000.0, merge=2):
    from qlower.reference.rope import vision_rope_tables

    sin, cos = vision_rope_tables(tuple(int(g) for g in grid), int(dims), float(theta), int(merge))
    return [np.asarray(sin, np.float32), np.asarray(cos, np.float32)]


def _text(positions, dims, theta=10000.0):
    from qlower.reference.rope import text_rope_tables

    sin, cos = text_rope_tables(positions, int(dims), float(theta))
    return [np.asarray(sin, np.float32), np.asarray(cos, np.float32)]


ROPE_FUNCTIONS = (
    Function("vision_rope_tables", ("list[int]", "int", "number", "int"), "list[tensor]", _vision, optional=2,
             doc="[sin, cos] for Qwen2-VL vision RoPE from a grid (t, h, w), head dim, theta, merge size"),
    Function("text_rope_tables", ("any", "int", "number"), "list[tensor]", _text, optional=1,
             doc="[sin, cos] full-width text RoPE tables for positions (an int count or a list)"),
)
