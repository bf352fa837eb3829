"""The `<name>_net.json` artifact, laid out as the QNN converter writes it.

Top level: `model.cpp`, `model.bin`, `converter_command`, `copyright_str`,
`op_types`, `Total parameters`, `Total MACs per inference`, `graph` with
`tensors` (name -> tensor) and `nodes` (name -> node). Tensor params live under
their node, with their data inline; graph static data lives in the `.bin`.
Fields the converter has no layout for (BLOCKWISE_EXPANSION, interleaved param
order) use qlower's own keys, documented in docs/artifacts.md.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from qlower.diagnostics import QlowerError, error
from qlower.qnn.datatypes import DataType, to_numpy
from qlower.qnn.emit_bin import Layout, num_elements, plan
from qlower.qnn.model import EncodingKind, QnnGraph, QnnTensor, QuantEncoding, ScalarParam, TensorParam

DEFINITION_DEFINED = 1
DEFINITION_UNDEFINED = 0x7FFFFFFF
ENCODING_UNDEFINED = 0x7FFFFFFF
NOT_YET_DEFINED = "NOT_YET_DEFINED"
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
        out["data"] = np.asarray(t.data).reshape(tuple(int(d) for d in t.dims)).tolist()
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
    """`_net.json` text: fixed key order, two-space indent, trailing newline."""
    doc = graph_json(graph, converter_command=converter_command, copyright_str=copyright_str,
                     layout=layout)
    return json.dumps(doc, indent=2) + "\n"
