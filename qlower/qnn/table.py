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
from qlower.qnn.model import (OpConfig, Origin, Param, QnnGraph, QnnTensor, QuantEncoding, ScalarParam,
                              TensorParam, TensorType)

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

    Keys tell apart what prints differently even when it compares equal (-0.0 and 0.0, the
    text of a float), so sharing a kind never changes a written byte."""

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


def tensor_key(t: QnnTensor) -> tuple:
    """What makes two tensors one kind. The encoding by identity: equal encodings made apart
    (rare) get kinds of their own, and a NaN scale, unequal to itself, does not break sharing."""
    return (t.type, t.datatype, t.dims, id(t.encoding) if t.encoding is not None else None, t.data is not None)


def param_key(params: Sequence[Param]) -> tuple | None:
    """What makes two ops' params one kind, or None when an op's params are its own kind (a scalar
    of a type that is not keyed by value). Tensor params key by their tensor's kind."""
    out: list[Any] = []
    for p in params:
        if type(p) is ScalarParam:
            v = p.value
            tv = type(v)
            if tv is bool or tv is int or tv is str:
                out.append((p.name, p.datatype, tv, v))
            elif tv is float:
                out.append((p.name, p.datatype, tv, float.__repr__(v)))
            else:
                return None
        elif type(p) is TensorParam:
            t = p.tensor
            if t.encoding is not None or t.type is not TensorType.STATIC:
                return None
            out.append((p.name, None, t.datatype, t.dims, t.data is not None))
        else:
            return None
    return tuple(out)


def param_prototype(p: Param) -> Param:
    """A param as an op kind holds it: a tensor param's tensor without its name and data (each op
    of the kind has its own, see `QnnTable.op_params`)."""
    if type(p) is TensorParam:
        t = p.tensor
        return TensorParam(p.name, QnnTensor("", t.type, t.datatype, t.dims, t.encoding, None))
    return p


def table_of(graph: QnnGraph) -> QnnTable:
    """The table of a `QnnGraph` (the same names; kinds by `tensor_key` and op signature)."""
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
    own = 0  # ops whose params key by value get shared kinds; the others one each
    for i, op in enumerate(graph.ops):
        ins = tuple([look(n, UNKNOWN) if type(n) is str else UNKNOWN for n in op.inputs])
        outs = tuple([look(n, UNKNOWN) if type(n) is str else UNKNOWN for n in op.outputs])
        o = op.origin
        pk = param_key(op.params)
        if pk is None:
            own += 1
            pk = ("own", own)
        key = (op.type, op.package, pk, ins, outs, op.provenance,
               None if o is None else (o.rule, o.location))
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

