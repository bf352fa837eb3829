"""QNN datatypes and their numeric codes (Qnn_DataType_t), and the mapping
from a numpy dtype plus quantization to the QNN datatype of a tensor."""

from __future__ import annotations

import enum

import numpy as np


class DataType(enum.IntEnum):
    INT_8 = 0x0008
    INT_16 = 0x0016
    INT_32 = 0x0032
    INT_64 = 0x0064
    UINT_8 = 0x0108
    UINT_16 = 0x0116
    UINT_32 = 0x0132
    UINT_64 = 0x0164
    FLOAT_16 = 0x0216
    BFLOAT_16 = 0x0226
    FLOAT_32 = 0x0232
    FLOAT_64 = 0x0264
    SFIXED_POINT_4 = 0x0304
    SFIXED_POINT_8 = 0x0308
    SFIXED_POINT_16 = 0x0316
    SFIXED_POINT_32 = 0x0332
    UFIXED_POINT_4 = 0x0404
    UFIXED_POINT_8 = 0x0408
    UFIXED_POINT_16 = 0x0416
    UFIXED_POINT_32 = 0x0432
    BOOL_8 = 0x0508
    STRING = 0x0608
    UNDEFINED = 0x7FFFFFFF

    @property
    def qnn_name(self) -> str:
        return f"QNN_DATATYPE_{self.name}"

    @classmethod
    def parse(cls, text: str) -> DataType:
        """Accepts `FLOAT_32`, `QNN_DATATYPE_FLOAT_32` or the decimal/hex code."""
        t = text.strip()
        if t.startswith("QNN_DATATYPE_"):
            t = t[len("QNN_DATATYPE_"):]
        if t in cls.__members__:
            return cls[t]
        return cls(int(t, 0))

    @property
    def is_fixed_point(self) -> bool:
        return 0x0300 <= self.value < 0x0500

    @property
    def is_float(self) -> bool:
        return 0x0200 <= self.value < 0x0300

    @property
    def bitwidth(self) -> int:
        if self in (DataType.STRING, DataType.UNDEFINED):
            return 0
        return int(f"{self.value & 0xFF:x}")


_PLAIN = {
    "int8": DataType.INT_8, "int16": DataType.INT_16, "int32": DataType.INT_32, "int64": DataType.INT_64,
    "uint8": DataType.UINT_8, "uint16": DataType.UINT_16, "uint32": DataType.UINT_32, "uint64": DataType.UINT_64,
    "float16": DataType.FLOAT_16, "float32": DataType.FLOAT_32, "float64": DataType.FLOAT_64,
    "bool": DataType.BOOL_8,
}
_FIXED = {
    ("uint", 4): DataType.UFIXED_POINT_4, ("uint", 8): DataType.UFIXED_POINT_8,
    ("uint", 16): DataType.UFIXED_POINT_16, ("uint", 32): DataType.UFIXED_POINT_32,
    ("int", 4): DataType.SFIXED_POINT_4, ("int", 8): DataType.SFIXED_POINT_8,
    ("int", 16): DataType.SFIXED_POINT_16, ("int", 32): DataType.SFIXED_POINT_32,
}


_FROM_NUMPY: dict[tuple, DataType] = {}


def from_numpy(dtype: np.dtype | str, quantized: bool = False, bitwidth: int | None = None) -> DataType:
    """The QNN datatype of a tensor stored as `dtype`.

    A quantized integer tensor is fixed point (UFIXED_POINT_8 for uint8 with an
    encoding); `bitwidth` narrows it (4-bit weights stored in uint8/int8).
    """
    # numpy's dtype.name is slow; answers are memoised per (dtype, quantized, bitwidth) argument
    key = (dtype, type(dtype), bool(quantized), bitwidth)
    try:
        return _FROM_NUMPY[key]
    except KeyError:
        found = _FROM_NUMPY[key] = _from_numpy(dtype, quantized, bitwidth)
        return found
    except TypeError:  # an unhashable dtype spelling
        return _from_numpy(dtype, quantized, bitwidth)


def _from_numpy(dtype: np.dtype | str, quantized: bool, bitwidth: int | None) -> DataType:
    name = np.dtype(dtype).name
    if quantized and name in ("uint8", "uint16", "uint32", "int8", "int16", "int32"):
        sign = "uint" if name.startswith("u") else "int"
        bits = bitwidth or np.dtype(dtype).itemsize * 8
        return _FIXED[(sign, bits)]
    if name not in _PLAIN:
        raise ValueError(f"no QNN datatype for numpy dtype {name}")
    return _PLAIN[name]


_TO_NUMPY = {
    DataType.INT_8: "int8", DataType.INT_16: "int16", DataType.INT_32: "int32", DataType.INT_64: "int64",
    DataType.UINT_8: "uint8", DataType.UINT_16: "uint16", DataType.UINT_32: "uint32", DataType.UINT_64: "uint64",
    DataType.FLOAT_16: "float16", DataType.FLOAT_32: "float32", DataType.FLOAT_64: "float64",
    DataType.BOOL_8: "bool",
    DataType.SFIXED_POINT_4: "int8", DataType.SFIXED_POINT_8: "int8", DataType.SFIXED_POINT_16: "int16",
    DataType.SFIXED_POINT_32: "int32",
    DataType.UFIXED_POINT_4: "uint8", DataType.UFIXED_POINT_8: "uint8", DataType.UFIXED_POINT_16: "uint16",
    DataType.UFIXED_POINT_32: "uint32",
    DataType.BFLOAT_16: "uint16",
}


def to_numpy(dt: DataType) -> np.dtype:
    """The numpy storage dtype of a QNN datatype (fixed point stores integers)."""
    if dt not in _TO_NUMPY:
        raise ValueError(f"no numpy storage for {dt.qnn_name}")
    return np.dtype(_TO_NUMPY[dt])
