"""A QNN graph as kinds and names: the form the writers and the validator walk.

A big graph has a million tensors and op configs but a few hundred kinds of them. A
tensor is its name, its data (static tensors only) and a `TensorKind` (type,
datatype, dims, encoding); an op config is its names (node, inputs, outputs, source
nodes) and an `OpKind` (type, package, params, the kinds of its inputs and outputs,
the rule that made it). `QnnTable` holds each kind once and the names in flat lists.
So whatever a kind decides (validation findings, MACs, the text of a tensor or node
in each artifact) is decided once per kind, and a million-op graph costs each stage a
pass over lists of names instead of a million objects and decisions.

Conversion makes a table (`qlower.qnn.convert.to_table`); `QnnTable.graph()` is its
object view, a `QnnGraph`; `table_of` makes the table of any `QnnGraph` (one read
from a converter's `_net.json`, or built by hand).

An op's tensor params (static data of its own) are kept per op, outside its kind;
their kinds are in the op's kind.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import numpy as np

from qlower.qnn.datatypes import DataType
from qlower.qnn.keys import NO_KEY, op_kind_key, params_key, tensor_key, tensor_kind_key
from qlower.qnn.model import OpConfig, Origin, Param, QnnGraph, QnnTensor, QuantEncoding, TensorParam, TensorType

ABSENT = -1  # the kind of an input named "" (an absent optional input)
UNKNOWN = -2  # the kind of a name that is not a tensor of the graph


@attrs.frozen
class TensorKind:
    """Everything a QNN tensor is but its name and data; `static` tensors carry data."""

    type: TensorType
    datatype: DataType
    dims: tuple[int, ...]
    encoding: QuantEncoding | None = None
    static: bool = False

    def tensor(self, name: str, data: Any = None) -> QnnTensor:
        return QnnTensor(name, self.type, self.datatype, self.dims, self.encoding, data)


@attrs.frozen(eq=False)
class OpKind:
    """Everything an op config is but its names, its source nodes and its tensor params' tensors.

    `params` are in the op's order; a tensor param stands there as a `TensorParam` whose tensor
    is a nameless, dataless prototype of its kind (each op has its own tensor: `QnnTable.op_params`).
    `inputs`/`outputs` are tensor kind ids (`ABSENT`, `UNKNOWN` for names that are no tensor).
    `origin` is False for ops that record none (read from another tool's files)."""

    type: str
    package: str
    params: tuple[Param, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    provenance: str | None = None
    rule: str | None = None
    location: str | None = None
    origin: bool = True

    @property
    def tensor_params(self) -> bool:
        return any(type(p) is TensorParam for p in self.params)


@attrs.define(eq=False)
class QnnTable:
    """A QNN graph: kinds once, names and data per tensor and op (see the module docstring).

    Tensors are in the graph's tensor order; ops in execution order."""

    name: str
    tensor_kinds: list[TensorKind] = attrs.Factory(list)
    op_kinds: list[OpKind] = attrs.Factory(list)
    tensor_names: list[str] = attrs.Factory(list)
    tensor_kind: list[int] = attrs.Factory(list)
    tensor_data: dict[int, Any] = attrs.Factory(dict)  # tensor index -> data (static tensors)
    op_names: list[str] = attrs.Factory(list)
    op_kind: list[int] = attrs.Factory(list)
    # every op's input (output) names in one list, op after op: how many an op has is its kind's
    # (`input_at`/`output_at` give where each op's start); no list per op to make, keep or touch
    op_input_names: list[str] = attrs.Factory(list)
    op_output_names: list[str] = attrs.Factory(list)
    op_sources: list[tuple[str, ...]] = attrs.Factory(list)  # the Origin's source nodes (() without one)
    op_params: dict[int, tuple[QnnTensor, ...]] = attrs.Factory(dict)  # op index -> its tensor params' tensors
    inputs: list[str] = attrs.Factory(list)
    outputs: list[str] = attrs.Factory(list)
    # the tensors no op produces, by index, when the maker knows them (conversion does: a value's
    # producer); None: the writers find them
    unproduced: list[int] | None = None

    def __len__(self) -> int:
        return len(self.op_names)

    def tensor(self, i: int) -> QnnTensor:
        return self.tensor_kinds[self.tensor_kind[i]].tensor(self.tensor_names[i], self.tensor_data.get(i))

    def tensors(self) -> Iterator[QnnTensor]:
        kinds, data = self.tensor_kinds, self.tensor_data
        for i, (name, k) in enumerate(zip(self.tensor_names, self.tensor_kind)):
            kind = kinds[k]
            yield QnnTensor(name, kind.type, kind.datatype, kind.dims, kind.encoding, data.get(i))

    def input_at(self) -> list[int]:
        """Where each op's input names start in `op_input_names`, and (last) where they end."""
        return _offsets([len(kind.inputs) for kind in self.op_kinds], self.op_kind)

    def output_at(self) -> list[int]:
        """Where each op's output names start in `op_output_names`, and (last) where they end."""
        return _offsets([len(kind.outputs) for kind in self.op_kinds], self.op_kind)

    def inputs_of(self, i: int, at: Sequence[int]) -> list[str]:
        """Op `i`'s input names (`at`: `input_at()`)."""
        return self.op_input_names[at[i]:at[i + 1]]

    def outputs_of(self, i: int, at: Sequence[int]) -> list[str]:
        """Op `i`'s output names (`at`: `output_at()`)."""
        return self.op_output_names[at[i]:at[i + 1]]

    def op(self, i: int, input_at: Sequence[int], output_at: Sequence[int]) -> OpConfig:
        """Op config `i` as an object (a new one each call; `input_at()`/`output_at()` made once by the
        caller, who asks for many)."""
        kind = self.op_kinds[self.op_kind[i]]
        return _op_config(kind, self.op_names[i], self.inputs_of(i, input_at), self.outputs_of(i, output_at),
                          self.op_sources[i], self.op_params.get(i))

    def ops(self) -> Iterator[OpConfig]:
        kinds, params = self.op_kinds, self.op_params
        ins, outs = self.op_input_names, self.op_output_names
        a, b = self.input_at(), self.output_at()
        for i, (name, k, srcs) in enumerate(zip(self.op_names, self.op_kind, self.op_sources)):
            yield _op_config(kinds[k], name, ins[a[i]:a[i + 1]], outs[b[i]:b[i + 1]], srcs, params.get(i))

    def graph(self) -> QnnGraph:
        """The table as a `QnnGraph` (new objects; the names lists are the table's own)."""
        qg = QnnGraph(self.name)
        qg.tensors = {t.name: t for t in self.tensors()}
        qg.ops = list(self.ops())
        qg.inputs = list(self.inputs)
        qg.outputs = list(self.outputs)
        return qg

    def check(self, *, closed: bool = True) -> list[str]:
        """`check_table(self, closed=closed)`: what is wrong with the table's own structure (empty: nothing)."""
        return check_table(self, closed=closed)

    def op_type_counts(self) -> dict[str, int]:
        """Ops per QNN type, sorted by type."""
        per_kind = [0] * len(self.op_kinds)
        for k in self.op_kind:
            per_kind[k] += 1
        out: dict[str, int] = {}
        for kind, n in zip(self.op_kinds, per_kind):
            if n:
                out[kind.type] = out.get(kind.type, 0) + n
        return dict(sorted(out.items()))


def _offsets(per_kind: list[int], op_kind: list[int]) -> list[int]:
    """Running totals of the ops' counts (a count per kind): where each op's names start, then the end."""
    counts = np.asarray(per_kind, dtype=np.int64)[np.asarray(op_kind, dtype=np.int64)] if op_kind else \
        np.zeros(0, np.int64)
    out = np.zeros(len(op_kind) + 1, np.int64)
    np.cumsum(counts, out=out[1:])
    return out.tolist()


def _op_config(kind: OpKind, name: str, inputs: list[str], outputs: list[str], sources: tuple[str, ...],
               tensors: tuple[QnnTensor, ...] | None) -> OpConfig:
    if tensors is None:
        params = list(kind.params)
    else:
        it = iter(tensors)
        params = [TensorParam(p.name, next(it)) if type(p) is TensorParam else p for p in kind.params]
    origin = Origin(kind.rule, kind.location, sources) if kind.origin else None
    return OpConfig(name, kind.type, inputs, outputs, params, kind.package, kind.provenance, origin)


class Interner:
    """Kind ids by key, for building a table: equal keys share a kind.

    The keys are `qlower.qnn.keys`' (`tensor_kind_key`, `op_kind_key`), which tell apart what is
    written differently even when it compares equal (-0.0 and 0.0, True and 1), so sharing a kind
    never changes a written byte."""

    def __init__(self, table: QnnTable) -> None:
        self.table = table
        self.tensor_ids: dict[tuple, int] = {}
        self.op_ids: dict[tuple, int] = {}

    def tensor_kind(self, key: tuple, make: Any) -> int:
        """The id of the tensor kind keyed `key`, made by `make()` when new."""
        return _intern(self.tensor_ids, self.table.tensor_kinds, key, make)

    def op_kind(self, key: tuple, make: Any) -> int:
        """The id of the op kind keyed `key`, made by `make()` when new."""
        return _intern(self.op_ids, self.table.op_kinds, key, make)


def _intern(ids: dict[tuple, int], kinds: list, key: tuple, make: Any) -> int:
    k = ids.get(key)
    if k is None:
        k = ids[key] = len(kinds)
        kinds.append(make())
    return k


def param_prototype(p: Param) -> Param:
    """A param as an op kind holds it: a tensor param's tensor without its name and data (each op
    of the kind has its own, see `QnnTable.op_params`)."""
    if type(p) is TensorParam:
        t = p.tensor
        return TensorParam(p.name, QnnTensor("", t.type, t.datatype, t.dims, t.encoding, None))
    return p


def table_of(graph: QnnGraph) -> QnnTable:
    """The table of a `QnnGraph` (the same names; kinds by `qlower.qnn.keys`' `tensor_key` and `op_kind_key`)."""
    table = QnnTable(graph.name)
    intern = Interner(table)
    names, kind_of, data = table.tensor_names, table.tensor_kind, table.tensor_data
    by_name: dict[str, int] = {"": ABSENT}
    for name, t in graph.tensors.items():
        k = intern.tensor_kind(tensor_key(t), lambda t=t: TensorKind(t.type, t.datatype, t.dims, t.encoding,
                                                                      t.data is not None))
        if t.data is not None:
            data[len(names)] = t.data
        names.append(name)
        kind_of.append(k)
        if name not in by_name:
            by_name[name] = k
    look = by_name.get
    for i, op in enumerate(graph.ops):
        ins = tuple([look(n, UNKNOWN) if type(n) is str else UNKNOWN for n in op.inputs])
        outs = tuple([look(n, UNKNOWN) if type(n) is str else UNKNOWN for n in op.outputs])
        o = op.origin
        pk = params_key(op.params)
        if pk is NO_KEY:  # (its params are its own kind)
            pk = ("own", i)
        key = op_kind_key(op.type, op.package, pk, ins, outs, op.provenance, None if o is None else o.rule,
                          None if o is None else o.location, o is not None)
        k = intern.op_kind(key, lambda op=op, ins=ins, outs=outs, o=o: OpKind(
            op.type, op.package, tuple(map(param_prototype, op.params)), ins, outs, op.provenance,
            None if o is None else o.rule, None if o is None else o.location, o is not None))
        table.op_names.append(op.name)
        table.op_kind.append(k)
        table.op_input_names += op.inputs
        table.op_output_names += op.outputs
        table.op_sources.append(o.sources if o is not None else ())
        if any(type(p) is TensorParam for p in op.params):
            table.op_params[i] = tuple(p.tensor for p in op.params if type(p) is TensorParam)
    table.inputs = list(graph.inputs)
    table.outputs = list(graph.outputs)
    return table



_CHECK_LIMIT = 50  # problems reported per check (a corrupted million-op table would list a million)


def check_table(table: QnnTable, *, closed: bool = True) -> list[str]:
    """The invariants the table's makers keep and its walkers rely on, as a list of what breaks them
    (empty: none). Structure only, not QNN validity (that is `qlower.qnn.validate`'s):

    - the parallel lists agree in length (tensor names and kind ids; op names, kind ids and sources;
      the flat input and output names and the counts the ops' kinds give), and every kind id is in range;
    - tensor and op names are unique, and no tensor is the output of two ops;
    - each name an op uses agrees with its kind: "" is `ABSENT`, a name that is no tensor `UNKNOWN`,
      any other that tensor's kind (the validator and the writers read ops by their kinds);
    - ops are in execution order: an op's inputs are produced by earlier ops or by none;
    - static data is exactly the static kinds' tensors'; tensor params' tensors are exactly the ops'
      whose kinds have tensor params, one per such param, each of its prototype's kind;
    - kinds are unique under `qlower.qnn.keys` (`tensor_kind_key`, `op_kind_key`; an op kind whose
      params have no key is its own), so that interning shared everything it could;
    - `unproduced`, when known, is the ascending indices of the tensors no op outputs.

    `closed`: every name an op, the graph's inputs or outputs use is a tensor (true of every table that
    conversion makes; a table read from another tool's file may name missing tensors, which its kinds
    then say are `UNKNOWN`, and validation reports)."""
    out: list[str] = []
    counts: dict[str, int] = {}

    def bad(what: str, text: str) -> None:
        n = counts[what] = counts.get(what, 0) + 1
        if n <= _CHECK_LIMIT:
            out.append(text)
        elif n == _CHECK_LIMIT + 1:
            out.append(f"... more {what} problems")

    t_kinds, o_kinds = table.tensor_kinds, table.op_kinds
    names, kind_of, nt = table.tensor_names, table.tensor_kind, len(table.tensor_names)
    nops = len(table.op_names)
    if len(kind_of) != nt:
        bad("length", f"{nt} tensor names but {len(kind_of)} tensor kind ids")
    if len(table.op_kind) != nops or len(table.op_sources) != nops:
        bad("length", f"{nops} op names but {len(table.op_kind)} op kind ids and {len(table.op_sources)} "
                      "op sources")
    for i, k in enumerate(kind_of):
        if type(k) is not int or not 0 <= k < len(t_kinds):
            bad("kind id", f"tensor {i} ({names[i] if i < nt else '?'}) has kind {k!r}, not one of the "
                           f"{len(t_kinds)} tensor kinds")
    for i, k in enumerate(table.op_kind):
        if type(k) is not int or not 0 <= k < len(o_kinds):
            bad("kind id", f"op {i} has kind {k!r}, not one of the {len(o_kinds)} op kinds")
    for k, kind in enumerate(o_kinds):
        for slot, ids in (("input", kind.inputs), ("output", kind.outputs)):
            for j, t in enumerate(ids):
                if type(t) is not int or not (t in (ABSENT, UNKNOWN) or 0 <= t < len(t_kinds)):
                    bad("kind id", f"op kind {k} ({kind.type}) {slot} {j} has tensor kind {t!r}")
    if out:
        return out  # what follows reads through these ids and lengths
    need_in = sum(len(o_kinds[k].inputs) for k in table.op_kind)
    need_out = sum(len(o_kinds[k].outputs) for k in table.op_kind)
    if len(table.op_input_names) != need_in or len(table.op_output_names) != need_out:
        bad("length", f"the ops' kinds give {need_in} input and {need_out} output names, the table has "
                      f"{len(table.op_input_names)} and {len(table.op_output_names)}")
        return out

    index: dict[str, int] = {}
    for i, name in enumerate(names):
        if type(name) is not str:
            bad("name", f"tensor {i} is named {name!r}, not a str")
        elif index.setdefault(name, i) != i:
            bad("name", f"tensor {i} and tensor {index[name]} are both named {name!r}")
    seen_ops: dict[str, int] = {}
    for i, name in enumerate(table.op_names):
        if seen_ops.setdefault(name, i) != i:
            bad("name", f"op {i} and op {seen_ops[name]} are both named {name!r}")

    producer: dict[str, int] = {}
    at_in, at_out = table.input_at(), table.output_at()
    for i, k in enumerate(table.op_kind):
        kind = o_kinds[k]
        for slot, ids, used in (("input", kind.inputs, table.inputs_of(i, at_in)),
                                ("output", kind.outputs, table.outputs_of(i, at_out))):
            for j, (t, name) in enumerate(zip(ids, used)):
                where = f"op {i} ({table.op_names[i]}) {slot} {j} `{name}`"
                if name == "":
                    want = ABSENT
                elif type(name) is str and name in index:
                    want = kind_of[index[name]]
                else:
                    want = UNKNOWN
                    if closed:
                        bad("name", f"{where} names no tensor")
                if t != want:
                    bad("kind of name", f"{where}: its kind says tensor kind {t}, the name's is {want}")
                if slot == "output" and type(name) is str and name:
                    if producer.setdefault(name, i) != i:
                        bad("producer", f"{where} is also the output of op {producer[name]}")
    for i in range(nops):  # every op's producer known now: an input made by this op or a later one is out of order
        for name in table.inputs_of(i, at_in):
            p = producer.get(name) if type(name) is str else None
            if p is not None and p >= i:
                bad("order", f"op {i} ({table.op_names[i]}) reads `{name}`, the output of "
                             f"{'itself' if p == i else f'the later op {p}'}")
    for i, srcs in enumerate(table.op_sources):
        if type(srcs) is not tuple or not all(type(s) is str for s in srcs):
            bad("sources", f"op {i} ({table.op_names[i]}) has sources {srcs!r}, not a tuple of str")

    for i in table.tensor_data:
        if type(i) is not int or not 0 <= i < nt:
            bad("data", f"tensor data for {i!r}, which is no tensor index")
    for i in range(nt):
        static = t_kinds[kind_of[i]].static
        if static != (i in table.tensor_data):
            bad("data", f"tensor {i} ({names[i]}) is {'' if static else 'not '}of a static kind but "
                        f"{'has no' if static else 'has'} data")
    for i in table.op_params:
        if type(i) is not int or not 0 <= i < nops:
            bad("params", f"tensor params for {i!r}, which is no op index")
    for i in range(nops):
        protos = [p.tensor for p in o_kinds[table.op_kind[i]].params if type(p) is TensorParam]
        got = table.op_params.get(i)
        if not protos:
            if got is not None:
                bad("params", f"op {i} ({table.op_names[i]}) has tensor params' tensors but its kind no tensor "
                              "params")
            continue
        if got is None or len(got) != len(protos):
            bad("params", f"op {i} ({table.op_names[i]}) has {0 if got is None else len(got)} tensor params' "
                          f"tensors for {len(protos)} tensor params")
            continue
        for p, t in zip(protos, got):
            if tensor_kind_key(t.type, t.datatype, t.dims, t.encoding, False) != tensor_kind_key(
                    p.type, p.datatype, p.dims, p.encoding, False):
                bad("params", f"op {i} ({table.op_names[i]}) tensor param `{t.name}` is not of its kind's "
                              f"prototype (type {p.type.name}, {p.datatype.name}, dims {list(p.dims)})")

    for what, keys in (("tensor", [tensor_kind_key(k.type, k.datatype, k.dims, k.encoding, k.static)
                                   for k in t_kinds]),
                       ("op", [op_kind_key(k.type, k.package, pk, k.inputs, k.outputs, k.provenance, k.rule,
                                           k.location, k.origin) if (pk := params_key(k.params)) is not NO_KEY
                               else None for k in o_kinds])):
        first: dict[Any, int] = {}
        for k, key in enumerate(keys):
            if key is not None and first.setdefault(key, k) != k:
                bad("kind", f"{what} kinds {first[key]} and {k} are one kind under qlower.qnn.keys")

    if closed:
        for which, io in (("input", table.inputs), ("output", table.outputs)):
            for name in io:
                if name not in index:
                    bad("name", f"graph {which} `{name}` is no tensor")
    if table.unproduced is not None:
        want_unproduced = [i for i, name in enumerate(names) if name not in producer]
        if list(table.unproduced) != want_unproduced:
            extra = sorted(set(table.unproduced) - set(want_unproduced))[:5]
            missing = sorted(set(want_unproduced) - set(table.unproduced))[:5]
            bad("unproduced", f"`unproduced` is not the ascending tensors no op outputs (listed but produced "
                              f"or no tensor: {extra}; unlisted: {missing})")
    return out
