"""The `<name>_net.json` artifact, laid out as the QNN converter writes it.

Holds the JSON layout in both directions where the reader needs it
(`parse_quant_params` is the inverse of `quant_params`).

Top level: `model.cpp`, `model.bin`, `converter_command`, `copyright_str`,
`op_types`, `Total parameters`, `Total MACs per inference`, `graph` with
`tensors` (name -> tensor) and `nodes` (name -> node). Tensor params live under
their node, with their data inline; graph static data lives in the `.bin`.
Fields the converter has no layout for (BLOCKWISE_EXPANSION, interleaved param
order) use qlower's own keys, documented in docs/artifacts.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from qlower.diagnostics import QlowerError, error
from qlower.qnn.datatypes import DataType, to_numpy
from qlower.qnn.emit_bin import Layout, num_elements, plan, storage
from qlower.qnn.model import EncodingKind, QnnGraph, QnnTensor, QuantEncoding, ScalarParam, TensorParam

DEFINITION_DEFINED = 1
DEFINITION_UNDEFINED = 0x7FFFFFFF
ENCODING_UNDEFINED = 0x7FFFFFFF
NOT_YET_DEFINED = "NOT_YET_DEFINED"
Fail = Callable[[str], QlowerError]  # builds the error for a message, naming the tensor
# The converter's default axis format by rank (its AxisOrder for QNN's spatial-last layout).
_AXIS_FORMATS = {1: "ANY", 2: "NF", 3: "NFC", 4: "NSC", 5: "NDHWC"}


def axis_format(rank: int) -> str:
    return _AXIS_FORMATS.get(rank, "NONTRIVIAL")


def si_notation(n: int, total: int) -> str:
    """The converter's count format: `950 (12.5%)`, `12k (3%)`, `4M (100%)`."""
    percent = 100.0 * n / total if total > 0 else 0.0
    if n < 1000:
        return "%d (%.3g%%)" % (n, percent)
    if n < 1000 * 1000:
        return "%dk (%.3g%%)" % (n // 1000, percent)
    return "%dM (%.3g%%)" % (n // (1000 * 1000), percent)


def total_parameters(count: int) -> str:
    return "%d (%d MB assuming single precision float)" % (count, count * 4 // (1024 * 1024))


def _scale_offset(scale: float, offset: int) -> dict[str, Any]:
    return {"scale": scale, "offset": offset}


def quant_params(enc: QuantEncoding | None) -> dict[str, Any]:
    """`quant_params` of one tensor; unquantized tensors get the converter's UNDEFINED block."""
    if enc is None:
        return {"definition": DEFINITION_UNDEFINED, "encoding": ENCODING_UNDEFINED,
                "scale_offset": _scale_offset(0.0, 0)}
    body: dict[str, Any]
    k = enc.kind
    pairs = [_scale_offset(s, o) for s, o in zip(enc.scales, enc.offsets)]
    if k is EncodingKind.SCALE_OFFSET:
        key, body = "scale_offset", pairs[0]
    elif k is EncodingKind.BW_SCALE_OFFSET:
        key, body = "bw_scale_offset", {"bitwidth": enc.bitwidth, **pairs[0]}
    elif k is EncodingKind.AXIS_SCALE_OFFSET:
        key, body = "axis_scale_offset", {"axis": enc.axis, "num_scale_offsets": len(pairs),
                                          "scale_offsets": pairs}
    elif k is EncodingKind.BW_AXIS_SCALE_OFFSET:
        # Like the converter: an empty offsets list means all offsets are zero.
        offsets = list(enc.offsets) if any(enc.offsets) else []
        key, body = "bw_axis_scale_offset", {"bitwidth": enc.bitwidth, "axis": enc.axis,
                                             "num_elements": len(pairs),
                                             "scales": list(enc.scales), "offsets": offsets}
    elif k is EncodingKind.BLOCKWISE_EXPANSION:
        assert enc.block_scale_bitwidth is not None and enc.block_scales is not None
        key, body = "blockwise_expansion", {
            "axis": enc.axis, "num_scale_offsets": len(pairs), "scale_offsets": pairs,
            "num_blocks_per_axis": enc.num_blocks_per_axis,
            "block_scale_bitwidth": enc.block_scale_bitwidth,
            "block_scale_storage_type": 0 if enc.block_scale_bitwidth <= 8 else 1,
            "block_scales": [[int(v) for v in row] for row in enc.block_scales]}
    else:
        raise ValueError(f"cannot write encoding kind {k.name}")
    if enc.bitwidth is not None and "bitwidth" not in body:
        body = {"bitwidth": enc.bitwidth, **body}
    return {"definition": DEFINITION_DEFINED, "encoding": int(k), key: body}


def scalar_value(p: ScalarParam, subject: str) -> bool | int | float | str:
    """The param's value as its datatype holds it; out-of-range values are the user's error."""
    dt, v = p.datatype, p.value

    def bad(why: str) -> QlowerError:
        return QlowerError(error(f"value {v!r} {why} {dt.qnn_name}", subject=subject,
                                 code="scalar-value"))

    if dt is DataType.STRING:
        if not isinstance(v, str):
            raise bad("is not a string for")
        return v
    if isinstance(v, str):
        raise bad("is a string, not a")
    if dt is DataType.BOOL_8:
        if v not in (0, 1):
            raise bad("is not a boolean for")
        return bool(v)
    if dt.is_float:
        return float(v)
    if dt is DataType.UNDEFINED:
        raise bad("has no type:")
    if isinstance(v, float) and not v.is_integer():
        raise bad("is not an integer for")
    info = np.iinfo(to_numpy(dt))
    if not info.min <= int(v) <= info.max:
        raise bad("is out of range for")
    return int(v)


def tensor_json(t: QnnTensor, tensor_id: int, *, inline_data: bool = False,
                params_count: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": tensor_id, "type": int(t.type), "dataFormat": 0, "data_type": int(t.datatype),
        "src_axis_format": NOT_YET_DEFINED, "axis_format": axis_format(len(t.dims)),
        "quant_params": quant_params(t.encoding), "dims": [int(d) for d in t.dims],
    }
    if params_count is not None:
        out["params_count"] = params_count
    if inline_data and t.data is not None:
        out["data"] = storage(t).reshape(tuple(int(d) for d in t.dims)).tolist()
    return out


def graph_json(graph: QnnGraph, *, converter_command: str = "qlower", copyright_str: str = "",
               layout: Layout | None = None) -> dict[str, Any]:
    """The whole `_net.json` document as ordered dicts."""
    layout = layout or plan(graph)
    statics = [t for t in graph.tensors.values() if t.data is not None]
    total = sum(num_elements(t.dims) for t in statics)
    tensors = {}
    for name, t in graph.tensors.items():
        count = si_notation(num_elements(t.dims), total) if t.data is not None else None
        tensors[name] = tensor_json(t, layout.ids[name], params_count=count)
    nodes = {}
    for op in graph.ops:
        tparams = {p.name: {p.tensor.name: tensor_json(p.tensor, layout.ids[p.tensor.name],
                                                       inline_data=True)}
                   for p in op.params if isinstance(p, TensorParam)}
        sparams = {p.name: {str(int(p.datatype)): scalar_value(p, f"node '{op.name}' param '{p.name}'")}
                   for p in op.params if isinstance(p, ScalarParam)}
        node: dict[str, Any] = {"package": op.package, "type": op.type, "tensor_params": tparams,
                                "scalar_params": sparams, "input_names": list(op.inputs),
                                "output_names": list(op.outputs)}
        order = [p.name for p in op.params]
        if order != [*tparams, *sparams]:
            node["param_order"] = order  # qlower's key: the JSON splits params by kind
        nodes[op.name] = node
    return {
        "model.cpp": f"{graph.name}.cpp",
        "model.bin": f"{graph.name}.bin",
        "converter_command": converter_command,
        "copyright_str": copyright_str,
        "op_types": sorted({op.type for op in graph.ops}),
        "Total parameters": total_parameters(total),
        "Total MACs per inference": si_notation(0, 0),
        "graph": {"tensors": tensors, "nodes": nodes},
    }


def dumps(graph: QnnGraph, *, converter_command: str = "qlower", copyright_str: str = "",
          layout: Layout | None = None) -> str:
    """`_net.json` text: fixed key order, one tensor or node per line, trailing newline.

    The document's frame is indented; each tensor and node is written on its own
    line by json's C encoder, which keeps a million-op graph to seconds (the
    pure-Python indenting encoder costs ~100 µs per node).
    """
    doc = graph_json(graph, converter_command=converter_command, copyright_str=copyright_str, layout=layout)
    enc = json.JSONEncoder(separators=(", ", ": ")).encode
    body = doc.pop("graph")
    lines = ["{"]
    for k, v in doc.items():
        lines.append(f"  {enc(k)}: {enc(v)},")
    lines.append('  "graph": {')
    for section, last in (("tensors", False), ("nodes", True)):
        items = body[section]
        lines.append(f"    {enc(section)}: {{")
        n = len(items)
        for j, (name, obj) in enumerate(items.items()):
            lines.append(f"      {enc(name)}: {enc(obj)}{',' if j < n - 1 else ''}")
        lines.append("    }" + ("" if last else ","))
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _num(v: Any, what: str, fail: Fail, integer: bool = False) -> Any:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool)
    if ok and integer and isinstance(v, float):
        ok = v.is_integer()
    if not ok:
        raise fail(f"quant_params: `{what}` must be {'an integer' if integer else 'a number'}, got {v!r}")
    return int(v) if integer else float(v)


def _pairs(items: Any, fail: Fail) -> tuple[list[float], list[int]]:
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise fail("quant_params: `scale_offsets` must be a list of {scale, offset}")
    return ([_num(i.get("scale"), "scale", fail) for i in items],
            [_num(i.get("offset", 0), "offset", fail, True) for i in items])


def _kind(value: Any, fail: Fail) -> EncodingKind | None:
    """The encoding kind, or None for an unquantized tensor."""
    if isinstance(value, str):
        key = value.removeprefix("QNN_QUANTIZATION_ENCODING_")
        if key in EncodingKind.__members__:
            value = int(EncodingKind[key])
    if value is None or value == ENCODING_UNDEFINED:
        return None
    try:
        if isinstance(value, bool):
            raise ValueError
        return EncodingKind(value)
    except ValueError:
        raise fail(f"unsupported quantization encoding {value!r}") from None


def parse_quant_params(qdoc: Any, dims: list[int], fail: Fail) -> QuantEncoding | None:
    """The inverse of `quant_params`, lenient about other tools' variants (see docs/artifacts.md)."""
    if qdoc is None:
        return None
    if not isinstance(qdoc, dict):
        raise fail("`quant_params` must be a JSON object")
    if qdoc.get("definition") in (DEFINITION_UNDEFINED, "QNN_DEFINITION_UNDEFINED"):
        return None
    kind = _kind(qdoc.get("encoding"), fail)
    if kind is None:
        return None

    def body(*keys: str) -> dict[str, Any]:
        for key in keys:
            if isinstance(qdoc.get(key), dict):
                return qdoc[key]
        raise fail(f"quant_params: {kind.name} needs a `{keys[0]}` object")

    def bits(b: dict[str, Any], required: bool) -> int | None:
        v = b.get("bitwidth")
        if v is None and isinstance(b.get("scale_offsets"), list) and b["scale_offsets"]:
            v = b["scale_offsets"][0].get("bitwidth") if isinstance(b["scale_offsets"][0], dict) else None
        if v is None and required:
            raise fail(f"quant_params: {kind.name} needs a `bitwidth`")
        return None if v is None else _num(v, "bitwidth", fail, True)

    if kind in (EncodingKind.SCALE_OFFSET, EncodingKind.BW_SCALE_OFFSET):
        b = body("scale_offset") if kind is EncodingKind.SCALE_OFFSET else body("bw_scale_offset", "scale_offset")
        return QuantEncoding(kind, _num(b.get("scale"), "scale", fail),
                             _num(b.get("offset", 0), "offset", fail, True),
                             bitwidth=bits(b, kind is EncodingKind.BW_SCALE_OFFSET))
    extra: dict[str, Any] = {}
    if kind is EncodingKind.AXIS_SCALE_OFFSET:
        b = body("axis_scale_offset")
        scales, offsets = _pairs(b.get("scale_offsets"), fail)
        count_key, bitwidth = "num_scale_offsets", bits(b, False)
    elif kind is EncodingKind.BW_AXIS_SCALE_OFFSET:
        b = body("bw_axis_scale_offset", "axis_scale_offset")
        if "scales" in b:
            raw_scales, raw_offsets = b.get("scales"), b.get("offsets") or []
            if not isinstance(raw_scales, list) or not isinstance(raw_offsets, list):
                raise fail("quant_params: `scales`/`offsets` must be lists")
            scales = [_num(v, "scale", fail) for v in raw_scales]
            offsets = [_num(v, "offset", fail, True) for v in raw_offsets] or [0] * len(scales)
        else:
            scales, offsets = _pairs(b.get("scale_offsets"), fail)
        count_key, bitwidth = "num_elements", bits(b, True)
    else:
        b = body("blockwise_expansion")
        scales, offsets = _pairs(b.get("scale_offsets"), fail)
        rows = b.get("block_scales")
        if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
            raise fail("quant_params: `block_scales` must be a list of lists")
        extra = {"num_blocks_per_axis": _num(b.get("num_blocks_per_axis"), "num_blocks_per_axis", fail, True),
                 "block_scale_bitwidth": _num(b.get("block_scale_bitwidth"), "block_scale_bitwidth", fail, True),
                 "block_scales": tuple(tuple(_num(v, "block scale", fail, True) for v in r)
                                       for r in rows)}
        count_key, bitwidth = "num_scale_offsets", bits(b, False)
    axis = _num(b.get("axis"), "axis", fail, True)
    count = b.get(count_key, len(scales))
    if len(offsets) != len(scales) or count != len(scales):
        raise fail(f"quant_params: {kind.name} lists {len(scales)} scales, {len(offsets)} offsets "
                   f"and `{count_key}` {count!r}")
    if not 0 <= axis < len(dims) or dims[axis] != len(scales):
        raise fail(f"quant_params: {kind.name} has {len(scales)} scales along axis {axis}, "
                   f"which does not fit dims {dims}")
    return QuantEncoding(kind, scales, offsets, axis=axis, bitwidth=bitwidth, **extra)
