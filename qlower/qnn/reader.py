"""Read `_net.json` (+ `.bin`) back into a QnnGraph.

Accepts what qlower writes exactly, and converter-like files from other tools
leniently: unknown keys are ignored, missing optional keys take the converter's
defaults, datatypes may be codes or `QNN_DATATYPE_*` names. Anything whose
meaning is unclear raises QlowerError naming the file and the tensor or node.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import numpy as np

from qlower.diagnostics import QlowerError, error
from qlower.qnn.datatypes import DataType, to_numpy
from qlower.qnn.emit_bin import c_identifiers, num_elements
from qlower.qnn.emit_json import parse_quant_params, scalar_value
from qlower.qnn.model import PACKAGE, OpConfig, Origin, Param, QnnGraph, QnnTensor, ScalarParam, TensorParam, TensorType

_NET_SUFFIX = "_net.json"


class _Ctx:
    """Where we are, so every message names the file and the subject."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, message: str, subject: str | None = None) -> QlowerError:
        where = f"{self.path.name}: {subject}" if subject else self.path.name
        return QlowerError(error(message, subject=where, code="bad-net-json"))


def load(net_json: Path, bin_path: Path | None = None) -> QnnGraph:
    """The graph described by `net_json`; static data from `bin_path` or `<name>.bin` next to it."""
    net_json = Path(net_json)
    ctx = _Ctx(net_json)
    try:
        text = net_json.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ctx.fail(f"cannot read: {exc}") from None
    try:
        doc = json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise ctx.fail(f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except _DuplicateKey as exc:
        raise ctx.fail(f"key '{exc.args[0]}' appears twice in one JSON object") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("graph"), dict):
        raise ctx.fail("not a QNN network JSON: no top-level `graph` object")
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
    return graph


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
    """The `.bin` members, opened only if some static tensor needs them."""

    def __init__(self, net_json: Path, doc: dict[str, Any], explicit: Path | None, ctx: _Ctx) -> None:
        self._ctx, self._members = ctx, None
        if explicit is not None:
            self.path: Path | None = Path(explicit)
            if not self.path.is_file():
                raise ctx.fail(f"static data file {self.path.name} does not exist")
            return
        self.path = None
        stem = net_json.name[: -len(_NET_SUFFIX)] if net_json.name.endswith(_NET_SUFFIX) else net_json.stem
        candidates = [net_json.with_name(stem + ".bin")]
        named = doc.get("model.bin")
        if isinstance(named, str) and named.strip() and named != "N/A":
            candidates.append(net_json.with_name(Path(named.replace("\\", "/")).name))
        self.path = next((c for c in candidates if c.is_file()), None)

    def get(self, cname: str) -> bytes | None:
        if self.path is None:
            return None
        if self._members is None:
            self._members = self._read()
        return self._members.get(cname)

    def _read(self) -> dict[str, bytes]:
        assert self.path is not None
        out: dict[str, bytes] = {}
        try:
            with tarfile.open(self.path, mode="r:*") as tar:
                for m in tar.getmembers():
                    base = m.name.replace("\\", "/").rsplit("/", 1)[-1]
                    if m.isfile() and base.endswith(".raw"):
                        f = tar.extractfile(m)
                        out[base[: -len(".raw")]] = f.read() if f is not None else b""
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise self._ctx.fail(f"static data file {self.path.name} is not a readable tar: {exc}") from None
        return out


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
        raise ctx.fail(f"`dims` must be a list of non-negative integers, got {dims!r}", subject)
    tid = tdoc.get("id")
    tid = tid if isinstance(tid, int) and not isinstance(tid, bool) else None
    enc = parse_quant_params(tdoc.get("quant_params"), dims, lambda m: ctx.fail(m, subject))
    raw = raws.get(cnames[name]) if kind is TensorType.STATIC else None
    data = _data(tdoc, kind, dt, dims, raw, raws.path is None, subject, ctx)
    return QnnTensor(name, kind, dt, tuple(dims), enc, data), tid


def _data(tdoc: dict[str, Any], kind: TensorType, dt: DataType, dims: list[int], raw: bytes | None,
          missing_bin: bool, subject: str, ctx: _Ctx) -> np.ndarray | None:
    if kind is not TensorType.STATIC:
        return None
    try:
        storage = to_numpy(dt)
    except ValueError:
        raise ctx.fail(f"static tensor of datatype {dt.qnn_name} cannot hold data", subject) from None
    count = num_elements(dims)
    if raw is not None:
        if len(raw) != count * storage.itemsize:
            raise ctx.fail(f"static data has {len(raw)} bytes, dims {dims} of {dt.qnn_name} need "
                           f"{count * storage.itemsize}", subject)
        return np.frombuffer(raw, dtype=storage.newbyteorder("<")).astype(storage).reshape(dims)
    if "data" in tdoc:
        try:
            arr = np.array(tdoc["data"], dtype=storage)
        except (ValueError, TypeError, OverflowError) as exc:
            raise ctx.fail(f"inline data does not fit {dt.qnn_name}: {exc}", subject) from None
        if arr.size != count:
            raise ctx.fail(f"inline data has {arr.size} elements, dims {dims} need {count}", subject)
        return arr.reshape(dims)
    hint = "no .bin was found next to the JSON" if missing_bin else "its .raw is not in the .bin"
    raise ctx.fail(f"static tensor has no data: none inline and {hint}", subject)


def _scalar(pname: str, pdoc: Any, subject: str, ctx: _Ctx) -> ScalarParam:
    pdoc = _obj(pdoc, "scalar param", ctx, subject)
    if len(pdoc) != 1:
        raise ctx.fail(f"scalar param needs exactly one {{datatype: value}} entry, got {len(pdoc)}", subject)
    (code, value), = pdoc.items()
    dt = _datatype(int(code) if str(code).lstrip("-").isdigit() else code, subject, ctx)
    if value is None or isinstance(value, (list, dict)):
        raise ctx.fail(f"value {value!r} is not a {dt.qnn_name}", subject)
    try:
        return ScalarParam(pname, dt, scalar_value(ScalarParam(pname, dt, value), subject))
    except QlowerError as exc:
        raise ctx.fail(exc.diagnostics[0].message, subject) from None


def _node(name: str, ndoc: Any, raws: _Raws, cnames: dict[str, str], ctx: _Ctx) -> OpConfig:
    subject = f"node '{name}'"
    ndoc = _obj(ndoc, "node", ctx, subject)
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
    order = ndoc.get("param_order")
    if order is not None:
        if (not isinstance(order, list) or not all(isinstance(p, str) and p in params for p in order)
                or len(set(order)) != len(order)):
            raise ctx.fail("`param_order` must list the node's params, each once", subject)
        order = order + [p for p in params if p not in order]
    package = ndoc.get("package", PACKAGE)
    if not isinstance(package, str):
        raise ctx.fail("`package` must be a string", subject)
    return OpConfig(name, ndoc["type"], list(names["input_names"]), list(names["output_names"]),
                    [params[p] for p in (order or params)], package=package or PACKAGE,
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


