"""Rotary position embedding mllm ops: VisionRoPE (half-width tables) and RoPE.

Both take the sin/cos tables as operands (see qlower.reference.rope for how
they are computed); x is BSHD and the tables broadcast over batch and heads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from qlower.reference.mllm._common import finish, float_attr, inputs_of, int_attr, real
from qlower.reference.spec import KernelError, Kernel, OutSpec

_Inputs = Sequence["np.ndarray | None"]
_Attrs = Mapping[str, Any]


def _bshd_and_tables(op: str, inputs: _Inputs, width: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x [B, S, H, D] with even D, and sin/cos [S, D/2] or [S, D] per `width`."""
    x, sin, cos = (real(v) for v in inputs_of(op, inputs, 3))
    if x.ndim != 4 or x.shape[-1] % 2:
        raise KernelError(f"{op}: x must be BSHD [B, S, H, D] with even D, got {list(x.shape)}")
    s, d = x.shape[1], x.shape[3]
    want = (s, d // 2) if width == "half" else (s, d)
    for name, t in (("sin", sin), ("cos", cos)):
        if t.shape != want:
            raise KernelError(f"{op}: {name} table must be {list(want)} for x {list(x.shape)}, "
                              f"got {list(t.shape)}")
    # [S, W] -> [1, S, 1, W]: broadcast over batch and heads.
    return x, sin[None, :, None, :], cos[None, :, None, :]


def vision_rope(inputs: _Inputs, attrs: _Attrs, outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """VisionRoPE(x, sin, cos) {dims, theta, spatial_merge_size}.

    With a = x[..., :D/2] and b = x[..., D/2:]:
    y = concat(a*cos - b*sin, a*sin + b*cos). `dims` must equal D; theta and
    spatial_merge_size only describe how the table operands were made and are
    checked for sanity, not used.
    """
    if len(inputs) == 1 or (len(inputs) == 3 and inputs[1] is None and inputs[2] is None):
        inputs = _static_tables(inputs[0], attrs)
    x, sin, cos = _bshd_and_tables("VisionRoPE", inputs, "half")
    dims = int_attr("VisionRoPE", attrs, "dims")
    if dims != x.shape[-1]:
        raise KernelError(f"VisionRoPE: dims={dims} but x's head_dim is {x.shape[-1]}")
    if float_attr("VisionRoPE", attrs, "theta", 10000.0) <= 0:
        raise KernelError("VisionRoPE: theta must be positive")
    if int_attr("VisionRoPE", attrs, "spatial_merge_size", 2) < 1:
        raise KernelError("VisionRoPE: spatial_merge_size must be >= 1")
    half = dims // 2
    a, b = x[..., :half], x[..., half:]
    y = np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
    return finish("VisionRoPE", [y], outs)


def _static_tables(x: "np.ndarray", attrs: _Attrs) -> list:
    """The static form: sin/cos computed from the `grid` (t, h, w) attribute."""
    from qlower.reference.rope import vision_rope_tables

    grid = attrs.get("grid") or []
    if len(grid) != 3:
        raise KernelError("VisionRoPE: without sin/cos operands the `grid` attribute (t, h, w) is required")
    sin, cos = vision_rope_tables(tuple(int(g) for g in grid), int_attr("VisionRoPE", attrs, "dims"),
                                  float_attr("VisionRoPE", attrs, "theta", 10000.0),
                                  int_attr("VisionRoPE", attrs, "spatial_merge_size", 2))
    return [x, sin, cos]


def rope(inputs: _Inputs, attrs: _Attrs, outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """RoPE(x, sin, cos): y = x*cos + rotate_half(x)*sin with full-width [S, D] tables."""
    x, sin, cos = _bshd_and_tables("RoPE", inputs, "full")
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return finish("RoPE", [x * cos + rotated * sin], outs)


KERNELS: Mapping[str, Kernel] = MappingProxyType({
    "VisionRoPE": vision_rope,
    "RoPE": rope,
})
