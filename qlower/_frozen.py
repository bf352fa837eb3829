"""Frozen: a read-only numpy array that stands where a tuple of Python numbers used to.

Encodings (`qlower.graph.types.Quant`, `qlower.qnn.model.QuantEncoding`) hold one scale and offset
per channel, and block (LPBQ) encodings one scale per block: tens of millions of numbers on a 4-bit
LLM. As tuples of Python floats and ints they cost 24-32 bytes each plus the work of building them
one at a time; a `Frozen` keeps them as one float64/int64 array that nobody can write to.

It behaves like the tuple it replaces wherever the code base used one: `len`, truth, iteration and
indexing give Python numbers (a 2-D one gives its rows as tuples), slicing gives a `Frozen`,
`np.asarray` gives the read-only array without a copy, and it pickles. Two `Frozen` are equal when
they have the same dtype, shape and bytes, which is how `qlower.qnn.keys` keys numbers (floats by their
IEEE bits: -0.0 and 0.0 differ, a NaN equals the same NaN; integers by value, whatever their width),
and the hash follows the same rule.
Compared with a tuple or list it compares by value, as a tuple would (`Frozen` and tuple hashes differ,
so do not mix them as keys of one dict).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

_F8, _I8 = np.dtype(np.float64), np.dtype(np.int64)
_SAMPLE = 4096  # elements a hash reads


class Frozen(Sequence):
    """A read-only float64 or integer array, 1-D (or 2-D for block scales), with tuple behaviour."""

    __slots__ = ("array", "_hash")

    def __init__(self, array: np.ndarray) -> None:
        """`array` is taken as it is; use `frozen_floats`/`frozen_ints`/`frozen_rows` to convert."""
        if array.flags.writeable:
            array.flags.writeable = False
        self.array = array
        self._hash: int | None = None

    # -- the tuple protocol
    def __len__(self) -> int:
        return len(self.array)

    def __iter__(self) -> Iterator[Any]:
        a = self.array
        return iter(a.tolist()) if a.ndim == 1 else map(tuple, a.tolist())

    def __getitem__(self, i: Any) -> Any:
        if type(i) is slice:
            return Frozen(self.array[i])
        a = self.array
        return a[i].item() if a.ndim == 1 else tuple(a[i].tolist())

    def __reversed__(self) -> Iterator[Any]:
        return iter(self[::-1])

    def __contains__(self, x: Any) -> bool:
        return any(v == x for v in self)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """The numbers as float64 or int64 (as from the tuple), or as `dtype`; no copy when the
        stored array is that already (`.array` is the stored one, integers perhaps narrower)."""
        a = self.array
        want = np.dtype(dtype) if dtype is not None else (_I8 if a.dtype.kind in "iu" else a.dtype)
        if want != a.dtype:
            return a.astype(want)
        return a.copy() if copy else a

    def tolist(self) -> list:
        return self.array.tolist()

    # -- value semantics
    def _bits(self) -> np.ndarray:
        """What equality compares: floats' bit patterns, integers as they are."""
        a = self.array
        return a.view(np.uint64) if a.dtype.kind == "f" else a

    def __eq__(self, other: Any) -> bool:
        if other is self:
            return True
        if type(other) is Frozen:
            a, b = self.array, other.array
            if (a.dtype.kind == "f") != (b.dtype.kind == "f") or a.shape != b.shape or hash(self) != hash(other):
                return False
            return bool(np.array_equal(self._bits(), other._bits()))
        if type(other) is tuple or type(other) is list:
            return (tuple(self) == tuple(other)) if len(other) == len(self) else False
        return NotImplemented

    def __ne__(self, other: Any) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            flat = self.array.reshape(-1)
            # at most _SAMPLE evenly spaced elements: equal arrays hash alike, unequal ones nearly always
            # apart, and a block encoding of millions of scales is hashed without reading them all
            sample = flat[::-(-flat.size // _SAMPLE)] if flat.size > _SAMPLE else flat
            kind = "f" if sample.dtype.kind == "f" else "i"  # integers of any width alike, by value
            h = self._hash = hash((kind, self.array.shape, sample.astype(_F8 if kind == "f" else _I8).tobytes()))
        return h

    def __repr__(self) -> str:
        return repr(tuple(self))

    # -- immutable: copies are the object itself; pickles as a read-only array again
    def __copy__(self) -> Frozen:
        return self

    def __deepcopy__(self, memo: Any) -> Frozen:
        return self

    def __reduce__(self) -> tuple:
        return Frozen, (np.array(self.array),)


def _frozen(v: Any, dtype: np.dtype, ndim: int) -> Frozen:
    src = v.array if type(v) is Frozen else v
    if dtype is _I8 and isinstance(src, np.ndarray) and src.dtype.kind in "iu" and src.dtype != np.uint64:
        dtype = src.dtype  # integers keep their width (an int8 zero point per block stays one byte)
    if type(v) is Frozen and v.array.dtype == dtype and v.array.ndim == ndim:
        return v
    a = np.asarray(src, dtype=dtype)
    a = np.atleast_1d(a).ravel() if ndim == 1 else a
    if isinstance(src, np.ndarray) and src.flags.writeable and np.shares_memory(a, src):
        a = a.copy()  # the caller's array stays theirs to write
    return Frozen(a)


def frozen_floats(v: Any) -> Frozen:
    """Any number, sequence or array of numbers as a flat read-only float64 `Frozen`."""
    return _frozen(v, _F8, 1)


def frozen_ints(v: Any) -> Frozen:
    """Any integer, sequence or array of integers as a flat read-only `Frozen`: int64 (OverflowError
    for a value outside int64), or an integer array's own dtype (uint64: int64)."""
    return _frozen(v, _I8, 1)


def frozen_rows(v: Any) -> Frozen | tuple[tuple[Any, ...], ...]:
    """Rows of integers (a 2-D array or a sequence of equally long sequences) as a 2-D `Frozen` (int64,
    or an integer array's own dtype); ragged or out-of-range rows are kept as a tuple of tuples, for
    validation to report."""
    src = v.array if type(v) is Frozen else v
    keep = isinstance(src, np.ndarray) and src.dtype.kind in "iu" and src.dtype != np.uint64
    if type(v) is Frozen and v.array.ndim == 2 and keep:
        return v
    try:
        a = np.asarray(src, dtype=src.dtype if keep else _I8)
    except (ValueError, OverflowError, TypeError):
        a = None
    if a is None or a.ndim != 2:
        return tuple(tuple(r) for r in v)
    if isinstance(v, np.ndarray) and v.flags.writeable and np.shares_memory(a, v):
        a = a.copy()
    return Frozen(a)
