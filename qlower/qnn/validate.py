"""Checks every op of a QNN graph against the op definitions for one backend.

The checks themselves are `qlower.qnn.checks`; this module decides which ops
they run on. All problems are reported in one run, as diagnostics whose subject names the
node, its QNN type and (when known) the rule that produced it. Per-op-type
lookup tables are built once per validation call, and the findings of an op are
memoised per signature: everything the checks read except names (op type,
tensor types, datatypes, ranks and encodings, params), then per shape. Cached
findings are templates whose tensor names are filled in per node, so large
graphs, whose ops repeat a handful of signatures, validate in linear time at a
few microseconds per op.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import attrs
import numpy as np

from qlower.diagnostics import Diagnostic, did_you_mean, error
from qlower.qnn.checks import (  # noqa: F401 - datatypes_allowed is used from here (qlower.qnn.retype)
    _NUMPY_NAMES, _OpCheck, _Plan, _load_shapes, _plan, datatypes_allowed, subject_of,
)
from qlower.qnn.model import OpConfig, QnnGraph, QnnTensor, ScalarParam, TensorParam, TensorType
from qlower.qnn.opdef import OpDefRegistry
from qlower.qnn.registry import QnnOps

# In a cached finding, a tensor's name is this placeholder (kind "in"/"out", position), filled per node.
_NAME_SLOT = re.compile("\x00(in|out)([0-9]+)\x00")


@contextmanager
def _no_gc() -> Iterator[None]:
    """Validation allocates many small acyclic objects; cyclic GC passes over a big graph free nothing."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def validate_graph(graph: QnnGraph, registry: OpDefRegistry, backend: str, *, ops: QnnOps | None = None
                   ) -> list[Diagnostic]:
    """Every problem with every op of `graph` on `backend` (one of qlower.qnn.backends.BACKENDS).

    `ops`: the op registry whose shape functions check shapes (with a plugin's custom ops);
    by default `registry` joined with the built-in shape rules."""
    validator = _Validator.create(graph, registry, backend, ops)
    if isinstance(validator, Diagnostic):
        return [validator]
    diags: list[Diagnostic] = [validator.shapes_problem] if validator.shapes_problem else []
    check = validator.check
    with _no_gc():
        validator.learn_all()
        for op in graph.ops:
            found = check(op)
            if found:
                diags.extend(found)
    return diags


def validate_op(op: OpConfig, graph: QnnGraph, registry: OpDefRegistry, backend: str, *,
                ops: QnnOps | None = None) -> list[Diagnostic]:
    """The problems of one op; `graph` supplies its tensors."""
    validator = _Validator.create(graph, registry, backend, ops)
    if isinstance(validator, Diagnostic):
        return [validator]
    return ([validator.shapes_problem] if validator.shapes_problem else []) + validator.check(op)




class _Validator:
    """Per-call state: the graph's tensors, the backend and a plan per op type."""

    def __init__(self, graph: QnnGraph, registry: OpDefRegistry, backend: str, ops: QnnOps | None = None) -> None:
        self.tensors = graph.tensors
        self.registry = registry
        self.ops = ops if ops is not None else QnnOps.build(registry)  # shape functions, per op entry
        self.backend = backend
        self.label = backend.upper()
        self.plans: dict[tuple[str, str], _Plan | None] = {}
        self.shapes, self.shapes_problem = _load_shapes()
        self.sigs: dict[str, Any] = {}
        self.shape_memo: dict[tuple, tuple] = {}
        # Per tensor name, an interned int standing for what the checks read of the tensor: `infos`
        # holds it as (what the shape-independent checks read: type, datatype, rank, encoding kind; dims).
        self.tkey: dict[str, int] = {}
        self.infos: list[tuple[tuple, Any]] = []
        self.interned: dict[tuple[tuple, Any], int] = {}
        # findings per op signature (tensor ids, params); per shape-independent signature (`_Entry`)
        self.found: dict[tuple, tuple[Diagnostic, ...]] = {}
        self.memo: dict[tuple, _Entry] = {}

    @classmethod
    def create(cls, graph: QnnGraph, registry: OpDefRegistry, backend: str,
               ops: QnnOps | None = None) -> _Validator | Diagnostic:
        b = backend.strip().lower()
        if b not in registry.backends:
            return error(f"unknown backend `{backend}`; expected one of {', '.join(registry.backends)}",
                         hint=did_you_mean(b, registry.backends), code="unknown-backend")
        return cls(graph, registry, b, ops)

    def plan(self, op: OpConfig) -> _Plan | None:
        key = (op.package, op.type)
        if key not in self.plans:
            opdef = self.registry.op(op.type, op.package)
            self.plans[key] = _plan(self.registry, opdef, self.backend) if opdef else None
        return self.plans[key]

    def sig(self, t: QnnTensor) -> Any:
        """The shapes module's signature of a tensor, built once per tensor."""
        sig = self.sigs.get(t.name)
        if sig is None:
            sig = self.sigs[t.name] = self.shapes.Sig(tuple(t.dims), _NUMPY_NAMES.get(t.datatype, "uint8"))
        return sig

    def check(self, op: OpConfig) -> list[Diagnostic]:
        """The findings of `op`: cached per signature, instantiated for this node."""
        tk = self.tkey
        inputs, outputs = op.inputs, op.outputs
        try:
            try:
                ik = tuple([tk[n] for n in inputs])
                ok = tuple([tk[n] for n in outputs])
            except KeyError:
                for n in (*inputs, *outputs):
                    if n not in tk:
                        self._learn(n)
                ik = tuple([tk[n] for n in inputs])
                ok = tuple([tk[n] for n in outputs])
        except TypeError:  # an unhashable name
            return _OpCheck(self, op).run()
        params = op.params
        pk = _params_key(params) if params else ()
        if pk is None:
            return _OpCheck(self, op).run()
        key = (op.package, op.type, ik, ok, pk)
        found = self.found.get(key)
        if found is None:
            found = self.found[key] = self._findings(op, ik, ok, pk)
        if not found:
            return []
        if found is _DIRECT:
            return _OpCheck(self, op).run()
        return _instantiate(found, op, self.tensors)

    def _findings(self, op: OpConfig, ik: tuple[int, ...], ok: tuple[int, ...], pk: tuple) -> tuple:
        """The findings (templates) of a signature not seen yet: its shape-independent findings, cached
        per shape-independent signature, then the shape check's, cached per shape."""
        infos = self.infos
        ins, outs = [infos[i] for i in ik], [infos[i] for i in ok]
        key = (op.package, op.type, tuple([i[0] for i in ins]), tuple([o[0] for o in outs]), pk)
        entry = self.memo.get(key)
        if entry is None:
            entry = self.memo[key] = self._entry(op)
        if entry.direct:
            return _DIRECT
        found = entry.findings
        if entry.shapes is not None:
            skey = (tuple([i[1] for i in ins]), tuple([o[1] for o in outs]))
            extra = entry.shapes.get(skey)
            if extra is None:
                check = _OpCheck(self, op, template=True)
                check._shapes([self._tensor(n) for n in op.inputs], [self._tensor(n) for n in op.outputs])
                extra = entry.shapes[skey] = tuple(check.diags)
            found = found + extra
        return found

    def _entry(self, op: OpConfig) -> _Entry:
        """Run the checks that do not depend on shapes once for a signature, naming tensors by slot."""
        texts = [op.package, op.type] + [p.name for p in op.params] \
            + [p.value for p in op.params if isinstance(p, ScalarParam) and isinstance(p.value, str)]
        if any("\x00" in t for t in texts if isinstance(t, str)):
            return _Entry((), None, direct=True)  # text that could pass for a name slot: no templates
        check = _OpCheck(self, op, template=True)
        shapes = check.checks()
        return _Entry(tuple(check.diags), {} if shapes else None)

    def _intern(self, info: tuple, dims: Any) -> int:
        full = (info, dims)
        i = self.interned.get(full)
        if i is None:
            i = self.interned[full] = len(self.infos)
            self.infos.append(full)
        return i

    def _learn(self, name: str) -> None:
        """Key what the checks read of the tensor `name` (absent, unknown or known)."""
        t = self.tensors.get(name) if name else None
        if not name:
            self.tkey[name] = self._intern(("",), None)
        elif t is None:
            self.tkey[name] = self._intern(("?",), None)
        else:
            d = tuple(t.dims)
            enc = t.encoding
            self.tkey[name] = self._intern((t.type, t.datatype, len(d), d == (1,), None if enc is None else enc.kind,
                                            bool(d) and d[0] == 1), _dims_key(d))

    def learn_all(self) -> None:
        """`_learn` every tensor of the graph at once (tensors alike share one key computation)."""
        tk = self.tkey
        seen: dict[tuple, int] = {}
        for name, t in self.tensors.items():
            if not name or type(name) is not str or name in tk:
                continue
            d = t.dims
            if type(d) is not tuple:
                d = tuple(d)
            dk = _dims_key(d)
            enc = t.encoding
            kind = None if enc is None else enc.kind
            k = (t.type, t.datatype, dk, kind)
            i = seen.get(k)
            if i is None:
                i = seen[k] = self._intern((t.type, t.datatype, len(d), d == (1,), kind, bool(d) and d[0] == 1), dk)
            tk[name] = i

    def _tensor(self, name: str) -> QnnTensor | None:
        """The tensor `name` as the checks see it (None when absent, unknown or NULL); no diagnostics."""
        if not name:
            return None
        t = self.tensors.get(name)
        return None if t is None or t.type == TensorType.NULL else t


_DIRECT: tuple = (None,)  # the findings of a signature whose ops are checked one by one


@attrs.define
class _Entry:
    """The cached findings of one op signature: the shape-independent ones (templates, see
    `_instantiate`), and when the shape check runs, its findings per shape key."""

    findings: tuple[Diagnostic, ...]
    shapes: dict[tuple, tuple[Diagnostic, ...]] | None
    direct: bool = False  # not templated: check every op of this signature afresh


def _dims_key(dims: tuple[Any, ...]) -> tuple[Any, ...]:
    """A shape key: the dims themselves when they are ints, else each with its type (messages print them)."""
    for d in dims:
        if type(d) is not int:
            return tuple((type(x), x) for x in dims)
    return dims


def _params_key(params: Sequence[Any]) -> tuple | None:
    """Everything the checks read of the params (hashable, and equal only when messages would print
    the same), or None when some value cannot be keyed cheaply."""
    out = []
    for p in params:
        if type(p) is ScalarParam:
            v = p.value
            tv = type(v)
            if tv is bool or tv is int or tv is str:
                out.append((0, p.name, p.datatype, tv, v))
            elif tv is float or isinstance(v, np.generic):
                out.append((0, p.name, p.datatype, tv, repr(v)))
            else:
                return None
        elif type(p) is TensorParam:
            t = p.tensor
            data = t.data
            if data is None:
                dk = None
            elif type(data) is np.ndarray and data.size <= 256 and not data.dtype.hasobject:
                dk = (data.dtype, data.shape, data.tobytes())
            else:
                return None
            out.append((1, p.name, t.datatype, _dims_key(tuple(t.dims)), dk))
        else:
            return None
    return tuple(out)


def _instantiate(found: Sequence[Diagnostic], op: OpConfig, tensors: Mapping[str, QnnTensor]) -> list[Diagnostic]:
    """Cached findings for the node `op`: its subject, and its tensors' names in their slots."""
    subject = subject_of(op)

    def name(m: re.Match) -> str:
        raw = (op.inputs if m.group(1) == "in" else op.outputs)[int(m.group(2))]
        t = tensors.get(raw) if raw else None
        return raw if t is None else t.name

    out = []
    for d in found:
        message, hint = d.message, d.hint
        if "\x00" in message:
            message = _NAME_SLOT.sub(name, message)
        if hint and "\x00" in hint:
            hint = _NAME_SLOT.sub(name, hint)
        out.append(Diagnostic(d.severity, message, d.span, subject, hint, d.notes, d.code))
    return out
