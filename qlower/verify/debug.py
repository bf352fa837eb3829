"""The offline accuracy debugger: which source op's lowering broke the numbers.

For each source op, in execution order, the QNN ops its rule emitted (found
through their provenance: rule, rule location, source node) are run on the
source op's own reference inputs, as the lowered graph represents them
(quantized to the tensor's encoding, or rounded to float16), and compared with
the source op's reference kernel on those same inputs: the *local* error, which
does not accumulate. The *cumulative* error of the same tensors comes from one
run of the whole lowered graph. A row whose local error is beyond tolerance is
a wrong lowering (`wrong`); one that is locally right but cumulatively beyond
tolerance is accumulated precision loss (`drift`), or, downstream of a wrong
one, error it only passes on (`inherited`).

Source ops that a multi-op rule fused into another op's rule (or that lowered
to nothing, e.g. an identity) are checked as part of the op that absorbed them
(verdict `fused`, with `group` naming it).

JSON shape (`DebugReport.to_json()`, format "qlower-debug/1"):

    {"format": "qlower-debug/1", "graph": str, "backend": str,
     "precision": "float32" | "float16" | "quantized" | "mixed",
     "passed": bool,                      # every graph output within tolerance
     "diagnosis": "pass" | "wrong-rule" | "drift" | "unlocalised",
     "culprit": str | null,               # first source op whose lowering is wrong
     "summary": str,                      # one line, as printed
     "policy": {"atol": f|null, "rtol": f|null, "steps": f|null},   # user overrides
     "outputs": [TensorCheck],            # graph outputs, whole lowered graph
     "ops": [                             # one per source op, execution order
       {"node": str, "op": str,           # source node name and type
        "rule": str | null, "location": str | null,   # rule name, file:line:col
        "group": str,                     # the source op whose QNN ops compute this one
        "qnn_ops": [str],                 # names of those QNN ops (on the group's row)
        "local": TensorCheck | null, "cumulative": TensorCheck | null,
        "verdict": "ok" | "wrong" | "drift" | "inherited" | "fused" | "unchecked",
        "note": str | null}]}
    TensorCheck = {"tensor": str, "error": f, "peak": f, "bound": f, "ok": bool,
                   "relative": f,             # error / peak (error if peak is 0)
                   "tolerance": {"kind", "atol", "rtol", "steps", "scale"},
                   "worst": {"index": [int], "lowered": f, "reference": f} | null}

Numbers that are not finite are written as strings ("inf", "nan").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from qlower.diagnostics import QlowerError, did_you_mean, error
from qlower.graph.core import Graph, Op, Provenance
from qlower.qnn.convert import encoding_of
from qlower.qnn.model import QnnGraph, QnnTensor, TensorType
from qlower.reference.interpreter import decode_value, encode_value, graph_inputs, run
from qlower.reference.quant import dequantize
from qlower.reference.source import run_values
from qlower.verify.tolerance import Tolerance, TolerancePolicy, is_float16_graph

FORMAT = "qlower-debug/1"
OK, WRONG, DRIFT, INHERITED, FUSED, UNCHECKED = "ok", "wrong", "drift", "inherited", "fused", "unchecked"


def _num(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


@attrs.frozen
class Worst:
    """The element with the largest error: its index and both values."""

    index: tuple[int, ...]
    lowered: float
    reference: float

    def to_json(self) -> dict:
        return {"index": list(self.index), "lowered": _num(self.lowered), "reference": _num(self.reference)}


@attrs.frozen
class TensorCheck:
    """One tensor compared: max |lowered − reference| against its bound."""

    tensor: str
    error: float
    peak: float
    tolerance: Tolerance
    worst: Worst | None = None

    @property
    def bound(self) -> float:
        return self.tolerance.bound(self.peak)

    @property
    def ok(self) -> bool:
        return self.error <= self.bound

    @property
    def relative(self) -> float:
        return self.error / self.peak if self.peak > 0 else self.error

    @property
    def ratio(self) -> float:
        """error / bound: above 1 is beyond tolerance (inf for any error under a zero bound)."""
        b = self.bound
        return self.error / b if b > 0 else (0.0 if self.error == 0 else math.inf)

    def describe(self) -> str:
        text = f"{self.error:.3g} on {self.tensor} ({self.relative:.2%} of its peak {self.peak:.3g})"
        if self.worst is not None and not self.ok:
            w = self.worst
            text += f", worst at {list(w.index)}: lowered {w.lowered:.6g}, reference {w.reference:.6g}"
        return text

    def to_json(self) -> dict:
        return {"tensor": self.tensor, "error": _num(self.error), "peak": _num(self.peak),
                "bound": _num(self.bound), "ok": self.ok, "relative": _num(self.relative),
                "tolerance": self.tolerance.to_json(),
                "worst": self.worst.to_json() if self.worst is not None else None}


@attrs.frozen
class OpCheck:
    """One source op: the rule that lowered it, its local and cumulative error, the verdict."""

    node: str
    op: str
    rule: str | None
    location: str | None
    group: str
    qnn_ops: tuple[str, ...]
    local: TensorCheck | None
    cumulative: TensorCheck | None
    verdict: str
    note: str | None = None

    def to_json(self) -> dict:
        return {"node": self.node, "op": self.op, "rule": self.rule, "location": self.location,
                "group": self.group, "qnn_ops": list(self.qnn_ops),
                "local": self.local.to_json() if self.local else None,
                "cumulative": self.cumulative.to_json() if self.cumulative else None,
                "verdict": self.verdict, "note": self.note}


@attrs.frozen
class DebugReport:
    """The per-op table and the verdict on the graph outputs."""

    graph: str
    backend: str
    precision: str
    policy: TolerancePolicy
    outputs: tuple[TensorCheck, ...]
    ops: tuple[OpCheck, ...]

    @property
    def passed(self) -> bool:
        return all(c.ok for c in self.outputs)

    @property
    def culprit(self) -> OpCheck | None:
        """The first source op (execution order) whose lowering is locally wrong."""
        return next((r for r in self.ops if r.verdict == WRONG), None)

    @property
    def first_drift(self) -> OpCheck | None:
        return next((r for r in self.ops if r.verdict == DRIFT), None)

    @property
    def diagnosis(self) -> str:
        if self.culprit is not None:
            return "wrong-rule"
        if self.passed:
            return "pass"
        return "drift" if self.first_drift is not None else "unlocalised"

    def summary(self) -> str:
        worst = max(self.outputs, key=lambda c: c.ratio, default=None)
        head = "passed" if self.passed else "FAILED"
        line = f"verification {head}"
        if worst is not None:
            line += f": max |lowered − source| = {worst.describe()}, tolerance {worst.bound:.3g}"
        c = self.culprit
        if c is not None:
            line += (f"\n  wrong lowering: node {c.node} ({c.op}), rule {c.rule} at {c.location}: "
                     f"local error {c.local.describe() if c.local else '?'}, tolerance {c.local.bound:.3g}"
                     if c.local else "")
        elif not self.passed:
            d = self.first_drift
            if d is not None and d.cumulative is not None:
                line += (f"\n  drift: every op is locally within tolerance; accumulated error first exceeds it "
                         f"at node {d.node} ({d.op}): {d.cumulative.describe()}")
            else:
                line += "\n  not localised: no source op's lowering is locally beyond tolerance"
        return line

    def table(self) -> str:
        """The per-op table as printed by `qlower debug`."""
        head = ("source op", "type", "rule (location)", "local", "cumulative", "tolerance", "verdict")
        rows = [head]
        for r in self.ops:
            rule = f"{r.rule} ({_short(r.location)})" if r.rule else "—"
            if r.verdict == FUSED:
                rule = f"(in {r.group})"
            tol = (r.local or r.cumulative).tolerance.describe() if (r.local or r.cumulative) else "—"
            rows.append((r.node, r.op, rule, _cell(r.local), _cell(r.cumulative), tol, r.verdict))
        widths = [min(max(len(row[i]) for row in rows), 60) for i in range(len(head))]
        lines = ["  ".join(c[:60].ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
        return "\n".join(lines)

    def to_json(self) -> dict:
        c = self.culprit
        return {"format": FORMAT, "graph": self.graph, "backend": self.backend, "precision": self.precision,
                "passed": self.passed, "diagnosis": self.diagnosis, "culprit": c.node if c else None,
                "summary": self.summary(), "policy": self.policy.to_json(),
                "outputs": [o.to_json() for o in self.outputs], "ops": [r.to_json() for r in self.ops]}


def _short(location: str | None) -> str:
    """`file.qpat:line` of a rule location `path/file.qpat:line:col`, for the table."""
    if not location:
        return "?"
    parts = location.replace("\\", "/").rsplit("/", 1)[-1].split(":")
    return ":".join(parts[:2])


def _cell(c: TensorCheck | None) -> str:
    if c is None:
        return "—"
    return f"{c.error:.3g}{'' if c.ok else ' !'}"


# ------------------------------------------------------------------ comparing

def check_tensor(name: str, have: np.ndarray, want: np.ndarray, tol: Tolerance) -> TensorCheck:
    """Compare real values elementwise; NaN where the reference is finite counts as infinite error."""
    w = np.asarray(want, np.float64)
    h = np.asarray(have, np.float64)
    if h.shape != w.shape:
        if h.size != w.size:
            raise QlowerError(error(f"lowered tensor `{name}` has shape {list(h.shape)}, the source "
                                    f"{list(w.shape)}", subject=f"tensor {name}", code="verify-shape"))
        h = h.reshape(w.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(h - w)
    diff = np.where((h == w) | (np.isnan(h) & np.isnan(w)), 0.0, diff)
    diff = np.where(np.isnan(diff), np.inf, diff)
    finite = w[np.isfinite(w)]
    peak = float(np.max(np.abs(finite), initial=0.0))
    if diff.size == 0:
        return TensorCheck(name, 0.0, peak, tol)
    flat = int(np.argmax(diff))
    idx = tuple(int(i) for i in np.unravel_index(flat, diff.shape)) if diff.ndim else ()
    return TensorCheck(name, float(diff.reshape(-1)[flat]), peak, tol,
                       Worst(idx, float(h.reshape(-1)[flat]), float(w.reshape(-1)[flat])))


# ------------------------------------------------------------------ running

def _fit(value: np.ndarray, dims: Sequence[int]) -> np.ndarray:
    value = np.asarray(value)
    return value.reshape(tuple(dims)) if value.shape != tuple(dims) and value.size == math.prod(dims) else value


class _Lowered:
    """The lowered graph, cut into the groups of QNN ops that compute each source op."""

    def __init__(self, source: Graph, qnn: QnnGraph, provenance: Mapping[str, Provenance]) -> None:
        self.qnn = qnn
        self.source_ops = {op.name: op for op in source.ops}
        self.producer: dict[str, Any] = {}
        self.group_of_op: dict[str, str | None] = {}
        self.groups: dict[str, list] = {}
        self.rule_of: dict[str, Provenance] = {}
        for op in qnn.ops:
            for o in op.outputs:
                self.producer[o] = op
            prov = provenance.get(op.name)
            g = self.source_of(prov)
            if g is None:  # glue (e.g. HTP's float16 casts): joins the group that produced its input
                src = next((self.group_of_op.get(self.producer[i].name) for i in op.inputs
                            if i in self.producer), None)
                g = src
            elif g not in self.rule_of:
                self.rule_of[g] = prov
            self.group_of_op[op.name] = g
            if g is not None:
                self.groups.setdefault(g, []).append(op)

    def source_of(self, prov: Provenance | None) -> str | None:
        if prov is None or prov.rule == "htp_float16":
            return None
        name = prov.source
        while name:
            if name in self.source_ops:
                return name
            if "." not in name:  # an op a source→source rule made is named `<root>.<local>`
                return None
            name = name.rsplit(".", 1)[0]
        return None


def analyse(source: Graph, qnn: QnnGraph, provenance: Mapping[str, Provenance], inputs: Mapping[str, np.ndarray],
            kernels: Mapping[str, Mapping[str, Any]], *, backend: str = "", policy: TolerancePolicy | None = None,
            localise: bool = True, ops: Any = None) -> DebugReport:
    """Compare the lowered graph with the source, per graph output and (with `localise`) per source op.

    `inputs` are the lowered graph's inputs in stored form (quantized integers for
    quantized inputs); `provenance` maps QNN op names to the rule that emitted them. `ops`: the op
    registry whose kernels run `qnn` (qlower.qnn.registry.QnnOps; default: the interpreter's).
    """
    policy = policy or TolerancePolicy()
    f16 = is_float16_graph(qnn.tensors.values())
    tensors = qnn.tensors
    names = [v.name for v in source.inputs]
    unknown = sorted(set(inputs) - set(names))
    if unknown:
        raise QlowerError(error(f"`{unknown[0]}` is not an input of graph `{source.name}`", code="unknown-input",
                                hint=did_you_mean(unknown[0], names) or f"inputs are: {', '.join(names)}"))
    real_in = {}
    for v in source.inputs:
        if v.name not in inputs:
            raise QlowerError(error("no value given for this graph input", subject=f"tensor {v.name}",
                                    code="missing-input"))
        arr = np.asarray(inputs[v.name])
        real_in[v.name] = (dequantize(arr, encoding_of(v.quant, v.dtype, v.shape), v.dtype)
                           if v.quant is not None and arr.dtype.kind in "iu" else arr)
    ref = run_values(source, real_in, kernels)
    feed = {n: inputs[n] for n in qnn.inputs if n in inputs}
    cum = run(qnn, feed, keep_all=localise, ops=ops)  # every tensor only when the per-op view needs it

    origin = quantized_origins(qnn)

    def tol(name: str) -> Tolerance:
        return policy.for_tensor(tensors[name], float16_graph=f16, quantized_origin=origin.get(name))

    def cumulative(name: str) -> TensorCheck | None:
        t = tensors.get(name)
        if t is None or t.type == TensorType.STATIC or name not in cum or name not in ref:
            return None
        return check_tensor(name, decode_value(t, cum[name]), ref[name], tol(name))

    outputs = tuple(c for c in (cumulative(v.name) for v in source.outputs) if c is not None)
    missing = [v.name for v in source.outputs if v.name not in tensors]
    if missing:
        raise QlowerError(error(f"graph output `{missing[0]}` is not a tensor of the lowered graph",
                                subject=f"tensor {missing[0]}", code="verify-output"))
    kinds = {c.tolerance.kind for c in outputs}
    precision = kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else "float32")
    rows: tuple[OpCheck, ...] = ()
    if localise:
        rows = tuple(_localise(source, qnn, provenance, ref, feed, kernels, tol, cumulative, ops))
    return DebugReport(qnn.name, backend, precision, policy, outputs, rows)


def quantized_origins(qnn: QnnGraph) -> dict[str, QnnTensor]:
    """For each float tensor computed from quantized activations (a Dequantize's output and what
    follows it), the coarsest quantized tensor it derives from: its error is that encoding's."""
    tensors = qnn.tensors
    origin: dict[str, QnnTensor] = {}

    def scale(t: QnnTensor) -> float:
        return max(map(abs, t.encoding.scales), default=0.0)

    for op in qnn.ops:
        best = None
        for i in op.inputs:
            t = tensors.get(i) if i else None
            if t is None or t.type == TensorType.STATIC:
                continue
            cand = t if t.datatype.is_fixed_point and t.encoding is not None else origin.get(i)
            if cand is not None and (best is None or scale(cand) > scale(best)):
                best = cand
        if best is not None:
            for o in op.outputs:
                t = tensors.get(o)
                if t is not None and not t.datatype.is_fixed_point:
                    origin[o] = best
    return origin


def _channel_last(rank: int) -> tuple[int, ...]:
    """The permutation from a channel-first (NCHW-like) tensor to its channel-last form."""
    return (0, *range(2, rank), 1)


def _layout_forms(low: _Lowered, members: Mapping[str, list[Op]], ref: Mapping[str, np.ndarray],
                  tensors: Mapping[str, QnnTensor]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Lowered tensors that hold a source result in channel-last layout: tensor → (source value, perm).

    A rule that lowers a channel-first op (a Conv, a pool) computes it channel-last between
    Transposes; the cleanup pack then cancels the Transposes between such ops, so the source's
    result exists in the lowered graph only in the channel-last form. For each source result of a
    group that the lowered graph lacks, it is the group's last-computed output with the permuted
    shape (the form the group hands on)."""
    found: dict[str, tuple[str, tuple[int, ...]]] = {}
    for g, ops in low.groups.items():
        for op in members.get(g, ()):
            for r in op.results:
                if r.name in tensors or r.name not in ref or np.ndim(ref[r.name]) < 3:
                    continue
                perm = _channel_last(np.ndim(ref[r.name]))
                dims = tuple(np.shape(ref[r.name])[i] for i in perm)
                cands = [o for q in ops for o in q.outputs if o not in ref and o not in found
                         and tensors[o].type != TensorType.STATIC and tuple(tensors[o].dims) == dims]
                if cands:
                    found[cands[-1]] = (r.name, perm)
    return found


def _worst(checks: Sequence[TensorCheck]) -> TensorCheck | None:
    return max(checks, key=lambda c: (c.ratio, c.error), default=None)


def _localise(source: Graph, qnn: QnnGraph, provenance, ref, feed, kernels, tol, cumulative, registry=None
              ) -> list[OpCheck]:
    low = _Lowered(source, qnn, provenance)
    tensors = qnn.tensors
    order = source.topo_order()
    # which group computes each source op without QNN ops of its own: the one producing its
    # results if they survive, else the one its first consumer belongs to
    owner: dict[str, str] = {}
    for op in reversed(order):
        if op.name in low.groups:
            owner[op.name] = op.name
            continue
        prod = next((low.group_of_op.get(low.producer[r.name].name) for r in op.results
                     if r.name in low.producer), None)
        if prod is None:
            prod = next((owner[u.name] for r in op.results for u, _ in r.users if u.name in owner), None)
        if prod is not None:
            owner[op.name] = prod
    members: dict[str, list[Op]] = {}
    for op in order:
        if op.name in owner:
            members.setdefault(owner[op.name], []).append(op)

    def run_ops(ops: list, vals: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run some of the lowered graph's ops on the given values of their inputs."""
        if not vals:  # no inputs: the interpreter would want the whole graph's
            vals = {n: np.asarray(feed[n]) for n in graph_inputs(qnn) if n in feed}
        return run(QnnGraph(f"{ops[0].name}.verify", tensors, ops, list(vals), []), vals, keep_all=True,
                   ops=registry)

    derived: dict[str, np.ndarray] = {}  # lowered-graph tensors computed from reference values

    def fed(name: str, depth: int = 0) -> np.ndarray:
        t = tensors[name]
        if t.type == TensorType.STATIC:
            return np.asarray(t.data)
        if name in feed:
            return np.asarray(feed[name])
        if name in ref:  # in the stored form: quantized, or rounded to float16
            return encode_value(t, _fit(ref[name], t.dims))
        if name in layout:  # a source value in the channel-last layout the lowering keeps
            src, perm = layout[name]
            return encode_value(t, np.transpose(ref[src], perm))
        got = derived.get(name)
        if got is not None:
            return got
        p = low.producer.get(name)
        if p is None or depth > 64:
            raise QlowerError(error(f"cannot give tensor `{name}` a reference value", subject=f"tensor {name}",
                                    code="verify-unmapped"))
        ins = [i for i in p.inputs if i and tensors[i].type not in (TensorType.STATIC, TensorType.NULL)]
        vals = {i: fed(i, depth + 1) for i in ins}
        derived.update({k: v for k, v in run_ops([p], vals).items() if k in p.outputs})
        return derived[name]

    def carrier(name: str) -> str | None:
        """The source value a lowered tensor holds: itself, or through glue (casts) above it."""
        for _ in range(64):
            if name in ref:
                return name
            p = low.producer.get(name)
            if p is None or low.source_of(provenance.get(p.name)) is not None:  # not glue
                return None
            ins = [i for i in p.inputs if i and tensors[i].type != TensorType.STATIC]
            if len(ins) != 1:
                return None
            name = ins[0]
        return None

    layout = _layout_forms(low, members, ref, tensors)

    results: dict[str, tuple[TensorCheck | None, str | None]] = {}
    for g, ops in low.groups.items():
        produced = {o for op in ops for o in op.outputs}
        ins = list(dict.fromkeys(i for op in ops for i in op.inputs if i and i not in produced
                                 and tensors[i].type not in (TensorType.STATIC, TensorType.NULL)))
        try:
            vals = {i: fed(i) for i in ins}
            env = run_ops(ops, vals)
        except QlowerError as exc:
            results[g] = (None, f"not run on its own: {exc.diagnostics[0].message}")
            continue
        seen = {}
        for i in ins:
            c = carrier(i)
            if c is not None:
                seen[c] = np.asarray(decode_value(tensors[i], vals[i]), np.float64)
        src_ops = members.get(g, [])
        boundary = {}
        inside = {r.name for op in src_ops for r in op.results}
        for op in src_ops:
            for v in op.operands:
                if v is not None and v.name not in inside and v.data is None:
                    want = ref[v.name]  # the lowered graph's view of it, in the source's dtype
                    boundary[v.name] = _fit(seen[v.name], want.shape).astype(want.dtype) if v.name in seen else want
        try:
            local_ref = run_values(source, {}, kernels, src_ops, boundary)
        except QlowerError as exc:
            results[g] = (None, f"source kernels failed on the lowered inputs: {exc.diagnostics[0].message}")
            continue
        checks = [check_tensor(o, decode_value(tensors[o], env[o]), local_ref[o], tol(o))
                  for o in produced if o in inside and o in env and o in local_ref]
        checks += [check_tensor(o, decode_value(tensors[o], env[o]), np.transpose(local_ref[layout[o][0]],
                                                                                  layout[o][1]), tol(o))
                   for o in produced if o in layout and layout[o][0] in inside and o in env
                   and layout[o][0] in local_ref]
        results[g] = (_worst(checks), None if checks else "no source tensor among its outputs")

    rows = []
    tainted: set[str] = set()  # source ops downstream of a wrong lowering
    for op in order:
        g = owner.get(op.name)
        cum = _worst([c for c in (cumulative(r.name) for r in op.results) if c is not None])
        if g is None:
            rows.append(OpCheck(op.name, op.type, None, None, op.name, (), None, cum, UNCHECKED,
                                "no lowered op computes it"))
            if op.name in tainted:
                tainted.update(u.name for r in op.results for u, _ in r.users)
            continue
        prov = low.rule_of.get(g)
        local, note = results.get(g, (None, "no lowered ops"))
        if g != op.name:
            rows.append(OpCheck(op.name, op.type, prov.rule if prov else None, prov.location if prov else None,
                                g, (), None, cum, FUSED, f"computed by the lowering of {g}"))
            if op.name in tainted:
                tainted.update(u.name for r in op.results for u, _ in r.users)
            continue
        if local is None:
            verdict = UNCHECKED
        elif not local.ok:
            verdict = WRONG
        elif cum is not None and not cum.ok:
            verdict = INHERITED if op.name in tainted else DRIFT
        else:
            verdict = OK
        if verdict == WRONG or op.name in tainted:
            tainted.update(u.name for r in op.results for u, _ in r.users)
        rows.append(OpCheck(op.name, op.type, prov.rule if prov else None, prov.location if prov else None, g,
                            tuple(o.name for o in low.groups.get(g, ())), local, cum, verdict, note))
    return rows
