"""ONNX element types ↔ numpy dtypes ↔ the dtypes qlower graphs hold.

Imports onnx lazily: these helpers are called only once onnx is in use.
"""

from __future__ import annotations

import numpy as np

from qlower.graph.types import canonical_dtype

# Dtypes an onnx-dialect graph may hold. int64 is narrowed to int32 on import
# (QNN computes no int64); other ONNX types (strings, complex, float8, int4) are refused.
_GRAPH_DTYPES = frozenset({"float16", "float32", "float64", "int8", "int16", "int32", "uint8", "uint16",
                           "uint32", "bool"})


def onnx_to_numpy(elem_type: int) -> np.dtype | None:
    """The numpy dtype of an ONNX element type, or None when numpy has no plain equivalent."""
    from onnx import helper

    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        return None


def graph_dtype(dtype: np.dtype | None) -> np.dtype | None:
    """The dtype qlower keeps for an ONNX tensor of `dtype` (int64 → int32), or None if unsupported."""
    if dtype is None:
        return None
    if dtype == np.int64:
        return np.dtype(np.int32)
    if dtype == np.uint64:
        return np.dtype(np.uint32)
    return dtype if dtype.name in _GRAPH_DTYPES else None


def numpy_to_onnx(dtype: np.dtype) -> int:
    from onnx import helper

    return int(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))


def dtype_to_onnx(name: str) -> int:
    """A qlower dtype name (`float32`, `f16`, `int32`) → ONNX element type."""
    canon = canonical_dtype(str(name))
    if canon is None:
        raise ValueError(f"unknown dtype {name}")
    return numpy_to_onnx(np.dtype(canon))


def narrow_ints(data: np.ndarray) -> np.ndarray:
    """int64/uint64 constant data → int32/uint32, saturating (INT64_MAX slice ends stay 'to the end')."""
    if data.dtype == np.int64:
        info = np.iinfo(np.int32)
        return np.asarray(np.clip(data, info.min, info.max).astype(np.int32))  # 0-d stays an array
    if data.dtype == np.uint64:
        return np.asarray(np.clip(data, 0, np.iinfo(np.uint32).max).astype(np.uint32))
    return data
