"""AIMET encodings files: what a quantizer decided for each tensor, by tensor name.

AIMET's QuantizationSimModel exports them, QNN's converters read them with
`--quantization_overrides`, and qlower reads and writes them so that either
side's encodings reach the other. Three layouts are in use:

* 0.6.1 (legacy): `activation_encodings` / `param_encodings` map a tensor name to a
  list of dicts `{bitwidth, dtype, is_symmetric, scale, offset, min, max}`, one per
  channel (a per-tensor encoding is a list of one).
* 1.0.0: both keys hold lists of dicts `{name, enc_type, dtype, bw, is_sym, scale,
  offset}` with flat `scale`/`offset` arrays. `PER_BLOCK` adds `block_size` (scales
  channels × blocks, channel-major); `LPBQ` adds `compressed_bw` (the weights' bits;
  `bw` is the decompressed width) and `per_block_int_scale` (channels × blocks),
  with `scale`/`offset` one per channel.
* 2.0.0 / 2.1.0: one `encodings` list in ONNX QuantizeLinear terms
  (`output_dtype`, `y_scale`, `y_zero_point`, `axis`, `block_size`; LPBQ as
  `per_block_int_scale` × `per_channel_float_scale`, or a `y_scale` meta dict), the
  arrays nested in the weight's own layout with the block axis divided.

0.6.1 and 1.0.0 use QNN's convention, real = scale · (q + offset) with q on the
unsigned grid [0, 2^bw − 1] (a symmetric 8-bit encoding has offset −128), and do
not name the channel axis: it is the consuming op's output-channel axis. 2.x uses
ONNX's, real = scale · (q − zero_point) on `output_dtype`'s grid, with the axis.
(The orders above were read off aimet-onnx 2.42's exports of the same model in
1.0.0 and 2.0.0.) `TensorEncoding` holds any entry in one normal form and turns it
into qlower's `Quant` once the storage signedness and, for 1.0.0, the axes are known.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from qlower.diagnostics import QlowerError, error
from qlower.graph.types import Quant

KINDS = ("PER_TENSOR", "PER_CHANNEL", "PER_BLOCK", "LPBQ")
VERSIONS = ("0.6.1", "1.0.0", "2.0.0", "2.1.0")
WRITE_VERSIONS = ("0.6.1", "1.0.0")
MAX_FILE_BYTES = 1 << 30  # an encodings file of a 7B model is ~100 MB; past this it is not one


@attrs.frozen
class TensorEncoding:
    """One tensor's encoding, in one normal form whatever the file's version.

    `kind` is one of `KINDS`, or None for a float encoding (`dtype: float`: keep
    the tensor in float at `bitwidth` bits). `bitwidth` is the bits of each
    quantized element (LPBQ: the compressed width, e.g. 4). `scale` holds the
    effective scales — one, one per channel, or channels × blocks channel-major
    — and `offset` one per channel (one for per-tensor) on the unsigned grid of
    `bitwidth` bits: real = scale · (q + offset), q in [0, 2^bitwidth − 1].
    `axis`/`block_axis` are the channel and block axes when the file names them
    (2.x), else None: the consumer decides. LPBQ keeps its factors, so `scale`
    is exactly `channel_scales` × `block_int_scales` (the latter channel-major)
    and `block_scale_bitwidth` is the bits of the integer block scales.
    """

    name: str
    kind: str | None
    bitwidth: int
    symmetric: bool = False
    scale: tuple[float, ...] = ()
    offset: tuple[int, ...] = ()
    role: str | None = None  # "activation" | "param" | None (2.x files do not say)
    axis: int | None = None
    block_size: int | None = None
    block_axis: int | None = None
    channel_scales: tuple[float, ...] | None = None
    block_int_scales: tuple[int, ...] | None = None
    block_scale_bitwidth: int | None = None

    @property
    def is_float(self) -> bool:
        return self.kind is None

    @property
    def channels(self) -> int:
        return len(self.offset)

    def quant(self, *, signed: bool, axis: int | None = None, block_axis: int | None = None,
              shape: tuple[int, ...] | list[int] | None = None) -> Quant:
        """The encoding as qlower's `Quant` for storage that is `signed` or not.

        `axis` (channel) and `block_axis` are needed for per-channel and block
        encodings of files that do not name them; given `shape`, the counts are
        checked against it. Raises ValueError, naming the tensor, when they do not fit.
        """
        if self.kind is None:
            raise ValueError(f"{self.name}: a float encoding has no integer grid")
        shift = 1 << (self.bitwidth - 1) if signed else 0
        zps = [-o - shift for o in self.offset]
        if self.kind == "PER_TENSOR":
            return Quant(self.scale[:1], zps[:1], bitwidth=self.bitwidth, symmetric=self.symmetric)
        axis = self.axis if axis is None else axis
        if axis is None:
            raise ValueError(f"{self.name}: a {self.kind} encoding needs the channel axis")
        dims = tuple(shape) if shape is not None else None
        if dims is not None:
            axis %= len(dims)
            if dims[axis] != self.channels:
                raise ValueError(f"{self.name}: {self.channels} channel encodings for dimension {axis} "
                                 f"({dims[axis]}) of {list(dims)}")
        if self.kind == "PER_CHANNEL":
            return Quant(self.scale, zps, axis=axis, bitwidth=self.bitwidth, symmetric=self.symmetric)
        block_axis = self.block_axis if block_axis is None else block_axis
        if block_axis is None:
            raise ValueError(f"{self.name}: a {self.kind} encoding needs the block axis")
        if dims is not None:
            block_axis %= len(dims)
            blocks = len(self.scale) // self.channels
            if block_axis == axis or dims[block_axis] != blocks * (self.block_size or 0):
                raise ValueError(f"{self.name}: {blocks} blocks of {self.block_size} do not cover dimension "
                                 f"{block_axis} ({dims[block_axis]}) of {list(dims)}")
        return Quant(self.scale, zps, axis=axis, bitwidth=self.bitwidth, symmetric=self.symmetric,
                     block_size=self.block_size, block_axis=block_axis)

    @staticmethod
    def from_quant(name: str, quant: Quant, *, signed: bool, bitwidth: int | None = None,
                   role: str | None = None) -> TensorEncoding:
        """qlower's `Quant` on a `signed` (or unsigned) storage grid as a file entry.

        `bitwidth` is the storage width when the Quant does not narrow it.
        """
        bits = quant.bitwidth or bitwidth
        if bits is None:
            raise ValueError(f"{name}: the encoding's bitwidth must be known to export it")
        shift = 1 << (bits - 1) if signed else 0
        offsets = tuple(int(-z - shift) for z in quant.zero_point)
        if quant.block_size is not None:
            return TensorEncoding(name, "PER_BLOCK", bits, quant.symmetric, quant.scale, offsets, role=role,
                                  axis=quant.axis, block_size=quant.block_size, block_axis=quant.block_axis)
        kind = "PER_TENSOR" if quant.axis is None else "PER_CHANNEL"
        return TensorEncoding(name, kind, bits, quant.symmetric, quant.scale, offsets, role=role, axis=quant.axis)


@attrs.frozen
class EncodingSet:
    """Every entry of an encodings file, by tensor name."""

    entries: Mapping[str, TensorEncoding]
    version: str = "1.0.0"
    excluded_layers: tuple[str, ...] = ()
    quantizer_args: Mapping[str, Any] = attrs.field(factory=dict)

    def get(self, name: str) -> TensorEncoding | None:
        return self.entries.get(name)

    @property
    def activations(self) -> dict[str, TensorEncoding]:
        """Entries a file lists as activations (2.x files: every entry, as they do not say)."""
        return {n: e for n, e in self.entries.items() if e.role != "param"}

    @property
    def params(self) -> dict[str, TensorEncoding]:
        return {n: e for n, e in self.entries.items() if e.role == "param"}


def read_encodings(path: str | Path) -> EncodingSet:
    """Read an encodings file; every problem is a `QlowerError` naming the file and entry."""
    path = Path(path)
    try:
        if not path.is_file():
            raise QlowerError(error(f"{path}: not a regular file", code="io"))
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise QlowerError(error(f"{path}: {size} bytes is too large for an encodings file", code="io"))
        with open(path, "rb") as f:
            text = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise QlowerError(error(f"cannot read encodings file {path}: {e.strerror or e}", code="io")) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise QlowerError(error(f"{path}:{e.lineno}:{e.colno}: not a JSON encodings file: {e.msg}",
                                code="bad-encodings")) from None
    except (ValueError, RecursionError):
        raise QlowerError(error(f"{path}: not a JSON encodings file (not UTF-8 text, or nested too deeply)",
                                code="bad-encodings")) from None
    return parse_encodings(doc, str(path))


def parse_encodings(doc: Any, source: str = "<encodings>") -> EncodingSet:
    """An encodings file's JSON document (any of `VERSIONS`) as an `EncodingSet`."""
    p = _Parser(source)
    if not isinstance(doc, dict):
        p.fail("an encodings file must hold a JSON object")
    version = doc.get("version", "0.6.1")
    if version not in VERSIONS:
        p.fail(f"encodings version {version!r} is not one qlower reads ({', '.join(VERSIONS)})")
    entries: dict[str, TensorEncoding] = {}

    def add(e: TensorEncoding, where: str) -> None:
        if e.name in entries:
            p.fail(f"{where}: tensor {e.name!r} has two encodings")
        entries[e.name] = e

    if version.startswith("2."):
        items = doc.get("encodings", [])
        if not isinstance(items, list):
            p.fail("`encodings` must be a list")
        for i, item in enumerate(items):
            add(p.v2(item, f"encodings[{i}]"), f"encodings[{i}]")
    else:
        for key, role in (("activation_encodings", "activation"), ("param_encodings", "param")):
            section = doc.get(key, [] if version == "1.0.0" else {})
            if version == "1.0.0":
                if not isinstance(section, list):
                    p.fail(f"`{key}` must be a list in a 1.0.0 file")
                for i, item in enumerate(section):
                    add(p.v1(item, role, f"{key}[{i}]"), f"{key}[{i}]")
            else:
                if not isinstance(section, dict):
                    p.fail(f"`{key}` must map tensor names to encodings in a {version} file")
                for name, item in section.items():
                    add(p.legacy(name, item, role, f"{key}[{name!r}]"), f"{key}[{name!r}]")
    excluded = doc.get("excluded_layers", [])
    if not isinstance(excluded, list) or not all(isinstance(x, str) for x in excluded):
        p.fail("`excluded_layers` must be a list of layer names")
    args = doc.get("quantizer_args", {})
    return EncodingSet(entries, version, tuple(excluded), args if isinstance(args, dict) else {})


def to_json(encodings: EncodingSet, version: str = "1.0.0") -> dict[str, Any]:
    """The document `write_encodings` writes: 1.0.0 (default) or the legacy 0.6.1 layout."""
    if version not in WRITE_VERSIONS:
        raise ValueError(f"qlower writes encodings version {' or '.join(WRITE_VERSIONS)}, not {version}")
    acts = [e for e in encodings.entries.values() if e.role != "param"]
    params = [e for e in encodings.entries.values() if e.role == "param"]
    if version == "1.0.0":
        doc: dict[str, Any] = {"version": "1.0.0",
                               "activation_encodings": [_v1_entry(e) for e in acts],
                               "param_encodings": [_v1_entry(e) for e in params]}
    else:
        doc = {"version": "0.6.1",
               "activation_encodings": {e.name: _legacy_entry(e) for e in acts},
               "param_encodings": {e.name: _legacy_entry(e) for e in params}}
    if encodings.excluded_layers:
        doc["excluded_layers"] = list(encodings.excluded_layers)
    if encodings.quantizer_args:
        doc["quantizer_args"] = dict(encodings.quantizer_args)
    return doc


def write_encodings(path: str | Path, encodings: EncodingSet, version: str = "1.0.0") -> None:
    """Write an encodings file QNN's converters (`--quantization_overrides`) and AIMET read."""
    from qlower._files import write_atomic

    try:
        text = json.dumps(to_json(encodings, version), indent=1, allow_nan=False)
    except ValueError as e:
        raise QlowerError(error(f"cannot write encodings file {path}: {e}", code="bad-encodings")) from None
    write_atomic(Path(path), (text + "\n").encode())


def _v1_entry(e: TensorEncoding) -> dict[str, Any]:
    if e.kind is None:
        return {"name": e.name, "dtype": "FLOAT", "enc_type": "PER_TENSOR", "bw": e.bitwidth}
    out: dict[str, Any] = {"name": e.name, "dtype": "INT", "enc_type": e.kind, "bw": e.bitwidth,
                           "is_sym": e.symmetric, "scale": list(e.scale), "offset": list(e.offset)}
    if e.block_size is not None:
        out["block_size"] = e.block_size
    if e.kind == "LPBQ":
        assert e.channel_scales is not None and e.block_int_scales is not None and e.block_scale_bitwidth
        wide = e.bitwidth + e.block_scale_bitwidth
        out.update(bw=wide, compressed_bw=e.bitwidth, scale=list(e.channel_scales),
                   offset=[-(1 << (wide - 1))] * e.channels, per_block_int_scale=list(e.block_int_scales))
    return out


def _legacy_entry(e: TensorEncoding) -> list[dict[str, Any]]:
    if e.kind is None:
        return [{"bitwidth": e.bitwidth, "dtype": "float"}]
    if e.kind in ("PER_BLOCK", "LPBQ"):
        raise ValueError(f"{e.name}: the 0.6.1 layout has no block encodings; write version 1.0.0")
    top = (1 << e.bitwidth) - 1
    return [{"bitwidth": e.bitwidth, "dtype": "int", "is_symmetric": str(bool(e.symmetric)),
             "scale": s, "offset": o, "min": s * o, "max": s * (top + o)}
            for s, o in zip(e.scale, e.offset, strict=True)]


class _Parser:
    """Checks one file's entries, naming the file and the entry in every error."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, message: str) -> None:
        raise QlowerError(error(f"{self.source}: {message}", code="bad-encodings"))

    def numbers(self, v: Any, where: str, what: str, *, integer: bool = False) -> np.ndarray:
        """A number or a (nested, rectangular) list of numbers, keeping its shape."""
        if isinstance(v, int | float) and not isinstance(v, bool):
            v = [v]
        if not isinstance(v, list):
            self.fail(f"{where}: `{what}` must be a number or a list of numbers")
        try:
            a = np.asarray(v)
        except (ValueError, TypeError):
            a = None
        if a is None or a.dtype.kind not in "iuf" or a.dtype == object:
            self.fail(f"{where}: `{what}` must be a number or a rectangular list of numbers")
        a = a.astype(np.float64)
        if a.size == 0 or not np.isfinite(a).all():
            self.fail(f"{where}: `{what}` must hold finite numbers" + ("" if a.size else ", not be empty"))
        if integer and (a != np.rint(a)).any():
            self.fail(f"{where}: `{what}` must hold integers")
        return a

    def positive(self, a: np.ndarray, where: str, what: str) -> tuple[float, ...]:
        if (a <= 0).any():
            self.fail(f"{where}: `{what}` must be positive")
        return tuple(a.ravel().tolist())

    def int_field(self, v: Any, where: str, key: str, lo: int, hi: int) -> int:
        if isinstance(v, bool) or not isinstance(v, int | float) or v != int(v) or not lo <= v <= hi:
            self.fail(f"{where}: `{key}` must be an integer from {lo} to {hi}, not {v!r}")
        return int(v)

    def name(self, v: Any, where: str) -> str:
        if not isinstance(v, str) or not v:
            self.fail(f"{where}: `name` must be a non-empty string")
        return v

    def flag(self, v: Any, where: str, key: str) -> bool:
        if isinstance(v, bool):
            return v
        if v in ("True", "False", "true", "false"):
            return v in ("True", "true")
        self.fail(f"{where}: `{key}` must be true or false, not {v!r}")
        return False

    def offsets(self, a: np.ndarray, bits: int, where: str) -> tuple[int, ...]:
        out = tuple(int(x) for x in a.ravel().tolist())
        if any(not -(1 << bits) < o <= 0 for o in out):
            self.fail(f"{where}: offsets must lie in (-2^{bits}, 0] for {bits}-bit encodings")
        return out

    def v1(self, item: Any, role: str, where: str) -> TensorEncoding:
        if not isinstance(item, dict):
            self.fail(f"{where}: an encoding must be a JSON object")
        name = self.name(item.get("name"), where)
        where = f"{where} ({name})"
        dtype = str(item.get("dtype", "INT")).upper()
        bits = self.int_field(item.get("bw"), where, "bw", 2, 32)
        if dtype == "FLOAT":
            return TensorEncoding(name, None, bits, role=role)
        if dtype != "INT":
            self.fail(f"{where}: `dtype` must be INT or FLOAT, not {item.get('dtype')!r}")
        kind = item.get("enc_type", "PER_TENSOR")
        if kind not in KINDS:
            self.fail(f"{where}: `enc_type` must be one of {', '.join(KINDS)}, not {kind!r}")
        sym = self.flag(item.get("is_sym", False), where, "is_sym")
        scale = self.positive(self.numbers(item.get("scale"), where, "scale"), where, "scale")
        offset_a = self.numbers(item.get("offset"), where, "offset", integer=True)
        block = None
        if kind in ("PER_BLOCK", "LPBQ"):
            block = self.int_field(item.get("block_size"), where, "block_size", 1, 1 << 31)
        if kind == "LPBQ":
            compressed = self.int_field(item.get("compressed_bw"), where, "compressed_bw", 2, bits - 1)
            ints = self.numbers(item.get("per_block_int_scale"), where, "per_block_int_scale", integer=True)
            if not sym:
                self.fail(f"{where}: an LPBQ encoding must be symmetric (is_sym true)")
            if len(offset_a.ravel()) != len(scale) or ints.size % len(scale):
                self.fail(f"{where}: {len(scale)} channel scales, {offset_a.size} offsets and {ints.size} block "
                          f"scales do not describe channels × blocks")
            ints_t = tuple(int(x) for x in self.positive(ints, where, "per_block_int_scale"))
            return _lpbq(name, compressed, bits - compressed, scale, ints_t, role=role, block_size=block)
        offset = self.offsets(offset_a, bits, where)
        if kind == "PER_BLOCK":
            if len(scale) % len(offset):
                self.fail(f"{where}: {len(scale)} block scales do not split over {len(offset)} channels")
        elif len(scale) != len(offset):
            self.fail(f"{where}: {len(scale)} scales but {len(offset)} offsets")
        if kind == "PER_TENSOR" and len(scale) != 1:
            self.fail(f"{where}: a PER_TENSOR encoding has one scale, not {len(scale)}")
        return TensorEncoding(name, kind, bits, sym, scale, offset, role=role, block_size=block)

    def legacy(self, name: Any, item: Any, role: str, where: str) -> TensorEncoding:
        name = self.name(name, where)
        if not isinstance(item, list) or not item or not all(isinstance(x, dict) for x in item):
            self.fail(f"{where}: an encoding must be a non-empty list of JSON objects (one per channel)")
        first = item[0]
        dtype = str(first.get("dtype", "int")).lower()
        bits = self.int_field(first.get("bitwidth"), where, "bitwidth", 2, 32)
        if dtype == "float":
            return TensorEncoding(name, None, bits, role=role)
        if dtype != "int":
            self.fail(f"{where}: `dtype` must be int or float, not {first.get('dtype')!r}")
        scale: list[float] = []
        offset: list[int] = []
        syms = set()
        for c, ch in enumerate(item):
            at = f"{where}[{c}]"
            if self.int_field(ch.get("bitwidth"), at, "bitwidth", 2, 32) != bits:
                self.fail(f"{at}: channels disagree on `bitwidth`")
            syms.add(self.flag(ch.get("is_symmetric", "False"), at, "is_symmetric"))
            if "scale" in ch and "offset" in ch:
                scale += self.positive(self.numbers(ch["scale"], at, "scale"), at, "scale")
                offset += self.offsets(self.numbers(ch["offset"], at, "offset", integer=True), bits, at)
            else:  # min/max only: the encoding they span on the unsigned grid
                lo, hi = self.numbers([ch.get("min"), ch.get("max")], at, "min/max").tolist()
                q = Quant.for_range(lo, hi, "uint32" if bits > 16 else "uint16", bitwidth=bits)
                scale.append(q.scale[0])
                offset.append(-q.zero_point[0])
        if len(syms) > 1:
            self.fail(f"{where}: channels disagree on `is_symmetric`")
        kind = "PER_TENSOR" if len(item) == 1 else "PER_CHANNEL"
        return TensorEncoding(name, kind, bits, syms.pop(), tuple(scale), tuple(offset), role=role)

    def v2(self, item: Any, where: str) -> TensorEncoding:
        if not isinstance(item, dict):
            self.fail(f"{where}: an encoding must be a JSON object")
        name = self.name(item.get("name"), where)
        where = f"{where} ({name})"
        dtype = item.get("output_dtype")
        digits = dtype.removeprefix("u").removeprefix("int") if isinstance(dtype, str) else ""
        if not (isinstance(dtype, str) and dtype.removeprefix("u").startswith("int") and digits.isdigit()):
            self.fail(f"{where}: `output_dtype` {dtype!r} is not an integer type qlower reads (int2..int32, uint2..uint16)")
        signed = not dtype.startswith("u")
        bits = self.int_field(int(digits), where, "output_dtype", 2, 32)
        axis = item.get("axis")
        if axis is not None:
            axis = self.int_field(axis, where, "axis", -8, 8)
        block = item.get("block_size")
        y_scale = item.get("y_scale")
        ints = channel = None
        if isinstance(y_scale, dict):  # 2.1.0 meta encoding: y_scale = x_scale · x
            ints, channel = y_scale.get("x"), y_scale.get("x_scale")
        elif "per_block_int_scale" in item:
            ints, channel = item.get("per_block_int_scale"), item.get("per_channel_float_scale")
        shift = 1 << (bits - 1) if signed else 0
        if block is None:
            if ints is not None:
                self.fail(f"{where}: block scales without `block_size`")
            scale = self.positive(self.numbers(y_scale, where, "y_scale"), where, "y_scale")
            zps = self.numbers(item.get("y_zero_point", 0), where, "y_zero_point", integer=True).ravel()
            if zps.size == 1:
                zps = np.repeat(zps, len(scale))
            if zps.size != len(scale):
                self.fail(f"{where}: {len(scale)} scales but {zps.size} zero points")
            offset = self.offsets(-(zps + shift), bits, where)
            if len(scale) > 1 and axis is None:
                self.fail(f"{where}: a per-channel encoding needs `axis`")
            kind = "PER_TENSOR" if len(scale) == 1 and axis is None else "PER_CHANNEL"
            sym = bool((zps == (0 if signed else 1 << (bits - 1))).all())
            return TensorEncoding(name, kind, bits, sym, scale, offset, axis=axis)
        block = self.int_field(block, where, "block_size", 1, 1 << 31)
        if axis is None:
            self.fail(f"{where}: a block encoding needs `axis` (the block axis)")
        # The arrays are the weight's layout with the block axis divided: find the channel axis.
        grid = self.numbers(ints if ints is not None else y_scale, where,
                            "per_block_int_scale" if ints is not None else "y_scale", integer=ints is not None)
        rank = grid.ndim
        if not -rank <= axis < rank:
            self.fail(f"{where}: `axis` {axis} is outside the scale array's rank {rank}")
        block_axis = axis % rank
        others = [d for d in range(rank) if d != block_axis and grid.shape[d] > 1]
        if len(others) > 1:
            self.fail(f"{where}: block scales vary along more than one axis besides the block axis {block_axis}")
        chan_axis = others[0] if others else (1 - block_axis if rank == 2 else 0)
        flat = np.moveaxis(grid, (chan_axis, block_axis), (0, 1)).reshape(grid.shape[chan_axis], -1)
        channels = flat.shape[0]
        zps = self.numbers(item.get("y_zero_point", 0), where, "y_zero_point", integer=True)
        if zps.size not in (1, channels) and not (zps == zps.ravel()[0]).all():
            self.fail(f"{where}: qlower keeps one zero point per channel; the blocks of a channel differ")
        zp = np.full(channels, zps.ravel()[0]) if zps.size != channels else zps.ravel()
        offset = self.offsets(-(zp + shift), bits, where)
        sym = bool((zp == (0 if signed else 1 << (bits - 1))).all())
        if ints is None:
            return TensorEncoding(name, "PER_BLOCK", bits, sym, self.positive(flat, where, "y_scale"), offset,
                                  axis=chan_axis, block_size=block, block_axis=block_axis)
        ch = self.positive(self.numbers(channel, where, "per-channel scale"), where, "per-channel scale")
        if len(ch) != channels:
            self.fail(f"{where}: {len(ch)} per-channel scales for {channels} channels")
        if not sym:
            self.fail(f"{where}: an LPBQ encoding must be symmetric")
        ints_t = tuple(int(x) for x in self.positive(flat, where, "per_block_int_scale"))
        # 2.x does not state the block scales' width; integer scales in [1, 2^k] need k bits (AIMET: 4).
        return _lpbq(name, bits, max(4, (max(ints_t) - 1).bit_length()), ch, ints_t,
                     axis=chan_axis, block_size=block, block_axis=block_axis)


def _lpbq(name: str, bits: int, scale_bits: int, channel: tuple[float, ...], ints: tuple[int, ...],
          **kw: Any) -> TensorEncoding:
    """An LPBQ entry: effective block scales = per-channel float × per-block integer (channel-major)."""
    per = len(ints) // len(channel)
    grid = np.asarray(ints, dtype=np.float64).reshape(len(channel), per) * np.asarray(channel)[:, None]
    return TensorEncoding(name, "LPBQ", bits, True, tuple(grid.ravel().tolist()),
                          (-(1 << (bits - 1)),) * len(channel), channel_scales=channel, block_int_scales=ints,
                          block_scale_bitwidth=scale_bits, **kw)
