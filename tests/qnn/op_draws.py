"""Hypothesis draws of one QNN op instance (input arrays and params) from its OpDef.

Used by the shape/kernel agreement test and the bigger sweep in bench/. The
draws only follow the OpDef (input count, fixed ranks and datatypes, param
ranks, enums) plus a few param names whose meaning is fixed across QNN
(`axis`, `axes`, `perm`, `stride`, ...): most draws of ops with several
related operands are rejected by the shape rule, which is what keeps a draw
honest — a case counts only when the shape rule accepts it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from qlower.qnn.datatypes import DataType, to_numpy
from qlower.qnn.opdef import IODef, OpDef, ParamDef

DIMS = st.integers(1, 3)


def _np_dtype(io: IODef) -> np.dtype:
    floats = [d for d in io.datatypes if d in (DataType.FLOAT_32,)]
    if not io.datatypes or floats:
        return np.dtype(np.float32)
    try:
        return to_numpy(io.datatypes[0])
    except (KeyError, ValueError):
        return np.dtype(np.float32)


@st.composite
def _shape_like(draw: st.DrawFn, base: tuple[int, ...], ndim: int | None) -> tuple[int, ...]:
    """A shape related to `base`: itself, a suffix, a broadcastable copy, or a fresh one."""
    rank = ndim if ndim is not None else draw(st.integers(max(0, len(base) - 2), len(base)))
    suffix = tuple(base[-rank:]) if rank and rank <= len(base) else None
    kind = draw(st.sampled_from(["same", "ones", "fresh"]))
    if kind == "fresh" or suffix is None:
        return tuple(draw(st.lists(DIMS, min_size=rank, max_size=rank)))
    if kind == "ones":
        return tuple(1 if draw(st.booleans()) else d for d in suffix)
    return suffix


def _array(draw: st.DrawFn, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    if dtype.kind in "iu":  # indices: 0 is in range of every non-empty axis
        return np.zeros(shape, dtype)
    if dtype.kind == "b":
        seed = draw(st.integers(0, 2**16))
        return np.random.default_rng(seed).random(shape) < 0.5
    seed = draw(st.integers(0, 2**16))
    return np.random.default_rng(seed).uniform(0.1, 1.0, shape).astype(dtype)


def _param(draw: st.DrawFn, p: ParamDef, rank0: int) -> Any:
    name = p.name.lower()
    dt = p.datatype
    spatial = max(rank0 - 2, 1)
    if p.enum:
        return draw(st.integers(0, len(p.enum) - 1))
    if dt == DataType.BOOL_8:
        return draw(st.booleans())
    if dt is not None and dt in (DataType.FLOAT_32, DataType.FLOAT_16):
        if p.is_scalar:
            return draw(st.sampled_from([0.5, 1.0, 2.0]))
        return np.ones(draw(st.integers(1, 3)), np.float32)
    if name == "axis" and p.is_scalar:
        return draw(st.integers(0, max(rank0 - 1, 0)))
    if name == "axes":
        axes = draw(st.lists(st.integers(0, max(rank0 - 1, 0)), min_size=1, max_size=max(rank0, 1), unique=True))
        return np.array(sorted(axes), np.uint32)
    if name == "perm":
        return np.array(draw(st.permutations(range(rank0))), np.uint32)
    if p.ndim == 2 and "pad" in name:
        return np.array(draw(st.lists(st.lists(st.integers(0, 1), min_size=2, max_size=2),
                                      min_size=spatial, max_size=spatial)), np.uint32).reshape(spatial, 2)
    if p.ndim == 2 and name == "ranges":
        return np.array([[0, d, 1] for d in draw(st.lists(st.integers(1, 3), min_size=rank0, max_size=rank0))],
                        np.int32).reshape(rank0, 3)
    if p.ndim == 1:
        if name in ("stride", "dilation", "filter_size", "block_size", "size"):
            return np.ones(spatial, np.uint32) * draw(st.integers(1, 2))
        return np.array(draw(st.lists(st.integers(0, 2), min_size=1, max_size=max(rank0, 1))), np.uint32)
    if p.ndim == 2:
        return np.zeros((max(rank0, 1), 2), np.uint32)
    if p.is_scalar:
        lo = -1 if dt in (DataType.INT_32, DataType.INT_64) else 0
        return draw(st.integers(lo, 3))
    return None


@st.composite
def op_case(draw: st.DrawFn, opdef: OpDef) -> tuple[list[np.ndarray | None], dict[str, Any]]:
    """Input arrays (None for an omitted optional input) and params of one `opdef` instance."""
    first = opdef.inputs[0] if opdef.inputs else None
    rank0 = first.ndim if first is not None and first.ndim is not None else draw(st.integers(1, 4))
    base = tuple(draw(st.lists(DIMS, min_size=rank0, max_size=rank0)))
    inputs: list[np.ndarray | None] = []
    for i, io in enumerate(opdef.inputs):
        if not io.mandatory and not draw(st.booleans()):
            break  # optional inputs are a prefix: stop at the first one left out
        count = draw(st.integers(1, 3)) if io.repeated else 1
        for _ in range(count):
            shape = base if i == 0 else draw(_shape_like(base, io.ndim))
            inputs.append(_array(draw, shape, _np_dtype(io)))
    params: dict[str, Any] = {}
    for p in opdef.params:
        if not p.mandatory and draw(st.booleans()):
            continue  # keep the QNN default
        value = _param(draw, p, rank0)
        if value is not None:
            params[p.name] = value
    return inputs, params


def _kind(dtype: Any) -> str:
    kind = np.dtype(dtype).kind
    return {"b": "bool", "i": "int", "u": "int", "f": "float"}.get(kind, kind)


def disagreement(entry: Any, inputs: list[np.ndarray | None], params: dict[str, Any]) -> str | None:
    """Why shape inference and the kernel of `entry` disagree on this case; None if they agree or
    the shape rule rejects the case (or leaves the shape to the output tensor)."""
    from qlower.qnn.model import EncodingKind, QuantEncoding
    from qlower.qnn.shapes import ShapeError, Sig
    from qlower.reference.spec import KernelError, OutSpec

    sigs = [None if a is None else Sig(a.shape, a.dtype) for a in inputs]
    try:
        inferred = entry.infer(sigs, params)
    except ShapeError:
        return None
    if inferred is None:
        return None
    outs = [OutSpec(None, s.dtype) for s in inferred]
    try:
        if entry.raw_io:
            # Quantize/Dequantize/Convert/Cast move between stored and real values: integer
            # tensors get an encoding, and the output dtype is the caller's to state (see
            # qnn.shapes), so only shapes are compared for them.
            enc = QuantEncoding(EncodingKind.SCALE_OFFSET, (0.1,), (0,))
            specs = [None if a is None else OutSpec(a.shape, a.dtype, enc if a.dtype.kind in "iu" else None)
                     for a in inputs]
            outs = [OutSpec(None, np.uint8, enc) if entry.name == "Quantize" else
                    OutSpec(None, s.dtype, enc if np.dtype(s.dtype).kind in "iu" else None) for s in inferred]
            got = entry.kernel(inputs, params, outs, in_specs=specs)
        else:
            got = entry.kernel(inputs, params, outs)
    except KernelError as exc:
        if "reference kernel" in str(exc):  # a mode the kernel does not implement: a gap, not a disagreement
            return None
        return f"shape rule accepts, kernel refuses ({exc}); rule says {inferred}"
    except (ValueError, IndexError, TypeError) as exc:
        return f"shape rule accepts, kernel fails ({type(exc).__name__}: {exc}); rule says {inferred}"
    if len(got) != len(inferred):
        return f"{len(inferred)} outputs inferred, kernel gives {len(got)}"
    for i, (sig, arr) in enumerate(zip(inferred, got)):
        arr = np.asarray(arr)
        if tuple(sig.shape) != arr.shape:
            return f"out[{i}]: shape rule {tuple(sig.shape)}, kernel {arr.shape}"
        if not entry.raw_io and _kind(sig.dtype) != _kind(arr.dtype):
            return f"out[{i}]: shape rule dtype {sig.dtype}, kernel {arr.dtype}"
    return None
