"""Read `_net.json` (+ `.bin`) back into a QnnGraph.

Reads what qlower writes exactly and what the QNN converters write (old and
new: converter-IR node types, `param_map` meta params, `packageName`, string
scalars, `macs_per_inference`, ...), and converter-like files from other tools
leniently. One reading path serves every command: `read` never fails for
absent static data (validation needs shapes and datatypes only) and says so
once; `NetFile.require_data` is where running refuses it. Anything whose
meaning is unclear raises QlowerError naming the file and the tensor or node.
"""

from __future__ import annotations

import json
import os
import stat
import tarfile
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from qlower.diagnostics import Diagnostic, QlowerError, Severity, error, warning
from qlower.qnn.datatypes import DataType, to_numpy
from qlower.qnn.emit_bin import c_identifiers, num_elements
from qlower.qnn.emit_json import parse_quant_params, scalar_value
from qlower.qnn.ir_types import IrTypes, shipped
from qlower.qnn.model import (PACKAGE, OpConfig, Origin, Param, QnnGraph, QnnTensor, ScalarParam, TensorParam,
                              TensorType)

_NET_SUFFIX = "_net.json"
_LFS_POINTER = b"version https://git-lfs.github.com/spec/"
_COMPRESSED = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd", b"\x5d\x00\x00")  # gzip bz2 xz zstd lzma
# Keys with a known meaning (qlower's and the converters'); anything else is tolerated with one note.
_KNOWN = {
    "file": {"model.cpp", "model.bin", "converter_command", "copyright_str", "op_types", "Total parameters",
             "Total MACs per inference", "graph"},
    "graph": {"tensors", "nodes"},
    "tensor": {"id", "name", "type", "dataFormat", "data_type", "unquantized_data_type", "src_axis_format",
               "axis_format", "quant_params", "dims", "is_dynamic_dims", "is_quantizable", "is_updateable",
               "params_count", "data"},
    "node": {"name", "package", "type", "tensor_params", "scalar_params", "param_map", "param_order",
             "input_names", "output_names", "macs_per_inference", "provenance"},
}
_OP_PARAM = 1  # param_map value of a real op param (the converter IR's "core" attributes); others are meta


@attrs.frozen
class NetFile:
    """A read `_net.json`: the graph, what the reader noticed, and which static data is absent."""

    graph: QnnGraph
    diagnostics: tuple[Diagnostic, ...] = ()
    missing_data: tuple[str, ...] = ()  # static tensors (and tensor-param tensors) whose data is absent
    data_problem: str | None = None  # why, e.g. "x.bin is a git-LFS pointer file, not the data"
    path: Path | None = None

    def require_data(self) -> QnnGraph:
        """The graph, or the error that absent static data is for anything that needs values."""
        if not self.missing_data:
            return self.graph
        first = self.missing_data[0]
        n = len(self.missing_data) - 1
        more = f"; {n} more static tensor{'s lack' if n != 1 else ' lacks'} data too" if n else ""
        name = self.path.name if self.path else self.graph.name
        raise QlowerError(error(
            f"static tensor has no data: {self.data_problem}{more}",
            subject=f"{name}: tensor '{first}'", code="missing-data",
            hint="put the real .bin next to the JSON (for a git-LFS pointer: `git lfs pull`); "
                 "`qlower validate` checks everything but the values without it"))


def load(net_json: Path, bin_path: Path | None = None) -> QnnGraph:
    """The graph described by `net_json` with all its static data (else QlowerError)."""
    return read(net_json, bin_path).require_data()


def read(net_json: Path, bin_path: Path | None = None, *, table: IrTypes | None = None) -> NetFile:
    """Read `net_json`; static data from `bin_path` or the `.bin` next to it, absent data noted, not fatal."""
    net_json = Path(net_json)
    ctx = _Ctx(net_json, table or shipped())
    try:
        if not stat.S_ISREG(os.stat(net_json).st_mode):  # (a FIFO would block the read forever)
            raise ctx.fail("cannot read: not a regular file")
        text = net_json.read_text(encoding="utf-8")
    except OSError as exc:
        raise ctx.fail(f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ctx.fail(f"cannot read: not UTF-8 (byte {exc.start})") from None
    try:
        doc = json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise ctx.fail(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise ctx.fail("JSON nested too deeply (a network JSON nests a few levels)") from None
    except _DuplicateKey as exc:
        raise ctx.fail(f"key '{exc.args[0]}' appears twice in one JSON object") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("graph"), dict):
        raise ctx.fail("not a QNN network JSON: no top-level `graph` object")
    ctx.known("file", doc, "top level")
    ctx.known("graph", doc["graph"], "graph")
    name = _graph_name(net_json, doc)
    tensors_doc = _named(doc["graph"].get("tensors", {}), "tensors", ctx)
    nodes_doc = _named(doc["graph"].get("nodes", {}), "nodes", ctx)
    raws = _Raws(net_json, doc, bin_path, ctx)
    param_names = [tn for node in nodes_doc.values() if isinstance(node, dict)
                   and isinstance(node.get("tensor_params"), dict)
                   for tp in node["tensor_params"].values() if isinstance(tp, dict) for tn in tp]
    cnames = c_identifiers([*tensors_doc, *param_names])
    ids: dict[str, int] = {}
    graph = QnnGraph(name)
    for i, (tname, tdoc) in enumerate(tensors_doc.items()):
        t, tid = _tensor(tname, tdoc, f"tensor '{tname}'", raws, cnames, ctx)
        ids[tname] = tid if tid is not None else i
        graph.add_tensor(t)
    for nname, ndoc in nodes_doc.items():
        graph.ops.append(_node(nname, ndoc, raws, cnames, ctx))
    order = {n: k for k, n in enumerate(tensors_doc)}
    for kind, listed in ((TensorType.APP_WRITE, graph.inputs), (TensorType.APP_READ, graph.outputs)):
        chosen = [n for n, t in graph.tensors.items() if t.type is kind]
        listed.extend(sorted(chosen, key=lambda n: (ids[n], order[n])))
    return NetFile(graph, ctx.diagnostics(raws), tuple(ctx.missing), raws.problem if ctx.missing else None,
                   net_json)


class _Ctx:
    """Where we are, so every message names the file and the subject; collects what the reader noticed."""

    def __init__(self, path: Path, table: IrTypes) -> None:
        self.path, self.table = path, table
        self.unknown: dict[str, set[str]] = {}
        self.missing: list[str] = []
        self.unmapped: list[str] = []  # IR-type nodes that do not say which QNN op they are

    def fail(self, message: str, subject: str | None = None) -> QlowerError:
        where = f"{self.path.name}: {subject}" if subject else self.path.name
        return QlowerError(error(message, subject=where, code="bad-net-json"))

    def known(self, scope: str, obj: dict[str, Any], where: str) -> None:
        extra = set(obj) - _KNOWN[scope]
        if extra:
            self.unknown.setdefault(where, set()).update(extra)

    def diagnostics(self, raws: _Raws) -> tuple[Diagnostic, ...]:
        out = []
        if self.missing:
            n = len(self.missing)
            out.append(warning(
                f"static data of {n} tensor{'s' if n != 1 else ''} is not available ({raws.problem}); "
                "everything else is checked, tensor values are not", subject=self.path.name, code="missing-data"))
        if self.unmapped:
            shown = ", ".join(self.unmapped[:3]) + (f" and {len(self.unmapped) - 3} more" if len(self.unmapped) > 3 else "")
            out.append(warning(f"{len(self.unmapped)} node{'s' if len(self.unmapped) != 1 else ''} keep their converter "
                               f"IR type, which names no QNN op: {shown}", subject=self.path.name, code="ir-type"))
        if self.unknown:
            listed = "; ".join(f"{where}: {', '.join(sorted(keys))}" for where, keys in sorted(self.unknown.items()))
            out.append(Diagnostic(Severity.NOTE, f"ignored keys qlower does not know ({listed})",
                                  subject=self.path.name, code="unknown-keys"))
        return tuple(out)


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json.loads would keep the last of two equal keys; for tensors and nodes that hides an error."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _graph_name(path: Path, doc: dict[str, Any]) -> str:
    if path.name.endswith(_NET_SUFFIX) and len(path.name) > len(_NET_SUFFIX):
        return path.name[: -len(_NET_SUFFIX)]
    cpp = doc.get("model.cpp")
    if isinstance(cpp, str) and cpp.strip() and cpp != "N/A":
        return Path(cpp.replace("\\", "/")).stem
    return path.stem


def _obj(value: Any, what: str, ctx: _Ctx, subject: str | None = None) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ctx.fail(f"`{what}` must be a JSON object, got {type(value).__name__}", subject)
    return value


def _named(value: Any, what: str, ctx: _Ctx) -> dict[str, Any]:
    """`graph.tensors`/`graph.nodes`: an object by name, or (leniently) a list of objects with `name`."""
    if isinstance(value, list):
        out: dict[str, Any] = {}
        for item in value:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise ctx.fail(f"`graph.{what}` list entries need a `name`")
            if item["name"] in out:
                raise ctx.fail(f"`graph.{what}` names '{item['name']}' twice")
            out[item["name"]] = item
        return out
    return _obj(value, f"graph.{what}", ctx)


class _Raws:
    """The `.bin` members by symbol. An absent, LFS-pointer or unreadable `.bin` is a `problem`, not an error."""

    def __init__(self, net_json: Path, doc: dict[str, Any], explicit: Path | None, ctx: _Ctx) -> None:
        self.members: dict[str, tuple[int, int]] = {}  # symbol -> (offset of its bytes in the tar, size)
        self.path: Path | None = None
        self.problem = "no .bin was found next to the JSON"
        if explicit is not None:
            path: Path | None = Path(explicit)
            if not path.is_file():
                raise ctx.fail(f"static data file {path.name} does not exist")
        else:
            stem = net_json.name[: -len(_NET_SUFFIX)] if net_json.name.endswith(_NET_SUFFIX) else net_json.stem
            candidates = [net_json.with_name(stem + ".bin")]
            named = doc.get("model.bin")
            if isinstance(named, str) and named.strip() and named != "N/A":
                candidates.append(net_json.with_name(Path(named.replace("\\", "/")).name))
            path = next((c for c in candidates if c.is_file()), None)
        if path is not None:
            self._read(path)

    def _read(self, path: Path) -> None:
        """Note where each `.raw` member's bytes are; none is read until a tensor asks for it."""
        try:
            with path.open("rb") as f:
                head = f.read(len(_LFS_POINTER))
            if head == _LFS_POINTER:
                self.problem = f"{path.name} is a git-LFS pointer file, not the data"
                return
            if head.startswith(_COMPRESSED):
                self.problem = (f"{path.name} is compressed; qlower reads the plain tar the QNN converter "
                                "writes (decompress it first)")
                return
            with tarfile.open(path, mode="r:") as tar:  # plain tar only: headers are read, members skipped
                for m in tar.getmembers():
                    base = m.name.replace("\\", "/").rsplit("/", 1)[-1]
                    if m.isfile() and not m.issparse() and base.endswith(".raw"):
                        self.members[base[: -len(".raw")]] = (m.offset_data, m.size)
        except (tarfile.TarError, OSError, EOFError, UnicodeError) as exc:
            self.members = {}
            self.problem = f"{path.name} is not a readable tar: {type(exc).__name__}"
            return
        self.path = path
        self.problem = f"{path.name} has no .raw member for it"

    def size(self, cname: str) -> int | None:
        """The byte count of the tensor's member, or None without one."""
        m = self.members.get(cname)
        return None if m is None else m[1]

    def read(self, cname: str) -> bytes:
        """The tensor's member's bytes (its size checked first by the caller, see `_data`)."""
        offset, size = self.members[cname]
        assert self.path is not None
        with self.path.open("rb") as f:
            f.seek(offset)
            data = f.read(size)
        if len(data) != size:
            raise OSError(f"{self.path.name} is truncated inside member {cname}.raw")
        return data


def _datatype(value: Any, subject: str, ctx: _Ctx) -> DataType:
    try:
        if isinstance(value, bool):
            raise ValueError
        return DataType(value) if isinstance(value, int) else DataType.parse(str(value))
    except (ValueError, KeyError):
        raise ctx.fail(f"unknown datatype {value!r}", subject) from None


def _tensor(name: str, tdoc: Any, subject: str, raws: _Raws, cnames: dict[str, str],
            ctx: _Ctx) -> tuple[QnnTensor, int | None]:
    tdoc = _obj(tdoc, "tensor", ctx, subject)
    ctx.known("tensor", tdoc, "tensors")
    ttype = tdoc.get("type")
    try:
        if isinstance(ttype, bool):
            raise ValueError
        if isinstance(ttype, int):
            kind = TensorType(ttype)
        else:
            kind = TensorType[str(ttype).removeprefix("QNN_TENSOR_TYPE_")]
    except (ValueError, KeyError):
        raise ctx.fail(f"unknown tensor type {ttype!r}", subject) from None
    if "data_type" not in tdoc:
        raise ctx.fail("missing `data_type`", subject)
    dt = _datatype(tdoc["data_type"], subject, ctx)
    if tdoc.get("dataFormat", 0) not in (0, None):
        raise ctx.fail(f"unsupported dataFormat {tdoc['dataFormat']!r} (only dense tensors)", subject)
    dims = tdoc.get("dims")
    if not isinstance(dims, list) or any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in dims):
        raise ctx.fail(f"`dims` must be a list of non-negative integers, got {str(dims)[:200]}", subject)
    if dims and (max(dims) > 0xFFFFFFFF or num_elements(dims) > 1 << 48):
        raise ctx.fail(f"`dims` {dims} are beyond what QNN holds (uint32 dims, at most 2^48 elements)", subject)
    tid = tdoc.get("id")
    tid = tid if isinstance(tid, int) and not isinstance(tid, bool) else None
    enc = parse_quant_params(tdoc.get("quant_params"), dims, lambda m: ctx.fail(m, subject))
    data = _data(name, tdoc, kind, dt, dims, raws if kind is TensorType.STATIC else None, cnames[name], subject, ctx)
    return QnnTensor(name, kind, dt, tuple(dims), enc, data), tid


def _data(name: str, tdoc: dict[str, Any], kind: TensorType, dt: DataType, dims: list[int], raws: _Raws | None,
          cname: str, subject: str, ctx: _Ctx) -> np.ndarray | None:
    if kind is not TensorType.STATIC or raws is None:
        return None
    try:
        storage = to_numpy(dt)
    except ValueError:
        raise ctx.fail(f"static tensor of datatype {dt.qnn_name} cannot hold data", subject) from None
    count = num_elements(dims)
    have = raws.size(cname)
    if have is not None:
        if have != count * storage.itemsize:  # (checked before a byte is read)
            raise ctx.fail(f"static data has {have} bytes, dims {dims} of {dt.qnn_name} need "
                           f"{count * storage.itemsize}", subject)
        try:
            raw = raws.read(cname)
        except OSError as exc:
            raise ctx.fail(f"cannot read its static data: {exc.strerror or exc}", subject) from None
        return np.frombuffer(raw, dtype=storage.newbyteorder("<")).astype(storage).reshape(dims)
    if "data" in tdoc:
        try:
            arr = np.array(tdoc["data"], dtype=storage)
        except (ValueError, TypeError, OverflowError) as exc:
            raise ctx.fail(f"inline data does not fit {dt.qnn_name}: {exc}", subject) from None
        if arr.size != count:
            raise ctx.fail(f"inline data has {arr.size} elements, dims {dims} need {count}", subject)
        return arr.reshape(dims)
    ctx.missing.append(name)
    return None


def _scalar(pname: str, pdoc: Any, subject: str, ctx: _Ctx) -> ScalarParam:
    pdoc = _obj(pdoc, "scalar param", ctx, subject)
    if len(pdoc) != 1:
        raise ctx.fail(f"scalar param needs exactly one {{datatype: value}} entry, got {len(pdoc)}", subject)
    (code, value), = pdoc.items()
    dt = _datatype(int(code) if str(code).lstrip("-").isdigit() else code, subject, ctx)
    if dt is DataType.UNDEFINED and isinstance(value, str):
        dt = DataType.STRING  # older converters tag string scalars with the UNDEFINED code
    if value is None or isinstance(value, (list, dict)):
        raise ctx.fail(f"value {value!r} is not a {dt.qnn_name}", subject)
    try:
        return ScalarParam(pname, dt, scalar_value(ScalarParam(pname, dt, value), subject))
    except QlowerError as exc:
        raise ctx.fail(exc.diagnostics[0].message, subject) from None


def _param_map(ndoc: dict[str, Any], subject: str, ctx: _Ctx) -> dict[str, int]:
    pmap = ndoc.get("param_map", {})
    if not isinstance(pmap, dict) or any(isinstance(v, bool) or not isinstance(v, int) for v in pmap.values()):
        raise ctx.fail("`param_map` must map param names to integers", subject)
    return pmap


def _node(name: str, ndoc: Any, raws: _Raws, cnames: dict[str, str], ctx: _Ctx) -> OpConfig:
    subject = f"node '{name}'"
    ndoc = _obj(ndoc, "node", ctx, subject)
    ctx.known("node", ndoc, "nodes")
    if not isinstance(ndoc.get("type"), str) or not ndoc["type"]:
        raise ctx.fail("missing op `type`", subject)
    names = {}
    for key in ("input_names", "output_names"):
        v = ndoc.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise ctx.fail(f"`{key}` must be a list of tensor names", subject)
        names[key] = v
    params: dict[str, Param] = {}
    for pname, pdoc in _obj(ndoc.get("tensor_params", {}), "tensor_params", ctx, subject).items():
        psub = f"{subject} param '{pname}'"
        pdoc = _obj(pdoc, "tensor param", ctx, psub)
        if len(pdoc) != 1:
            raise ctx.fail(f"tensor param needs exactly one {{tensor name: tensor}} entry, got {len(pdoc)}", psub)
        (tname, tdoc), = pdoc.items()
        t, _ = _tensor(tname, tdoc, psub, raws, cnames, ctx)
        params[pname] = TensorParam(pname, t)
    for pname, pdoc in _obj(ndoc.get("scalar_params", {}), "scalar_params", ctx, subject).items():
        if pname in params:
            raise ctx.fail(f"param '{pname}' is both a tensor and a scalar param", subject)
        params[pname] = _scalar(pname, pdoc, f"{subject} param '{pname}'", ctx)
    op_type, meta, provenance = _op_type(ndoc["type"], params, _param_map(ndoc, subject, ctx), subject, ctx)
    package = ndoc.get("package")
    if package is None:
        pkg_param = params.get("packageName")
        package = pkg_param.value if isinstance(pkg_param, ScalarParam) else PACKAGE
    if not isinstance(package, str):
        raise ctx.fail("`package` must be a string", subject)
    kept = {p: v for p, v in params.items() if p not in meta}
    for p in meta:  # data a dropped meta param lacks is nobody's concern
        v = params[p]
        if isinstance(v, TensorParam) and v.tensor.data is None and v.tensor.name in ctx.missing:
            ctx.missing.remove(v.tensor.name)
    order = ndoc.get("param_order")
    if order is not None:
        if (not isinstance(order, list) or not all(isinstance(p, str) and p in params for p in order)
                or len(set(order)) != len(order)):
            raise ctx.fail("`param_order` must list the node's params, each once", subject)
        order = [p for p in order if p in kept] + [p for p in kept if p not in order]
    return OpConfig(name, op_type, list(names["input_names"]), list(names["output_names"]),
                    [kept[p] for p in (order or kept)], package=package or PACKAGE, provenance=provenance,
                    origin=_origin(ndoc.get("provenance")))


def _origin(doc: Any) -> Origin | None:
    """qlower's `provenance` key, when it is well formed (it is informative only: anything else is ignored)."""
    if not isinstance(doc, dict):
        return None
    rule, location, sources = doc.get("rule"), doc.get("location"), doc.get("source_nodes", [])
    if not (rule is None or isinstance(rule, str)) or not (location is None or isinstance(location, str)):
        return None
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        return None
    return Origin(rule, location, tuple(sources))


def _op_type(node_type: str, params: dict[str, Param], pmap: dict[str, int], subject: str,
             ctx: _Ctx) -> tuple[str, set[str], str | None]:
    """The QNN op type, the names of the node's meta params, and the provenance naming the IR type."""
    meta = {p for p in params if p in ctx.table.meta_params or pmap.get(p, _OP_PARAM) != _OP_PARAM}
    if not ctx.table.is_ir_type(node_type):
        return node_type, meta, None
    rule = ctx.table.rule_for(node_type, params)
    if rule is None:
        wanted = " or ".join(f"`{r.param}`" for r in ctx.table.rules[node_type])
        ctx.unmapped.append(f"{subject} ({node_type} without {wanted})")
        return node_type, meta, None
    if rule.qnn_op is not None:
        meta.discard(rule.param)
        return rule.qnn_op, meta, f"converter IR {node_type}"
    p = params[rule.param]
    if not isinstance(p, ScalarParam) or not isinstance(p.value, str) or not p.value:
        ctx.unmapped.append(f"{subject} ({node_type} whose `{rule.param}` is not a QNN op name)")
        return node_type, meta, None
    meta.add(rule.param)
    return p.value, meta, f"converter IR {node_type}"
