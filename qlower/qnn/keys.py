"""Hashable keys for the QNN IR: the one place that decides when two values, tensors, params or ops are one.

Conversion interns tensor and op kinds by these keys (`qlower.qnn.table`), the writers cache a
param's text by them, validation memoises findings and shape inference by them, and the rewrite
memo decides one op per key (`qlower.rewrite.memo`). Sharing is only sound when everything an
artifact writes of the things is the same, so a key tells apart whatever writes differently, even
when Python calls the values equal:

- a float by its IEEE-754 bytes (`float_bits`): -0.0 and 0.0 are two keys (they are written
  `-0.0` and `0.0`), and each NaN bit pattern is one key (as a dict key a NaN is unequal to itself,
  which would give every NaN-valued op a kind of its own);
- a scalar with its type: `True`, `1` and `1.0` are equal dict keys but are written `true`, `1` and
  `1.0`, so they are three keys;
- a numpy scalar or array by dtype, shape and bytes.

A value no rule here covers (an object array, a lazily read array, any other object) has `NO_KEY`:
what holds it is never shared. Keys are on the hot path (every op of a million-op graph gets one),
so the common shapes are keyed with little more than a tuple: `attrs_key` and `values_key` are the
loop and the C-level form of the same rule, for attribute dicts and for tuples of attributes.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from struct import Struct
from typing import Any, Final

import numpy as np

from qlower.qnn.datatypes import DataType
from qlower.qnn.model import Param, QnnTensor, QuantEncoding, ScalarParam, TensorParam, TensorType


class _NoKey:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_KEY"


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


NO_KEY: Final[Any] = _NoKey()  # the key of what cannot be keyed: never share what holds it
MISSING: Final[Any] = _Missing()  # an attribute an op does not have (`values_key`): a key of its own

# The float rule: a float's key is its 8 IEEE-754 bytes (-0.0 is not 0.0; a NaN is its bit pattern).
float_bits: Final = Struct("<d").pack

_PLAIN: Final = frozenset({bool, int, str, bytes, type(None), _Missing})  # keyed as themselves, with their type
_PLAIN_OR_FLOAT: Final = _PLAIN | {float}


def _dtype_key(dt: np.dtype) -> Hashable:
    """A dtype as a key: its string (a dtype object compares equal to `float`, `int`, "float32", ...)."""
    return dt.str if dt.names is None else (dt.str, str(dt))


def scalar_key(v: Any) -> Hashable:
    """`(type, value)` of a bool, int, str, bytes or None; `(float, bits)`; `(np.generic, dtype, bytes)` of
    a numpy scalar; else NO_KEY."""
    tv = type(v)
    if tv is float:
        return float, float_bits(v)
    if tv in _PLAIN:
        return tv, v
    if isinstance(v, np.generic) and not v.dtype.hasobject:
        return np.generic, _dtype_key(v.dtype), v.tobytes()
    return NO_KEY


def array_key(a: np.ndarray, max_size: int | None = None) -> Hashable:
    """An array by dtype, shape and bytes; NO_KEY for object arrays and, with `max_size`, bigger ones
    (a key costs a copy of the data)."""
    if a.dtype.hasobject or (max_size is not None and a.size > max_size):
        return NO_KEY
    return np.ndarray, _dtype_key(a.dtype), a.shape, a.tobytes()


def value_key(v: Any, max_size: int | None = None) -> Hashable:
    """Any attribute or param value: a scalar (`scalar_key`), an array (`array_key`, `max_size`
    elements at most), a list or tuple of such (its type and its items' keys); else NO_KEY."""
    k = scalar_key(v)
    if k is not NO_KEY:
        return k
    tv = type(v)
    if tv is list or tv is tuple:
        items = tuple([value_key(x, max_size) for x in v])
        return NO_KEY if any(x is NO_KEY for x in items) else (tv, items)
    if tv is np.ndarray:
        return array_key(v, max_size)
    return NO_KEY


def attrs_key(attrs: Mapping[str, Any]) -> Hashable:
    """An op's attributes when all are scalars, `(name, *scalar_key(value))` each (written out for the
    common types); else NO_KEY (a list or an array: the caller
    keys the params made of it)."""
    out = []
    for name, v in attrs.items():
        tv = type(v)
        if tv is float:
            out.append((name, float, float_bits(v)))
        elif tv is int or tv is bool or tv is str:
            out.append((name, tv, v))
        else:
            k = scalar_key(v)
            if k is NO_KEY:
                return NO_KEY
            out.append((name, *k))
    return tuple(out)


def values_key(values: tuple[Any, ...]) -> Hashable:
    """A tuple of scalar values (attributes by position, `MISSING` for absent ones): `(values, types)`,
    floats by their bits; numpy scalars by `scalar_key`; else NO_KEY. The types tuple is the tag that
    `attrs_key` writes per item, computed in C."""
    types = tuple(map(type, values))
    if _PLAIN.issuperset(types):
        return values, types
    if _PLAIN_OR_FLOAT.issuperset(types):
        return tuple([float_bits(v) if t is float else v for v, t in zip(values, types)]), types
    keys = tuple(map(scalar_key, values))
    return NO_KEY if any(k is NO_KEY for k in keys) else (keys, types)


def encoding_key(enc: QuantEncoding | None) -> Hashable:
    """An encoding by value, scales by their bits (a NaN scale keys like any other); None for none.

    The numbers are `qlower._frozen.Frozen` arrays, which hash and compare by dtype, shape and bytes,
    so they are their own keys (hashed once each, however often the encoding is keyed); ragged block
    scales (kept as tuples of tuples for validation to report) key as they are."""
    if enc is None:
        return None
    return (enc.kind, enc.scales, enc.offsets,
            values_key((enc.axis, enc.bitwidth, enc.num_blocks_per_axis, enc.block_scale_bitwidth)), enc.block_scales)


def tensor_kind_key(tensor_type: TensorType, datatype: DataType, dims: tuple[int, ...],
                    encoding: QuantEncoding | None, static: bool) -> tuple:
    """What makes two tensors one kind (`qlower.qnn.table.TensorKind`)."""
    return tensor_type, datatype, dims, None if encoding is None else encoding_key(encoding), static


def tensor_key(t: QnnTensor) -> tuple:
    """`tensor_kind_key` of a tensor: static when it has data."""
    enc = t.encoding
    return t.type, t.datatype, t.dims, None if enc is None else encoding_key(enc), t.data is not None


def scalar_param_key(name: str, datatype: DataType, value: Any) -> Hashable:
    """A scalar param (what the writers write of it: its name, datatype and value), or NO_KEY."""
    tv = type(value)
    if tv is float:
        return name, datatype, float, float_bits(value)
    if tv is int or tv is bool or tv is str:
        return name, datatype, tv, value
    k = scalar_key(value)
    return NO_KEY if k is NO_KEY else (name, datatype, *k)


def params_key(params: Sequence[Param]) -> Hashable:
    """An op's params as an op kind holds them: scalars by value (`scalar_param_key`), tensor params by
    their tensor's kind without its data (each op has its own: `QnnTable.op_params`); NO_KEY when a
    scalar's value has none (the op's params are then its own kind)."""
    out: list[Any] = []
    for p in params:
        if type(p) is ScalarParam:
            k = scalar_param_key(p.name, p.datatype, p.value)
        elif type(p) is TensorParam:
            t = p.tensor
            k = (p.name, TensorParam, tensor_kind_key(t.type, t.datatype, t.dims, t.encoding, False))
        else:
            k = NO_KEY
        if k is NO_KEY:
            return NO_KEY
        out.append(k)
    return tuple(out)


def op_kind_key(op_type: str, package: str, params: Hashable, inputs: tuple[int, ...], outputs: tuple[int, ...],
                provenance: str | None, rule: str | None, location: str | None, origin: bool) -> tuple:
    """What makes two ops one kind (`qlower.qnn.table.OpKind`): `params` is `params_key` of its params
    (not NO_KEY: such an op is a kind of its own), `inputs`/`outputs` its tensors' kind ids."""
    return op_type, package, params, inputs, outputs, provenance, rule, location, origin
