"""Reading and writing the npz archives that hold a graph file's constant data.

Members stored uncompressed are sliced straight out of the archive bytes
(numpy's loader costs ~10x more per array on graphs with 250k weights).
"""

from __future__ import annotations

import ast
import io
import math
import mmap
import struct
import zipfile
from pathlib import Path
from typing import NamedTuple

import attrs
import numpy as np



_LOCAL_HEADER = struct.Struct("<4s22xHH")
_EOCD = struct.Struct("<4s4H2LH")  # end of central directory record
_EOCD64_LOCATOR = struct.Struct("<4sLQL")
_EOCD64 = struct.Struct("<4sQ2H2L4Q")
_CENTRAL = struct.Struct("<4s4x2H4x3L5H2L")  # central directory file header, up to the name
_FULL = 0xFFFFFFFF
_MAX_NPY_HEADER = 10000  # numpy's limit on an .npy header (np.lib.format._MAX_HEADER_SIZE)


class _Member(NamedTuple):
    """Where a member is: what `_Npz._fast` reads of a zipfile.ZipInfo (a tuple: one per weight)."""

    filename: str
    compress_type: int
    header_offset: int
    file_size: int


def _members(buf: bytes | mmap.mmap) -> dict[str, _Member] | None:
    """The `.npy` members of a zip archive from its central directory, or None when the archive is
    anything but a plain single-disk one (zipfile then reads it, and reports what is wrong).

    One `struct` unpack per member: zipfile builds a ZipInfo with a dozen fields for each, which on
    an npz of 250k weights costs seconds."""
    end = buf.rfind(b"PK\x05\x06", max(0, len(buf) - (1 << 16) - _EOCD.size))
    if end < 0 or end + _EOCD.size > len(buf):
        return None
    sig, disk, cd_disk, _, count, size, offset, _ = _EOCD.unpack_from(buf, end)
    if disk or cd_disk:
        return None
    if count == 0xFFFF or size == _FULL or offset == _FULL:
        loc = end - _EOCD64_LOCATOR.size
        if loc < 0 or buf[loc:loc + 4] != b"PK\x06\x07":
            return None
        rec = _EOCD64_LOCATOR.unpack_from(buf, loc)[2]
        if rec + _EOCD64.size > len(buf) or buf[rec:rec + 4] != b"PK\x06\x06":
            return None
        _, _, _, _, disk, cd_disk, _, count, size, offset = _EOCD64.unpack_from(buf, rec)
        if disk or cd_disk:
            return None
    fast = _members_at_once(buf, count, size, offset)
    if fast is not None:
        return fast
    out: dict[str, _Member] = {}
    pos, stop = offset, offset + size
    unpack, hsize, member = _CENTRAL.unpack_from, _CENTRAL.size, _Member
    try:
        for _ in range(count):
            sig, flags, method, _, csize, usize, nlen, xlen, clen, disk, _, _, loff = unpack(buf, pos)
            if sig != b"PK\x01\x02" or flags & 1 or disk:  # (encrypted, or on another disk)
                return None
            npos = pos + hsize
            raw = buf[npos:npos + nlen]
            name = raw.decode("utf-8") if flags & 0x800 else raw.decode("cp437")
            if csize == _FULL or usize == _FULL or loff == _FULL:
                found = _zip64(buf, npos + nlen, xlen, usize == _FULL, csize == _FULL, loff == _FULL)
                if found is None:
                    return None
                usize, csize, loff = (usize if found[0] is None else found[0], csize if found[1] is None
                                      else found[1], loff if found[2] is None else found[2])
            pos = npos + nlen + xlen + clen
            if name[-4:] == ".npy":
                out[name[:-4]] = member(name, method, loff, usize)
    except (struct.error, UnicodeDecodeError):
        return None
    return out if pos <= stop else None


def _members_at_once(buf: bytes | mmap.mmap, count: int, size: int, offset: int) -> dict[str, _Member] | None:
    """`_members` for the common archive (what numpy and qlower write: no encryption, one disk, no
    field left to a ZIP64 extra), with the central directory's fields read by numpy for all entries
    at once; None when the archive is anything else (the entry-by-entry reading then decides)."""
    if count == 0 or size < count * _CENTRAL.size or offset + size > len(buf):
        return None
    cd = np.frombuffer(buf, np.uint8, size, offset)
    # where entries could start (a signature), then whether they chain from the first to the end
    sig = np.flatnonzero((cd[:-3] == 0x50) & (cd[1:-2] == 0x4B) & (cd[2:-1] == 1) & (cd[3:] == 2))
    if len(sig) < count or sig[0] != 0:
        return None

    def u16(at: int) -> np.ndarray:
        return cd[sig + at].astype(np.int64) | (cd[sig + at + 1].astype(np.int64) << 8)

    def u32(at: int) -> np.ndarray:
        return u16(at) | (u16(at + 2) << 16)

    if len(sig) != count:  # a name holds the signature's bytes: follow the chain entry by entry
        return None
    nlen, xlen, clen = u16(28), u16(30), u16(32)
    ends = sig + _CENTRAL.size + nlen + xlen + clen
    if not (np.array_equal(ends[:-1], sig[1:]) and int(ends[-1]) <= size):
        return None
    flags, method, disk = u16(8), u16(10), u16(34)
    usize, csize, loff = u32(24), u32(20), u32(42)
    if (flags & 1).any() or disk.any() or (usize == _FULL).any() or (csize == _FULL).any() or (loff == _FULL).any():
        return None
    out: dict[str, _Member] = {}
    member = _Member
    # the names as slices of one decoding of the directory: bytes as code points 0-255, which is
    # ASCII names' text in either of zip's encodings (others are decoded from their bytes)
    text = cd.tobytes().decode("latin-1")
    starts = (sig + _CENTRAL.size).tolist()
    try:
        for at, n, f, m, lo, us in zip(starts, nlen.tolist(), flags.tolist(), method.tolist(), loff.tolist(),
                                       usize.tolist()):
            name = text[at:at + n]
            if not name.isascii():
                raw = name.encode("latin-1")
                name = raw.decode("utf-8") if f & 0x800 else raw.decode("cp437")
            if name[-4:] == ".npy":
                out[name[:-4]] = member(name, m, lo, us)
    except UnicodeDecodeError:
        return None
    return out


def _zip64(buf: bytes, pos: int, length: int, *wanted: bool) -> tuple[int | None, ...] | None:
    """The 64-bit (uncompressed size, compressed size, offset) an extra field gives, in that order, for the
    fields the central header left full (None for the others); None without a ZIP64 extra."""
    end = pos + length
    while pos + 4 <= end:
        tag, n = struct.unpack_from("<2H", buf, pos)
        if tag == 1:
            vals, at = [], pos + 4
            for want in wanted:
                if want:
                    if at + 8 > pos + 4 + n:
                        return None
                    vals.append(struct.unpack_from("<Q", buf, at)[0])
                    at += 8
                else:
                    vals.append(None)
            return tuple(vals)
        pos += 4 + n
    return None


@attrs.define
class _Npz:
    """An npz archive, memory-mapped; stored members are read-only views of the mapping, made without
    zipfile/np.load overhead and without reading their bytes (the `.bin` writer, folding or `run` read
    them when they need them; the kernel can drop those pages again, as they are the file's)."""

    buf: bytes | mmap.mmap
    members: dict[str, _Member]
    headers: dict[bytes, tuple[np.dtype, tuple[int, ...], int] | None] = attrs.Factory(dict)
    _zip: zipfile.ZipFile | None = None

    @classmethod
    def open(cls, path: Path) -> _Npz:
        with open(path, "rb") as f:
            try:
                buf: bytes | mmap.mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (ValueError, OSError):  # an empty file, or one that cannot be mapped: read it
                buf = f.read()
        members = _members(buf)
        if members is not None:
            return cls(buf, members)
        z = zipfile.ZipFile(io.BytesIO(buf))  # in memory: nothing to close
        return cls(buf, {i.filename[:-4]: _Member(i.filename, i.compress_type, i.header_offset, i.file_size)
                         for i in z.infolist() if i.filename.endswith(".npy")}, zip=z)

    @property
    def zip(self) -> zipfile.ZipFile:
        """zipfile's view, opened when a member needs it (compressed or unusual)."""
        if self._zip is None:
            self._zip = zipfile.ZipFile(io.BytesIO(self.buf))
        return self._zip

    def keys(self) -> list[str]:
        return list(self.members)

    def get(self, key: str, max_bytes: int | None = None) -> np.ndarray:
        """The member's array. With `max_bytes` (what the tensor referring to it can hold), a
        compressed member whose header declares more is refused before anything is allocated
        (numpy's reader allocates what the header says, then inflates into it)."""
        info = self.members[key]
        arr = self._fast(info) if info.compress_type == zipfile.ZIP_STORED else None
        if arr is None:  # compressed, Fortran-ordered or unusual: let numpy do it (and raise)
            with self.zip.open(self.zip.getinfo(info.filename)) as f:
                try:
                    version = np.lib.format.read_magic(f)
                    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                   else np.lib.format.read_array_header_2_0)
                    shape, _, dtype = read_header(f, max_header_size=_MAX_NPY_HEADER)
                except (ValueError, SyntaxError, TypeError, KeyError, OverflowError, MemoryError):
                    raise ValueError("the member is not an .npy array (its magic string or header is not "
                                     f"valid, or the header is over {_MAX_NPY_HEADER} bytes)") from None
                need = math.prod(shape) * dtype.itemsize
                if dtype.hasobject:
                    raise ValueError("the member is an object array, which qlower never reads")
                if need > info.file_size or (max_bytes is not None and need > max_bytes):
                    limit = f"; the tensor holds {max_bytes}" if max_bytes is not None else ""
                    raise ValueError(f"the member's header declares {dtype}{list(shape)} ({need} bytes), more "
                                     f"than the member's {info.file_size} bytes{limit}")
            with self.zip.open(self.zip.getinfo(info.filename)) as f:
                arr = np.lib.format.read_array(f, allow_pickle=False)
        return arr

    def get_stored(self, key: object) -> np.ndarray | None:
        """`get(key)` for a stored member of the usual layout; None for anything else (no such member,
        compressed, unusual): `get` then reads it, or says what is wrong."""
        info = self.members.get(key) if type(key) is str else None
        return self._fast(info) if info is not None and info.compress_type == zipfile.ZIP_STORED else None

    def _fast(self, info: _Member) -> np.ndarray | None:
        buf, off = self.buf, info.header_offset
        if off + _LOCAL_HEADER.size > len(buf):
            return None
        sig, n, m = _LOCAL_HEADER.unpack_from(buf, off)
        start = off + 30 + n + m
        if sig != b"PK\x03\x04" or buf[start:start + 6] != b"\x93NUMPY":
            return None
        if buf[start + 6] == 1:
            hlen, hstart = int.from_bytes(buf[start + 8:start + 10], "little"), start + 10
        else:
            hlen, hstart = int.from_bytes(buf[start + 8:start + 12], "little"), start + 12
        if hlen > _MAX_NPY_HEADER:
            return None  # (numpy's reader then refuses it)
        header = buf[hstart:hstart + hlen]
        meta = self.headers.get(header, False)
        if meta is False:
            meta = self.headers[header] = _parse_npy_header(header)
        if meta is None:
            return None
        dtype, shape, nbytes = meta
        dstart = hstart + hlen
        if dstart + nbytes > start + info.file_size:
            return None
        return np.ndarray(shape, dtype, buf, dstart)  # a read-only view, like every constant


def _parse_npy_header(header: bytes) -> tuple[np.dtype, tuple[int, ...], int] | None:
    """(dtype, shape, data bytes) of an `.npy` header, or None for one this reader leaves to numpy."""
    try:
        d = ast.literal_eval(header.decode("latin1"))
        dtype = np.dtype(d["descr"]) if type(d["descr"]) is str else None
        if dtype is None or dtype.hasobject or d["fortran_order"] or type(d["shape"]) is not tuple:
            return None
        shape = tuple(int(x) for x in d["shape"])
        if any(x < 0 for x in shape):
            return None
        return dtype, shape, math.prod(shape) * dtype.itemsize
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
