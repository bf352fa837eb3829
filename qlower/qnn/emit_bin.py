"""The `.bin` artifact and the naming layout all three artifacts share.

The converter's `.bin` is a tar of `<symbol>.raw` files, one per static
tensor; `qnn-model-lib-generator` turns each into an object whose symbols the
`.cpp` reaches through `BINVARSTART(symbol)`. So the tar member names, the C
identifiers in the `.cpp` and the tensor ids in `_net.json` must agree; `plan`
computes them once, after checking that the graph can be written at all.
"""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Iterable
from typing import BinaryIO

import attrs
import numpy as np

from qlower.diagnostics import QlowerError, error
from qlower.qnn.datatypes import DataType, to_numpy
from qlower.qnn.model import EncodingKind, QnnGraph, QnnTensor, TensorParam, TensorType

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_MEMBER_MODE = 0o644


def c_identifiers(names: Iterable[str]) -> dict[str, str]:
    """A unique C identifier for every name, independent of the names' order.

    Names that already are identifiers keep their spelling (that is what the
    converter's own tensor names look like, so its `.bin` members resolve);
    the others get non-identifier characters replaced by `_` and, on a clash,
    a numeric suffix, assigned in sorted order so the result is reproducible.
    """
    unique = sorted(set(names))
    out = {n: n for n in unique if _IDENT.match(n)}
    used = set(out.values())
    for name in unique:
        if name in out:
            continue
        base = re.sub(r"[^A-Za-z0-9_]", "_", name)
        if not base or not (base[0].isalpha() or base[0] == "_"):
            base = "_" + base
        candidate, k = base, 1
        while candidate in used:
            candidate, k = f"{base}_{k}", k + 1
        out[name] = candidate
        used.add(candidate)
    return out


def num_elements(dims: Iterable[int]) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


@attrs.frozen
class Layout:
    """Ids, C identifiers and the static tensors of one graph, as every artifact sees them.

    `statics` lists the graph's static tensors (in tensor order) and then the
    tensor-param tensors (in op and param order); `owners` maps a tensor-param
    tensor's name to its node.
    """

    ids: dict[str, int]
    cnames: dict[str, str]
    node_cnames: dict[str, str]
    statics: tuple[QnnTensor, ...]
    owners: dict[str, str]


def _fail(message: str, subject: str, code: str = "artifact-invalid") -> QlowerError:
    return QlowerError(error(message, subject=subject, code=code))


def _check_storage(t: QnnTensor, subject: str) -> None:
    if t.datatype in (DataType.STRING, DataType.UNDEFINED):
        raise _fail(f"datatype {t.datatype.qnn_name} cannot be stored in a tensor", subject)
    if any(int(d) < 0 for d in t.dims):
        raise _fail(f"negative dimension in dims {list(t.dims)}", subject)
    if t.type is TensorType.STATIC:
        if t.data is None:
            raise _fail("static tensor has no data", subject)
        want = to_numpy(t.datatype)
        if t.data.dtype != want and not _lossless(t.data, want):
            raise _fail(f"static data of dtype {t.data.dtype} does not convert exactly to {want}, "
                        f"the storage of {t.datatype.qnn_name}", subject)
        if t.data.size != num_elements(t.dims):
            raise _fail(f"static data has {t.data.size} elements, dims {list(t.dims)} "
                        f"need {num_elements(t.dims)}", subject)
    elif t.data is not None:
        raise _fail(f"only STATIC tensors carry data, this one is {t.type.name}", subject)


def _lossless(data: np.ndarray, want: np.dtype) -> bool:
    try:
        cast = data.astype(want)
        return bool(np.array_equal(cast.astype(data.dtype), data, equal_nan=data.dtype.kind in "fc"))
    except (TypeError, ValueError, OverflowError):
        return False


def storage(tensor: QnnTensor) -> np.ndarray:
    """The static data in the datatype's storage dtype (other dtypes are accepted when exact)."""
    assert tensor.data is not None
    want = to_numpy(tensor.datatype)
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
        rows = [tuple(r) for r in e.block_scales]
        limit = 1 << (8 if e.block_scale_bitwidth <= 8 else 16)
        if len(rows) != len(e.scales) or any(len(r) != e.num_blocks_per_axis for r in rows):
            raise _fail(f"block_scales must be [{len(e.scales)}][{e.num_blocks_per_axis}]", subject)
        if any(not (0 <= int(v) < limit) for r in rows for v in r):
            raise _fail("block scale does not fit its storage", subject)
    elif any(f is not None for f in block_fields):
        raise _fail(f"{k.name} must not set block fields", subject)


def plan(graph: QnnGraph) -> Layout:
    """Check that `graph` can be written and fix its ids and C identifiers."""
    gsub = f"graph '{graph.name}'"
    if not graph.name or "/" in graph.name or "\\" in graph.name or graph.name in (".", ".."):
        raise _fail("graph name must be a non-empty file name", gsub)
    for name, t in graph.tensors.items():
        if name != t.name:
            raise _fail(f"registered under '{name}' but named '{t.name}'", f"tensor '{t.name}'")
        _check_storage(t, f"tensor '{name}'")
        _check_encoding(t, f"tensor '{name}'")
    for attr, role, kind in (("inputs", "input", TensorType.APP_WRITE),
                             ("outputs", "output", TensorType.APP_READ)):
        listed = getattr(graph, attr)
        for n in listed:
            if n not in graph.tensors or graph.tensors[n].type is not kind:
                raise _fail(f"graph {role} '{n}' is not an {kind.name} tensor of the graph", gsub)
        if len(set(listed)) != len(listed):
            raise _fail(f"graph {attr} list a tensor twice", gsub)
        missing = [n for n, t in graph.tensors.items() if t.type is kind and n not in listed]
        if missing:
            raise _fail(f"{kind.name} tensor '{missing[0]}' is not listed in graph {attr}", gsub)
    seen_nodes: set[str] = set()
    param_tensors: list[QnnTensor] = []
    owners: dict[str, str] = {}
    for op in graph.ops:
        nsub = f"node '{op.name}'"
        if not op.name or op.name in seen_nodes:
            raise _fail("node name is empty or used twice", nsub)
        seen_nodes.add(op.name)
        for n in (*op.inputs, *op.outputs):
            if n not in graph.tensors:
                raise _fail(f"refers to tensor '{n}', which is not in the graph", nsub)
        pnames = [p.name for p in op.params]
        if len(set(pnames)) != len(pnames):
            raise _fail("has two params with the same name", nsub)
        for p in op.params:
            if isinstance(p, TensorParam):
                t, psub = p.tensor, f"node '{op.name}' param '{p.name}'"
                if t.type is not TensorType.STATIC:
                    raise _fail("a tensor param must be a STATIC tensor", psub)
                if t.name in graph.tensors or t.name in owners:
                    raise _fail(f"tensor name '{t.name}' is used twice (QNN tensor names are "
                                "unique per graph)", psub)
                _check_storage(t, psub)
                _check_encoding(t, psub)
                owners[t.name] = op.name
                param_tensors.append(t)
    return Layout(ids=_ids(graph, param_tensors), cnames=c_identifiers([*graph.tensors, *owners]),
                  node_cnames=c_identifiers(seen_nodes),
                  statics=(*(t for t in graph.tensors.values() if t.type is TensorType.STATIC),
                           *param_tensors),
                  owners=owners)


def _ids(graph: QnnGraph, param_tensors: list[QnnTensor]) -> dict[str, int]:
    """Tensor order, except that inputs and outputs take their id slots in graph order.

    The reader recovers `graph.inputs`/`outputs` as APP_WRITE/APP_READ tensors
    in id order, so this is what makes that order survive the round trip.
    """
    order = list(graph.tensors)
    for kind, listed in ((TensorType.APP_WRITE, graph.inputs), (TensorType.APP_READ, graph.outputs)):
        slots = [i for i, n in enumerate(order) if graph.tensors[n].type is kind]
        for slot, name in zip(slots, listed):
            order[slot] = name
    ids = {n: i for i, n in enumerate(order)}
    for t in param_tensors:
        ids[t.name] = len(ids)
    return ids


def raw_bytes(tensor: QnnTensor) -> bytes:
    """The tensor's data as the `.raw` file holds it: dense, C order, little-endian."""
    data = np.ascontiguousarray(storage(tensor))
    return data.astype(data.dtype.newbyteorder("<"), copy=False).tobytes()


def write(graph: QnnGraph, fileobj: BinaryIO, layout: Layout | None = None) -> None:
    """Write the `.bin` tar with reproducible headers (mtime 0, root, 0644, sorted members)."""
    layout = layout or plan(graph)
    members = sorted((layout.cnames[t.name] + ".raw", t) for t in layout.statics)
    with tarfile.open(fileobj=fileobj, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member, tensor in members:
            payload = raw_bytes(tensor)
            info = tarfile.TarInfo(member)
            info.size, info.mtime, info.mode = len(payload), 0, _MEMBER_MODE
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.type = tarfile.REGTYPE
            tar.addfile(info, io.BytesIO(payload))
