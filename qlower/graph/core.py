"""The graph every stage works on: op and value nodes, with a networkx MultiDiGraph view.

Ops and values keep their operand/result/user lists, so the matcher walks
plain Python lists. `Graph.nx` is the same graph as a networkx MultiDiGraph
(edges value → op keyed by operand index, op → value keyed by result index)
for analysis with networkx's algorithms. It is built on first use and from
then on kept in step by every `Graph` mutation; a pipeline that never asks
for it (load → lower → emit) does not pay for it, which on a million-op model
is about 2 GB and several seconds. Rewrites that only change an op's type and
attributes touch neither view (the cheap path lowering takes most often).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec
import numpy as np

from qlower.graph.types import Quant

if TYPE_CHECKING:
    import networkx as nx  # (imported when the view is first built: a load-lower-write run never needs it)


class Value(msgspec.Struct, eq=False, forbid_unknown_fields=True):
    """A tensor: dtype, shape, optional encoding and constant data.

    `Value` and `Op` are `msgspec` structs rather than `attrs` classes, the project's usual choice:
    the loader of big graph files decodes a file's tensors and nodes straight into them (see
    `qlower.graph.io`), which spares a million-op graph a second set of objects. Each field
    after `shape` is the graph's bookkeeping, not something a file says."""

    # (a field the graph fills with its own objects is typed Any: the loader decodes a file's dtype
    # name, quant and data into it and then converts them; see `qlower.graph.io`)
    name: str = ""
    dtype: Any = None  # np.dtype
    shape: tuple[int, ...] | None = None
    quant: Any = None  # Quant | None
    data: Any = None  # np.ndarray | LazyArray | None
    producer: Any = None  # Op | None
    users: list[Any] = msgspec.field(default_factory=list)  # (Op, operand index) pairs
    is_input: bool = False
    is_output: bool = False
    # the graph that holds it (None once removed): membership in one attribute read, which is
    # what `qlower.graph.check` asks of every operand of a million-op graph
    owner: Any = None  # Graph | None

    @property
    def use_count(self) -> int:
        return len(self.users)

    @property
    def is_const(self) -> bool:
        return self.data is not None

    def __repr__(self) -> str:
        return f"Value({self.name}: {self.dtype}{list(self.shape) if self.shape is not None else '[?]'})"


class Provenance(NamedTuple):
    """Which rule emitted an op, from which source node (a tuple: one is made per emitted op)."""

    rule: str
    location: str  # file:line:col of the rule
    source: str  # name of the matched root node
    # The nodes of the *input* graph this op stems from: the matched ops, each traced back
    # through the ops earlier rules emitted (empty: made by a pass, e.g. a precision cast).
    sources: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"rule {self.rule} at {self.location}"


class Op(msgspec.Struct, eq=False, forbid_unknown_fields=True,
         rename={"type": "op", "operands": "inputs", "results": "outputs"}):
    """An operation of some dialect (`mllm.Repeat`, `qnn.Tile`); a struct for the reason `Value` is one
    (a graph file's node keys `op`, `inputs`, `outputs` name `type`, `operands`, `results`)."""

    name: str = ""
    type: str = ""
    attrs: dict[str, Any] = {}
    operands: list[Any] = []  # Value | None
    results: list[Any] = []  # Value
    provenance: Any = None  # Provenance | None
    dead: bool = False
    owner: Any = None  # the graph that holds it (None once removed), as for `Value`

    @property
    def dialect(self) -> str:
        return self.type.split(".", 1)[0]

    def __repr__(self) -> str:
        return f"Op({self.name}: {self.type})"


class GraphError(Exception):
    """A structural mistake in building or editing a graph (a bug in the caller)."""


class Graph:
    """A model graph; see the module docstring for how it is stored."""

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self._nx: nx.MultiDiGraph | None = None  # built on first use of `nx`
        self._values: dict[str, Value] = {}
        self._ops: dict[str, Op] = {}
        # For fresh names: per base name, a suffix below which every `base_i` is taken (see `_fresh`).
        self._value_hints: dict[str, int] = {}
        self._op_hints: dict[str, int] = {}
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []

    # ---------------------------------------------------------------- reading
    @property
    def nx(self) -> nx.MultiDiGraph:
        """The networkx view; treat it as read-only (edit through Graph methods)."""
        if self._nx is None:
            import networkx as nx

            g = nx.MultiDiGraph()
            _index(g, [*self._values.values(), *self._ops.values()])
            self._nx = g
        return self._nx

    def value(self, name: str) -> Value:
        return self._values[name]

    def op(self, name: str) -> Op:
        return self._ops[name]

    def has_value(self, name: str) -> bool:
        return name in self._values

    def has_op(self, name: str) -> bool:
        return name in self._ops

    @property
    def values(self) -> Iterable[Value]:
        return self._values.values()

    @property
    def ops(self) -> Iterable[Op]:
        """Ops in insertion order (not necessarily execution order: see `topo_order`)."""
        return self._ops.values()

    def __len__(self) -> int:
        return len(self._ops)

    def topo_order(self) -> list[Op]:
        """Ops in a deterministic execution order; raises GraphError on a cycle.

        Graphs are usually stored producers-first, so one cheap pass first checks
        whether insertion order already is an execution order.
        """
        ops = list(self._ops.values())
        seen: set[Op] = set()
        add = seen.add
        in_order = True
        for op in ops:
            for v in op.operands:
                if v is not None:
                    p = v.producer
                    if p is not None and p not in seen:
                        in_order = False
                        break
            if not in_order:
                break
            add(op)
        if in_order:
            return ops
        return self._kahn()

    def _kahn(self) -> list[Op]:
        pending = {}
        ready = []
        for op in self._ops.values():
            n = sum(1 for v in op.operands if v is not None and v.producer is not None)
            if n:
                pending[op] = n
            else:
                ready.append(op)
        order: list[Op] = []
        i = 0
        while i < len(ready):
            op = ready[i]
            i += 1
            order.append(op)
            for r in op.results:
                for user, _ in r.users:
                    left = pending[user] - 1
                    if left:
                        pending[user] = left
                    else:
                        del pending[user]
                        ready.append(user)
        if pending:
            stuck = sorted(o.name for o in pending)
            raise GraphError(f"the graph has a cycle through {', '.join(stuck[:5])}")
        return order

    # --------------------------------------------------------------- building
    def add_value(self, name: str, dtype: Any, shape: Sequence[int] | None, *, quant: Quant | None = None,
                  data: np.ndarray | None = None) -> Value:
        if name in self._values:
            raise GraphError(f"duplicate value name {name}")
        if shape is not None:
            shape = tuple(map(int, shape))
        v = Value(name, dtype if isinstance(dtype, np.dtype) else np.dtype(dtype), shape, quant, data, owner=self)
        self._values[name] = v
        if self._nx is not None:
            self._nx.add_node(v)
        return v

    def add_op(self, name: str, type: str, operands: Sequence[Value | None], results: Sequence[Value],
               attrs: dict[str, Any] | None = None, provenance: Provenance | None = None) -> Op:
        if name in self._ops:
            raise GraphError(f"duplicate op name {name}")
        op = Op(name, type, dict(attrs or {}), list(operands), list(results), provenance, owner=self)
        for r in op.results:
            if r.producer is not None:
                raise GraphError(f"value {r.name} already has producer {r.producer.name}")
        for i, v in enumerate(op.operands):
            if v is not None:
                v.users.append((op, i))
        for r in op.results:
            r.producer = op
        self._ops[name] = op
        g = self._nx
        if g is None:
            return op
        g.add_node(op)
        for i, v in enumerate(op.operands):
            if v is not None:
                g.add_edge(v, op, i)
        for i, r in enumerate(op.results):
            g.add_edge(op, r, i)
        return op

    @contextlib.contextmanager
    def bulk(self) -> Iterator[Graph]:
        """Build many values and ops, then index them in the networkx view (if any) in one pass."""
        g, self._nx = self._nx, None
        try:
            yield self
        finally:
            if g is not None:
                existing = set(g)
                _index(g, [x for x in (*self._values.values(), *self._ops.values()) if x not in existing])
            self._nx = g

    def set_io(self, inputs: Sequence[Value], outputs: Sequence[Value]) -> None:
        for v in self.inputs:
            v.is_input = False
        for v in self.outputs:
            v.is_output = False
        self.inputs, self.outputs = list(inputs), list(outputs)
        for v in self.inputs:
            v.is_input = True
        for v in self.outputs:
            v.is_output = True

    def copy(self) -> Graph:
        """An independent graph with the same values, ops and I/O; constant data is shared, not
        copied (rewrites replace values, they never write into a constant's array)."""
        out = Graph(self.name)
        for v in self._values.values():
            out.add_value(v.name, v.dtype, v.shape, quant=v.quant, data=v.data)
        for op in self._ops.values():
            if op.dead:
                continue
            out.add_op(op.name, op.type, [out._values[v.name] if v is not None else None for v in op.operands],
                       [out._values[v.name] for v in op.results], dict(op.attrs), op.provenance)
        out.set_io([out._values[v.name] for v in self.inputs], [out._values[v.name] for v in self.outputs])
        return out

    def fresh_value_name(self, base: str) -> str:
        return _fresh(base, self._values, self._value_hints)

    def fresh_op_name(self, base: str) -> str:
        return _fresh(base, self._ops, self._op_hints)

    # ---------------------------------------------------------------- editing
    def retype(self, op: Op, type: str, attrs: dict[str, Any], provenance: Provenance | None = None) -> None:
        """Change what an op is without touching its edges."""
        op.type = type
        op.attrs = attrs
        if provenance is not None:
            op.provenance = provenance

    def replace_uses(self, old: Value, new: Value) -> None:
        """Point every user of `old` at `new` (graph outputs included)."""
        if old is new:
            return
        g = self._nx
        for user, idx in old.users:
            user.operands[idx] = new
            new.users.append((user, idx))
            if g is not None:
                g.remove_edge(old, user, idx)
                g.add_edge(new, user, idx)
        old.users = []
        if old.is_output:
            self.outputs = [new if v is old else v for v in self.outputs]
            old.is_output = False
            new.is_output = True

    def remove_op(self, op: Op) -> None:
        """Remove an op; its results must have no users left (they stay in the graph, unproduced)."""
        for r in op.results:
            if r.users:
                raise GraphError(f"cannot remove {op.name}: result {r.name} is still used")
        self.detach_op(op)

    def set_operand(self, op: Op, index: int, new: Value | None) -> None:
        """Point operand `index` of `op` at `new`."""
        old = op.operands[index]
        g = self._nx
        if old is not None:
            old.users.remove((op, index))
            if g is not None:
                g.remove_edge(old, op, index)
        op.operands[index] = new
        if new is not None:
            new.users.append((op, index))
            if g is not None:
                g.add_edge(new, op, index)

    def replace_result(self, op: Op, index: int, new: Value) -> Value:
        """Make `op` produce `new` in place of its result `index`; returns the old value (now unproduced)."""
        old = op.results[index]
        if new.producer is not None:
            raise GraphError(f"value {new.name} already has producer {new.producer.name}")
        old.producer = None
        op.results[index] = new
        new.producer = op
        if self._nx is not None:
            self._nx.remove_edge(op, old, index)
            self._nx.add_edge(op, new, index)
        return old

    def detach_op(self, op: Op) -> None:
        """Remove an op but keep its result values (now without producer) and their users."""
        for i, v in enumerate(op.operands):
            if v is not None:
                v.users.remove((op, i))
        for r in op.results:
            r.producer = None
        if self._nx is not None:
            self._nx.remove_node(op)
        del self._ops[op.name]
        _freed(op.name, self._op_hints)
        op.dead = True
        op.owner = None

    def remove_value(self, v: Value) -> None:
        if v.users or v.producer is not None:
            raise GraphError(f"cannot remove value {v.name}: it is still connected")
        if self._nx is not None:
            self._nx.remove_node(v)
        del self._values[v.name]
        _freed(v.name, self._value_hints)
        v.owner = None

    def rename_value(self, v: Value, name: str) -> None:
        if name in self._values:
            raise GraphError(f"duplicate value name {name}")
        del self._values[v.name]
        _freed(v.name, self._value_hints)
        v.name = name
        self._values[name] = v

    def rename_op(self, op: Op, name: str) -> None:
        if name in self._ops:
            raise GraphError(f"duplicate op name {name}")
        del self._ops[op.name]
        _freed(op.name, self._op_hints)
        op.name = name
        self._ops[name] = op

    def remove_dead(self) -> int:
        """Drop ops whose results are all unused (and not outputs), repeatedly; returns how many."""
        removed = 0
        work = [o for o in self._ops.values()]
        while work:
            op = work.pop()
            if op.dead or any(r.users or r.is_output for r in op.results):
                continue
            producers = [v.producer for v in op.operands if v is not None and v.producer is not None]
            operands = [v for v in op.operands if v is not None]
            self.remove_op(op)
            for r in op.results:
                self.remove_value(r)
            for v in operands:
                if not v.users and v.producer is None and not v.is_input and not v.is_output:
                    if v.name in self._values:
                        self.remove_value(v)
            work.extend(producers)
            removed += 1
        return removed

    def iter_consts(self) -> Iterator[Value]:
        return (v for v in self._values.values() if v.data is not None)


_NO_DATA: Mapping[str, Any] = MappingProxyType({})  # nodes and edges carry no attributes: one shared, read-only


def _index(g: nx.MultiDiGraph, items: list) -> None:
    """Add nodes and their edges (value → op by operand index, op → value by result index).

    Bulk-built nodes and edges share one read-only attribute mapping (qlower keeps
    everything on the Op and Value objects), which saves a dict per node and edge.
    """
    node, succ, pred = g._node, g._succ, g._pred
    for x in items:
        if x not in node:
            node[x] = _NO_DATA
            succ[x] = {}
            pred[x] = {}

    def edge(u, v, key) -> None:
        kd = succ[u].get(v)
        if kd is None:
            kd = succ[u][v] = {}
            pred[v][u] = kd
        kd[key] = _NO_DATA

    for x in items:
        if isinstance(x, Op):
            for i, v in enumerate(x.operands):
                if v is not None:
                    if v not in node:
                        node[v], succ[v], pred[v] = _NO_DATA, {}, {}
                    edge(v, x, i)
            for i, r in enumerate(x.results):
                if r not in node:
                    node[r], succ[r], pred[r] = _NO_DATA, {}, {}
                edge(x, r, i)
    import networkx as nx

    nx._clear_cache(g)


def _fresh(base: str, taken: dict, hints: dict[str, int]) -> str:
    """`base`, else `base_i` for the smallest free i. `hints[base]` remembers where the last search
    ended (every `base_j` below it was taken then, and `_freed` lowers it when one goes), so a rule
    that emits the same names once per application — an unrolled loop — costs O(1) a name, not O(i)."""
    if base not in taken:
        return base
    i = hints.get(base, 1)
    while f"{base}_{i}" in taken:
        i += 1
    hints[base] = i
    return f"{base}_{i}"


def _freed(name: str, hints: dict[str, int]) -> None:
    """A name went: if it is `base_j`, `base`'s search must start at j again."""
    base, sep, suffix = name.rpartition("_")
    if sep and suffix.isdigit() and not (len(suffix) > 1 and suffix[0] == "0"):
        j = int(suffix)
        if hints.get(base, 1) > j:
            hints[base] = j
