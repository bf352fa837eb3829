"""Reading and writing the npz archives that hold a graph file's constant data.

Members stored uncompressed are sliced straight out of the archive bytes
(numpy's loader costs ~10x more per array on graphs with 250k weights).
"""

from __future__ import annotations

import ast
import io
import math
import struct
import zipfile
from pathlib import Path

import attrs
import numpy as np



_LOCAL_HEADER = struct.Struct("<4s22xHH")


@attrs.define
class _Npz:
    """An npz archive read once into memory; stored members are sliced without zipfile/np.load overhead."""

    buf: bytes
    zip: zipfile.ZipFile
    members: dict[str, zipfile.ZipInfo]
    headers: dict[bytes, tuple[np.dtype, tuple[int, ...]] | None] = attrs.Factory(dict)

    @classmethod
    def open(cls, path: Path) -> _Npz:
        buf = path.read_bytes()
        z = zipfile.ZipFile(io.BytesIO(buf))  # in memory: nothing to close
        return cls(buf, z, {i.filename[:-4]: i for i in z.infolist() if i.filename.endswith(".npy")})

    def keys(self) -> list[str]:
        return list(self.members)

    def get(self, key: str) -> np.ndarray:
        info = self.members[key]
        arr = self._fast(info) if info.compress_type == zipfile.ZIP_STORED else None
        if arr is None:  # compressed, Fortran-ordered or unusual: let numpy do it (and raise)
            with self.zip.open(info) as f:
                arr = np.lib.format.read_array(f, allow_pickle=False)
        return arr

    def _fast(self, info: zipfile.ZipInfo) -> np.ndarray | None:
        buf, off = self.buf, info.header_offset
        sig, n, m = _LOCAL_HEADER.unpack_from(buf, off)
        start = off + 30 + n + m
        if sig != b"PK\x03\x04" or not buf.startswith(b"\x93NUMPY", start):
            return None
        if buf[start + 6] == 1:
            hlen, hstart = int.from_bytes(buf[start + 8:start + 10], "little"), start + 10
        else:
            hlen, hstart = int.from_bytes(buf[start + 8:start + 12], "little"), start + 12
        header = buf[hstart:hstart + hlen]
        meta = self.headers.get(header, False)
        if meta is False:
            meta = self.headers[header] = _parse_npy_header(header)
        if meta is None:
            return None
        dtype, shape = meta
        count = math.prod(shape)
        dstart = hstart + hlen
        if dstart + count * dtype.itemsize > start + info.file_size:
            return None
        return np.frombuffer(buf, dtype, count, dstart).reshape(shape).copy()


def _parse_npy_header(header: bytes) -> tuple[np.dtype, tuple[int, ...]] | None:
    try:
        d = ast.literal_eval(header.decode("latin1"))
        dtype = np.dtype(d["descr"]) if type(d["descr"]) is str else None
        if dtype is None or dtype.hasobject or d["fortran_order"] or type(d["shape"]) is not tuple:
            return None
        return dtype, tuple(int(x) for x in d["shape"])
    except (ValueError, SyntaxError, TypeError, KeyError):
        return None



# ------------------------------------------------------------------- saving


def _npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """An npz archive (stored, fixed timestamps) so equal graphs give equal bytes."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for name, arr in arrays.items():
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            with z.open(info, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, arr.astype(arr.dtype.newbyteorder("<"), order="C"),
                                          allow_pickle=False)
    return out.getvalue()
