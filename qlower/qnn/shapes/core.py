"""Shared vocabulary of the shape rules: the signature of a tensor, the error a
rule raises, and `Call`, the view of one op instance that rules read from.

Rules live in sibling modules, one family per module; each exports a constant
`RULES` table mapping QNN op type names to a function of a `Call`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np


def _shape(value: Iterable[Any]) -> tuple[int, ...]:
    return tuple(int(d) for d in value)


def _dtype(value: Any) -> str:
    return np.dtype(value).name


@attrs.frozen
class Sig:
    """Shape and numpy dtype name of one tensor: all a shape rule needs to know."""

    shape: tuple[int, ...] = attrs.field(converter=_shape)
    dtype: str = attrs.field(converter=_dtype)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


class ShapeError(Exception):
    """The inputs and params of an op do not fit together."""


REQUIRED = object()


def fmt(shape: Sequence[int]) -> str:
    """A shape as users write it: [2, 3]."""
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


@attrs.frozen
class Call:
    """One op instance as the rules see it; its helpers turn bad input into
    ShapeError messages that name the op, the input and the param."""

    op: str
    inputs: tuple[Sig | None, ...] = attrs.field(converter=tuple)
    params: Mapping[str, Any]

    def fail(self, message: str) -> ShapeError:
        return ShapeError(f"{self.op}: {message}")

    def inp(self, i: int) -> Sig:
        """Mandatory input i."""
        sig = self.opt(i)
        if sig is None:
            raise self.fail(f"input in[{i}] is required but missing")
        return sig

    def opt(self, i: int) -> Sig | None:
        """Optional input i, None when omitted."""
        return self.inputs[i] if i < len(self.inputs) else None

    def has(self, name: str) -> bool:
        return self.params.get(name) is not None

    def _get(self, name: str, default: Any) -> Any:
        value = self.params.get(name)
        if value is None:
            if default is REQUIRED:
                raise self.fail(f"param '{name}' is required but missing")
            return default
        return value

    def _array(self, name: str, default: Any) -> np.ndarray:
        try:
            arr = np.asarray(self._get(name, default))
        except (TypeError, ValueError) as exc:
            raise self.fail(f"param '{name}' is not a rectangular array of numbers") from exc
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
            raise self.fail(f"param '{name}' must be numeric, got {arr.dtype.name} values")
        return arr

    def scalar(self, name: str, default: Any = REQUIRED) -> int:
        """An integer scalar param (a 1-element array is accepted)."""
        arr = self.ints(name, default)
        if arr.size != 1:
            raise self.fail(f"param '{name}' must be a scalar, got shape {fmt(arr.shape)}")
        return int(arr.reshape(()))

    def flag(self, name: str, default: bool = False) -> bool:
        arr = self._array(name, default)
        if arr.size != 1:
            raise self.fail(f"param '{name}' must be a scalar, got shape {fmt(arr.shape)}")
        return bool(arr.reshape(()))

    def ints(self, name: str, default: Any = REQUIRED, shape: Sequence[int] | None = None) -> np.ndarray:
        """An integer tensor param as int64; with `shape`, its shape is checked."""
        arr = self._array(name, default)
        if arr.size and not np.issubdtype(arr.dtype, np.integer) and not np.issubdtype(arr.dtype, np.bool_):
            if not np.all(np.equal(np.mod(arr, 1), 0)):
                raise self.fail(f"param '{name}' must hold integers")
        arr = arr.astype(np.int64)
        if shape is not None and tuple(arr.shape) != tuple(shape):
            if arr.size == int(np.prod(shape)):
                arr = arr.reshape(shape)
            else:
                raise self.fail(f"param '{name}' must have shape {fmt(shape)}, got {fmt(arr.shape)}")
        return arr

    def axis(self, name: str, rank: int, default: Any = REQUIRED, allow_end: bool = False) -> int:
        """An axis param checked against `rank` (`allow_end`: rank itself is valid)."""
        a = self.scalar(name, default)
        hi = rank if allow_end else rank - 1
        if not 0 <= a <= hi:
            raise self.fail(f"param '{name}' = {a} is out of range for a rank-{rank} input (valid: 0..{hi})")
        return a

    def axes(self, name: str, rank: int, default: Any = REQUIRED) -> list[int]:
        """A list of distinct axes, each in [0, rank-1]."""
        values = [int(a) for a in self.ints(name, default).reshape(-1)]
        for a in values:
            if not 0 <= a < rank:
                raise self.fail(f"param '{name}' holds axis {a}, out of range for a rank-{rank} input (valid: 0..{rank - 1})")
        if len(set(values)) != len(values):
            raise self.fail(f"param '{name}' = {values} repeats an axis")
        return values

    def min_rank(self, i: int, rank: int) -> Sig:
        sig = self.inp(i)
        if sig.rank < rank:
            raise self.fail(f"in[{i}] must have rank >= {rank}, got shape {fmt(sig.shape)}")
        return sig

    def exact_rank(self, i: int, rank: int, what: str = "") -> Sig:
        sig = self.inp(i)
        if sig.rank != rank:
            layout = f" {what}" if what else ""
            raise self.fail(f"in[{i}] must have rank {rank}{layout}, got shape {fmt(sig.shape)}")
        return sig


Rule = Callable[[Call], "list[Sig] | None"]


def same(call: Call, dtype: str | None = None) -> list[Sig]:
    """Output 0 is shaped like in[0] (dtype kept unless given)."""
    x = call.inp(0)
    return [Sig(x.shape, dtype or x.dtype)]


def broadcast_shapes(call: Call, items: Sequence[tuple[str, Sequence[int]]]) -> tuple[int, ...]:
    """numpy broadcasting of labelled shapes, failing with a message that
    names the operands and the first dimension that does not fit."""
    rank = max((len(shape) for _, shape in items), default=0)
    out: list[int] = []
    for k in range(rank):
        dims = [(label, int(shape[len(shape) - rank + k])) for label, shape in items if len(shape) - rank + k >= 0]
        sizes = {d for _, d in dims if d != 1}
        if len(sizes) > 1:
            names = ", ".join(f"{label} {fmt(shape)}" for label, shape in items)
            detail = " vs ".join(f"{d} ({label})" for label, d in dims)
            raise call.fail(
                f"shapes cannot be broadcast together: {names}; "
                f"dimension {k - rank} differs: {detail}; sizes must match or be 1"
            )
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def broadcast(call: Call, indices: Sequence[int]) -> tuple[int, ...]:
    """numpy broadcasting of the given inputs."""
    return broadcast_shapes(call, [(f"in[{i}]", call.inp(i).shape) for i in indices])
