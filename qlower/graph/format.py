"""What a `qlower-graph/1` file may contain: the format tag and the checks shared by loading and saving."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from qlower.graph.types import Quant

FORMAT = "qlower-graph/1"


def _is_num(x: Any) -> bool:
    return type(x) is float or type(x) is int  # bool is excluded: its type is bool, not int


_NUM_TYPES = frozenset({int, float})
_INT_TYPES = frozenset({int})


def _all_of(xs: list, types: frozenset) -> bool:
    """Every element's exact type in `types` (one C-level pass: block encodings list millions)."""
    return types.issuperset(map(type, xs))


_PLAIN = frozenset({int, float, str, bool, type(None)})


def _plain_list(v: Any) -> bool:
    """A JSON list of scalars and lists (no objects), as attributes allow."""
    return type(v) is list and all(type(x) in _PLAIN or _plain_list(x) for x in v)


def _inline_array(d: Any, dtype: np.dtype) -> tuple[np.ndarray | None, str]:
    """Inline data as an array of `dtype`, refusing lossy conversions."""
    try:
        raw = np.array(d)
    except (ValueError, TypeError, OverflowError):
        return None, "data must be a rectangular nested list of numbers"
    kind, want = raw.dtype.kind, dtype.kind
    if raw.size and want in "iu":
        # mixed huge and small ints infer float64, so fall back to the exact Python values
        if kind in "iu" or (kind == "f" and all(type(x) is int for x in _leaves(d))):
            info = np.iinfo(dtype)
            try:
                return np.array(d, dtype=dtype), ""
            except OverflowError:
                bad = next(x for x in _leaves(d) if not info.min <= x <= info.max)
                return None, f"data value {bad} is out of range for {dtype}"
        return None, f"data for dtype {dtype} must hold integers"
    if raw.size and not (kind == "b" if want == "b" else kind in "iuf"):
        return None, f"data for dtype {dtype} must hold {'true/false' if want == 'b' else 'numbers'}"
    with np.errstate(over="ignore"):
        arr = raw.astype(dtype)
    if want == "f" and raw.size and not np.array_equal(np.isfinite(arr), np.isfinite(raw)):
        return None, f"data holds a value out of range for {dtype}"
    return arr, ""


def _leaves(d: Any) -> Iterator[Any]:
    if type(d) is list:
        for x in d:
            yield from _leaves(x)
    else:
        yield d


def _quant_json_problems(q: dict) -> list[tuple[str, str]]:
    """JSON-level type checks of a quant object (before it becomes a `Quant`)."""
    out = []
    axis, scale, zp = q.get("axis"), q["scale"], q.get("zero_point")
    if axis is None:
        if not _is_num(scale):
            out.append(("bad-quant", "per-tensor \"scale\" must be a number (lists need \"axis\")"))
        if zp is not None and type(zp) is not int:
            out.append(("bad-quant", "per-tensor \"zero_point\" must be an integer"))
    else:
        if type(scale) is not np.ndarray and (type(scale) is not list or not _all_of(scale, _NUM_TYPES)):
            out.append(("bad-quant", "per-axis \"scale\" must be a list of numbers"))
        if zp is not None and type(zp) is not np.ndarray and (type(zp) is not list or not _all_of(zp, _INT_TYPES)):
            out.append(("bad-quant", "per-axis \"zero_point\" must be a list of integers"))
    for k in ("axis", "bitwidth", "block_size", "block_axis"):
        if k in q and type(q[k]) is not int:
            out.append(("bad-quant", f"\"{k}\" must be an integer"))
    if type(q.get("symmetric", False)) is not bool:
        out.append(("bad-quant", "\"symmetric\" must be true or false"))
    return out


def quant_problems(q: Quant, dtype: np.dtype, shape: Any) -> list[tuple[str, str]]:
    """What is wrong with an encoding on a tensor of `dtype`/`shape`, as (code, message) pairs."""
    out: list[tuple[str, str]] = []
    rank = None if shape is None else len(shape)
    if len(q.scale) != len(q.zero_point):
        out.append(("quant-length", f"quant has {len(q.scale)} scales but {len(q.zero_point)} zero points"))
    if q.axis is None:
        if q.block_size is not None or q.block_axis is not None:
            out.append(("bad-quant", "block quantization needs \"axis\" (the channel axis)"))
        elif len(q.scale) != 1:
            out.append(("quant-length", f"per-tensor quant needs one scale, not {len(q.scale)}"))
    elif q.axis < 0 or (rank is not None and q.axis >= rank):
        out.append(("bad-quant", f"quant axis {q.axis} is out of range for rank {rank}" if rank is not None
                    else f"quant axis {q.axis} must be non-negative"))
    elif (q.block_size is None) != (q.block_axis is None):
        out.append(("bad-quant", "block quantization needs both \"block_size\" and \"block_axis\""))
    elif q.block_size is not None and (q.block_size <= 0 or q.block_axis == q.axis or q.block_axis < 0
                                       or (rank is not None and q.block_axis >= rank)):
        out.append(("bad-quant", "\"block_size\" must be positive and \"block_axis\" a dimension other than "
                                 "\"axis\""))
    elif shape is not None:
        want = shape[q.axis]
        what = f"{want} (dimension {q.axis})"
        if q.block_size is not None:
            blocks = -(-shape[q.block_axis] // q.block_size)
            want, what = want * blocks, f"{want * blocks} ({shape[q.axis]} channels × {blocks} blocks)"
        if len(q.scale) != want:
            out.append(("quant-length", f"quant has {len(q.scale)} scales; shape {list(shape)} needs {what}"))
    scales = np.asarray(q.scale, dtype=np.float64)
    bad_scale = np.flatnonzero(~((scales > 0) & np.isfinite(scales)))
    if bad_scale.size:
        i = int(bad_scale[0])
        out.append(("bad-scale", f"quant scale{f' {i}' if q.axis is not None else ''} is {q.scale[i]}; "
                                 "scales must be positive and finite"))
    bits = dtype.itemsize * 8
    if q.bitwidth is not None and not 1 <= q.bitwidth <= bits:
        out.append(("bad-quant", f"quant bitwidth {q.bitwidth} does not fit dtype {dtype}"))
    elif dtype.kind in "iu":
        b = q.bitwidth or bits
        lo, hi = (0, 2**b - 1) if dtype.kind == "u" else (-(2 ** (b - 1)), 2 ** (b - 1) - 1)
        zps = q.zero_point.array  # (any integer width: numpy compares it with Python ints exactly)
        bad = zps[(zps < lo) | (zps > hi)].tolist()
        if bad:
            out.append(("bad-quant", f"zero point {bad[0]} is outside [{lo}, {hi}] for {b}-bit {dtype}"))
    return out


# -------------------------------------------------------------------- npz
