"""Turning rule-computed values into QNN param values of the declared datatype."""

from __future__ import annotations

from typing import Any

import numpy as np

from qlower.qnn.datatypes import DataType, to_numpy
from qlower.qnn.opdef import ParamDef


class ParamError(Exception):
    """A param value does not fit its definition."""


def _integral(x: Any) -> int:
    if isinstance(x, (bool, np.bool_)):
        return int(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)) and float(x).is_integer():
        return int(x)
    raise ParamError(f"expected an integer, got {x!r}")


def coerce_param(pdef: ParamDef, value: Any) -> Any:
    """The value QNN expects: bool/int/float for scalars, a numpy array for tensors.

    Enum params accept their names (`"ADD"`) or values.
    """
    if pdef.enum is not None and pdef.is_scalar:
        if isinstance(value, str):
            names = [e.upper() for e in pdef.enum]
            if value.upper() not in names:
                raise ParamError(f"`{value}` is not one of {', '.join(pdef.enum)}")
            return names.index(value.upper())
        v = _integral(value)
        if not 0 <= v < len(pdef.enum):
            raise ParamError(f"{v} is out of range for an enum of {len(pdef.enum)} values")
        return v
    dt = pdef.datatype
    if pdef.is_scalar:
        if isinstance(value, (list, tuple, np.ndarray)) and np.size(value) == 1:
            value = np.asarray(value).reshape(()).item()
        if isinstance(value, (list, tuple, np.ndarray)):
            raise ParamError(f"expected a scalar, got a list {list(np.asarray(value).ravel())[:8]}")
        return _scalar(dt, value)
    arr = np.asarray(value)
    if arr.dtype == object:
        raise ParamError("expected a rectangular list of numbers")
    if dt is not None and dt not in (DataType.STRING, DataType.UNDEFINED):
        np_dt = to_numpy(dt)
        if np_dt.kind == "u" and arr.size and np.any(np.asarray(arr, dtype=np.float64) < 0):
            raise ParamError(f"negative value in an unsigned ({dt.name}) param: {arr.tolist()}")
        if np_dt.kind in "iu" and arr.dtype.kind == "f" and not np.all(np.mod(arr, 1) == 0):
            raise ParamError(f"expected integers, got {arr.tolist()}")
        arr = arr.astype(np_dt)
    nd = pdef.ndim
    if nd is not None and nd >= 1 and arr.ndim == 0:
        arr = arr.reshape((1,) * nd)
    if nd is not None and arr.ndim != nd and not (nd == 1 and arr.size == 0):
        raise ParamError(f"expected a rank-{nd} tensor, got rank {arr.ndim} (shape {list(arr.shape)})")
    return arr


def _scalar(dt: DataType | None, value: Any) -> Any:
    if dt is None:
        return value
    if dt is DataType.BOOL_8:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        if isinstance(value, (int, np.integer)) and value in (0, 1):
            return bool(value)
        raise ParamError(f"expected true or false, got {value!r}")
    if dt.is_float:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ParamError(f"expected a number, got {value!r}")
        return float(value)
    if dt is DataType.STRING:
        return str(value)
    v = _integral(value)
    if dt.name.startswith("UINT") and v < 0:
        raise ParamError(f"expected a non-negative integer ({dt.name}), got {v}")
    return v
