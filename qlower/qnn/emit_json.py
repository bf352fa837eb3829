"""The `<name>_net.json` artifact, laid out as the QNN converter writes it.

Holds the JSON layout in both directions where the reader needs it
(`parse_quant_params` is the inverse of `quant_params`).

Top level: `model.cpp`, `model.bin`, `converter_command`, `copyright_str`,
`op_types`, `Total parameters`, `Total MACs per inference`, `graph` with
`tensors` (name -> tensor) and `nodes` (name -> node). Tensor params live under
their node, with their data inline; graph static data lives in the `.bin`.
Fields the converter has no layout for (BLOCKWISE_EXPANSION, interleaved param
order) use qlower's own keys, documented in docs/artifacts.md, as do the two
extra node keys QNN tools ignore: `macs_per_inference` and `provenance`.
"""

from __future__ import annotations

import collections
import io
import json
from collections.abc import Callable
from itertools import chain
from json.encoder import encode_basestring_ascii
from typing import Any, BinaryIO

import numpy as np

from qlower._frozen import Frozen
from qlower.diagnostics import QlowerError, error
from qlower.qnn import numtext
from qlower.qnn.datatypes import DataType, to_numpy
from qlower.qnn.emit_bin import Layout, plan, storage
from qlower.qnn.joiner import all_plain_json, compile_join
from qlower.qnn.keys import NO_KEY, scalar_param_key
from qlower.qnn.macs import op_kind_macs
from qlower.qnn.model import (EncodingKind, OpConfig, Origin, QnnGraph, QnnTensor, QuantEncoding, ScalarParam,
                              TensorParam, TensorType)
from qlower.qnn.table import OpKind, QnnTable

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
    return _quant_params(enc, _Lists)


class _Lists:
    """The long lists of `quant_params` as Python lists (the dict the reader inverts)."""

    @staticmethod
    def pairs(enc: QuantEncoding) -> list[dict[str, Any]]:
        return [_scale_offset(s, o) for s, o in zip(enc.scales, enc.offsets)]

    @staticmethod
    def scales(enc: QuantEncoding) -> list[float]:
        return list(enc.scales)

    @staticmethod
    def offsets(enc: QuantEncoding) -> list[int]:
        return list(enc.offsets)

    @staticmethod
    def block_scales(enc: QuantEncoding) -> list[list[int]]:
        return [list(map(int, row)) for row in enc.block_scales]


def _quant_params(enc: QuantEncoding, lists: Any) -> dict[str, Any]:
    """`quant_params` of a quantized tensor, its long lists made by `lists` (`_Lists`, or `_Marks`
    for text formatted apart)."""
    body: dict[str, Any]
    k = enc.kind
    n = min(len(enc.scales), len(enc.offsets))  # scales and offsets are written in pairs (zip)
    if k is EncodingKind.SCALE_OFFSET:
        key, body = "scale_offset", _scale_offset(enc.scales[0], enc.offsets[0])
    elif k is EncodingKind.BW_SCALE_OFFSET:
        key, body = "bw_scale_offset", {"bitwidth": enc.bitwidth, **_scale_offset(enc.scales[0], enc.offsets[0])}
    elif k is EncodingKind.AXIS_SCALE_OFFSET:
        key, body = "axis_scale_offset", {"axis": enc.axis, "num_scale_offsets": n,
                                          "scale_offsets": lists.pairs(enc)}
    elif k is EncodingKind.BW_AXIS_SCALE_OFFSET:
        # Like the converter: an empty offsets list means all offsets are zero.
        offsets = lists.offsets(enc) if np.asarray(enc.offsets).any() else []
        key, body = "bw_axis_scale_offset", {"bitwidth": enc.bitwidth, "axis": enc.axis,
                                             "num_elements": n,
                                             "scales": lists.scales(enc), "offsets": offsets}
    elif k is EncodingKind.BLOCKWISE_EXPANSION:
        assert enc.block_scale_bitwidth is not None and enc.block_scales is not None
        key, body = "blockwise_expansion", {
            "axis": enc.axis, "num_scale_offsets": n, "scale_offsets": lists.pairs(enc),
            "num_blocks_per_axis": enc.num_blocks_per_axis,
            "block_scale_bitwidth": enc.block_scale_bitwidth,
            "block_scale_storage_type": 0 if enc.block_scale_bitwidth <= 8 else 1,
            "block_scales": lists.block_scales(enc)}
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
    """One tensor object as a dict (the streaming writer formats the same fields directly)."""
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


_ENC = json.JSONEncoder(separators=(", ", ": ")).encode
_QUOTE = encode_basestring_ascii  # a str as a JSON string literal, as _ENC writes it
_UNQUANTIZED = _ENC(quant_params(None))
_FLUSH_PARTS = 4096  # lines buffered before a write


_jfloat = numtext.json_float  # a float as json writes it (allow_nan: NaN, Infinity, -Infinity)


class _Marks:
    """The long lists of `quant_params` as marks (strings no name or number encodes to) that
    `_quant_json` replaces with the lists' text, formatted with numpy (`numtext`)."""

    @staticmethod
    def pairs(enc: QuantEncoding) -> str:
        return "\0pairs"

    @staticmethod
    def scales(enc: QuantEncoding) -> str:
        return "\0scales"

    @staticmethod
    def offsets(enc: QuantEncoding) -> str:
        return "\0offsets"

    @staticmethod
    def block_scales(enc: QuantEncoding) -> str:
        return "\0block_scales"


def _marked_lists(enc: QuantEncoding) -> dict[str, Callable[[], str]]:
    """The JSON text of each list `_Marks` stands for, as `_ENC` writes it, keyed by the mark's JSON."""
    n = min(len(enc.scales), len(enc.offsets))

    def pairs() -> str:
        return "[" + numtext.join_fields(
            [numtext.floats(np.asarray(enc.scales)[:n], _jfloat), numtext.ints(np.asarray(enc.offsets)[:n])],
            ('{"scale": ', ', "offset": ', "}"), ", ", n) + "]"

    def block_scales() -> str:
        b = enc.block_scales.array
        return "[" + numtext.rows(numtext.ints(b), b.shape) + "]"

    return {_ENC(_Marks.pairs(enc)): pairs,
            _ENC(_Marks.scales(enc)): lambda: "[" + numtext.join(numtext.floats(enc.scales.array, _jfloat)) + "]",
            _ENC(_Marks.offsets(enc)): lambda: "[" + numtext.join(numtext.ints(enc.offsets.array)) + "]",
            _ENC(_Marks.block_scales(enc)): block_scales}


def _quant_json(enc: QuantEncoding) -> str:
    """`_ENC(quant_params(enc))`, formatted directly for the per-tensor kinds; the per-axis kinds' long
    lists are formatted with numpy into the text of the rest."""
    k, bw = enc.kind, enc.bitwidth
    if (k is EncodingKind.SCALE_OFFSET or k is EncodingKind.BW_SCALE_OFFSET) and (bw is None or type(bw) is int):
        head = "" if bw is None else f'"bitwidth": {bw}, '
        key = "scale_offset" if k is EncodingKind.SCALE_OFFSET else "bw_scale_offset"
        return (f'{{"definition": {DEFINITION_DEFINED}, "encoding": {int(k)}, "{key}": '
                f'{{{head}"scale": {_jfloat(enc.scales[0])}, "offset": {enc.offsets[0]}}}}}')
    if k is EncodingKind.BLOCKWISE_EXPANSION and not isinstance(enc.block_scales, Frozen):
        return _ENC(quant_params(enc))  # ragged rows (validation rejects them first)
    text = _ENC(_quant_params(enc, _Marks))
    for mark, make in _marked_lists(enc).items():
        if mark in text:
            text = text.replace(mark, make(), 1)
    return text


class _Text:
    """Text written to a binary file in large UTF-8 chunks."""

    __slots__ = ("parts", "fileobj")

    def __init__(self, fileobj: BinaryIO) -> None:
        self.parts: list[str] = []
        self.fileobj = fileobj

    def flush(self) -> None:
        if self.parts:
            self.fileobj.write("".join(self.parts).encode("utf-8"))
            self.parts.clear()

    def lines(self, lines: list[str], first: bool) -> None:
        """Lines of a `tensors`/`nodes` section, each indented on its own line, commas between them."""
        self.flush()
        if lines:
            self.fileobj.write(((_FIRST if first else _NEXT) + _NEXT.join(lines)).encode("utf-8"))


class _TensorLines:
    """Tensor objects as `_ENC(tensor_json(...))` writes them, from cached per-kind text.

    An unquantized graph tensor's object after its id depends only on (type,
    datatype, dims) (`params_count` follows from the dims), so that text is
    made once per distinct key.
    """

    def __init__(self, layout: Layout) -> None:
        self.shapes = layout.shapes
        self.total = layout.static_elements
        self.prefixes: dict[tuple[int, int, int], str] = {}
        self.tails: dict[tuple[object, ...], str] = {}

    def prefix(self, t: QnnTensor) -> str:
        key = (t.type, t.datatype, len(t.dims))
        p = self.prefixes.get(key)
        if p is None:
            p = (f'"type": {int(t.type)}, "dataFormat": 0, "data_type": {int(t.datatype)}, '
                 f'"src_axis_format": "{NOT_YET_DEFINED}", "axis_format": "{axis_format(len(t.dims))}", '
                 '"quant_params": ')
            self.prefixes[key] = p
        return p

    def count(self, t: QnnTensor) -> str:
        return f', "params_count": {_QUOTE(si_notation(self.shapes[t.dims][1], self.total))}'

    def graph_tensor(self, t: QnnTensor, tensor_id: int) -> str:
        """A tensor of `graph.tensors`: static ones carry `params_count`."""
        if t.encoding is not None:
            return self(t, tensor_id, self.count(t) if t.type is TensorType.STATIC else "")
        key = (t.type, t.datatype, t.dims)
        tail = self.tails.get(key)
        if tail is None:
            if len(self.tails) >= 1 << 16:
                self.tails.clear()
            extra = self.count(t) if t.type is TensorType.STATIC else ""
            tail = self.tails[key] = (f'{self.prefix(t)}{_UNQUANTIZED}, "dims": [{self.shapes[t.dims][0]}]'
                                      f'{extra}}}')
        return f'{{"id": {tensor_id}, {tail}'

    def __call__(self, t: QnnTensor, tensor_id: int, extra: str = "") -> str:
        enc = t.encoding
        qp = _UNQUANTIZED if enc is None else _quant_json(enc)
        return (f'{{"id": {tensor_id}, {self.prefix(t)}{qp}, "dims": [{self.shapes[t.dims][0]}]'
                f'{extra}}}')


class _NodeTail:
    """qlower's extra node keys, which QNN tools ignore: `macs_per_inference` (the
    converter's format) and `provenance` (rule, its `folder/file:line`, source nodes)."""

    def __init__(self, total_macs: int) -> None:
        self.total = total_macs
        self.macs: dict[int, str] = {}
        self.rules: dict[tuple[str | None, str | None], str] = {}

    def __call__(self, op: OpConfig, macs: int) -> str:
        text = self.macs.get(macs)
        if text is None:
            if len(self.macs) >= 1 << 16:
                self.macs.clear()
            text = self.macs[macs] = f', "macs_per_inference": {_QUOTE(si_notation(macs, self.total))}'
        o = op.origin
        if o is None:
            return text
        key = (o.rule, o.location)
        head = self.rules.get(key)
        if head is None:
            head = self.rules[key] = (f', "provenance": {{"rule": {_ENC(o.rule)}, '
                                      f'"location": {_ENC(o.location)}, "source_nodes": [')
        srcs = o.sources
        names = _QUOTE(srcs[0]) if len(srcs) == 1 else ", ".join(map(_QUOTE, srcs))
        return f'{text}{head}{names}]}}'


def write(graph: QnnGraph | QnnTable, fileobj: BinaryIO, *, converter_command: str = "qlower",
          copyright_str: str = "", layout: Layout | None = None) -> None:
    """Stream the `_net.json` text into `fileobj` (binary, UTF-8), a chunk of lines at a time.

    Layout: fixed key order, the document's frame indented, each tensor and
    node on its own line as json's C encoder writes it with `", "`/`": "`
    separators, trailing newline. Nothing proportional to the graph is built.
    A line is its names joined into the text of its kind (`QnnTable`), made once per
    kind; an op with tensor params (data inline) is formatted on its own.
    """
    layout = layout or plan(graph)
    table = layout.table
    assert table is not None
    out = _Text(fileobj)
    add = out.parts.append
    quote = _QUOTE
    kind_macs, own_macs = op_kind_macs(table)
    counts = collections.Counter(table.op_kind)
    total_macs = sum(m * counts[k] for k, m in enumerate(kind_macs) if m is not None) + sum(own_macs.values())
    header = {
        "model.cpp": f"{table.name}.cpp",
        "model.bin": f"{table.name}.bin",
        "converter_command": converter_command,
        "copyright_str": copyright_str,
        "op_types": list(layout.op_types),
        "Total parameters": total_parameters(layout.static_elements),
        "Total MACs per inference": si_notation(total_macs, total_macs),
    }
    add("{\n")
    for k, v in header.items():
        add(f"  {quote(k)}: {_ENC(v)},\n")
    add('  "graph": {\n    "tensors": {')
    line = _TensorLines(layout)
    # a tensor's object after its id is its kind's
    rests = [line.graph_tensor(kind.tensor("", _DATA if kind.static else None), 0)[len('{"id": 0, '):]
             for kind in table.tensor_kinds]
    io_kinds = {k for k, kind in enumerate(table.tensor_kinds)
                if kind.type is not TensorType.NATIVE and kind.type is not TensorType.STATIC}
    io_ids = layout.io_ids
    names, kind_of = table.tensor_names, table.tensor_kind
    op_names, op_kind, op_sources = table.op_names, table.op_kind, table.op_sources
    ins, outs, in_at, out_at = table.op_input_names, table.op_output_names, table.input_at(), table.output_at()
    # every name its own JSON string: no per-name escaping, and a node's line is one join
    plain = all_plain_json(names) and all_plain_json(op_names) and all_plain_json(
        list(chain.from_iterable(op_sources)))
    for a in range(0, len(names), _CHUNK):
        b = min(a + _CHUNK, len(names))
        if io_kinds:
            ids = [io_ids.get(n, i) if k in io_kinds else i for i, n, k in zip(range(a, b), names[a:b], kind_of[a:b])]
        else:
            ids = range(a, b)
        if plain:
            lines = [f'"{n}": {{"id": {i}, {rests[k]}' for n, i, k in zip(names[a:b], ids, kind_of[a:b])]
        else:
            lines = [f'{quote(n)}: {{"id": {i}, {rests[k]}' for n, i, k in zip(names[a:b], ids, kind_of[a:b])]
        out.lines(lines, a == 0)
    add('\n    },\n    "nodes": {')
    tail = _NodeTail(total_macs)
    heads = [_node_head(table, k, tail, m) for k, m in enumerate(kind_macs)]
    joins = [None if h is None or not plain else _node_join(h, table.op_kinds[k]) for k, h in enumerate(heads)]
    next_id = len(names)
    scalars: dict[tuple[Any, ...], str] = {}
    for a in range(0, len(op_names), _CHUNK):
        b = min(a + _CHUNK, len(op_names))
        if plain and all(joins[k] is not None for k in set(op_kind[a:b])):
            lines = [joins[k](n, ins, i, outs, o, s) for n, k, i, o, s in zip(
                op_names[a:b], op_kind[a:b], in_at[a:b], out_at[a:b], op_sources[a:b])]
        else:
            lines = []
            for i in range(a, b):
                h = heads[op_kind[i]]
                if h is None:
                    text, next_id = _node_line(table.op(i, in_at, out_at), next_id, line, tail, own_macs[i],
                                               scalars)
                    lines.append(text)
                else:
                    lines.append(_node_text(h, op_names[i], ins[in_at[i]:in_at[i + 1]],
                                            outs[out_at[i]:out_at[i + 1]], op_sources[i]))
        out.lines(lines, a == 0)
    add("\n    }\n  }\n}\n")
    out.flush()


_CHUNK = 4096  # lines formatted and written at once
_FIRST, _NEXT = "\n      ", ",\n      "
_DATA = object()  # (a stand-in: the kind's text does not depend on the data)


def _node_head(table: QnnTable, k: int, tail: _NodeTail, macs: int | None) -> tuple[str, str, str, str] | None:
    """The constant text of a node of kind `k` around its input, output and source names (None for a
    kind whose nodes are formatted one by one: tensor params)."""
    kind = table.op_kinds[k]
    if kind.tensor_params or macs is None:
        return None
    sparts = []
    for p in kind.params:
        try:
            v = scalar_value(p, "")
        except QlowerError:  # the message names the kind's first node
            name = table.op_names[table.op_kind.index(k)]
            scalar_value(p, f"node '{name}' param '{p.name}'")
            raise
        sparts.append(f'{_QUOTE(p.name)}: {{"{int(p.datatype)}": {_ENC(v)}}}')
    head = (f'{{"package": {_QUOTE(kind.package)}, "type": {_QUOTE(kind.type)}, "tensor_params": {{}}, '
            f'"scalar_params": {{{", ".join(sparts)}}}, "input_names": [')
    if not kind.origin:
        after = tail(OpConfig("", kind.type, [], [], [], kind.package), macs)
        return head, '], "output_names": [', f"]{after}}}", ""
    after = tail(OpConfig("", kind.type, [], [], [], kind.package, origin=Origin(kind.rule, kind.location, (_MARK,))),
                 macs)
    cut = after.rindex(_QUOTE(_MARK))
    return head, '], "output_names": [', f"]{after[:cut]}", f"{after[cut + len(_QUOTE(_MARK)):]}}}"


_MARK = "\x01"  # a stand-in source node, cut out of the text


def _node_join(h: tuple[str, str, str, str], kind: OpKind) -> Callable[..., str]:
    """`_node_text` of a kind, compiled (for names that are their own JSON strings)."""
    parts: list = ['"', ("n",), '": ', h[0]]
    for j in range(len(kind.inputs)):
        parts += [", " if j else "", '"', ("i", j), '"']
    parts.append(h[1])
    for j in range(len(kind.outputs)):
        parts += [", " if j else "", '"', ("o", j), '"']
    parts += [h[2], ("s",), h[3]]
    return compile_join(parts)


def _node_text(h: tuple[str, str, str, str], name: str, ins: list[str], outs: list[str], srcs: tuple[str, ...]) -> str:
    q = _QUOTE
    return f'{q(name)}: {h[0]}{", ".join(map(q, ins))}{h[1]}{", ".join(map(q, outs))}{h[2]}{", ".join(map(q, srcs))}{h[3]}'


def _node_line(op: OpConfig, next_id: int, line: _TensorLines, tail: _NodeTail, op_macs: int,
               scalars: dict[tuple[Any, ...], str]) -> tuple[str, int]:
    """One node formatted on its own (tensor params, their data inline); the next tensor-param id."""
    quote = _QUOTE
    head = f'{{"package": {quote(op.package)}, "type": {quote(op.type)}, "tensor_params": {{'
    tparts: list[str] = []
    sparts: list[str] = []
    order_ok = True
    for p in op.params:
        if isinstance(p, TensorParam):
            if sparts:
                order_ok = False
            t = p.tensor
            data = f', "data": {_ENC(storage(t).reshape(tuple(int(d) for d in t.dims)).tolist())}'
            tparts.append(f"{quote(p.name)}: {{{quote(t.name)}: {line(t, next_id, data)}}}")
            next_id += 1
        else:
            key = scalar_param_key(p.name, p.datatype, p.value)
            text = scalars.get(key) if key is not NO_KEY else None
            if text is None:
                v = scalar_value(p, f"node '{op.name}' param '{p.name}'")
                text = f'{quote(p.name)}: {{"{int(p.datatype)}": {_ENC(v)}}}'
                if key is not NO_KEY:
                    if len(scalars) >= 1 << 16:  # (floats key too: a graph may hold many values)
                        scalars.clear()
                    scalars[key] = text
            sparts.append(text)
    ins = ", ".join(map(quote, op.inputs))
    outs = ", ".join(map(quote, op.outputs))
    order = "" if order_ok else f', "param_order": {_ENC([p.name for p in op.params])}'
    return (f'{quote(op.name)}: {head}{", ".join(tparts)}}}, "scalar_params": {{{", ".join(sparts)}}}, '
            f'"input_names": [{ins}], "output_names": [{outs}]{order}{tail(op, op_macs)}}}'), next_id


def dumps(graph: QnnGraph, *, converter_command: str = "qlower", copyright_str: str = "",
          layout: Layout | None = None) -> str:
    """The `_net.json` text `write` streams, as one string (for tests and small graphs)."""
    buf = io.BytesIO()
    write(graph, buf, converter_command=converter_command, copyright_str=copyright_str, layout=layout)
    return buf.getvalue().decode("utf-8")


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
