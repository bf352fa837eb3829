"""Argument handling shared by the mllm reference kernels.

Attribute parsing, dim normalisation and shaping results to their OutSpecs
live here so that every kernel rejects bad input the same, clear way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from qlower.reference.spec import KernelError, OutSpec

# Marks an attribute that has no default and must be present.
REQUIRED: Any = object()


def inputs_of(op: str, inputs: Sequence[np.ndarray | None], required: int,
              optional: int = 0) -> list[np.ndarray | None]:
    """Checks the operand count and returns arrays, None-padded for omitted optionals."""
    n = len(inputs)
    if n < required or n > required + optional:
        want = str(required) if not optional else f"{required}..{required + optional}"
        raise KernelError(f"{op}: expected {want} inputs, got {n}")
    arrays: list[np.ndarray | None] = []
    for i, x in enumerate(inputs):
        if x is None and i < required:
            raise KernelError(f"{op}: input {i} is required but was omitted")
        arrays.append(None if x is None else np.asarray(x))
    arrays.extend([None] * (required + optional - n))
    return arrays


def real(x: np.ndarray) -> np.ndarray:
    """Source semantics are computed on real values, in float64 for headroom."""
    return np.asarray(x, dtype=np.float64)


def _get(op: str, attrs: Mapping[str, Any], name: str, default: Any) -> Any:
    value = attrs.get(name, default)
    if value is REQUIRED:
        raise KernelError(f"{op}: missing required attribute '{name}'")
    return value


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def int_attr(op: str, attrs: Mapping[str, Any], name: str, default: Any = REQUIRED) -> int:
    """An integer attribute (bools are rejected: they are almost always a mix-up)."""
    v = _get(op, attrs, name, default)
    if not _is_int(v):
        raise KernelError(f"{op}: attribute '{name}' must be an int, got {v!r}")
    return int(v)


def float_attr(op: str, attrs: Mapping[str, Any], name: str, default: Any = REQUIRED) -> float:
    """A real-valued attribute; ints are accepted."""
    v = _get(op, attrs, name, default)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise KernelError(f"{op}: attribute '{name}' must be a number, got {v!r}")
    return float(v)


def bool_attr(op: str, attrs: Mapping[str, Any], name: str, default: Any = REQUIRED) -> bool:
    """A flag; 0/1 are accepted since some IRs spell flags as ints."""
    v = _get(op, attrs, name, default)
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if _is_int(v) and int(v) in (0, 1):
        return bool(v)
    raise KernelError(f"{op}: attribute '{name}' must be a bool, got {v!r}")


def str_attr(op: str, attrs: Mapping[str, Any], name: str, default: Any = REQUIRED) -> str:
    v = _get(op, attrs, name, default)
    if not isinstance(v, str):
        raise KernelError(f"{op}: attribute '{name}' must be a string, got {v!r}")
    return v


def ints_attr(op: str, attrs: Mapping[str, Any], name: str, default: Any = REQUIRED,
              length: int | None = None, scalar_ok: bool = False) -> list[int]:
    """An int-list attribute; with `scalar_ok` a lone int is broadcast to `length`."""
    v = _get(op, attrs, name, default)
    if scalar_ok and _is_int(v) and length is not None:
        return [int(v)] * length
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if not isinstance(v, (list, tuple)) or not all(_is_int(e) for e in v):
        raise KernelError(f"{op}: attribute '{name}' must be a list of ints, got {v!r}")
    if length is not None and len(v) != length:
        raise KernelError(f"{op}: attribute '{name}' must have {length} entries, got {list(v)}")
    return [int(e) for e in v]


def norm_dim(op: str, dim: int, rank: int, name: str = "dim") -> int:
    """Maps a possibly negative dim into [0, rank) or fails."""
    if rank == 0 or not -rank <= dim < rank:
        raise KernelError(f"{op}: {name}={dim} is out of range for a rank-{rank} operand")
    return dim % rank


def indices_of(op: str, idx: np.ndarray, what: str = "indices") -> np.ndarray:
    """Index operands as int64; float operands must hold integral values."""
    if idx.dtype.kind in "iu":
        return idx.astype(np.int64)
    if idx.dtype.kind == "f" and np.all(np.isfinite(idx)) and np.all(idx == np.round(idx)):
        return idx.astype(np.int64)
    raise KernelError(f"{op}: {what} must be integers, got dtype {idx.dtype}")


def result_dtype(spec: OutSpec) -> np.dtype:
    """Integer/bool results keep their dtype; float and quantized results are real -> float32."""
    if spec.encoding is None and spec.dtype.kind in "biu":
        return spec.dtype
    return np.dtype(np.float32)


def finish(op: str, results: Sequence[np.ndarray], outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """Checks results against their declared shapes and converts them to the result dtypes.

    A shape mismatch means the op's attributes and declared result types
    disagree, which the caller needs to hear about rather than have hidden.
    """
    if len(outs) != len(results):
        raise KernelError(f"{op}: computes {len(results)} result(s) but {len(outs)} OutSpec(s) were given")
    done: list[np.ndarray] = []
    for i, (y, spec) in enumerate(zip(results, outs)):
        y = np.asarray(y)
        if spec.shape is not None and y.shape != tuple(spec.shape):
            raise KernelError(f"{op}: result {i} has shape {list(y.shape)} but is declared {list(spec.shape)}")
        done.append(y.astype(result_dtype(spec)))
    return done
