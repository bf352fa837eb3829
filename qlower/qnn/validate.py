"""Checks every op of a QNN graph against the op definitions for one backend.

The checks themselves are `qlower.qnn.checks`; this module decides which ops
they run on. All problems are reported in one run, as diagnostics whose subject
names the node, its QNN type and (when known) the rule that produced it.

Validation walks the graph's `QnnTable`: an op's findings follow from its kind
(type, params, the kinds of its tensors), so the checks run once per op kind, on
a stand-in op whose tensors are named by their slots (`\\x00in0\\x00`); an op of
a kind with findings gets them with its own names filled in. An op with tensor
params is checked per distinct param data (small tensors) or on its own. A
million-op graph of a few hundred kinds validates in a pass over a list of ints.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from qlower.diagnostics import Diagnostic, did_you_mean, error
from qlower.qnn.checks import (  # noqa: F401 - datatypes_allowed is used from here (qlower.qnn.retype)
    _NUMPY_NAMES, _OpCheck, _Plan, _load_shapes, _plan, datatypes_allowed, subject_of,
)
from qlower.qnn.keys import NO_KEY, value_key
from qlower.qnn.model import OpConfig, Origin, QnnGraph, QnnTensor, TensorType
from qlower.qnn.opdef import OpDefRegistry
from qlower.qnn.registry import QnnOps
from qlower.qnn.table import ABSENT, UNKNOWN, OpKind, QnnTable, table_of

# In a cached finding, a tensor's name is this placeholder (kind "in"/"out", position), filled per node.
_NAME_SLOT = re.compile("\x00(in|out)([0-9]+)\x00")
_OWN = (None,)  # the findings of a kind whose ops are checked one by one
_OWN_DATA = (None, None)  # ... because checks read its static inputs' data (no sharing by param data either)


def validate_graph(graph: QnnGraph | QnnTable, registry: OpDefRegistry, backend: str, *, ops: QnnOps | None = None
                   ) -> list[Diagnostic]:
    """Every problem with every op of `graph` on `backend` (one of qlower.qnn.backends.BACKENDS).

    `ops`: the op registry whose shape functions check shapes (with a plugin's custom ops);
    by default `registry` joined with the built-in shape rules."""
    table = graph if isinstance(graph, QnnTable) else table_of(graph)
    validator = _Validator.create(registry, backend, ops)
    if isinstance(validator, Diagnostic):
        return [validator]
    diags: list[Diagnostic] = [validator.shapes_problem] if validator.shapes_problem else []
    diags += validator.table(table)
    return diags


def validate_op(op: OpConfig, graph: QnnGraph, registry: OpDefRegistry, backend: str, *,
                ops: QnnOps | None = None) -> list[Diagnostic]:
    """The problems of one op; `graph` supplies its tensors."""
    one = QnnGraph(graph.name)
    one.tensors = {n: t for n in (*op.inputs, *op.outputs) if type(n) is str
                   and (t := graph.tensors.get(n)) is not None}
    one.ops = [op]
    return validate_graph(one, registry, backend, ops=ops)


class _Validator:
    """Per-call state: the backend, a plan per op type, the shape checks' memos (a `checks.Context`)."""

    def __init__(self, registry: OpDefRegistry, backend: str, ops: QnnOps | None = None) -> None:
        self.tensors: Mapping[str, QnnTensor] = {}  # the tensors of the op being checked
        self.registry = registry
        self.ops = ops if ops is not None else QnnOps.build(registry)  # shape functions, per op entry
        self.backend = backend
        self.label = backend.upper()
        self.plans: dict[tuple[str, str], _Plan | None] = {}
        self.shapes, self.shapes_problem = _load_shapes()
        self.shape_memo: dict[tuple, tuple] = {}

    @classmethod
    def create(cls, registry: OpDefRegistry, backend: str, ops: QnnOps | None = None) -> _Validator | Diagnostic:
        b = backend.strip().lower()
        if b not in registry.backends:
            return error(f"unknown backend `{backend}`; expected one of {', '.join(registry.backends)}",
                         hint=did_you_mean(b, registry.backends), code="unknown-backend")
        return cls(registry, b, ops)

    def plan(self, op: OpConfig) -> _Plan | None:
        key = (op.package, op.type)
        if key not in self.plans:
            opdef = self.registry.op(op.type, op.package)
            self.plans[key] = _plan(self.registry, opdef, self.backend) if opdef else None
        return self.plans[key]

    def sig(self, t: QnnTensor) -> Any:
        """The shapes module's signature of a tensor."""
        return self.shapes.Sig(tuple(t.dims), _NUMPY_NAMES.get(t.datatype, "uint8"))

    def table(self, table: QnnTable) -> list[Diagnostic]:
        """The findings of every op of `table`, in op order."""
        found = [self.kind(table, kind) for kind in table.op_kinds]
        bad = {k for k, f in enumerate(found) if f}
        if not bad:
            return []
        diags: list[Diagnostic] = []
        per_data: dict[tuple, tuple[Diagnostic, ...] | None] = {}
        index: dict[str, int] | None = None
        op_kind = table.op_kind
        at = (table.input_at(), table.output_at())
        for i in [i for i, k in enumerate(op_kind) if k in bad]:  # (the filter runs in C)
            k = op_kind[i]
            f = found[k]
            op = table.op(i, *at)
            if f is _OWN or f is _OWN_DATA:
                key = None if f is _OWN_DATA else _data_key(k, table.op_params.get(i, ()))
                f = per_data.get(key) if key is not None else None
                if f is None:
                    if index is None:
                        index = {n: j for j, n in enumerate(table.tensor_names)}
                    f = self.own(table, index, op, template=key is not None)
                    if key is None:
                        diags += f
                        continue
                    per_data[key] = f
            if f:
                diags += _instantiate(f, op)
        return diags

    def kind(self, table: QnnTable, kind: OpKind) -> tuple[Diagnostic, ...]:
        """The findings of every op of `kind` as templates (tensors named by slot), or `_OWN` when its ops
        need checking one by one (tensor params, whose data the checks read; names that could pass for
        slots, static inputs whose data a check reads)."""
        if kind.tensor_params or _slot_like(kind):
            return _OWN
        tensors: dict[str, QnnTensor] = {}
        ins = [self._stand_in(table, k, f"\x00in{i}\x00", tensors) for i, k in enumerate(kind.inputs)]
        outs = [self._stand_in(table, k, f"\x00out{i}\x00", tensors) for i, k in enumerate(kind.outputs)]
        op = OpConfig("\x00node\x00", kind.type, ins, outs, list(kind.params), kind.package, kind.provenance,
                      Origin(kind.rule, kind.location) if kind.origin else None)
        plan = self.plan(op)
        if plan is not None and plan.reads_data and any(
                k not in (ABSENT, UNKNOWN) and table.tensor_kinds[k].static for k in kind.inputs):
            return _OWN_DATA  # its checks read the data of its static inputs, which a kind does not have
        return self._checked(op, tensors, template=True)

    @staticmethod
    def _stand_in(table: QnnTable, k: int, slot: str, tensors: dict[str, QnnTensor]) -> str:
        if k == ABSENT:
            return ""
        if k != UNKNOWN:
            tensors[slot] = table.tensor_kinds[k].tensor(slot)
        return slot

    def own(self, table: QnnTable, index: dict[str, int], op: OpConfig, template: bool) -> tuple[Diagnostic, ...]:
        """The findings of one op, checked with its own tensors."""
        tensors = {n: table.tensor(index[n]) for n in (*op.inputs, *op.outputs) if type(n) is str and n in index}
        return self._checked(op, tensors, template)

    def _checked(self, op: OpConfig, tensors: dict[str, QnnTensor], template: bool) -> tuple[Diagnostic, ...]:
        self.tensors = tensors
        check = _OpCheck(self, op, template=template)
        if check.checks() and template:  # the shape check, which `checks` leaves to the maker of a template
            check._shapes([self._tensor(n) for n in op.inputs], [self._tensor(n) for n in op.outputs])
        self.tensors = {}
        return tuple(check.diags)

    def _tensor(self, name: str) -> QnnTensor | None:
        """The tensor `name` as the checks see it (None when absent, unknown or NULL); no diagnostics."""
        t = self.tensors.get(name) if name else None
        return None if t is None or t.type == TensorType.NULL else t


def _slot_like(kind: OpKind) -> bool:
    """Text of the kind's that could pass for a name slot: its ops are checked one by one."""
    texts = [kind.package, kind.type, *(p.name for p in kind.params),
             *(v for p in kind.params if isinstance(v := getattr(p, "value", None), str))]
    return any("\x00" in t for t in texts if isinstance(t, str))


def _data_key(k: int, tensors: tuple[QnnTensor, ...]) -> tuple | None:
    """A key for the tensor params' data (small arrays by value), or None: check that op on its own."""
    data = tuple([value_key(t.data, max_size=256) for t in tensors])
    return None if NO_KEY in data else (k, data)


def _instantiate(found: tuple[Diagnostic, ...], op: OpConfig) -> list[Diagnostic]:
    """Findings (templates) for the node `op`: its subject, and its tensors' names in their slots."""
    subject = subject_of(op)

    def name(m: re.Match) -> str:
        return (op.inputs if m.group(1) == "in" else op.outputs)[int(m.group(2))]

    out = []
    for d in found:
        message, hint = d.message, d.hint
        if "\x00" in message:
            message = _NAME_SLOT.sub(name, message)
        if hint and "\x00" in hint:
            hint = _NAME_SLOT.sub(name, hint)
        out.append(Diagnostic(d.severity, message, d.span, subject, hint, d.notes, d.code))
    return out
