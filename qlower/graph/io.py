"""The `qlower-graph/1` JSON format: load and save graphs (see docs/graph-format.md).

Loading is built for benchmark graphs of a million ops: one `json.loads`, one
pass over tensors and one over nodes, with every check done inline on the item
being built. Constant data is inline nested lists or a reference into an npz
archive next to the JSON; each archive is opened once, on first reference, and
uncompressed members are sliced straight out of the file bytes.
"""

from __future__ import annotations

import ast
import gc
import io
import json
import math
import os
import re
import secrets
import struct
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from qlower.diagnostics import Diagnostic, QlowerError, Span, did_you_mean, error
from qlower.graph.core import Graph, Value
from qlower.graph.types import DTYPE_ALIASES, DTYPE_NAMES, Quant

FORMAT = "qlower-graph/1"
_DTYPES: dict[str, np.dtype] = {n: np.dtype(n) for n in sorted(DTYPE_NAMES)}
_TOP_KEYS = frozenset({"format", "name", "inputs", "outputs", "tensors", "nodes"})
_TENSOR_KEYS = frozenset({"dtype", "shape", "quant", "data"})
_NODE_KEYS = frozenset({"name", "op", "inputs", "outputs", "attrs"})
_QUANT_KEYS = frozenset({"scale", "zero_point", "axis", "bitwidth", "symmetric", "block_size", "block_axis"})
_MAX_ERRORS = 50


# ------------------------------------------------------------------ loading
def load_graph(path: str | Path) -> Graph:
    """Read a graph file; npz references resolve against the file's folder."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise QlowerError(error(f"cannot read graph file {path}: {getattr(e, 'strerror', None) or e}",
                                code="io")) from None
    return loads_graph(text, base_dir=path.parent, file=str(path))


def loads_graph(text: str, base_dir: Path | None = None, file: str = "<string>") -> Graph:
    """Parse graph JSON; `base_dir` (default: the working directory) anchors npz paths."""
    enabled = gc.isenabled()
    gc.disable()  # a load allocates millions of acyclic objects; cyclic GC passes would dominate
    try:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise QlowerError(error(f"invalid JSON: {e.msg}", span=Span.point(file, e.lineno, e.colno),
                                    code="invalid-json")) from None
        return _Loader(text, file, Path(base_dir) if base_dir is not None else Path.cwd()).load(doc)
    finally:
        if enabled:
            gc.enable()


def _is_num(x: Any) -> bool:
    return (type(x) is float or type(x) is int) and x is not True and x is not False


def _fmt(x: Any) -> str:
    """A value as the user wrote it in JSON."""
    try:
        return json.dumps(x, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(x)


@attrs.define
class _Loader:
    """State of one load: the source (to locate errors), collected errors, open npz archives."""

    text: str
    file: str
    base_dir: Path
    errors: list[Diagnostic] = attrs.Factory(list)
    archives: dict[str, _Npz | None] = attrs.Factory(dict)

    # -------------------------------------------------------------- errors
    def err(self, message: str, code: str, subject: str | None = None, hint: str | None = None) -> None:
        self.errors.append(error(message, span=self._locate(subject), subject=subject, hint=hint, code=code))
        if len(self.errors) >= _MAX_ERRORS:
            self.raise_errors()

    def raise_errors(self) -> None:
        if self.errors:
            raise QlowerError(self.errors)

    def _locate(self, subject: str | None) -> Span | None:
        """Best-effort position of a tensor entry or node in the source (error path only)."""
        if subject is None:
            return None
        kind, _, name = subject.partition(" ")
        quoted = re.escape(json.dumps(name, ensure_ascii=False))
        if kind == "tensor":
            start = self.text.find('"tensors"')
            m = re.compile(quoted + r"\s*:\s*[{\[]").search(self.text, max(start, 0))
        else:
            m = re.compile(r'"name"\s*:\s*' + quoted).search(self.text)
        if m is None:
            return None
        line = self.text.count("\n", 0, m.start()) + 1
        return Span.point(self.file, line, m.start() - self.text.rfind("\n", 0, m.start()))

    # ---------------------------------------------------------------- top
    def load(self, doc: Any) -> Graph:
        if type(doc) is not dict:
            raise QlowerError(error("a graph file must hold a JSON object", code="bad-type"))
        fmt = doc.get("format")
        if fmt != FORMAT:
            what = "missing \"format\"" if fmt is None else f"unsupported format {_fmt(fmt)}"
            raise QlowerError(error(f"{what}: expected \"format\": \"{FORMAT}\"", code="bad-format",
                                    span=Span.point(self.file, 1, 1)))
        for k in sorted(doc.keys() - _TOP_KEYS):
            self.err(f"unknown top-level key {_fmt(k)}", "unknown-key", hint=did_you_mean(k, _TOP_KEYS))
        want = {"tensors": dict, "nodes": list, "inputs": list, "outputs": list}
        for k, t in want.items():
            if k not in doc:
                self.err(f"missing key \"{k}\"", "missing-key")
            elif type(doc[k]) is not t:
                self.err(f"\"{k}\" must be a JSON {'object' if t is dict else 'array'}", "bad-type")
        name = doc.get("name", "graph")
        if type(name) is not str:
            self.err("\"name\" must be a string", "bad-type")
        self.raise_errors()
        g = Graph(name)
        with g.bulk():
            values = self.tensors(g, doc["tensors"])
            self.nodes(g, values, doc["nodes"])
        ins = self.io_list(values, doc["inputs"], "input")
        outs = self.io_list(values, doc["outputs"], "output")
        for v in ins:
            if v.producer is not None:
                self.err(f"graph input `{v.name}` is produced by node `{v.producer.name}`", "input-produced",
                         f"tensor {v.name}")
        self.raise_errors()
        g.set_io(ins, outs)
        return g

    def io_list(self, values: dict[str, Value], names: list, what: str) -> list[Value]:
        out: dict[str, Value] = {}
        for n in names:
            v = values.get(n) if type(n) is str else None
            if v is None:
                self.err(f"graph {what} {_fmt(n)} names no tensor in \"tensors\"", "unknown-tensor",
                         hint=did_you_mean(n, values) if type(n) is str else None)
            elif n in out:
                self.err(f"graph {what} `{n}` is listed twice", "duplicate-io", f"tensor {n}")
            else:
                out[n] = v
        return list(out.values())

    # ------------------------------------------------------------ tensors
    def tensors(self, g: Graph, tensors: dict) -> dict[str, Value]:
        values: dict[str, Value] = {}
        dtypes, add_value, keys = _DTYPES, g.add_value, _TENSOR_KEYS
        for name, t in tensors.items():
            if type(t) is not dict or not name or not keys.issuperset(t) or "dtype" not in t:
                values[name] = add_value(name, np.float32, None)
                self.bad_tensor(name, t)
                continue
            dt = t["dtype"]
            dtype = dtypes.get(dt) if type(dt) is str else None
            if dtype is None:
                self.unknown_dtype(name, dt)
                dtype = _DTYPES["float32"]
            shape = t.get("shape")
            if shape is not None and (type(shape) is not list or
                                      not all(type(d) is int and d >= 0 for d in shape)):
                self.err(f"tensor `{name}`: shape must be a list of non-negative integers, not {_fmt(shape)}",
                         "bad-shape", f"tensor {name}")
                shape = None
            q = t.get("quant")
            quant = None if q is None else self.quant(name, q, dtype, shape)
            d = t.get("data")
            data = None if d is None else self.data(name, d, dtype, shape)
            values[name] = add_value(name, dtype, shape, quant=quant, data=data)
        return values

    def bad_tensor(self, name: str, t: Any) -> None:
        subject = f"tensor {name}"
        if not name:
            self.err("a tensor may not have an empty name (\"\" means an absent optional input)",
                     "bad-name", None)
        elif type(t) is not dict:
            self.err(f"tensor `{name}`: entry must be a JSON object", "bad-type", subject)
        elif "dtype" not in t:
            self.err(f"tensor `{name}`: missing key \"dtype\"", "missing-key", subject)
        for k in (sorted(t.keys() - _TENSOR_KEYS) if type(t) is dict else ()):
            self.err(f"tensor `{name}`: unknown key {_fmt(k)}", "unknown-key", subject,
                     did_you_mean(k, _TENSOR_KEYS))

    def unknown_dtype(self, name: str, dt: Any) -> None:
        hint = None
        if type(dt) is str:
            alias = DTYPE_ALIASES.get(dt) or DTYPE_ALIASES.get(dt.lower())
            hint = f"did you mean `{alias}`?" if alias in DTYPE_NAMES else did_you_mean(dt, sorted(DTYPE_NAMES))
        self.err(f"tensor `{name}`: unknown dtype {_fmt(dt)}", "unknown-dtype", f"tensor {name}",
                 hint or f"dtypes are numpy names: {', '.join(sorted(DTYPE_NAMES))}")

    def quant(self, name: str, q: Any, dtype: np.dtype, shape: list | None) -> Quant | None:
        subject = f"tensor {name}"
        problems: list[tuple[str, str]] = []
        if type(q) is not dict:
            problems.append(("bad-quant", "\"quant\" must be a JSON object"))
        elif "scale" not in q:
            problems.append(("missing-key", "\"quant\" is missing key \"scale\""))
        else:
            problems += [("unknown-key", f"unknown \"quant\" key {_fmt(k)}") for k in sorted(q.keys() - _QUANT_KEYS)]
            problems += _quant_json_problems(q)
        if not problems:
            scale, zp = q["scale"], q.get("zero_point")  # absent or null: zeros
            if type(scale) is not list:
                scale, zp = [scale], [zp or 0]
            elif zp is None:
                zp = [0] * len(scale)
            try:
                quant = Quant(scale, zp, q.get("axis"), q.get("bitwidth"), q.get("symmetric", False),
                              q.get("block_size"), q.get("block_axis"))
            except OverflowError:  # Quant keeps zero points as int64
                problems = [("bad-quant", "a zero point does not fit in a 64-bit integer")]
            else:
                problems = quant_problems(quant, dtype, shape)
            if not problems:
                return quant
        for code, msg in problems:
            self.err(f"tensor `{name}`: {msg}", code, subject)
        return None

    def data(self, name: str, d: Any, dtype: np.dtype, shape: list | None) -> np.ndarray | None:
        subject = f"tensor {name}"
        if shape is None:
            self.err(f"tensor `{name}`: a constant needs a declared \"shape\"", "bad-shape", subject)
            return None
        if type(d) is dict:
            arr = self.npz_data(name, d)
            if arr is None:
                return None
            if arr.dtype != dtype:
                if arr.dtype.kind == dtype.kind and arr.dtype.itemsize == dtype.itemsize:
                    arr = arr.astype(dtype)  # byte order only
                else:
                    self.err(f"tensor `{name}`: npz array has dtype {arr.dtype} but the tensor declares {dtype}",
                             "data-dtype", subject)
                    return None
        else:
            arr, problem = _inline_array(d, dtype)
            if arr is None:
                self.err(f"tensor `{name}`: {problem}", "bad-data", subject)
                return None
        if arr.shape != tuple(shape):
            if arr.size == 0 and math.prod(shape) == 0:
                return arr.reshape(shape)
            self.err(f"tensor `{name}`: data has shape {list(arr.shape)} but the declared shape is {shape}",
                     "data-shape", subject)
            return None
        return arr

    def npz_data(self, name: str, ref: dict) -> np.ndarray | None:
        subject = f"tensor {name}"
        file, key = ref.get("npz"), ref.get("key")
        if type(file) is not str or type(key) is not str or len(ref) != 2:
            self.err(f"tensor `{name}`: an npz reference is {{\"npz\": FILE, \"key\": KEY}} with string values, "
                     f"not {_fmt(ref)}", "bad-data", subject)
            return None
        if file not in self.archives:
            path = self.base_dir / file
            try:
                self.archives[file] = _Npz.open(path)
            except OSError as e:
                self.archives[file] = None
                self.err(f"tensor `{name}`: cannot open npz file {path}: {e.strerror or e}", "npz-missing", subject)
            except (zipfile.BadZipFile, ValueError) as e:
                self.archives[file] = None
                self.err(f"tensor `{name}`: {path} is not a valid npz archive: {e}", "npz-missing", subject)
        archive = self.archives[file]
        if archive is None:
            return None
        try:
            return archive.get(key)
        except KeyError:
            self.err(f"tensor `{name}`: npz file {file} has no array {_fmt(key)}", "npz-key", subject,
                     did_you_mean(key, archive.keys()))
        except (ValueError, OSError, zipfile.BadZipFile) as e:
            self.err(f"tensor `{name}`: cannot read array {_fmt(key)} from {file}: {e}", "npz-key", subject)
        return None

    # -------------------------------------------------------------- nodes
    def nodes(self, g: Graph, values: dict[str, Value], nodes: list) -> None:
        add_op, has_op, keys, plain = g.add_op, g.has_op, _NODE_KEYS, _PLAIN
        for i, n in enumerate(nodes):
            try:
                name, op, ins, outs = n["name"], n["op"], n["inputs"], n["outputs"]
                attrs_ = n.get("attrs", {})
                operands = [values[x] if x != "" else None for x in ins]
                results = [values[x] for x in outs]
            except (KeyError, TypeError, AttributeError):
                self.bad_node(i, n, values, g)
                continue
            if (type(name) is not str or type(op) is not str or type(ins) is not list or type(outs) is not list
                    or type(attrs_) is not dict or not keys.issuperset(n) or "." not in op or not name
                    or has_op(name) or "" in outs):
                self.bad_node(i, n, values, g)
                continue
            for r in results:
                if r.producer is not None:
                    self.err(f"tensor `{r.name}` is produced by two nodes: `{r.producer.name}` and `{name}`",
                             "multiple-producers", f"node {name}")
                    break
            else:
                if len(outs) > 1 and len(set(outs)) != len(outs):
                    self.err(f"node `{name}` lists an output twice", "multiple-producers", f"node {name}")
                    continue
                for k, v in attrs_.items():
                    if type(v) not in plain and not _plain_list(v):
                        self.err(f"node `{name}`: attribute `{k}` must be a JSON scalar or list, not {_fmt(v)}",
                                 "bad-attr", f"node {name}")
                add_op(name, op, operands, results, attrs_)

    def bad_node(self, i: int, n: Any, values: dict[str, Value], g: Graph) -> None:
        """Explain why node #i was rejected (slow path, runs only for broken nodes)."""
        before = len(self.errors)
        self._bad_node(i, n, values, g)
        if len(self.errors) == before:  # a safety net: a rejected node is never dropped silently
            self.err(f"node #{i} is malformed: {_fmt(n)[:200]}", "bad-type")

    def _bad_node(self, i: int, n: Any, values: dict[str, Value], g: Graph) -> None:
        if type(n) is not dict:
            self.err(f"node #{i}: entry must be a JSON object", "bad-type")
            return
        name = n.get("name")
        who, subject = (f"node `{name}`", f"node {name}") if type(name) is str and name else (f"node #{i}", None)
        for k in ("name", "op", "inputs", "outputs"):
            if k not in n:
                self.err(f"{who}: missing key \"{k}\"", "missing-key", subject)
        for k in sorted(n.keys() - _NODE_KEYS):
            self.err(f"{who}: unknown key {_fmt(k)}", "unknown-key", subject, did_you_mean(k, _NODE_KEYS))
        if "name" in n and (type(name) is not str or not name):
            self.err(f"{who}: \"name\" must be a non-empty string", "bad-type", subject)
        elif g.has_op(name):
            self.err(f"duplicate node name `{name}`", "duplicate-node", subject)
        op = n.get("op")
        if "op" in n and (type(op) is not str or "." not in op):
            self.err(f"{who}: \"op\" must be a dialect-qualified op type like \"mllm.Add\", not {_fmt(op)}",
                     "bad-type", subject)
        if type(n.get("attrs", {})) is not dict:
            self.err(f"{who}: \"attrs\" must be a JSON object", "bad-type", subject)
        for key, what in (("inputs", "input"), ("outputs", "output")):
            names = n.get(key)
            if key not in n:
                continue
            if type(names) is not list:
                self.err(f"{who}: \"{key}\" must be a list of tensor names", "bad-type", subject)
                continue
            for j, x in enumerate(names):
                if x == "" and key == "outputs":
                    self.err(f"{who}: output {j} is empty; only inputs may be absent (\"\")", "bad-type", subject)
                elif x != "" and (type(x) is not str or x not in values):
                    kind = "unknown-tensor" if key == "inputs" else "undeclared-tensor"
                    extra = "" if key == "inputs" else " (every node output needs an entry with its dtype and shape)"
                    self.err(f"{who}: {what} {j} names tensor {_fmt(x)}, which is not declared in \"tensors\"{extra}",
                             kind, subject, did_you_mean(x, values) if type(x) is str else None)


_PLAIN = frozenset({int, float, str, bool, type(None)})


def _plain_list(v: Any) -> bool:
    """A JSON list of scalars and lists (no objects), as attributes allow."""
    return type(v) is list and all(type(x) in _PLAIN or _plain_list(x) for x in v)


def _inline_array(d: Any, dtype: np.dtype) -> tuple[np.ndarray | None, str]:
    """Inline data as an array of `dtype`, refusing lossy conversions."""
    try:
        raw = np.array(d)
    except (ValueError, TypeError, OverflowError):
        return None, "data must be a rectangular nested list of numbers"
    kind, want = raw.dtype.kind, dtype.kind
    if raw.size and want in "iu":
        # mixed huge and small ints infer float64, so fall back to the exact Python values
        if kind in "iu" or (kind == "f" and all(type(x) is int for x in _leaves(d))):
            info = np.iinfo(dtype)
            try:
                return np.array(d, dtype=dtype), ""
            except OverflowError:
                bad = next(x for x in _leaves(d) if not info.min <= x <= info.max)
                return None, f"data value {bad} is out of range for {dtype}"
        return None, f"data for dtype {dtype} must hold integers"
    if raw.size and not (kind == "b" if want == "b" else kind in "iuf"):
        return None, f"data for dtype {dtype} must hold {'true/false' if want == 'b' else 'numbers'}"
    with np.errstate(over="ignore"):
        arr = raw.astype(dtype)
    if want == "f" and raw.size and not np.array_equal(np.isfinite(arr), np.isfinite(raw)):
        return None, f"data holds a value out of range for {dtype}"
    return arr, ""


def _leaves(d: Any) -> Iterator[Any]:
    if type(d) is list:
        for x in d:
            yield from _leaves(x)
    else:
        yield d


def _quant_json_problems(q: dict) -> list[tuple[str, str]]:
    """JSON-level type checks of a quant object (before it becomes a `Quant`)."""
    out = []
    axis, scale, zp = q.get("axis"), q["scale"], q.get("zero_point")
    if axis is None:
        if not _is_num(scale):
            out.append(("bad-quant", "per-tensor \"scale\" must be a number (lists need \"axis\")"))
        if zp is not None and type(zp) is not int:
            out.append(("bad-quant", "per-tensor \"zero_point\" must be an integer"))
    else:
        if type(scale) is not list or not all(_is_num(s) for s in scale):
            out.append(("bad-quant", "per-axis \"scale\" must be a list of numbers"))
        if zp is not None and (type(zp) is not list or not all(type(z) is int for z in zp)):
            out.append(("bad-quant", "per-axis \"zero_point\" must be a list of integers"))
    for k in ("axis", "bitwidth", "block_size", "block_axis"):
        if k in q and type(q[k]) is not int:
            out.append(("bad-quant", f"\"{k}\" must be an integer"))
    if type(q.get("symmetric", False)) is not bool:
        out.append(("bad-quant", "\"symmetric\" must be true or false"))
    return out


def quant_problems(q: Quant, dtype: np.dtype, shape: Any) -> list[tuple[str, str]]:
    """What is wrong with an encoding on a tensor of `dtype`/`shape`, as (code, message) pairs."""
    out: list[tuple[str, str]] = []
    rank = None if shape is None else len(shape)
    if len(q.scale) != len(q.zero_point):
        out.append(("quant-length", f"quant has {len(q.scale)} scales but {len(q.zero_point)} zero points"))
    if q.axis is None:
        if q.block_size is not None or q.block_axis is not None:
            out.append(("bad-quant", "block quantization needs \"axis\" (the channel axis)"))
        elif len(q.scale) != 1:
            out.append(("quant-length", f"per-tensor quant needs one scale, not {len(q.scale)}"))
    elif q.axis < 0 or (rank is not None and q.axis >= rank):
        out.append(("bad-quant", f"quant axis {q.axis} is out of range for rank {rank}" if rank is not None
                    else f"quant axis {q.axis} must be non-negative"))
    elif (q.block_size is None) != (q.block_axis is None):
        out.append(("bad-quant", "block quantization needs both \"block_size\" and \"block_axis\""))
    elif q.block_size is not None and (q.block_size <= 0 or q.block_axis == q.axis or q.block_axis < 0
                                       or (rank is not None and q.block_axis >= rank)):
        out.append(("bad-quant", "\"block_size\" must be positive and \"block_axis\" a dimension other than "
                                 "\"axis\""))
    elif shape is not None:
        want = shape[q.axis]
        what = f"{want} (dimension {q.axis})"
        if q.block_size is not None:
            blocks = -(-shape[q.block_axis] // q.block_size)
            want, what = want * blocks, f"{want * blocks} ({shape[q.axis]} channels × {blocks} blocks)"
        if len(q.scale) != want:
            out.append(("quant-length", f"quant has {len(q.scale)} scales; shape {list(shape)} needs {what}"))
    for i, s in enumerate(q.scale):
        if not (s > 0 and math.isfinite(s)):
            out.append(("bad-scale", f"quant scale{f' {i}' if q.axis is not None else ''} is {s}; "
                                     "scales must be positive and finite"))
            break
    bits = dtype.itemsize * 8
    if q.bitwidth is not None and not 1 <= q.bitwidth <= bits:
        out.append(("bad-quant", f"quant bitwidth {q.bitwidth} does not fit dtype {dtype}"))
    elif dtype.kind in "iu":
        b = q.bitwidth or bits
        lo, hi = (0, 2**b - 1) if dtype.kind == "u" else (-(2 ** (b - 1)), 2 ** (b - 1) - 1)
        bad = [z for z in q.zero_point if not lo <= z <= hi]
        if bad:
            out.append(("bad-quant", f"zero point {bad[0]} is outside [{lo}, {hi}] for {b}-bit {dtype}"))
    return out


# -------------------------------------------------------------------- npz
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
def dumps_graph(graph: Graph) -> str:
    """The graph as `qlower-graph/1` text with all constant data inline."""
    return _dump(graph, None, {})


def save_graph(graph: Graph, path: str | Path, *, npz: bool | str = False) -> None:
    """Write a graph file atomically; `npz` (True = `<stem>.npz`, or a name relative to
    the JSON's folder) moves constant data into an archive written the same way."""
    path = Path(path)
    if not npz:
        _write_atomic(path, dumps_graph(graph).encode("utf-8"))
        return
    npz_path = path.with_suffix(".npz") if npz is True else path.parent / str(npz)
    if npz_path.resolve() == path.resolve():
        raise QlowerError(error(f"the npz file {npz_path} would overwrite the graph file", code="io"))
    arrays: dict[str, np.ndarray] = {}
    text = _dump(graph, Path(os.path.relpath(npz_path, path.parent)).as_posix(), arrays)
    if arrays:
        _write_atomic(npz_path, _npz_bytes(arrays))
    _write_atomic(path, text.encode("utf-8"))


def _dump(graph: Graph, npz_ref: str | None, arrays: dict[str, np.ndarray]) -> str:
    enc = json.JSONEncoder(ensure_ascii=False, separators=(", ", ": "), default=_json_default).encode
    key = enc  # tensor names are JSON strings
    tensors = []
    for v in graph.values:
        t: dict[str, Any] = {"dtype": _dtype_name(v), "shape": None if v.shape is None else list(v.shape)}
        if v.quant is not None:
            t["quant"] = _quant_json(v)
        if v.data is not None:
            t["data"] = _data_json(v, npz_ref, arrays)
        tensors.append(f"    {key(v.name)}: {enc(t)}")
    nodes = []
    for op in graph.ops:
        n: dict[str, Any] = {"name": op.name, "op": op.type,
                             "inputs": ["" if x is None else x.name for x in op.operands],
                             "outputs": [r.name for r in op.results]}
        if op.attrs:
            n["attrs"] = op.attrs
            for k, a in op.attrs.items():
                if type(k) is not str or (type(a) not in _PLAIN and not _plain_list(a) and not _dumpable(a, enc)):
                    raise QlowerError(error(f"node `{op.name}`: attribute `{k}` = {a!r} has no JSON form "
                                            "(attributes are scalars, strings and lists)",
                                            subject=f"node {op.name}", code="bad-attr"))
        nodes.append(f"    {enc(n)}")
    head = {"format": FORMAT, "name": graph.name, "inputs": [v.name for v in graph.inputs],
            "outputs": [v.name for v in graph.outputs]}
    lines = ["{"] + [f"  {enc(k)}: {enc(x)}," for k, x in head.items()]
    lines.append('  "tensors": {' + ("\n" + ",\n".join(tensors) + "\n  }," if tensors else "},"))
    lines.append('  "nodes": [' + ("\n" + ",\n".join(nodes) + "\n  ]" if nodes else "]"))
    lines.append("}\n")
    return "\n".join(lines)


def _json_default(x: Any) -> Any:
    if isinstance(x, np.generic) and x.dtype.kind in "biuf":
        return x.item()
    raise TypeError(type(x).__name__)


def _dumpable(a: Any, enc: Callable[[Any], str]) -> bool:
    if isinstance(a, dict):
        return False
    if isinstance(a, (list, tuple)):
        return all(_dumpable(x, enc) for x in a)
    try:
        enc(a)
        return True
    except (TypeError, ValueError):
        return False


def _dtype_name(v: Value) -> str:
    name = v.dtype.name
    if name not in DTYPE_NAMES:
        raise QlowerError(error(f"tensor `{v.name}`: dtype {v.dtype} has no qlower-graph/1 name",
                                subject=f"tensor {v.name}", code="unknown-dtype"))
    return name


def _quant_json(v: Value) -> dict[str, Any]:
    q = v.quant
    problems = quant_problems(q, v.dtype, v.shape)
    if problems:
        raise QlowerError([error(f"tensor `{v.name}`: {m}", subject=f"tensor {v.name}", code=c)
                           for c, m in problems])
    if q.axis is None:
        out: dict[str, Any] = {"scale": q.scale[0], "zero_point": q.zero_point[0]}
    else:
        out = {"scale": list(q.scale), "zero_point": list(q.zero_point), "axis": q.axis}
        if q.block_size is not None:
            out["block_size"], out["block_axis"] = q.block_size, q.block_axis
    if q.bitwidth is not None:
        out["bitwidth"] = q.bitwidth
    if q.symmetric:
        out["symmetric"] = True
    return out


def _data_json(v: Value, npz_ref: str | None, arrays: dict[str, np.ndarray]) -> Any:
    data = np.asarray(v.data)
    if v.shape is None or data.shape != v.shape or data.dtype != v.dtype:
        raise QlowerError(error(f"tensor `{v.name}`: constant data is {data.dtype}{list(data.shape)} but the tensor "
                                f"is {v.dtype}{list(v.shape) if v.shape is not None else '[?]'}",
                                subject=f"tensor {v.name}", code="data-shape"))
    if npz_ref is None:
        return data.tolist()
    arrays[v.name] = data
    return {"npz": npz_ref, "key": v.name}


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


def _write_atomic(path: Path, payload: bytes) -> None:
    """Write a temporary file in the same folder, then rename: the file is complete or absent."""
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies, as for open()
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise QlowerError(error(f"cannot write {path}: {e.strerror or e}", code="io")) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
