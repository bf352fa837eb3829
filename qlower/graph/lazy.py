"""Constant data read only when something needs it, and released when it is done.

A `LazyArray` stands in for a constant's numpy array: it knows its dtype and
shape (read from the file's header at load time) but holds no bytes. Reading
it (`np.asarray`, any numpy function or operator, any ndarray attribute)
reads the file then and returns a fresh array that the caller owns, so the
bytes live only as long as that use. `astype` and `reshape` are recorded, not
done, which is how lowering retypes a model's weights to float16 without
holding them; `map` records an elementwise conversion the same way (float16's
saturation). Writers that can take data in pieces (`chunks`) get it a slice
of rows at a time, so even the largest tensor is never whole in memory.

Sources: `.npy` files (memory-mapped) and tensors in `.safetensors` files
(read with the `safetensors` package).
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

CHUNK_BYTES = 16 << 20  # a slice `chunks` reads at once


@attrs.frozen
class NpySource:
    """A whole `.npy` file, memory-mapped on each read (unmapped when the array is dropped)."""

    path: Path

    def describe(self) -> str:
        return str(self.path)

    def read(self) -> np.ndarray:
        return np.load(self.path, mmap_mode="r", allow_pickle=False)

    def rows(self, i: int, j: int) -> np.ndarray:
        mm = np.load(self.path, mmap_mode="r", allow_pickle=False)
        try:
            return np.array(mm[i:j])  # a copy: the mapping (and its resident pages) goes with `mm`
        finally:
            del mm


@attrs.frozen
class SafetensorsSource:
    """One tensor of a `.safetensors` file; each read opens the file and closes it again.

    A `BF16` tensor (the dtype Qwen and Llama checkpoints ship in; numpy has none) is read as
    float32: bfloat16 is float32's upper half, so widening is exact (`bits << 16`)."""

    path: Path
    key: str
    bf16: bool = False

    def describe(self) -> str:
        return f"{self.path}[{self.key}]"

    def read(self) -> np.ndarray:
        if self.bf16:
            return self._bf16_rows(None)
        from safetensors import safe_open

        with safe_open(str(self.path), framework="numpy") as f:
            return f.get_tensor(self.key)

    def rows(self, i: int, j: int) -> np.ndarray:
        if self.bf16:
            return self._bf16_rows((i, j))
        plain = self._plain_rows(i, j)
        if plain is not None:
            return plain
        from safetensors import safe_open

        with safe_open(str(self.path), framework="numpy") as f:
            return f.get_slice(self.key)[i:j]

    def _plain_rows(self, i: int, j: int) -> np.ndarray | None:
        """Rows i:j with one read into the array (the safetensors package reads, then copies: a 4-bit
        LLM's weights are gigabytes); None for a dtype numpy has no name for (the package reads it)."""
        doc, base = _safetensors_doc(self.path)
        entry = doc.get(self.key)
        name = _NPY_DTYPES.get(entry.get("dtype")) if type(entry) is dict else None
        if name is None or name == "bfloat16" or "data_offsets" not in entry or not entry.get("shape"):
            return None
        dtype = np.dtype(name).newbyteorder("<")  # (safetensors data is little-endian)
        shape = tuple(int(d) for d in entry.get("shape", ()))
        start, end = (int(x) for x in entry["data_offsets"])
        if end - start != math.prod(shape) * dtype.itemsize or start < 0:
            raise OSError(f"{self.path}: tensor {self.key}'s data offsets span {end - start} bytes, its shape "
                             f"{list(shape)} of {entry.get('dtype')} needs {math.prod(shape) * dtype.itemsize}")
        row = math.prod(shape[1:]) if shape else 1
        j = min(j, shape[0]) if shape else j
        i = min(i, j)
        count = max(0, j - i) * row
        raw = np.fromfile(self.path, dtype=dtype, count=count,
                          offset=base + start + i * row * dtype.itemsize)
        if raw.size != count:
            raise OSError(f"{self.path}: tensor {self.key} is cut short ({raw.size} of {count} values)")
        return raw.reshape(((j - i), *shape[1:]) if shape else ())

    def _bf16_rows(self, span: tuple[int, int] | None) -> np.ndarray:
        """Rows i:j (all when `span` is None), widened to float32 from the file's raw bytes."""
        start, shape = safetensors_offset(self.path, self.key)
        row = math.prod(shape[1:]) if shape else 1
        i, j = span if span is not None else (0, shape[0] if shape else 1)
        j = min(j, shape[0]) if shape else j
        count = max(0, j - i) * row
        raw = np.fromfile(self.path, dtype="<u2", count=count, offset=start + 2 * i * row)
        if raw.size != count:
            raise OSError(f"{self.path}: tensor {self.key} is cut short ({raw.size} of {count} values)")
        return widen_bf16(raw).reshape(((j - i), *shape[1:]) if shape else ())


_NPY_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "I64": "int64", "I32": "int32",
               "I16": "int16", "I8": "int8", "U64": "uint64", "U32": "uint32", "U16": "uint16", "U8": "uint8",
               "BOOL": "bool", "BF16": "bfloat16"}


def safetensors_header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """key → (numpy dtype name, `bfloat16`, or the file's own name when numpy has none, shape), from the
    header alone: no tensor bytes are read. The safetensors package checks the header (its
    length, offsets inside the file, not overlapping, matching each shape) as it opens the file;
    a file it refuses is a ValueError that quotes none of the file's bytes."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            out = {}
            for k in f.keys():
                part = f.get_slice(k)
                dname = part.get_dtype()
                out[k] = (_NPY_DTYPES.get(dname, str(dname)), tuple(int(d) for d in part.get_shape()))
    except SafetensorError as e:
        text = str(e)
        if "JSON" in text:  # serde quotes what it could not parse
            text = "its header is not the JSON a safetensors file holds"
        raise ValueError(text[:300]) from None
    return out


def safetensors_offset(path: Path, key: str) -> tuple[int, tuple[int, ...]]:
    """The file offset of tensor `key`'s first byte, and its shape."""
    doc, base = _safetensors_doc(path)
    entry = doc.get(key)
    if type(entry) is not dict or "data_offsets" not in entry:
        raise ValueError(f"no tensor {key!r} in the header")
    return base + int(entry["data_offsets"][0]), tuple(int(d) for d in entry.get("shape", ()))


def _safetensors_doc(path: Path) -> tuple[dict, int]:
    """The parsed JSON header and the offset where the data starts."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError("file too short for a safetensors header")
        (n,) = struct.unpack("<Q", head)
        if n > 100 << 20:
            raise ValueError(f"header length {n} is implausible")
        raw = f.read(n)
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"header is not JSON: {e}") from None
    if type(doc) is not dict:
        raise ValueError("header is not a JSON object")
    return doc, 8 + n


_MAX_NPY_HEADER = 10000  # numpy's own limit (np.lib.format._MAX_HEADER_SIZE): bigger headers are refused


def npy_header(path: Path) -> tuple[np.dtype, tuple[int, ...]]:
    """dtype and shape of a `.npy` file from its header, checked against the file's size (a short
    file is refused here, not when the data is read). Errors quote none of the file's bytes."""
    with open(path, "rb") as f:
        try:
            version = np.lib.format.read_magic(f)
        except ValueError:
            raise ValueError("it does not start with the .npy magic string") from None
        try:
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f, max_header_size=_MAX_NPY_HEADER)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f, max_header_size=_MAX_NPY_HEADER)
        except (ValueError, SyntaxError, TypeError, KeyError, OverflowError, MemoryError):
            raise ValueError(f"its header is not a valid .npy header (at most {_MAX_NPY_HEADER} bytes of a "
                             "Python literal with descr, fortran_order and shape)") from None
        start = f.tell()
        size = os.fstat(f.fileno()).st_size
    if fortran or dtype.hasobject:
        raise ValueError("Fortran-ordered and object arrays are not supported")
    need = math.prod(shape) * dtype.itemsize
    if start + need > size:
        raise ValueError(f"it is truncated: its header declares {dtype}{list(shape)} ({need} bytes) but "
                         f"{max(0, size - start)} bytes follow")
    return dtype, tuple(shape)


class LazyArray(NDArrayOperatorsMixin):
    """A constant's data by reference (see the module docstring); numpy reads it on use."""

    __slots__ = ("source", "dtype", "shape", "steps", "origin")

    def __init__(self, source: Any, dtype: np.dtype, shape: tuple[int, ...],
                 steps: tuple[tuple[str, Any], ...] = (), origin: tuple[int, ...] | None = None) -> None:
        self.source = source
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(d) for d in shape)
        self.steps = steps
        self.origin = self.shape if origin is None else origin  # the source's own shape

    # ------------------------------------------------------------ ndarray facts (no reading)
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"LazyArray({self.source.describe()}: {self.dtype}{list(self.shape)})"

    # ------------------------------------------------------------ recorded, not done
    def astype(self, dtype: Any, copy: bool = True) -> LazyArray:
        dtype = np.dtype(dtype)
        if dtype == self.dtype:
            return self
        return LazyArray(self.source, dtype, self.shape, self.steps + (("astype", dtype),), self.origin)

    def reshape(self, *shape: Any, order: str = "C") -> LazyArray:
        if order != "C":
            return self.read().reshape(*shape, order=order)
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        new = _resolve(self.size, shape)
        if new == self.shape:
            return self
        return LazyArray(self.source, self.dtype, new, self.steps + (("reshape", new),), self.origin)

    def map(self, convert: Callable[[np.ndarray], np.ndarray], dtype: Any) -> LazyArray:
        """`convert(data)`, recorded: an elementwise conversion to `dtype` (applied to the whole array
        when read, to each piece by `chunks`, so it must not look at neighbours)."""
        return LazyArray(self.source, np.dtype(dtype), self.shape, self.steps + (("map", convert),), self.origin)

    # ------------------------------------------------------------ reading
    def read(self) -> np.ndarray:
        """The data, read now; the caller owns (and drops) the array."""
        arr = self.source.read()
        for kind, arg in self.steps:
            if kind == "reshape":
                arr = arr.reshape(arg)
            else:
                arr = _convert(arr, kind, arg)
        return arr

    def rows(self, i: int, j: int) -> np.ndarray:
        """Rows i:j along axis 0, reading only those from the source when no reshape was recorded."""
        if self.shape != self.origin or not self.shape:
            return self.read()[i:j]
        part = self.source.rows(i, min(j, self.shape[0]))
        for kind, arg in self.steps:
            part = _convert(part, kind, arg)
        return part

    def chunks(self, max_bytes: int = CHUNK_BYTES) -> Iterator[np.ndarray]:
        """The data in C order as consecutive flat pieces of about `max_bytes` (row slices of the
        source, converted one at a time)."""
        origin = self.origin  # reshapes keep C order: the source's rows are consecutive pieces
        if not origin or self.size == 0:
            yield self.read().reshape(-1)
            return
        row = (self.size // origin[0]) * max(self.dtype.itemsize, 1)
        step = max(1, max_bytes // max(1, row))
        for i in range(0, origin[0], step):
            part = self.source.rows(i, min(origin[0], i + step))
            for kind, arg in self.steps:
                if kind != "reshape":  # (reshapes keep C order: nothing to do to a flat piece)
                    part = _convert(part, kind, arg)
            yield part.reshape(-1)
            del part

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = self.read()
        return arr if dtype is None else arr.astype(dtype)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        inputs = tuple(_real(x) for x in inputs)
        if "out" in kwargs:
            kwargs["out"] = tuple(_real(x) for x in kwargs["out"])
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        return func(*_real(args), **_real(kwargs))

    def __getitem__(self, key: Any) -> Any:
        return self.read()[key]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in LazyArray.__slots__:
            raise AttributeError(name)
        return getattr(self.read(), name)

    def __bool__(self) -> bool:
        return bool(self.read())

    def __float__(self) -> float:
        return float(self.read())

    def __int__(self) -> int:
        return int(self.read())


def _convert(arr: np.ndarray, kind: str, arg: Any) -> np.ndarray:
    """One recorded elementwise step: `astype` to a dtype or `map` through a function."""
    return arr.astype(arg) if kind == "astype" else arg(arr)


def _resolve(size: int, shape: tuple[Any, ...]) -> tuple[int, ...]:
    dims = [int(d) for d in shape]
    if dims.count(-1) == 1:
        rest = math.prod(d for d in dims if d != -1)
        dims[dims.index(-1)] = size // rest if rest else 0
    if math.prod(dims) != size:
        raise ValueError(f"cannot reshape array of size {size} into shape {tuple(shape)}")
    return tuple(dims)


def _real(x: Any) -> Any:
    if isinstance(x, LazyArray):
        return x.read()
    if type(x) is tuple or type(x) is list:
        return type(x)(_real(y) for y in x)
    if type(x) is dict:
        return {k: _real(v) for k, v in x.items()}
    return x


def widen_bf16(bits: np.ndarray) -> np.ndarray:
    """bfloat16 values given as their uint16 bit patterns → float32, exactly (the bits are float32's
    upper half)."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def is_lazy(x: Any) -> bool:
    return isinstance(x, LazyArray)


@attrs.frozen
class RawSource:
    """Little-endian raw bytes at `offset` in a file (ONNX external data), read with plain file reads."""

    path: Path
    offset: int
    dtype: np.dtype
    shape: tuple[int, ...]

    def describe(self) -> str:
        return f"{self.path}@{self.offset}"

    def read(self) -> np.ndarray:
        return self._read(0, math.prod(self.shape)).reshape(self.shape)

    def rows(self, i: int, j: int) -> np.ndarray:
        row = math.prod(self.shape[1:])
        return self._read(i * row, (j - i) * row).reshape((j - i, *self.shape[1:]))

    def _read(self, start: int, count: int) -> np.ndarray:
        little = np.dtype(self.dtype).newbyteorder("<")
        arr = np.fromfile(self.path, dtype=little, count=count, offset=self.offset + start * little.itemsize)
        if arr.size != count:
            raise OSError(f"{self.path}: expected {count} elements at offset {self.offset + start * little.itemsize}, "
                          f"found {arr.size}")
        return arr.astype(np.dtype(self.dtype).newbyteorder("="), copy=False)
