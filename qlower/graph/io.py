"""The `qlower-graph/1` JSON format: load and save graphs (see docs/graph-format.md).

Loading is built for benchmark graphs of a million ops: one decode, one pass
over tensors and one over nodes, with every check done inline on the item being
built. Constant data is inline nested lists or a reference into an npz archive
next to the JSON; each archive is opened once, on first reference, and
uncompressed members are sliced straight out of the file bytes.

Big files take a typed path: msgspec decodes the JSON straight into the graph's
own `Value` and `Op` structs (no dict per tensor and node in between), and the
loader resolves names and sets the bookkeeping fields, without error reporting.
Anything it does not take as is (a type or semantic error, NaN, a lone
surrogate) makes it give up, and the general path, which reports every
problem with its location, loads the file instead; both build the same graph.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import zipfile
from pathlib import Path
from typing import Any

import attrs
import msgspec
import numpy as np

try:
    import orjson as _orjson
except ImportError:  # optional: `pip install qlower[fast]`
    _orjson = None

from qlower._files import UnsafeReference, confined
from qlower.diagnostics import Diagnostic, QlowerError, Span, did_you_mean, error
from qlower.graph.core import Graph, Op, Value
from qlower.graph.format import FORMAT, _PLAIN, _inline_array, _plain_list, _quant_json_problems, quant_problems
from qlower.graph.lazy import LazyArray, NpySource, SafetensorsSource, npy_header, safetensors_header
from qlower.graph.npz import _Npz
from qlower.graph.save import dumps_graph, save_graph  # the saving half of the format
from qlower.graph.types import DTYPE_ALIASES, DTYPE_NAMES, Quant

_DTYPES: dict[str, np.dtype] = {n: np.dtype(n) for n in sorted(DTYPE_NAMES)}
__all__ = ["FORMAT", "dumps_graph", "load_graph", "loads_graph", "quant_problems", "save_graph"]

_TOP_KEYS = frozenset({"format", "name", "inputs", "outputs", "tensors", "nodes"})
_TENSOR_KEYS = frozenset({"dtype", "shape", "quant", "data"})
_NODE_KEYS = frozenset({"name", "op", "inputs", "outputs", "attrs"})
_QUANT_KEYS = frozenset({"scale", "zero_point", "axis", "bitwidth", "symmetric", "block_size", "block_axis"})
_MAX_ERRORS = 50
_ORJSON_MIN = 1 << 20  # characters
_TYPED_MIN = 1 << 20  # characters: below this the general path is as fast
_INTS = frozenset({int})
_MISSING: Any = object()  # (an unknown name, where None means an absent input)

_UNSET = msgspec.UNSET
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


class _FileValue(Value, forbid_unknown_fields=True):
    """A `tensors` entry decoded straight into a `Value`. Its bookkeeping fields start UNSET, so that
    a file that names one (a key the format does not have) is told apart and given to the general
    path, which reports it; `load_typed` then sets them."""

    name: Any = _UNSET
    producer: Any = _UNSET
    users: Any = _UNSET
    is_input: Any = _UNSET
    is_output: Any = _UNSET
    owner: Any = _UNSET


class _FileOp(Op, forbid_unknown_fields=True):
    """A `nodes` entry decoded straight into an `Op` (bookkeeping fields as for `_FileValue`; its
    operand and result lists hold names until `load_typed` resolves them, "" for an absent input)."""

    operands: list[str] = []
    results: list[str] = []
    provenance: Any = _UNSET
    dead: Any = _UNSET
    owner: Any = _UNSET


class _Document(msgspec.Struct, forbid_unknown_fields=True):
    """A graph file as the typed path decodes it: tensors straight into `Value`s and nodes into `Op`s
    (their names and name lists still to be resolved; see `_Loader.load_typed`)."""

    format: str
    inputs: list[str]
    outputs: list[str]
    tensors: dict[str, _FileValue]
    nodes: list[_FileOp]
    name: str = "graph"


_TYPED = msgspec.json.Decoder(_Document)


# ------------------------------------------------------------------ loading
def _decode(text: str | bytes) -> Any:
    """JSON → Python objects. Big files (graphs of 10^5+ ops, block encodings) go through orjson
    when it is installed (several times faster); what orjson refuses (NaN/Infinity) and every
    error (for json's line:col) go through json. orjson reads an integer literal beyond 64 bits as
    a float, so on big files such a value is reported as "not an integer" rather than "too large".

    A key twice in one object (a tensor declared twice: JSON parsers keep the last) is an error:
    json checks every object; after orjson, a file with more "dtype" keys than its tensors and
    `dtype` attributes account for is read again by json to find it."""
    if _orjson is not None and len(text) >= _ORJSON_MIN:
        try:
            doc = _orjson.loads(text)  # bytes: no str of the whole file is made
        except _orjson.JSONDecodeError:
            pass
        else:
            tensors = doc.get("tensors") if type(doc) is dict else None
            nodes = doc.get("nodes") if type(doc) is dict else None
            if type(tensors) is not dict or type(nodes) is not list:
                return doc
            attrs_ = (n.get("attrs") if type(n) is dict else None for n in nodes)
            if _dtype_keys(text) == len(tensors) + sum(1 for a in attrs_ if type(a) is dict and "dtype" in a):
                return doc
    return json.loads(text.decode("utf-8") if isinstance(text, bytes) else text, object_pairs_hook=_unique_keys)


class _DuplicateKey(Exception):
    """A key twice in one JSON object (args: the key)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _DuplicateKey(k)
            seen.add(k)
    return d


def _dtype_keys(text: str | bytes) -> int:
    """How often `"dtype"` occurs in the file: once per tensor entry and per node with a `dtype`
    attribute, more only when a tensor is declared twice (or a name or value holds the word: the
    file is then read again, by json, to tell)."""
    return text.count(b'"dtype"' if isinstance(text, bytes) else '"dtype"')


def _duplicate_error(text: str | bytes, file: str, key: str) -> QlowerError:
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    quoted = json.dumps(key, ensure_ascii=False)
    first = text.find(quoted + ":")
    at = text.find(quoted, first + 1) if first >= 0 else -1
    span = None
    if at >= 0:
        line = text.count("\n", 0, at) + 1
        span = Span.point(file, line, at - text.rfind("\n", 0, at))
    return QlowerError(error(f"key {quoted} appears twice in one JSON object (JSON readers would keep the last "
                             "silently)", span=span, code="duplicate-key"))


def load_graph(path: str | Path) -> Graph:
    """Read a graph file; npz references resolve against the file's folder."""
    path = Path(path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # (a FIFO would block the read forever)
            raise QlowerError(error(f"cannot read graph file {path}: not a regular file", code="io"))
        raw = path.read_bytes()
        if len(raw) < _ORJSON_MIN or _orjson is None:
            raw = raw.decode("utf-8")
    except OSError as e:
        raise QlowerError(error(f"cannot read graph file {path}: {e.strerror or e}", code="io")) from None
    except UnicodeDecodeError as e:
        raise QlowerError(error(f"cannot read graph file {path}: not UTF-8 (byte {e.start})", code="io")) from None
    return loads_graph(raw, base_dir=path.parent, file=str(path))


def loads_graph(text: str | bytes, base_dir: Path | None = None, file: str = "<string>") -> Graph:
    """Parse graph JSON (text, or UTF-8 bytes); `base_dir` (default: the working directory) anchors npz
    paths."""
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    try:
        if len(text) >= _TYPED_MIN:
            try:
                typed = _TYPED.decode(text)
            except msgspec.DecodeError:  # (ValidationError is one) the general path says what is wrong
                typed = None
            if typed is not None and _dtype_keys(text) != len(typed.tensors) + sum(
                    1 for op in typed.nodes if op.attrs and "dtype" in op.attrs):
                typed = None  # maybe a tensor declared twice: the general path finds it
            g = None if typed is None else _Loader(text, file, base).load_typed(typed)
            del typed
            if g is not None:
                return g
        try:
            doc = _decode(text)
        except UnicodeDecodeError as e:
            raise QlowerError(error(f"cannot read graph file {file}: not UTF-8 (byte {e.start})", code="io")) from None
        except json.JSONDecodeError as e:
            raise QlowerError(error(f"invalid JSON: {e.msg}", span=Span.point(file, e.lineno, e.colno),
                                    code="invalid-json")) from None
        except _DuplicateKey as e:
            raise _duplicate_error(text, file, e.args[0]) from None
        return _Loader(text, file, base).load(doc)
    except RecursionError:
        raise QlowerError(error(f"{file}: JSON nested too deeply (graph files nest a few levels)",
                                code="invalid-json")) from None


_MAX_DIM = (1 << 32) - 1  # QNN tensor dims are uint32
_MAX_ELEMENTS = 1 << 48  # far beyond any device's memory; keeps every byte count a 64-bit integer


def _too_big(dims: Any) -> bool:
    return max(dims) > _MAX_DIM or math.prod(dims) > _MAX_ELEMENTS


def _wire(o: Op, ops: dict[str, Op]) -> None:
    """Add `o` to the graph's op table as its operands' user and its results' producer: what
    `Graph.add_op` does, minus the checks the loaders have already made."""
    ops[o.name] = o
    j = 0
    for v in o.operands:
        if v is not None:
            v.users.append((o, j))
        j += 1
    for r in o.results:
        r.producer = o


def _fmt(x: Any) -> str:
    """A value as the user wrote it in JSON."""
    try:
        return json.dumps(x, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(x)


@attrs.define
class _Loader:
    """State of one load: the source (to locate errors), collected errors, open npz archives."""

    source: str | bytes  # the file's text, or its UTF-8 bytes (decoded only to locate an error)
    file: str
    base_dir: Path
    errors: list[Diagnostic] = attrs.Factory(list)
    archives: dict[str, _Npz | None] = attrs.Factory(dict)
    headers: dict[str, dict[str, tuple[str, tuple[int, ...]]]] = attrs.Factory(dict)  # safetensors headers

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
        if isinstance(self.source, bytes):
            self.source = self.source.decode("utf-8", errors="replace")
        text = self.source
        quoted = re.escape(json.dumps(name, ensure_ascii=False))
        if kind == "tensor":
            start = text.find('"tensors"')
            m = re.compile(quoted + r"\s*:\s*[{\[]").search(text, max(start, 0))
        else:
            m = re.compile(r'"name"\s*:\s*' + quoted).search(text)
        if m is None:
            return None
        line = text.count("\n", 0, m.start()) + 1
        return Span.point(self.file, line, m.start() - text.rfind("\n", 0, m.start()))

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
        self.check_text(doc)
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

    def check_text(self, doc: dict) -> None:
        """Names are text that can be written out again: a `\\uD800`-style escape without its pair
        decodes to a lone surrogate, which no UTF-8 artifact can hold (looked for only when the
        file has such an escape)."""
        src = self.source
        if not _SURROGATE_ESCAPE.search(src if isinstance(src, str) else src.decode("utf-8", "replace")):
            return
        names = [doc.get("name", ""), *doc["tensors"], *doc["inputs"], *doc["outputs"]]
        names += [x for n in doc["nodes"] if type(n) is dict for k in ("name", "op", "inputs", "outputs")
                  for x in (n.get(k) if type(n.get(k)) is list else [n.get(k)])]
        for x in names:
            if type(x) is str:
                try:
                    x.encode("utf-8")
                except UnicodeEncodeError:
                    self.err(f"name {json.dumps(x)} holds a lone UTF-16 surrogate (a \\u escape without its pair): "
                             "not valid UTF-8 text", "bad-name")
        self.raise_errors()

    def load_typed(self, doc: Any) -> Graph | None:
        """The graph of a typed-decoded document (`_Document`), or None at the first thing the general
        path would report or that this path does not handle (the caller then loads the file again with
        the general path). Builds exactly what `load` builds; a law in tests/graph keeps it so."""
        if doc.format != FORMAT:
            return None
        g = Graph(doc.name)
        # the decoded name -> tensor table becomes the graph's (in file order, as `load` makes it)
        g._values = values = doc.tensors  # noqa: SLF001 (a new graph, built here: see `tensors`)
        ops = g._ops  # noqa: SLF001
        dtypes, plain, unset = _DTYPES, _PLAIN, _UNSET
        archives = self.archives
        seen: dict[tuple, tuple] = {}
        for name, v in values.items():
            if (not name or v.name is not unset or v.producer is not unset or v.users is not unset
                    or v.is_input is not unset or v.is_output is not unset or v.owner is not unset):
                return None  # (a key the format does not have)
            dtype = dtypes.get(v.dtype) if type(v.dtype) is str else None
            if dtype is None:
                return None
            dims = v.shape
            if dims is not None:
                shared = seen.get(dims)
                if shared is None:
                    if dims and (min(dims) < 0 or _too_big(dims)):
                        return None
                    shared = seen[dims] = dims
                dims = shared  # one tuple per distinct shape
            v.name, v.dtype, v.shape = name, dtype, dims
            v.producer, v.users, v.is_input, v.is_output, v.owner = None, [], False, False, g
            d = v.data
            if v.quant is None:
                if d is None:  # most tensors
                    continue
                # a weight in an npz archive already open: its view, when it is what the entry says
                # (anything else, and every problem, goes through `data`, which reports it)
                if type(d) is dict and len(d) == 2 and (arch := archives.get(d.get("npz"))) is not None:
                    arr = arch.get_stored(d.get("key"))
                    if arr is not None and arr.dtype == dtype and arr.shape == dims:
                        v.data = arr
                        continue
            shape = None if dims is None else list(dims)
            if v.quant is not None:
                v.quant = self.quant(name, v.quant, dtype, shape)
            if d is not None:
                v.data = self.data(name, d, dtype, shape)
            if self.errors:
                return None
        get = values.get
        types: dict[str, str] = {}
        for op in doc.nodes:
            name, op_type, ins, outs = op.name, op.type, op.operands, op.results
            if (not name or name in ops or "." not in op_type or op.provenance is not unset
                    or op.dead is not unset or op.owner is not unset):
                return None
            if len(outs) > 1 and len(set(outs)) != len(outs):
                return None
            # the decoded name lists become the op's value lists (in place)
            if "" in ins:  # absent optional inputs
                ins[:] = [None if x == "" else get(x, _MISSING) for x in ins]
                if _MISSING in ins:
                    return None
            else:
                ins[:] = map(get, ins)
                if None in ins:
                    return None
            outs[:] = map(get, outs)
            if None in outs:
                return None
            attrs_ = op.attrs
            if attrs_:
                for a in attrs_.values():
                    if type(a) not in plain and not _plain_list(a):
                        return None
            op.type = types.setdefault(op_type, op_type)
            for r in outs:
                if r.producer is not None:  # (a second producer)
                    return None
            op.provenance, op.dead, op.owner = None, False, g
            _wire(op, ops)
        ins = self.io_list(values, doc.inputs, "input")
        outs = self.io_list(values, doc.outputs, "output")
        if self.errors or any(v.producer is not None for v in ins):
            return None
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
        """One pass; the common case (dtype and shape, maybe data) costs a few C-level checks and one
        `Value` built directly into the graph's table (the graph is new and has no networkx view yet)."""
        values = g._values  # noqa: SLF001 (the loader builds the graph it owns; see Graph.bulk)
        dtypes, keys, ints, make = _DTYPES, _TENSOR_KEYS, _INTS, Value
        f32 = _DTYPES["float32"]
        # One tuple per distinct shape, shared by the tensors of that shape: a big graph's tensors have
        # a few hundred shapes, so this keeps a million small objects out of memory.
        seen: dict[tuple, tuple] = {}
        for name, t in tensors.items():
            if type(t) is not dict or not name or not keys.issuperset(t) or "dtype" not in t:
                values[name] = make(name, f32, None, owner=g)
                self.bad_tensor(name, t)
                continue
            dt = t["dtype"]
            dtype = dtypes.get(dt) if type(dt) is str else None
            if dtype is None:
                self.unknown_dtype(name, dt)
                dtype = f32
            shape = t.get("shape")
            if shape is not None and (type(shape) is not list or not ints.issuperset(map(type, shape))
                                      or (shape and min(shape) < 0)):
                self.err(f"tensor `{name}`: shape must be a list of non-negative integers, not {_fmt(shape)}",
                         "bad-shape", f"tensor {name}")
                shape = None
            elif shape and _too_big(shape):
                self.err(f"tensor `{name}`: shape {_fmt(shape)} is beyond what QNN holds (dims below 2^32, "
                         "at most 2^48 elements)", "bad-shape", f"tensor {name}")
                shape = None
            if len(t) == 2 and shape is not None:  # dtype and shape only: most tensors of a big graph
                dims = tuple(shape)
                values[name] = make(name, dtype, seen.setdefault(dims, dims), owner=g)
                continue
            q = t.get("quant")
            quant = None if q is None else self.quant(name, q, dtype, shape)
            if quant is not None and quant.axis is not None:
                del t["quant"]  # the Quant has the numbers now: let the parsed lists go as loading goes on
            d = t.get("data")
            data = None if d is None else self.data(name, d, dtype, shape)
            dims = None if shape is None else tuple(shape)
            values[name] = make(name, dtype, None if dims is None else seen.setdefault(dims, dims), quant, data,
                                owner=g)
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
            if type(q["scale"]) is dict or type(q.get("zero_point")) is dict:
                q = self.quant_refs(name, q, shape)  # scales/zero points by reference: read as arrays here
                if q is None:
                    return None
            problems += [("unknown-key", f"unknown \"quant\" key {_fmt(k)}") for k in sorted(q.keys() - _QUANT_KEYS)]
            problems += _quant_json_problems(q)
        if not problems:
            scale, zp = q["scale"], q.get("zero_point")  # absent or null: zeros
            if type(scale) is np.ndarray:
                zp = np.zeros(len(scale), np.int64) if zp is None else zp
            elif type(scale) is not list:
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

    def quant_refs(self, name: str, q: dict, shape: list | None = None) -> dict | None:
        """A quant object whose `scale`/`zero_point` reference arrays (npz, npy, safetensors, as `data`
        does): the same object with those arrays read in, flat. Block encodings list millions of
        scales; as arrays they skip JSON number parsing and Python lists altogether."""
        subject = f"tensor {name}"
        out = dict(q)
        for key, kinds in (("scale", "fc"), ("zero_point", "iu")):
            ref = q.get(key)
            if type(ref) is not dict:
                continue
            if q.get("axis") is None:
                self.err(f"tensor `{name}`: a per-tensor \"{key}\" is a number, not a reference (references "
                         "need \"axis\")", "bad-quant", subject)
                return None
            if "npy" in ref or "safetensors" in ref:
                lazy = self.ref_data(name, ref, None, None)
                if lazy is not None and shape is not None and lazy.size > max(1, math.prod(shape)):
                    self.err(f"tensor `{name}`: quant \"{key}\" references {lazy.size} values, more than the "
                             f"tensor's {math.prod(shape)} elements", "bad-quant", subject)
                    return None
                arr = None if lazy is None else np.asarray(lazy)
            else:  # (no more scales or zero points than the tensor has elements)
                arr = self.npz_data(name, ref, None if shape is None else max(1, math.prod(shape)) * 8)
            if arr is None:
                return None
            if arr.dtype.kind not in kinds or arr.ndim != 1:
                what = "a 1-D array of floats" if key == "scale" else "a 1-D array of integers"
                self.err(f"tensor `{name}`: quant \"{key}\" must reference {what}, not {arr.dtype}"
                         f"{list(arr.shape)}", "bad-quant", subject)
                return None
            if key == "scale" or arr.dtype == np.uint64:
                arr = arr.astype(np.float64 if key == "scale" else np.int64, copy=False)
            # (zero points keep their width: `Quant` holds them as they are, int8 for a 4-bit weight's)
            arr.flags.writeable = False  # read here for the Quant alone: it keeps the array without a copy
            out[key] = arr
        return out

    def data(self, name: str, d: Any, dtype: np.dtype, shape: list | None) -> np.ndarray | None:
        subject = f"tensor {name}"
        if shape is None:
            self.err(f"tensor `{name}`: a constant needs a declared \"shape\"", "bad-shape", subject)
            return None
        if type(d) is dict and ("npy" in d or "safetensors" in d):
            return self.ref_data(name, d, dtype, shape)
        if type(d) is dict:
            arr = self.npz_data(name, d, math.prod(shape) * dtype.itemsize)
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

    def ref_data(self, name: str, ref: dict, dtype: np.dtype | None, shape: list | None) -> LazyArray | None:
        """A `.npy` or `.safetensors` reference: checked against the file's header (unless `dtype` and
        `shape` are None: any), read later."""
        subject = f"tensor {name}"
        kind = "npy" if "npy" in ref else "safetensors"
        file, key = ref.get(kind), ref.get("key")
        want = {"npy"} if kind == "npy" else {"safetensors", "key"}
        if type(file) is not str or set(ref) != want or (kind == "safetensors" and type(key) is not str):
            form = '{"npy": FILE}' if kind == "npy" else '{"safetensors": FILE, "key": KEY}'
            self.err(f"tensor `{name}`: a {kind} reference is {form} with string values, not {_fmt(ref)}",
                     "bad-data", subject)
            return None
        path = self.base_dir / file
        try:
            path = confined(self.base_dir, file)
            if kind == "npy":
                got_dtype, got_shape = npy_header(path)
                source: Any = NpySource(path)
            else:
                header = self.headers.get(file)
                if header is None:
                    header = self.headers[file] = safetensors_header(path)
                if key not in header:
                    self.err(f"tensor `{name}`: safetensors file {file} has no tensor {_fmt(key)}", "data-key",
                             subject, did_you_mean(key, header))
                    return None
                dname, got_shape = header[key]
                if dname == "bfloat16":  # read widened to float32 (exact): numpy has no bfloat16
                    got_dtype, source = np.dtype(np.float32), SafetensorsSource(path, key, bf16=True)
                elif dname not in _DTYPES:
                    self.err(f"tensor `{name}`: tensor {_fmt(key)} in {file} has dtype {dname}, which qlower "
                             "does not read", "data-dtype", subject)
                    return None
                else:
                    got_dtype, source = _DTYPES[dname], SafetensorsSource(path, key)
        except UnsafeReference as e:
            self.err(f"tensor `{name}`: {kind} reference {_fmt(file)} refused: {e}", "data-file", subject)
            return None
        except OSError as e:
            self.err(f"tensor `{name}`: cannot open {kind} file {path}: {e.strerror or e}", "data-file", subject)
            return None
        except ValueError as e:
            self.err(f"tensor `{name}`: {path} is not a valid {kind} file: {e}", "data-file", subject)
            return None
        lazy = LazyArray(source, got_dtype, got_shape)
        if dtype is None:
            return lazy
        if got_dtype != dtype:
            if got_dtype.kind == dtype.kind and got_dtype.itemsize == dtype.itemsize:
                lazy = lazy.astype(dtype)  # byte order only
            else:
                self.err(f"tensor `{name}`: {kind} data has dtype {got_dtype} but the tensor declares {dtype}",
                         "data-dtype", subject)
                return None
        if got_shape != tuple(shape):
            if math.prod(got_shape) == 0 == math.prod(shape):
                return lazy.reshape(shape)
            self.err(f"tensor `{name}`: data has shape {list(got_shape)} but the declared shape is {shape}",
                     "data-shape", subject)
            return None
        return lazy

    def npz_data(self, name: str, ref: dict, max_bytes: int | None = None) -> np.ndarray | None:
        subject = f"tensor {name}"
        file, key = ref.get("npz"), ref.get("key")
        if type(file) is not str or type(key) is not str or len(ref) != 2:
            self.err(f"tensor `{name}`: an npz reference is {{\"npz\": FILE, \"key\": KEY}} with string values, "
                     f"not {_fmt(ref)}", "bad-data", subject)
            return None
        if file not in self.archives:
            path = self.base_dir / file
            try:
                path = confined(self.base_dir, file)
                self.archives[file] = _Npz.open(path)
            except UnsafeReference as e:
                self.archives[file] = None
                self.err(f"tensor `{name}`: npz reference {_fmt(file)} refused: {e}", "npz-missing", subject)
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
            return archive.get(key, max_bytes)
        except KeyError:
            self.err(f"tensor `{name}`: npz file {file} has no array {_fmt(key)}", "npz-key", subject,
                     did_you_mean(key, archive.keys()))
        except (ValueError, OSError, zipfile.BadZipFile) as e:
            self.err(f"tensor `{name}`: cannot read array {_fmt(key)} from {file}: {e}", "npz-key", subject)
        return None

    # -------------------------------------------------------------- nodes
    def nodes(self, g: Graph, values: dict[str, Value], nodes: list) -> None:
        """One pass; each good node becomes an `Op` wired into its values directly (what `Graph.add_op`
        does, minus the checks this loop has already made)."""
        ops, keys, plain, make = g._ops, _NODE_KEYS, _PLAIN, Op  # noqa: SLF001 (see `tensors`)
        get = values.__getitem__
        empty: dict = {}
        for i, n in enumerate(nodes):
            try:
                name, op, ins, outs = n["name"], n["op"], n["inputs"], n["outputs"]
                attrs_ = n.get("attrs", empty)
                # (map: no comprehension frame per node; "" is an absent input, which `values` may hold as
                # the name of a rejected tensor entry)
                operands = [values[x] if x != "" else None for x in ins] if "" in ins else list(map(get, ins))
                results = list(map(get, outs))
            except (KeyError, TypeError, AttributeError):
                self.bad_node(i, n, values, g)
                continue
            if (type(name) is not str or type(op) is not str or type(ins) is not list or type(outs) is not list
                    or type(attrs_) is not dict or not keys.issuperset(n) or "." not in op or not name
                    or name in ops or "" in outs):
                self.bad_node(i, n, values, g)
                continue
            if len(results) == 1:
                r = results[0]
                if r.producer is not None:
                    self.err(f"tensor `{r.name}` is produced by two nodes: `{r.producer.name}` and `{name}`",
                             "multiple-producers", f"node {name}")
                    continue
            else:
                for r in results:
                    if r.producer is not None:
                        self.err(f"tensor `{r.name}` is produced by two nodes: `{r.producer.name}` and `{name}`",
                                 "multiple-producers", f"node {name}")
                        break
                else:
                    r = None
                if r is not None:
                    continue
                if len(outs) > 1 and len(set(outs)) != len(outs):
                    self.err(f"node `{name}` lists an output twice", "multiple-producers", f"node {name}")
                    continue
            if attrs_:
                for k, v in attrs_.items():
                    if type(v) not in plain and not _plain_list(v):
                        self.err(f"node `{name}`: attribute `{k}` must be a JSON scalar or list, not {_fmt(v)}",
                                 "bad-attr", f"node {name}")
            else:
                attrs_ = {}  # each op its own (rewrites may set attributes)
            _wire(make(name, op, attrs_, operands, results, owner=g), ops)

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
