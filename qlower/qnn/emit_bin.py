"""The `.bin` artifact and the naming layout all three artifacts share.

The converter's `.bin` is a tar of `<symbol>.raw` files, one per static
tensor; `qnn-model-lib-generator` turns each into an object whose symbols the
`.cpp` reaches through `BINVARSTART(symbol)`. So the tar member names, the C
identifiers in the `.cpp` and the tensor ids in `_net.json` must agree; `plan`
computes them once, in one pass over the graph, after checking that the graph
can be written at all. `write` streams the tar one tensor at a time.
"""

from __future__ import annotations

import collections
import re
import tarfile
from collections.abc import Callable, Iterable, Sequence
from itertools import chain
from typing import Any, BinaryIO

import attrs
import numpy as np

from qlower._frozen import Frozen
from qlower.diagnostics import QlowerError, error
from qlower.graph.lazy import LazyArray
from qlower.qnn.datatypes import DataType, to_numpy
from qlower.qnn.model import EncodingKind, QnnGraph, QnnTensor, TensorParam, TensorType
from qlower.qnn.joiner import all_identifiers
from qlower.qnn.table import UNKNOWN, QnnTable, TensorKind, table_of

_NON_IDENT_CHAR = re.compile(r"[^A-Za-z0-9_]")
_MEMBER_MODE = 0o644
_BLOCK = tarfile.BLOCKSIZE
_GATHER = 1 << 20  # bytes of small members written at once
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
    statics: Sequence[QnnTensor]
    static_elements: int  # elements of the graph's static tensors (not tensor params)
    op_types: tuple[str, ...]  # sorted
    shapes: Shapes = attrs.field(factory=Shapes, eq=False)
    table: QnnTable | None = attrs.field(default=None, eq=False)  # what was planned (the writers walk it)

    def cname(self, name: str) -> str:
        return self.cnames.get(name, name)

    def node_cname(self, name: str) -> str:
        return self.node_cnames.get(name, name)


def _fail(message: str, subject: str, code: str = "artifact-invalid") -> QlowerError:
    return QlowerError(error(message, subject=subject, code=code))


def _form_problem(datatype: DataType, dims: tuple[int, ...], ttype: TensorType, has_data: bool) -> str | None:
    """Why a tensor of this datatype, dims and type, with or without data, cannot be written (None:
    it can, data permitting): what a tensor and a tensor kind are both checked for."""
    if datatype in _NO_STORAGE:
        return f"datatype {datatype.qnn_name} cannot be stored in a tensor"
    if dims and min(dims) < 0:
        return f"negative dimension in dims {list(dims)}"
    if ttype is TensorType.STATIC and not has_data:
        return "static tensor has no data"
    if has_data and ttype is not TensorType.STATIC:
        return f"only STATIC tensors carry data, this one is {ttype.name}"
    return None


def _check_storage(t: QnnTensor, subject: str, shapes: Shapes) -> int:
    """Raise unless `t` can be stored; return its element count."""
    dims, data = t.dims, t.data
    problem = _form_problem(t.datatype, dims, t.type, data is not None)
    if problem is not None:
        raise _fail(problem, subject)
    count = shapes[dims][1]
    if t.type is TensorType.STATIC:
        want = _STORAGE[t.datatype]
        if data.dtype != want and not _lossless(data, want):
            raise _fail(f"static data of dtype {data.dtype} does not convert exactly to {want}, "
                        f"the storage of {t.datatype.qnn_name}", subject)
        if data.size != count:
            raise _fail(f"static data has {data.size} elements, dims {list(dims)} "
                        f"need {count}", subject)
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
    offsets = np.asarray(e.offsets)
    if offsets.size and (offsets.min() < -2**31 or offsets.max() >= 2**31):
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
        if not isinstance(rows, Frozen) or rows.array.shape != (len(e.scales), n):  # ragged rows stay tuples
            raise _fail(f"block_scales must be [{len(e.scales)}][{e.num_blocks_per_axis}]", subject)
        # millions of entries on a 4-bit LLM: one min/max over the array
        if rows.array.size and (rows.array.min() < 0 or rows.array.max() >= limit):
            raise _fail("block scale does not fit its storage", subject)
    elif any(f is not None for f in block_fields):
        raise _fail(f"{k.name} must not set block fields", subject)


def _io_ids(gsub: str, role: str, attr: str, kind: TensorType, listed: list[str],
            slots: list[tuple[int, str]], tensors: Any) -> dict[str, int]:
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


def plan(graph: QnnGraph | QnnTable) -> Layout:
    """Check that `graph` can be written and fix its ids and C identifiers (one pass; a `QnnGraph` is
    planned as its `QnnTable`, which `Layout.table` holds for the writers)."""
    if isinstance(graph, QnnGraph):
        for name, t in graph.tensors.items():
            if name is not t.name and name != t.name:
                raise _fail(f"registered under '{name}' but named '{t.name}'", f"tensor '{t.name}'")
        table = table_of(graph)
    else:
        table = graph
    gsub = f"graph '{table.name}'"
    if not table.name or "/" in table.name or "\\" in table.name or table.name in (".", ".."):
        raise _fail("graph name must be a non-empty file name", gsub)
    names, kind_of, data = table.tensor_names, table.tensor_kind, table.tensor_data
    shapes = Shapes()
    # what can be checked of a kind, once per kind; a static tensor's data, once per tensor
    for k, kind in enumerate(table.tensor_kinds):
        try:
            _check_kind(kind)
        except _KindProblem as exc:  # named after the kind's first tensor, looked for only now
            raise _fail(str(exc), f"tensor '{names[kind_of.index(k)] if k in kind_of else ''}'") from None
    STATIC, APP_WRITE, APP_READ = TensorType.STATIC, TensorType.APP_WRITE, TensorType.APP_READ
    kinds = table.tensor_kinds
    # static data: what a kind fixes (storage dtype, element count) compared per tensor, in C where it can be
    want = [_STORAGE.get(kind.datatype) if kind.static else None for kind in kinds]
    counts = [shapes[kind.dims][1] if kind.static else 0 for kind in kinds]
    total = 0
    for i, d in data.items():
        k = kind_of[i]
        if type(d) is not np.ndarray or d.dtype != want[k] or d.size != counts[k]:
            _check_storage(table.tensor(i), f"tensor '{names[i]}'", shapes)  # the general check (and its message)
        total += counts[k]
    writes: list[tuple[int, str]] = []
    reads: list[tuple[int, str]] = []
    io_kinds = {k for k, kind in enumerate(kinds) if kind.type is APP_WRITE or kind.type is APP_READ}
    at = np.flatnonzero(np.isin(np.fromiter(kind_of, np.int64, len(kind_of)), sorted(io_kinds))) if io_kinds else ()
    for i in map(int, at):  # (the few graph input and output tensors, found in C)
        (writes if kinds[kind_of[i]].type is APP_WRITE else reads).append((i, names[i]))
    odd = [] if all_identifiers(names) else [n for n in names if not (n.isascii() and n.isidentifier())]
    io_tensors = {n: table.tensor(i) for i, n in (*writes, *reads)}
    io_ids = _io_ids(gsub, "input", "inputs", APP_WRITE, table.inputs, writes, io_tensors)
    io_ids.update(_io_ids(gsub, "output", "outputs", APP_READ, table.outputs, reads, io_tensors))
    op_names = table.op_names
    seen_nodes = set(op_names)
    if len(seen_nodes) != len(op_names) or "" in seen_nodes:
        seen: set[str] = set()
        for name in op_names:
            if not name or name in seen:
                raise _fail("node name is empty or used twice", f"node '{name}'")
            seen.add(name)
    odd_nodes = [] if all_identifiers(op_names) else [n for n in op_names if not (n.isascii() and n.isidentifier())]
    used_kinds = set(table.op_kind)
    op_types = {kind.type for k, kind in enumerate(table.op_kinds) if k in used_kinds}
    known: set[str] | None = None  # the tensor names, as a set when something needs it
    if any(UNKNOWN in kind.inputs or UNKNOWN in kind.outputs for kind in table.op_kinds):
        known = set(names)
        in_at, out_at = table.input_at(), table.output_at()
        for i, op_name in enumerate(op_names):
            n = next((n for n in (*table.inputs_of(i, in_at), *table.outputs_of(i, out_at)) if n not in known),
                     None)
            if n is not None:
                raise _fail(f"refers to tensor '{n}', which is not in the graph", f"node '{op_name}'")
    param_names: set[str] = set()
    param_tensors: list[QnnTensor] = []
    at = (table.input_at(), table.output_at()) if table.op_params else (None, None)
    for i in sorted(table.op_params):
        op = table.op(i, *at)
        name, params = op.name, op.params
        if len(params) > 1 and len({p.name for p in params}) != len(params):
            raise _fail("has two params with the same name", f"node '{name}'")
        for p in params:
            if isinstance(p, TensorParam):
                t, psub = p.tensor, f"node '{name}' param '{p.name}'"
                if t.type is not STATIC:
                    raise _fail("a tensor param must be a STATIC tensor", psub)
                if known is None:
                    known = set(names)
                if t.name in known or t.name in param_names:
                    raise _fail(f"tensor name '{t.name}' is used twice (QNN tensor names are "
                                "unique per graph)", psub)
                _check_storage(t, psub, shapes)
                _check_encoding(t, psub)
                param_names.add(t.name)
                param_tensors.append(t)
                if not (t.name.isascii() and t.name.isidentifier()):
                    odd.append(t.name)
    for k, kind in enumerate(table.op_kinds):
        if k in used_kinds and len(kind.params) > 1 and len({p.name for p in kind.params}) != len(kind.params):
            raise _fail("has two params with the same name", f"node '{op_names[table.op_kind.index(k)]}'")

    if odd and known is None:
        known = set(names)

    def tensor_taken(n: str) -> bool:
        return n in known or n in param_names  # type: ignore[operator]

    return Layout(cnames=_renames(odd, tensor_taken), node_cnames=_renames(odd_nodes, seen_nodes.__contains__),
                  io_ids=io_ids, statics=_Statics(table, list(data), tuple(param_tensors)), static_elements=total,
                  op_types=tuple(sorted(op_types)), shapes=shapes, table=table)


class _KindProblem(Exception):
    """Why tensors of a kind cannot be written (the caller names the tensor)."""


def _check_kind(kind: TensorKind) -> None:
    """What can be checked of a kind, once per kind (a static tensor's data is checked per tensor)."""
    problem = _form_problem(kind.datatype, kind.dims, kind.type, kind.static)
    if problem is not None:
        raise _KindProblem(problem)
    try:
        _check_encoding(kind.tensor("", None), "")
    except QlowerError as exc:
        raise _KindProblem(exc.diagnostics[0].message) from None


class _Statics(Sequence):
    """The static tensors a layout writes: the graph's (made from the table when asked for) and then
    the tensor params' tensors."""

    def __init__(self, table: QnnTable, indices: list[int], params: tuple[QnnTensor, ...] = ()) -> None:
        self.table, self.indices, self.params = table, indices, params

    def __len__(self) -> int:
        return len(self.indices) + len(self.params)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        n = len(self.indices)
        return self.table.tensor(self.indices[i]) if i < n else self.params[i - n]

    def names(self) -> list[str]:
        names = self.table.tensor_names
        return [names[i] for i in self.indices] + [t.name for t in self.params]


def static_bytes(layout: Layout) -> int:
    """Data bytes the `.bin` will hold (for progress reporting)."""
    statics = layout.statics
    kinds, kind_of = statics.table.tensor_kinds, statics.table.tensor_kind
    counts = collections.Counter(kind_of[i] for i in statics.indices)
    return sum(layout.shapes[kinds[k].dims][1] * _STORAGE.get(kinds[k].datatype, np.dtype(np.uint8)).itemsize * n
               for k, n in counts.items()) + sum(layout.shapes[t.dims][1] * _STORAGE.get(
                   t.datatype, np.dtype(np.uint8)).itemsize for t in statics.params)


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


def write(graph: QnnGraph | QnnTable, fileobj: BinaryIO, layout: Layout | None = None,
          progress: Callable[[int], None] | None = None) -> None:
    """Stream the `.bin` tar with reproducible headers (mtime 0, root, 0644, sorted members).

    Byte for byte what `tarfile` writes in PAX format, one tensor in memory at a time
    (data by reference: one slice of it). `progress(n)` hears of every n data bytes written.
    """
    layout = layout or plan(graph)
    cname = layout.cnames.get
    statics = layout.statics
    members = sorted((cname(n, n) + ".raw", i) for i, n in enumerate(statics.names()))
    header = _Headers()
    out = fileobj.write
    offset = 0
    # small members gather here and go out together: a tar of 250k small weights is 750k pieces
    pending = bytearray()
    for member, i in members:
        t = statics[i]
        if isinstance(t.data, LazyArray):  # by reference: read, convert and write a slice at a time
            if pending:
                out(pending)
                pending = bytearray()
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
            pad = -size % _BLOCK
            if pad:
                out(bytes(pad))
        else:
            data = raw_array(t)
            size = data.nbytes
            head = header(member, size)
            pending += head
            if size >= _GATHER:
                out(pending)
                pending = bytearray()
                out(data.reshape(-1).view(np.uint8))
            elif size:
                pending += data.reshape(-1).view(np.uint8).data
            if size and progress is not None:
                progress(size)
            del data
            pad = -size % _BLOCK
            if pad:
                pending += bytes(pad)
            if len(pending) >= _GATHER:
                out(pending)
                pending = bytearray()
        offset += len(head) + size + pad
    if pending:
        out(pending)
    offset += 2 * _BLOCK
    out(bytes(2 * _BLOCK + (-offset % _RECORD)))
