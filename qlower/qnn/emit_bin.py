"""The `.bin` artifact and the naming layout all three artifacts share.

The converter's `.bin` is a tar of `<symbol>.raw` files, one per static
tensor; `qnn-model-lib-generator` turns each into an object whose symbols the
`.cpp` reaches through `BINVARSTART(symbol)`. So the tar member names, the C
identifiers in the `.cpp` and the tensor ids in `_net.json` must agree; `plan`
computes them once, in one pass over the graph, after checking that the graph
can be written at all. `write` streams the tar one tensor at a time.
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Callable, Container, Iterable
from itertools import chain
from typing import BinaryIO

import attrs
import numpy as np

from qlower.diagnostics import QlowerError, error
from qlower.graph.lazy import LazyArray
from qlower.qnn.datatypes import DataType, to_numpy
from qlower.qnn.model import EncodingKind, QnnGraph, QnnTensor, TensorParam, TensorType

_NON_IDENT_CHAR = re.compile(r"[^A-Za-z0-9_]")
_MEMBER_MODE = 0o644
_BLOCK = tarfile.BLOCKSIZE
_RECORD = tarfile.RECORDSIZE
_NO_STORAGE = (DataType.STRING, DataType.UNDEFINED)
# Storage dtype of each storable datatype (to_numpy, looked up once).
_STORAGE: dict[DataType, np.dtype] = {}
for _dt in DataType:
    try:
        _STORAGE[_dt] = to_numpy(_dt)
    except ValueError:
        pass


def _is_ident(name: str) -> bool:
    return name.isascii() and name.isidentifier()  # i.e. [A-Za-z_][A-Za-z0-9_]*


def _renames(odd: Iterable[str], taken: Callable[[str], bool]) -> dict[str, str]:
    """C identifiers for the names that are not identifiers already (see `c_identifiers`).

    `taken(candidate)` says whether an identifier-shaped candidate is one of the
    names themselves (which keep their spelling).
    """
    out: dict[str, str] = {}
    used: set[str] = set()
    for name in sorted(set(odd)):
        base = _NON_IDENT_CHAR.sub("_", name)
        if not base or not (base[0].isalpha() or base[0] == "_"):
            base = "_" + base
        candidate, k = base, 1
        while candidate in used or taken(candidate):
            candidate, k = f"{base}_{k}", k + 1
        out[name] = candidate
        used.add(candidate)
    return out


def c_identifiers(names: Iterable[str]) -> dict[str, str]:
    """A unique C identifier for every name, independent of the names' order.

    Names that already are identifiers keep their spelling (that is what the
    converter's own tensor names look like, so its `.bin` members resolve);
    the others get non-identifier characters replaced by `_` and, on a clash,
    a numeric suffix, assigned in sorted order so the result is reproducible.
    """
    unique = set(names)
    out = {n: n for n in unique if _is_ident(n)}
    out.update(_renames([n for n in unique if n not in out], out.__contains__))
    return out


def num_elements(dims: Iterable[int]) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


class Shapes(dict):
    """dims tuple -> (`"1, 8"`, element count), computed once per distinct shape.

    Equal tuples (8 == 8.0 == np.int64(8)) give equal `int()` values, so sharing
    an entry never changes the output.
    """

    def __missing__(self, dims: tuple[int, ...]) -> tuple[str, int]:
        if len(self) >= 1 << 16:  # a graph of all-different shapes: stay bounded
            self.clear()
        ints = [int(d) for d in dims]
        value = (", ".join(map(str, ints)), num_elements(ints))
        self[dims] = value
        return value


@attrs.frozen
class Layout:
    """Ids, C identifiers and the static tensors of one graph, as every artifact sees them.

    Only what is not the identity is stored, so the layout stays small on large
    graphs: `cname(n)` is `n` unless `cnames` renames it (likewise for nodes).
    Tensor ids are the position in `graph.tensors` except for the APP_WRITE and
    APP_READ tensors, which take their kind's id slots in `graph.inputs` /
    `graph.outputs` order (`io_ids`); tensor-param tensors follow, numbered in
    op and param order. `statics` lists the graph's static tensors (in tensor
    order) and then the tensor-param tensors (in op and param order).
    """

    cnames: dict[str, str]
    node_cnames: dict[str, str]
    io_ids: dict[str, int]
    statics: tuple[QnnTensor, ...]
    static_elements: int  # elements of the graph's static tensors (not tensor params)
    op_types: tuple[str, ...]  # sorted
    produced: Container[str]  # names of tensors some op outputs
    shapes: Shapes = attrs.field(factory=Shapes, eq=False)

    def cname(self, name: str) -> str:
        return self.cnames.get(name, name)

    def node_cname(self, name: str) -> str:
        return self.node_cnames.get(name, name)


def _fail(message: str, subject: str, code: str = "artifact-invalid") -> QlowerError:
    return QlowerError(error(message, subject=subject, code=code))


def _check_storage(t: QnnTensor, subject: str, shapes: Shapes) -> int:
    """Raise unless `t` can be stored; return its element count."""
    if t.datatype in _NO_STORAGE:
        raise _fail(f"datatype {t.datatype.qnn_name} cannot be stored in a tensor", subject)
    dims = t.dims
    if dims and min(dims) < 0:
        raise _fail(f"negative dimension in dims {list(dims)}", subject)
    count = shapes[dims][1]
    data = t.data
    if t.type is TensorType.STATIC:
        if data is None:
            raise _fail("static tensor has no data", subject)
        want = _STORAGE[t.datatype]
        if data.dtype != want and not _lossless(data, want):
            raise _fail(f"static data of dtype {data.dtype} does not convert exactly to {want}, "
                        f"the storage of {t.datatype.qnn_name}", subject)
        if data.size != count:
            raise _fail(f"static data has {data.size} elements, dims {list(dims)} "
                        f"need {count}", subject)
    elif data is not None:
        raise _fail(f"only STATIC tensors carry data, this one is {t.type.name}", subject)
    return count


def _lossless(data: np.ndarray, want: np.dtype) -> bool:
    try:
        cast = data.astype(want)
        return bool(np.array_equal(cast.astype(data.dtype), data, equal_nan=data.dtype.kind in "fc"))
    except (TypeError, ValueError, OverflowError):
        return False


def storage(tensor: QnnTensor) -> np.ndarray:
    """The static data in the datatype's storage dtype (other dtypes are accepted when exact)."""
    assert tensor.data is not None
    want = _STORAGE.get(tensor.datatype) or to_numpy(tensor.datatype)
    return tensor.data if tensor.data.dtype == want else tensor.data.astype(want)


def _check_encoding(t: QnnTensor, subject: str) -> None:
    """Reject encodings whose fields the artifacts could not carry back exactly."""
    e = t.encoding
    if e is None:
        return
    k = e.kind
    if k is EncodingKind.UNDEFINED:
        raise _fail("encoding kind UNDEFINED: use encoding=None for an unquantized tensor", subject)
    if not e.scales:
        raise _fail(f"{k.name} needs at least one scale", subject)
    if len(e.scales) != len(e.offsets):
        raise _fail(f"{k.name} needs as many offsets as scales (got {len(e.scales)} scales, "
                    f"{len(e.offsets)} offsets)", subject)
    if any(not (-2**31 <= o < 2**31) for o in e.offsets):
        raise _fail(f"{k.name} offset does not fit int32", subject)
    if k in (EncodingKind.BW_SCALE_OFFSET, EncodingKind.BW_AXIS_SCALE_OFFSET) and e.bitwidth is None:
        raise _fail(f"{k.name} needs a bitwidth", subject)
    if e.per_axis:
        if e.axis is None or not 0 <= e.axis < len(t.dims):
            raise _fail(f"{k.name} axis {e.axis} is not an axis of dims {list(t.dims)}", subject)
        if len(e.scales) != int(t.dims[e.axis]):
            raise _fail(f"{k.name} has {len(e.scales)} scales, but axis {e.axis} has size "
                        f"{t.dims[e.axis]}", subject)
    else:
        if len(e.scales) != 1:
            raise _fail(f"{k.name} is per-tensor but has {len(e.scales)} scales", subject)
        if e.axis is not None:
            raise _fail(f"{k.name} is per-tensor but sets axis {e.axis}", subject)
    block_fields = (e.num_blocks_per_axis, e.block_scale_bitwidth, e.block_scales)
    if k is EncodingKind.BLOCKWISE_EXPANSION:
        if any(f is None for f in block_fields):
            raise _fail("BLOCKWISE_EXPANSION needs num_blocks_per_axis, block_scale_bitwidth and "
                        "block_scales", subject)
        if not 0 < e.block_scale_bitwidth <= 16:
            raise _fail(f"block_scale_bitwidth {e.block_scale_bitwidth} is not in 1..16", subject)
        rows = e.block_scales
        limit = 1 << (8 if e.block_scale_bitwidth <= 8 else 16)
        n = e.num_blocks_per_axis
        if len(rows) != len(e.scales) or any(len(r) != n for r in rows):
            raise _fail(f"block_scales must be [{len(e.scales)}][{e.num_blocks_per_axis}]", subject)
        # millions of entries on a 4-bit LLM: min/max over the rows at C speed
        if rows and n and (min(map(min, rows)) < 0 or max(map(max, rows)) >= limit):
            raise _fail("block scale does not fit its storage", subject)
    elif any(f is not None for f in block_fields):
        raise _fail(f"{k.name} must not set block fields", subject)


def _io_ids(gsub: str, role: str, attr: str, kind: TensorType, listed: list[str],
            slots: list[tuple[int, str]], tensors: dict[str, QnnTensor]) -> dict[str, int]:
    """Check one of `graph.inputs`/`outputs` against its kind's tensors; give their ids.

    The reader recovers `graph.inputs`/`outputs` as APP_WRITE/APP_READ tensors
    in id order, so giving the listed names their kind's id slots in list order
    is what makes that order survive the round trip.
    """
    for n in listed:
        t = tensors.get(n)
        if t is None or t.type is not kind:
            raise _fail(f"graph {role} '{n}' is not an {kind.name} tensor of the graph", gsub)
    listed_set = set(listed)
    if len(listed_set) != len(listed):
        raise _fail(f"graph {attr} list a tensor twice", gsub)
    for _, n in slots:
        if n not in listed_set:
            raise _fail(f"{kind.name} tensor '{n}' is not listed in graph {attr}", gsub)
    return {name: slot for (slot, _), name in zip(slots, listed)}


def plan(graph: QnnGraph) -> Layout:
    """Check that `graph` can be written and fix its ids and C identifiers (one pass)."""
    gsub = f"graph '{graph.name}'"
    if not graph.name or "/" in graph.name or "\\" in graph.name or graph.name in (".", ".."):
        raise _fail("graph name must be a non-empty file name", gsub)
    tensors = graph.tensors
    shapes = Shapes()
    STATIC, APP_WRITE, APP_READ = TensorType.STATIC, TensorType.APP_WRITE, TensorType.APP_READ
    statics: list[QnnTensor] = []
    writes: list[tuple[int, str]] = []
    reads: list[tuple[int, str]] = []
    odd: list[str] = []
    total = 0
    NATIVE = TensorType.NATIVE
    plain_dims: set[tuple[int, ...]] = set()  # dims seen without a negative entry
    for i, (name, t) in enumerate(tensors.items()):
        if name is not t.name and name != t.name:
            raise _fail(f"registered under '{name}' but named '{t.name}'", f"tensor '{t.name}'")
        kind, dims = t.type, t.dims
        if kind is NATIVE and t.data is None and t.encoding is None and dims in plain_dims \
                and t.datatype not in _NO_STORAGE:
            continue  # the common case: an unquantized activation of a shape seen before
        if (kind is STATIC or t.data is not None or t.datatype in _NO_STORAGE
                or (dims and min(dims) < 0)):  # else: nothing to check about its storage
            count = _check_storage(t, f"tensor '{name}'", shapes)
            if kind is STATIC:
                statics.append(t)
                total += count
        elif len(plain_dims) < 1 << 16:
            plain_dims.add(dims)
        if t.encoding is not None:
            _check_encoding(t, f"tensor '{name}'")
        if kind is APP_WRITE:
            writes.append((i, name))
        elif kind is APP_READ:
            reads.append((i, name))
    odd = [n for n in tensors if not (n.isascii() and n.isidentifier())]
    io_ids = _io_ids(gsub, "input", "inputs", APP_WRITE, graph.inputs, writes, tensors)
    io_ids.update(_io_ids(gsub, "output", "outputs", APP_READ, graph.outputs, reads, tensors))
    seen_nodes: set[str] = set()
    odd_nodes: list[str] = []
    param_names: set[str] = set()
    param_tensors: list[QnnTensor] = []
    produced: set[str] = set()
    op_types: set[str] = set()
    known = tensors.__contains__
    ops = graph.ops
    # whole-graph checks as set operations (a million ops: a fraction of a second); the first
    # offending node is looked for only when one fails
    names = [op.name for op in ops]
    seen_nodes.update(names)
    if len(seen_nodes) != len(names) or "" in seen_nodes:
        seen: set[str] = set()
        for name in names:
            if not name or name in seen:
                raise _fail("node name is empty or used twice", f"node '{name}'")
            seen.add(name)
    odd_nodes = [n for n in names if not (n.isascii() and n.isidentifier())]
    op_types = {op.type for op in ops}
    # (lists of the ops' name lists, flattened in C: no Python frame per op or name)
    produced = set(chain.from_iterable([op.outputs for op in ops]))
    if not (all(map(known, produced)) and all(map(known, chain.from_iterable([op.inputs for op in ops])))):
        for op in ops:
            n = next((n for n in (*op.inputs, *op.outputs) if n not in tensors), None)
            if n is not None:
                raise _fail(f"refers to tensor '{n}', which is not in the graph", f"node '{op.name}'")
    for op in ops:
        if not op.params:
            continue
        name = op.name
        params = op.params
        if len(params) > 1 and len({p.name for p in params}) != len(params):
            raise _fail("has two params with the same name", f"node '{name}'")
        for p in params:
            if isinstance(p, TensorParam):
                t, psub = p.tensor, f"node '{name}' param '{p.name}'"
                if t.type is not STATIC:
                    raise _fail("a tensor param must be a STATIC tensor", psub)
                if t.name in tensors or t.name in param_names:
                    raise _fail(f"tensor name '{t.name}' is used twice (QNN tensor names are "
                                "unique per graph)", psub)
                _check_storage(t, psub, shapes)
                _check_encoding(t, psub)
                param_names.add(t.name)
                param_tensors.append(t)
                if not (t.name.isascii() and t.name.isidentifier()):
                    odd.append(t.name)

    def tensor_taken(n: str) -> bool:
        return n in tensors or n in param_names

    return Layout(cnames=_renames(odd, tensor_taken), node_cnames=_renames(odd_nodes, seen_nodes.__contains__),
                  io_ids=io_ids, statics=(*statics, *param_tensors), static_elements=total,
                  op_types=tuple(sorted(op_types)), produced=produced, shapes=shapes)


def static_bytes(layout: Layout) -> int:
    """Data bytes the `.bin` will hold (for progress reporting)."""
    return sum(layout.shapes[t.dims][1] * _STORAGE.get(t.datatype, np.dtype(np.uint8)).itemsize
               for t in layout.statics)


def raw_array(tensor: QnnTensor) -> np.ndarray:
    """The tensor's data as the `.raw` file holds it: dense, C order, little-endian (a view when possible)."""
    data = np.ascontiguousarray(storage(tensor))
    little = data.dtype.newbyteorder("<")
    return data if data.dtype == little else data.astype(little)


def raw_bytes(tensor: QnnTensor) -> bytes:
    """The tensor's data as the `.raw` file holds it: dense, C order, little-endian."""
    return raw_array(tensor).tobytes()


def _tarinfo(member: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(member)
    info.size, info.mtime, info.mode = size, 0, _MEMBER_MODE
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info


class _Headers:
    """Tar headers exactly as `tarfile` writes them in PAX format, without its per-member cost.

    A member whose name is ASCII and at most 100 bytes and whose size fits the
    ustar field needs no PAX extension; its header is the one `tarfile` makes
    for a template member with the name and size fields replaced and the
    checksum recomputed. Anything else goes through `tarfile` itself.
    """

    def __init__(self) -> None:
        self.encoding, self.errors = tarfile.ENCODING, "surrogateescape"  # TarFile's defaults
        t = _tarinfo("x", 0).tobuf(tarfile.PAX_FORMAT, self.encoding, self.errors)
        assert len(t) == _BLOCK
        self.mid, self.tail = t[100:124], t[136:148]
        self.rest = t[156:]
        self.base = 8 * 32 + sum(self.mid) + sum(self.tail) + sum(self.rest)  # checksum field as spaces

    def __call__(self, member: str, size: int) -> bytes:
        name = member.encode("ascii", "replace")
        if len(name) > 100 or not member.isascii() or size >= 8 ** 11:
            return _tarinfo(member, size).tobuf(tarfile.PAX_FORMAT, self.encoding, self.errors)
        size_field = b"%011o\0" % size
        chk = self.base + sum(name) + sum(size_field)
        return b"".join((name, bytes(100 - len(name)), self.mid, size_field, self.tail,
                         b"%06o\0 " % chk, self.rest))


def write(graph: QnnGraph, fileobj: BinaryIO, layout: Layout | None = None,
          progress: Callable[[int], None] | None = None) -> None:
    """Stream the `.bin` tar with reproducible headers (mtime 0, root, 0644, sorted members).

    Byte for byte what `tarfile` writes in PAX format, one tensor in memory at a time
    (data by reference: one slice of it). `progress(n)` hears of every n data bytes written.
    """
    layout = layout or plan(graph)
    cname = layout.cnames.get
    members = sorted((cname(t.name, t.name) + ".raw", i) for i, t in enumerate(layout.statics))
    header = _Headers()
    out = fileobj.write
    offset = 0
    for member, i in members:
        t = layout.statics[i]
        if isinstance(t.data, LazyArray):  # by reference: read, convert and write a slice at a time
            lazy = storage(t)
            size = lazy.nbytes
            head = header(member, size)
            out(head)
            little = lazy.dtype.newbyteorder("<")
            for part in lazy.chunks():
                out((part if part.dtype == little else part.astype(little)).view(np.uint8))
                if progress is not None:
                    progress(part.nbytes)
                del part
        else:
            data = raw_array(t)
            size = data.nbytes
            head = header(member, size)
            out(head)
            if size:
                out(data.reshape(-1).view(np.uint8))
                if progress is not None:
                    progress(size)
            del data
        pad = -size % _BLOCK
        if pad:
            out(bytes(pad))
        offset += len(head) + size + pad
    offset += 2 * _BLOCK
    out(bytes(2 * _BLOCK + (-offset % _RECORD)))
