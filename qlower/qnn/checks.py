"""The checks of one QNN op against the op definitions for one backend.

`_OpCheck` runs every check of an op (support, counts, params, datatypes,
ranks, static inputs, default-only params, constraint files, shapes) and
collects diagnostics instead of stopping at the first; `_Plan` is what those
checks need of one op type on one backend, built once per validation.
Which ops are checked, and how their findings are shared between ops of one
signature, is `qlower.qnn.validate`'s business.
"""

from __future__ import annotations

import ast
import functools
import json
import importlib
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import attrs
import numpy as np

from qlower.diagnostics import Diagnostic, Note, did_you_mean, error, warning
from qlower.qnn.datatypes import DataType, to_numpy
from qlower.qnn.keys import NO_KEY, value_key
from qlower.qnn.model import PACKAGE, EncodingKind, OpConfig, QnnTensor, ScalarParam, TensorParam, TensorType
from qlower.qnn import cexpr
from qlower.qnn.constraints import Check
from qlower.qnn.opdef import (
    ALL_CONFIGS, IODef, OpDef, OpDefRegistry, ParamDef, RankLimit, StaticRule, TargetSupplement, unknown_op,
)

_UNKNOWN = object()
# numpy storage dtype names; STRING/UNDEFINED have none and shapes do not depend on it
_NUMPY_NAMES = {dt: to_numpy(dt).name for dt in DataType if dt not in (DataType.STRING, DataType.UNDEFINED)}
_MAX_NOTES = 3



class Context(Protocol):
    """What the checks read of the validation they run in (`qlower.qnn.validate`'s validator)."""

    tensors: Mapping[str, QnnTensor]
    registry: OpDefRegistry
    backend: str
    label: str  # the backend as messages name it
    shapes: ModuleType | None  # qlower.qnn.shapes, when it imports
    ops: Any  # qlower.qnn.registry.QnnOps: each op's shape function
    shape_memo: dict[tuple, tuple]

    def plan(self, op: OpConfig) -> _Plan | None: ...

    def sig(self, t: QnnTensor) -> Any: ...


def subject_of(op: OpConfig) -> str:
    prefix = "qnn" if op.package == PACKAGE else op.package
    origin = f", from {op.provenance}" if op.provenance else ""
    return f"node {op.name} ({prefix}.{op.type}{origin})"



@attrs.frozen
class _Row:
    """A datatype row resolved against the master definition: every constrained entry."""

    config: str
    checks: tuple[tuple[str, frozenset[DataType]], ...]


@attrs.frozen
class _Plan:
    """Everything needed to check one op type on the chosen backend."""

    opdef: OpDef
    supported: bool
    params: Mapping[str, ParamDef]
    param_dtypes: Mapping[str, frozenset[DataType]]
    targets: Mapping[str, TargetSupplement]
    rows: tuple[_Row, ...]
    row_params: frozenset[str]  # params some row constrains
    checks: tuple[Check, ...] = ()  # constraints-file checks other than static and default-only
    reads_data: bool = False  # some check reads the data of static inputs (ops with one are checked one by one)
    check_configs: tuple[frozenset[str], ...] = ()  # per check: the configs its bullet is documented under
    bindings: dict[int, tuple[int, ...]] = attrs.field(factory=dict)
    matches: dict[tuple, tuple[frozenset[str], tuple | None]] = attrs.field(factory=dict)

    def limits(self, io: IODef) -> tuple[RankLimit, ...]:
        supp = self.targets.get(io.name)
        return io.rank_limits + (supp.rank_limits if supp else ())


def _plan(registry: OpDefRegistry, opdef: OpDef, backend: str) -> _Plan:
    supp = registry.supplement(opdef.name, backend, opdef.package)
    targets = {t.name: t for t in supp.targets} if supp else {}
    kinds = {"Input": {io.name for io in opdef.inputs}, "Output": {io.name for io in opdef.outputs}}
    others = []
    for c in registry.checks(opdef.name, backend, opdef.package):
        w = c.when
        plain = w.operations is None and not w.except_operations and not w.except_datatypes \
            and w.min_rank is None and w.max_rank is None and (w.datatypes is None or len(w.datatypes) == 1)
        if c.kind in ("static", "only_default") and plain and c.target:
            kind = next((k for k, names in kinds.items() if c.target in names), "Parameter")
            t = targets.get(c.target) or TargetSupplement(kind, c.target)
            if c.kind == "static":
                dt = next(iter(w.datatypes)) if w.datatypes else None
                t = attrs.evolve(t, static=t.static + (StaticRule(c.config, dt, c.get("encoding")),))
            else:
                t = attrs.evolve(t, only_default=t.only_default + (c.config,))
            targets[c.target] = t
        else:
            others.append(c)
    param_dtypes = {}
    for p in opdef.params:
        allowed = targets[p.name].datatypes if p.name in targets and targets[p.name].datatypes else p.datatypes
        if allowed:
            param_dtypes[p.name] = frozenset(allowed)
    fixed = {io.name: frozenset(io.datatypes) for io in opdef.inputs + opdef.outputs
             if io.datatypes and not io.backend_specific}
    raw = [(r.config, dict(r.entries)) for r in supp.rows] if supp and supp.rows else []
    if not raw:
        implicit = {t.name: frozenset(t.datatypes) for t in targets.values() if t.kind != "Parameter" and t.datatypes}
        raw = [(ALL_CONFIGS, implicit)] if implicit or fixed else []
    rows = tuple(_Row(config, tuple({**fixed, **entries}.items())) for config, entries in raw)
    params = {p.name: p for p in opdef.params}
    row_params = frozenset(n for r in rows for n, _ in r.checks if n in params)
    # one bullet documented under several configs is one check that applies under any of them
    merged: dict[tuple, int] = {}
    configs: list[set[str]] = []
    kept: list[Check] = []
    for c in others:
        key = (c.ref, c.kind, c.target, c.when, repr(sorted(c.fields.items(), key=lambda kv: kv[0])))
        if c.ref and key in merged:
            configs[merged[key]].add(c.config)
            continue
        merged[key] = len(kept)
        kept.append(c)
        configs.append({c.config})
    others = kept
    reads_data = any("data(" in e.text for c in others for k in ("require", "if") if (e := c.get(k)) is not None)
    return _Plan(opdef, registry.supported(opdef.name, backend, opdef.package), params, param_dtypes, targets,
                 rows, row_params, tuple(others), reads_data, tuple(frozenset(x) for x in configs))


@functools.cache
def later_params() -> Mapping[str, Mapping[str, Mapping[str, str]]]:
    """Params newer than the shipped op definitions (opdefs/later_params.json): noted, not refused."""
    path = Path(__file__).with_name("opdefs") / "later_params.json"
    return json.loads(path.read_text(encoding="utf-8"))["params"]


def _bind(defs: Sequence[IODef], n: int) -> tuple[int, ...]:
    """Which definition each of `n` positional tensors belongs to (left to right)."""
    need_after = [0] * (len(defs) + 1)
    for i in range(len(defs) - 1, -1, -1):
        need_after[i] = need_after[i + 1] + (1 if defs[i].mandatory else 0)
    out: list[int] = []
    for i, d in enumerate(defs):
        spare = n - len(out) - need_after[i + 1]
        if d.repeated:
            take = max(0, min(d.max_repeat or n, spare))
        else:
            take = 1 if spare >= 1 or (d.mandatory and n > len(out)) else 0
        out.extend([i] * take)
    return tuple(out)


def _count_text(lo: int, hi: int | None, noun: str) -> str:
    if hi == lo:
        return f"{lo} {noun}{'s' if lo != 1 else ''}"
    return f"at least {lo} {noun}s" if hi is None else f"{lo} to {hi} {noun}s"


def _applies(flagged: set[str] | frozenset[str], matched: frozenset[str]) -> bool:
    """A config-bound restriction holds when it is unconditional or every matching row's config has it."""
    return ALL_CONFIGS in flagged or (bool(matched) and matched <= flagged)


def _rank_ok(rank: int, dims: tuple[int, ...], fixed: int | None) -> bool:
    return fixed is None or rank == fixed or (fixed == 0 and dims == (1,))


def _default_value(pd: ParamDef, in0_rank: int | None) -> Any:
    """The default as a Python value (N and N-1 relative to rank(in[0])), or _UNKNOWN."""
    text = (pd.default or "").strip()
    if text in ("true", "false"):
        return text == "true"
    m = re.fullmatch(r"N(?:\s*-\s*(\d+))?", text)
    if m:
        return _UNKNOWN if in0_rank is None else in0_rank - int(m.group(1) or 0)
    m = re.fullmatch(r"\{(.+),\.\.,\1\}", text)
    if m:
        fill = _literal(m.group(1))
        return _UNKNOWN if fill is _UNKNOWN else ("fill", fill)
    return _literal(text)


def _literal(text: str) -> Any:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return _UNKNOWN
    return value if isinstance(value, (bool, int, float, list, tuple)) else _UNKNOWN


def _equals_default(value: Any, default: Any) -> bool:
    scalars = (bool, int, float, np.generic)
    if isinstance(value, scalars) and isinstance(default, scalars):
        return math.isclose(float(value), float(default), rel_tol=1e-6)
    try:
        if isinstance(default, tuple) and len(default) == 2 and default[0] == "fill":
            return bool(np.all(np.asarray(value, dtype=np.float64) == float(default[1])))
        a = np.asarray(value, dtype=np.float64).ravel()
        b = np.asarray(default, dtype=np.float64).ravel()
        return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-6, atol=0.0))
    except (TypeError, ValueError):
        return False


def _load_shapes() -> tuple[ModuleType | None, Diagnostic | None]:
    """The shape-rule module, if there is one; a broken one only costs the shape checks."""
    try:
        return importlib.import_module("qlower.qnn.shapes"), None
    except ModuleNotFoundError as exc:
        if exc.name == "qlower.qnn.shapes":
            return None, None
        problem: Exception = exc
    except Exception as exc:  # noqa: BLE001 - any import failure of an optional checker
        problem = exc
    return None, warning(f"shape checks skipped: qlower.qnn.shapes failed to import "
                         f"({type(problem).__name__}: {problem})", code="shape-internal")



class _OpCheck:
    """The checks of one op; collects diagnostics instead of stopping at the first."""

    def __init__(self, v: Context, op: OpConfig, template: bool = False) -> None:
        self.v = v
        self.op = op
        # template: findings to cache for every op of this signature, so no subject and names by slot
        self.template = template
        self.subject = None if template else subject_of(op)
        self.diags: list[Diagnostic] = []

    def name(self, kind: str, i: int, name: str) -> str:
        """How a message names tensor `kind`[i]: itself, or its slot in a template."""
        return f"\x00{kind}{i}\x00" if self.template else name

    def err(self, code: str, message: str, hint: str | None = None, notes: Sequence[Note] = ()) -> None:
        self.diags.append(error(message, subject=self.subject, hint=hint, code=code, notes=notes))

    def tensor(self, name: str, kind: str, i: int) -> QnnTensor | None:
        if not name:
            return None
        t = self.v.tensors.get(name)
        if t is None:
            self.err("unknown-tensor", f"{kind}[{i}] refers to unknown tensor `{self.name(kind, i, name)}`")
            return None
        return None if t.type == TensorType.NULL else t

    def run(self) -> list[Diagnostic]:
        self.checks()
        return self.diags

    def checks(self) -> bool:
        """Every check; the shape check only without `template` (returns whether it applies)."""
        op, v = self.op, self.v
        plan = v.plan(op)
        if plan is None:
            elsewhere = v.registry.op(op.type)
            if elsewhere is not None:
                self.err("unknown-op", f"package {op.package} has no op `{op.type}`",
                         hint=f"{op.type} is defined in package {elsewhere.package}; set the op's package")
            else:
                known = v.registry.names(op.package if op.package in v.registry.packages() else None)
                self.diags.append(unknown_op(op.type, known, subject=self.subject))
            return False
        d = plan.opdef
        if not plan.supported:
            self.err("unsupported-op", f"{d.name} is not supported on {v.label}",
                     hint=self._supported_elsewhere(d))
        ins = [self.tensor(n, "in", i) for i, n in enumerate(op.inputs)]
        outs = [self.tensor(n, "out", i) for i, n in enumerate(op.outputs)]
        counts_ok = self._counts(plan, d.inputs, d.input_count_range(), op.inputs, "input")
        counts_ok &= self._counts(plan, d.outputs, d.output_count_range(), op.outputs, "output")
        in0_rank = len(ins[0].dims) if ins and ins[0] is not None else None
        params_ok = self._params(plan, in0_rank)
        if counts_ok:
            in_bind = self._binding(plan, d.inputs, len(ins))
            out_bind = self._binding(plan, d.outputs, len(outs))
            matched = self._datatypes(plan, ins, outs, in_bind, out_bind) if plan.supported else frozenset()
            self._ranks(plan, d.inputs, ins, in_bind, "in", matched)
            self._ranks(plan, d.outputs, outs, out_bind, "out", matched)
            self._static(plan, ins, in_bind, matched)
            self._only_default(plan, ins, in_bind, matched, in0_rank)
            if plan.checks:
                self._constraints(plan, ins, outs, in_bind, out_bind, matched, in0_rank)
            if params_ok and v.shapes is not None:
                if self.template:
                    return True
                self._shapes(ins, outs)
        return False

    def _supported_elsewhere(self, d: OpDef) -> str | None:
        where = [b.upper() for b in self.v.registry.backends if self.v.registry.supported(d.name, b, d.package)]
        return f"{d.name} is supported on {', '.join(where)}" if where else None

    def _counts(self, plan: _Plan, defs: Sequence[IODef], span: tuple[int, int | None], names: list[str],
                noun: str) -> bool:
        lo, hi = span
        n = len(names)
        if n < lo or (hi is not None and n > hi):
            self.err(f"{noun}-count", f"{self.op.type} takes {_count_text(lo, hi, noun)}, got {n}")
            return False
        ok = True
        for i, di in enumerate(self._binding(plan, defs, n)):
            t = self.v.tensors.get(names[i]) if names[i] else None
            if defs[di].mandatory and (not names[i] or (t is not None and t.type == TensorType.NULL)):
                self.err(f"{noun}-count", f"{defs[di].name} is mandatory but {noun} {i} is empty")
                ok = False
        return ok

    def _binding(self, plan: _Plan, defs: Sequence[IODef], n: int) -> tuple[int, ...]:
        key = n if defs is plan.opdef.inputs else -1 - n
        if key not in plan.bindings:
            plan.bindings[key] = _bind(defs, n)
        return plan.bindings[key]

    # ------------------------------------------------------------ params

    def _params(self, plan: _Plan, in0_rank: int | None) -> bool:
        before = len(self.diags)
        seen: set[str] = set()
        for p in self.op.params:
            if p.name in seen:
                self.err("duplicate-param", f"param `{p.name}` is given more than once")
                continue
            seen.add(p.name)
            pd = plan.params.get(p.name)
            if pd is None:
                newer = later_params().get(plan.opdef.name, {}).get(p.name)
                if newer is not None:
                    self.diags.append(warning(
                        f"param `{p.name}` of {plan.opdef.name} is newer than the op definitions (QNN 2.25; seen "
                        f"in {newer['seen_in']}): not checked", subject=self.subject, code="newer-param"))
                    continue
                self.err("unknown-param", f"{plan.opdef.name} has no param `{p.name}`",
                         hint=did_you_mean(p.name, plan.params))
                continue
            self._param(plan, pd, p)
        for pd in plan.opdef.params:
            if pd.mandatory and pd.name not in seen:
                self.err("missing-param", f"mandatory param `{pd.name}` is missing")
        return len(self.diags) == before

    def _param(self, plan: _Plan, pd: ParamDef, p: ScalarParam | TensorParam) -> None:
        is_scalar = isinstance(p, ScalarParam)
        dt = p.datatype if is_scalar else p.tensor.datatype
        allowed = plan.param_dtypes.get(pd.name)
        if allowed is not None and dt not in allowed:
            names = " or ".join(x.qnn_name for x in sorted(allowed))
            self.err("param-datatype", f"param `{pd.name}` must be {names}, got {dt.qnn_name}")
        if pd.is_scalar and not is_scalar:
            self.err("param-shape", f"param `{pd.name}` must be a scalar, got a tensor of shape {list(p.tensor.dims)}")
        elif pd.ndim is not None and is_scalar:
            self.err("param-shape", f"param `{pd.name}` must be a {pd.rank} tensor, got a scalar")
        elif not is_scalar:
            rank = len(p.tensor.dims)
            supp = plan.targets.get(pd.name)
            limits = pd.rank_limits + (supp.rank_limits if supp else ())
            if pd.ndim is not None and rank != pd.ndim:
                self.err("param-shape", f"param `{pd.name}` must be a {pd.rank} tensor, got rank {rank}")
            for lim in limits:
                if lim.config == ALL_CONFIGS and not lim.allows(rank):
                    self.err("param-shape", f"param `{pd.name}` has rank {rank}; {self.v.label} requires {lim}")
        if pd.enum is not None and is_scalar:
            value = p.value
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not 0 <= value < len(pd.enum):
                self.err("param-enum", f"param `{pd.name}` = {value!r} is not a valid {pd.name} value",
                         hint="use one of " + ", ".join(f"{i} ({n})" for i, n in enumerate(pd.enum)))

    # ------------------------------------------------------------ datatypes

    def _datatypes(self, plan: _Plan, ins: list[QnnTensor | None], outs: list[QnnTensor | None],
                   in_bind: tuple[int, ...], out_bind: tuple[int, ...]) -> frozenset[str]:
        """Match whole datatype rows; returns the configs of the matching rows (empty if none match)."""
        if not plan.rows:
            return frozenset({ALL_CONFIGS})
        values: dict[str, list[DataType]] = {}
        for defs, tensors, bind in ((plan.opdef.inputs, ins, in_bind), (plan.opdef.outputs, outs, out_bind)):
            for t, di in zip(tensors, bind):
                if t is not None:
                    values.setdefault(defs[di].name, []).append(t.datatype)
        for p in self.op.params:
            dt = p.datatype if isinstance(p, ScalarParam) else p.tensor.datatype
            allowed = plan.param_dtypes.get(p.name)
            if p.name in plan.row_params and (allowed is None or dt in allowed):
                values[p.name] = [dt]
        key = tuple((k, tuple(x)) for k, x in values.items())
        found = plan.matches.get(key)
        if found is None:
            found = plan.matches[key] = _match(plan, key, values, self.v)
        matched, problem = found
        if problem is not None:
            message, hint, notes = problem
            self.err("datatype", message, hint=hint, notes=notes)
        return matched

    # ------------------------------------------------------------ ranks, static, defaults

    def _ranks(self, plan: _Plan, defs: Sequence[IODef], tensors: list[QnnTensor | None],
               bind: tuple[int, ...], kind: str, matched: frozenset[str]) -> None:
        for i, (t, di) in enumerate(zip(tensors, bind)):
            if t is None:
                continue
            io, rank = defs[di], len(t.dims)
            where = f"{kind}[{i}] `{self.name(kind, i, t.name)}`"
            if not _rank_ok(rank, t.dims, io.ndim):
                self.err("rank", f"{where} has rank {rank}; {plan.opdef.name} requires rank {io.ndim}")
                continue
            failing: dict[str, RankLimit] = {}
            for lim in plan.limits(io):
                if not lim.allows(rank):
                    failing.setdefault(lim.config, lim)
            if failing and _applies(set(failing), matched):
                lim = failing.get(ALL_CONFIGS) or next(iter(failing.values()))
                self.err("rank", f"{where} has rank {rank}; {self.v.label} supports {lim}")

    def _static(self, plan: _Plan, ins: list[QnnTensor | None], bind: tuple[int, ...],
                matched: frozenset[str]) -> None:
        defs = plan.opdef.inputs
        for i, (t, di) in enumerate(zip(ins, bind)):
            if t is None or t.type == TensorType.STATIC:
                continue
            io = defs[di]
            supp = plan.targets.get(io.name)
            rules = [r for r in (supp.static if supp else ()) if _rule_matches(r, t)]
            if io.is_static or (rules and _applies({r.config for r in rules}, matched)):
                why = ""
                if rules and not io.is_static:
                    r = rules[0]
                    cond = [x for x in (r.datatype and r.datatype.name, r.encoding and f"{r.encoding} encoding") if x]
                    why = f" on {self.v.label}" + (f" when it is {' with '.join(cond)}" if cond else "")
                self.err("static-input", f"in[{i}] `{self.name('in', i, t.name)}` must be a static tensor{why}, "
                                         f"but it is {t.type.name}")

    def _only_default(self, plan: _Plan, ins: list[QnnTensor | None], bind: tuple[int, ...],
                      matched: frozenset[str], in0_rank: int | None) -> None:
        for p in self.op.params:
            supp = plan.targets.get(p.name)
            pd = plan.params.get(p.name)
            if pd is None or supp is None or not supp.only_default or not _applies(set(supp.only_default), matched):
                continue
            default = _default_value(pd, in0_rank)
            value = p.value if isinstance(p, ScalarParam) else p.tensor.data
            if default is _UNKNOWN or value is None:
                self.diags.append(warning(f"param `{p.name}` is supported on {self.v.label} only at its default, "
                                          "which qlower cannot check here", subject=self.subject,
                                          code="param-default-only"))
            elif not _equals_default(value, default):
                shown = pd.default if pd.default == str(default) else f"{pd.default} = {default}"
                self.err("param-default-only", f"param `{p.name}` must keep its default ({shown}) on "
                                               f"{self.v.label}, got {value!r}")
        for i, (t, di) in enumerate(zip(ins, bind)):
            io = plan.opdef.inputs[di]
            supp = plan.targets.get(io.name)
            if t is not None and supp and supp.only_default and _applies(set(supp.only_default), matched):
                self.err("input-default-only", f"optional input in[{i}] `{self.name('in', i, t.name)}` is not "
                                               f"supported on {self.v.label}; omit it")

    # ------------------------------------------------------------ constraints file

    def _constraints(self, plan: _Plan, ins: list[QnnTensor | None], outs: list[QnnTensor | None],
                     in_bind: tuple[int, ...], out_bind: tuple[int, ...], matched: frozenset[str],
                     in0_rank: int | None) -> None:
        """The structured checks of the constraints files (documented constraints, see opdefs/README.md)."""
        d = plan.opdef
        bound: dict[str, list[tuple[str, int, QnnTensor]]] = {}
        for kind, defs, tensors, bind in (("in", d.inputs, ins, in_bind), ("out", d.outputs, outs, out_bind)):
            for i, (t, di) in enumerate(zip(tensors, bind)):
                if t is not None:
                    bound.setdefault(defs[di].name, []).append((kind, i, t))
        params = {p.name: p for p in self.op.params}
        operation = None
        if "operation" in params and isinstance(params["operation"], ScalarParam):
            value = params["operation"].value
            pd = plan.params.get("operation")
            if pd is not None and pd.enum and isinstance(value, (int, np.integer)) and 0 <= value < len(pd.enum):
                operation = pd.enum[int(value)]
        label = self.v.label
        env: cexpr.Env | None = None
        for c, configs in zip(plan.checks, plan.check_configs):
            if not _applies(configs, matched):
                continue
            cond = f" (documented for {c.when})" if str(c.when) else ""
            cfg = "" if ALL_CONFIGS in configs else f" {'/'.join(sorted(configs))}"
            if c.kind == "operation":
                if operation is None or not c.when.holds(operation, None, None):
                    continue
                allowed, forbidden = c.get("allowed"), c.get("forbidden") or frozenset()
                if (allowed is not None and operation not in allowed) or operation in forbidden:
                    self.err("operation", f"operation {operation} is not supported by {d.name} on {label}{cfg}")
                continue
            if c.kind in ("absent", "required"):
                present = c.target in params or c.target in bound
                if not c.when.holds(operation, None, None):
                    continue
                if c.kind == "absent" and present:
                    what = "param" if c.target in params else "input"
                    self.err("not-supported", f"{what} `{c.target}` is not supported on {label}{cfg}{cond}; omit it")
                elif c.kind == "required" and not present:
                    self.err("missing-param", f"`{c.target}` must be given{cond}")
                continue
            if c.kind == "count":
                n = len(bound.get(c.target or "", []))
                if n < c.get("min", 0) and c.when.holds(operation, None, None):
                    noun = "input" if (c.target or "").startswith("in") else "output"
                    self.err(f"{noun}-count", f"{d.name} needs at least {c.get('min')} tensors for {c.target}, "
                                              f"got {n}")
                continue
            if c.kind in ("expr", "encoding"):
                if env is None:
                    env = self._env(plan, ins, outs, in0_rank)
                if c.kind == "expr":
                    self._expr(plan, c, env, bound, operation, cfg, cond)
                else:
                    self._encoding(plan, c, env, bound, operation, cfg, cond)
                continue
            if c.kind == "value":
                p = params.get(c.target)
                if p is None or not c.when.holds(operation, None, None):
                    continue
                value = p.value if isinstance(p, ScalarParam) else p.tensor.data
                bad = _value_problem(c, value, in0_rank)
                if bad:
                    self.err("param-value", f"param `{c.target}` = {_show(value)} {bad} on "
                                            f"{'QNN' if c.get('_master') else label}{cfg}{cond}")
                continue
            tensors = [(f"{kind}[{i}] `{self.name(kind, i, t.name)}`", t) for kind, i, t in bound.get(c.target or "", [])]
            p = params.get(c.target or "")
            if isinstance(p, TensorParam):
                tensors.append((f"param `{p.name}`", p.tensor))
            elif isinstance(p, ScalarParam) and c.kind == "datatype":
                allowed, forbidden = c.get("allowed"), c.get("forbidden") or frozenset()
                if (allowed is not None and p.datatype not in allowed) or p.datatype in forbidden:
                    self.err("param-datatype", f"param `{p.name}` is {p.datatype.name}; not supported by {d.name} "
                                               f"on {label}{cfg}{cond}")
            for where, t in tensors:
                rank = len(t.dims)
                if not c.when.holds(operation, t.datatype, rank):
                    continue
                if c.kind == "rank":
                    lo, hi, ranks = c.get("min"), c.get("max"), c.get("ranks")
                    ok = (lo is None or rank >= lo) and (hi is None or rank <= hi) and (ranks is None or rank in ranks)
                    if not ok and c.get("lower_if_leading_one") and lo is not None and rank < lo and t.dims \
                            and t.dims[0] == 1:
                        ok = True
                    if not ok:
                        want = "rank " + "/".join(map(str, sorted(ranks))) if ranks is not None else str(RankLimit(min=lo, max=hi))
                        extra = "; lower ranks only with outermost dimension 1" if c.get("lower_if_leading_one") else ""
                        self.err("rank", f"{where} has rank {rank}; {d.name} supports {want}{extra} on "
                                         f"{label}{cfg}{cond}")
                elif c.kind == "datatype":
                    allowed, forbidden = c.get("allowed"), c.get("forbidden") or frozenset()
                    if (allowed is not None and t.datatype not in allowed) or t.datatype in forbidden:
                        if allowed is not None and not allowed:
                            text = "is not supported"
                        else:
                            text = f"must be {' or '.join(x.name for x in sorted(allowed))}" if allowed is not None \
                                else f"must not be {t.datatype.name}"
                        self.err("datatype", f"{where} is {t.datatype.name}; {d.name} {text} on {label}{cfg}{cond}")
                elif c.kind in ("same_datatype", "same_rank") and not (c.kind == "same_datatype" and plan.rows
                                                                       and not matched):
                    for okind, oi, other in bound.get(c.get("as"), [])[:1]:
                        if c.kind == "same_datatype" and t.datatype != other.datatype:
                            self.err("datatype", f"{where} is {t.datatype.name} but must have the datatype of "
                                                 f"{c.get('as')} ({other.datatype.name})")
                        elif c.kind == "same_rank" and rank != len(other.dims):
                            self.err("rank", f"{where} has rank {rank} but must have the rank of {c.get('as')} "
                                             f"({len(other.dims)})")

    # ------------------------------------------------------------ expressions and encodings

    def _env(self, plan: _Plan, ins: list[QnnTensor | None], outs: list[QnnTensor | None],
             in0_rank: int | None) -> cexpr.Env:
        """The op as constraint expressions see it: params by value (enum params by name), defaults filled in."""
        values: dict[str, Any] = {}
        given = set()
        for p in self.op.params:
            pd = plan.params.get(p.name)
            if pd is None:
                continue
            given.add(p.name)
            v = p.value if isinstance(p, ScalarParam) else p.tensor.data
            if v is not None:
                values[p.name] = _enum_name(pd, v)
        for pd in plan.opdef.params:
            if pd.name not in values and pd.name not in given:
                v = _default_value(pd, in0_rank)
                if v is not _UNKNOWN and not (isinstance(v, tuple) and len(v) == 2 and v[0] == "fill"):
                    values[pd.name] = _enum_name(pd, v)
        entries: dict[str, list[QnnTensor]] = {}
        for defs, tensors in ((plan.opdef.inputs, ins), (plan.opdef.outputs, outs)):
            for t, di in zip(tensors, self._binding(plan, defs, len(tensors))):
                if t is not None:
                    entries.setdefault(defs[di].name, []).append(t)
        dtypes = {p.name: (p.datatype if isinstance(p, ScalarParam) else p.tensor.datatype).name for p in self.op.params}
        return cexpr.Env(ins, outs, values, frozenset(given), {k: tuple(v) for k, v in entries.items()}, dtypes)

    def _report(self, c: Check, code: str, message: str) -> None:
        """An error, or a warning for bullets the documentation words as what the backend expects."""
        if c.get("severity") == "warning":
            self.diags.append(warning(message, subject=self.subject, code=code))
        else:
            self.err(code, message)

    def _expr_holds(self, e: cexpr.Expr | None, env: cexpr.Env) -> bool | None:
        """Whether a condition holds; None when the graph lacks a value it needs (the check does not apply)."""
        if e is None:
            return True
        try:
            return bool(e(env))
        except cexpr.Unknown:
            return None
        except Exception as exc:  # noqa: BLE001 - a faulty expression must not hide the other findings
            self.diags.append(warning(f"constraint `{e.text}` could not be evaluated ({type(exc).__name__}: {exc}); "
                                      "not checked", subject=self.subject, code="constraint-internal"))
            return None

    def _shown(self, exprs: Sequence[cexpr.Expr | None], env: cexpr.Env) -> str:
        """The values the expressions read, for the message."""
        parts: dict[str, None] = {}
        for e in (x for x in exprs if x is not None):
            for n in e.names:
                if n in env.params:
                    parts[f"{n} = {_show(env.params[n])}"] = None
            for slot in e.slots:
                kind, _, i = slot[:-1].partition("[")
                seq = env.inputs if kind == "in" else env.outputs
                if i.isdigit() and int(i) < len(seq) and seq[int(i)] is not None:
                    t = seq[int(i)]
                    values = f" = {_show(t.data)}" if t.data is not None and t.data.size <= 8 else ""
                    parts[f"{slot} `{self.name(kind, int(i), t.name)}` {list(t.dims)} {t.datatype.name}{values}"] = None
                elif ".." in i:
                    parts[f"{len(env.entries.get(slot, ()))} tensors for {slot}"] = None
            if e.uses_n and env.inputs and env.inputs[0] is not None:
                parts[f"N = {len(env.inputs[0].dims)}"] = None
        return "; got " + ", ".join(parts) if parts else ""

    def _expr(self, plan: _Plan, c: Check, env: cexpr.Env, bound: Mapping[str, list[tuple[str, int, QnnTensor]]],
              operation: str | None, cfg: str, cond: str) -> None:
        t = next(iter(bound.get(c.target or "", [])), None)
        dt, rank = (t[2].datatype, len(t[2].dims)) if t else (None, None)
        if not c.when.holds(operation, dt, rank) or not self._expr_holds(c.get("if"), env):
            return
        req: cexpr.Expr = c.get("require")
        if self._expr_holds(req, env) is False:
            where = "QNN" if c.get("_master") else self.v.label
            cond_if = f" when {c.get('if').text}" if c.get("if") is not None else ""
            self._report(c, "constraint", f"{plan.opdef.name} on {where}{cfg} requires {c.get('says')} "
                                   f"({req.text}{cond_if}){cond}{self._shown((req, c.get('if')), env)}")

    def _encoding(self, plan: _Plan, c: Check, env: cexpr.Env, bound: Mapping[str, list[tuple[str, int, QnnTensor]]],
                  operation: str | None, cfg: str, cond: str) -> None:
        if not self._expr_holds(c.get("if"), env):
            return
        label, op = self.v.label, plan.opdef.name
        cond_if = f" when {c.get('if').text}" if c.get("if") is not None else ""
        for kind, i, t in bound.get(c.target or "", []):
            if not c.when.holds(operation, t.datatype, len(t.dims)) or "FIXED_POINT" not in t.datatype.name:
                continue
            where = f"{kind}[{i}] `{self.name(kind, i, t.name)}` ({t.datatype.name})"
            tail = f" on {label}{cfg}{cond}{cond_if}"
            enc = t.encoding if t.encoding is not None and t.encoding.kind != EncodingKind.UNDEFINED else None
            if enc is None:
                if c.get("defined"):
                    self.err("encoding", f"{where} has no quantization encoding; {op} requires a defined encoding"
                                         f"{tail}")
                continue
            problems = []
            kinds, forbidden = c.get("kinds"), c.get("forbidden_kinds") or frozenset()
            if (kinds is not None and enc.kind.name not in kinds) or enc.kind.name in forbidden:
                want = " or ".join(sorted(kinds)) if kinds is not None else f"not {enc.kind.name}"
                problems.append(f"has a {enc.kind.name} encoding; {op} requires {want}")
            if c.get("signed") and not t.datatype.name.startswith("SFIXED"):
                problems.append(f"is unsigned; {op} requires signed (SFIXED_POINT) quantization")
            if c.get("symmetric") and not cexpr.FUNCS["symmetric"](t):
                problems.append(f"is quantized asymmetrically (offsets {_few(enc.offsets)}); {op} requires symmetric "
                                "quantization")
            if "offset" in c.fields and any(o != c.get("offset") for o in enc.offsets):
                problems.append(f"has offset {_few(enc.offsets)}; {op} requires offset {c.get('offset')}")
            if "scale" in c.fields and not all(math.isclose(x, c.get("scale"), rel_tol=1e-6, abs_tol=0.0)
                                               for x in enc.scales):
                problems.append(f"has scale {_few(enc.scales)}; {op} requires scale {c.get('scale'):.9g}")
            if "axis" in c.fields and enc.per_axis and enc.axis is not None:
                r = len(t.dims)
                want = r - 1 if c.get("axis") == "N-1" else c.get("axis") % max(r, 1)
                if enc.axis % max(r, 1) != want:
                    problems.append(f"is quantized per axis {enc.axis}; {op} requires per-axis quantization on "
                                    f"axis {want} (the channel axis)")
            other = c.get("same_as")
            if other:
                for okind, oi, o in bound.get(other, [])[:1]:
                    if not cexpr.FUNCS["same_quant"](t, o):
                        problems.append(f"is quantized differently from {okind}[{oi}] "
                                        f"`{self.name(okind, oi, o.name)}`; {op} requires the same quantization "
                                        f"encoding")
            for text in problems:
                self._report(c, "encoding", f"{where} {text}{tail}")

    # ------------------------------------------------------------ shapes

    def _shapes(self, ins: list[QnnTensor | None], outs: list[QnnTensor | None]) -> None:
        v = self.v
        sigs = tuple(None if t is None else v.sig(t) for t in ins)
        params = {p.name: (p.value if isinstance(p, ScalarParam) else p.tensor.data) for p in self.op.params}
        params = {k: x for k, x in params.items() if x is not None}
        op_type = self.op.type if self.op.package == PACKAGE else f"{self.op.package}:{self.op.type}"
        key = _shape_key(op_type, sigs, params)
        result = v.shape_memo.get(key) if key is not None else None
        if result is None:
            result = self._infer(sigs, params, outs)
            if key is not None:
                v.shape_memo[key] = result
        kind, value = result
        plan = v.plan(self.op)
        if plan is not None and any(c.kind == "same_shape" for c in plan.checks):
            # outputs are left to the shape rule when the op has one (one finding per problem)
            self._same_shapes(plan, ins, outs, outputs=kind == "ok" and value is None)
        if kind == "error":
            self.err("shape", value)
        elif kind == "internal":
            self.diags.append(warning(value, subject=self.subject, code="shape-internal"))
        else:
            for i, (sig, t) in enumerate(zip(value or (), outs)):
                if t is not None and sig is not None and tuple(t.dims) != tuple(sig.shape):
                    self.err("shape", f"out[{i}] `{self.name('out', i, t.name)}` is declared with shape {list(t.dims)} "
                                      f"but its inputs give {list(sig.shape)}")

    def _same_shapes(self, plan: _Plan, ins: list[QnnTensor | None], outs: list[QnnTensor | None],
                     outputs: bool) -> None:
        """`same_shape` checks of the constraints files (shape-dependent, so run with the shape check)."""
        d = plan.opdef
        bound: dict[str, list[tuple[str, int, QnnTensor]]] = {}
        for kind, defs, tensors in (("in", d.inputs, ins), ("out", d.outputs, outs)):
            bind = self._binding(plan, defs, len(tensors))
            for i, (t, di) in enumerate(zip(tensors, bind)):
                if t is not None:
                    bound.setdefault(defs[di].name, []).append((kind, i, t))
        for c in plan.checks:
            if c.kind != "same_shape" or c.config != ALL_CONFIGS:
                continue
            ref = bound.get(c.get("as"), [])[:1]
            for kind, i, t in bound.get(c.target or "", []):
                if kind == "out" and not outputs:
                    continue
                for _, _, other in ref:
                    a, b = tuple(t.dims), tuple(other.dims)
                    if a != b and {a, b} != {(), (1,)}:
                        self.err("shape", f"{kind}[{i}] `{self.name(kind, i, t.name)}` has shape {list(a)} but "
                                          f"must have the shape of {c.get('as')} {list(b)}")

    def _infer(self, sigs: tuple[Any, ...], params: Mapping[str, Any], outs: list[QnnTensor | None]) -> tuple:
        shapes = self.v.shapes
        try:
            entry = self.v.ops.of_package(self.op.type, self.op.package)
            inferred = entry.infer(sigs, params) if entry is not None else None
            if inferred is None and self.op.type == "Reshape" and sigs and sigs[0] is not None and outs \
                    and outs[0] is not None and hasattr(shapes, "check_reshape"):
                shapes.check_reshape(sigs[0], outs[0].dims)
        except shapes.ShapeError as exc:
            return ("error", str(exc))
        except Exception as exc:  # a bug in a shape rule must not hide the other diagnostics
            return ("internal", f"shape inference failed ({type(exc).__name__}: {exc}); shapes not checked")
        return ("ok", tuple(inferred) if inferred is not None else None)


def _shape_key(op_type: str, sigs: tuple[Any, ...], params: Mapping[str, Any]) -> tuple | None:
    """A hashable key for memoising shape inference, or None when params are too big to hash cheaply."""
    items = []
    for k, x in params.items():
        key = value_key(x, max_size=256)
        if key is NO_KEY:
            return None
        items.append((k, key))
    return (op_type, sigs, tuple(items))


def _bound(value: Any, in0_rank: int | None) -> float | None:
    if value == "N":
        return None if in0_rank is None else in0_rank
    if value == "N-1":
        return None if in0_rank is None else in0_rank - 1
    return value


def _few(values: Sequence[Any]) -> str:
    shown = ", ".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in list(values)[:4])
    return shown + (", ..." if len(values) > 4 else "")


def _enum_name(pd: ParamDef, value: Any) -> Any:
    if pd.enum and isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 0 <= value < len(pd.enum):
        return pd.enum[int(value)]
    return value


def _show(value: Any) -> str:
    return repr(value.tolist()) if isinstance(value, np.ndarray) else repr(value)


def _value_problem(c: Check, value: Any, in0_rank: int | None) -> str | None:
    """What is wrong with a param value under a value check (every element of a tensor), or None."""
    if value is None:
        return None
    try:
        arr = np.asarray(value, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        return None
    if arr.size == 0:
        return None
    for key, op, text in (("min", np.less, "must be >= {}"), ("max", np.greater, "must be <= {}"),
                          ("min_exclusive", np.less_equal, "must be > {}"),
                          ("max_exclusive", np.greater_equal, "must be < {}")):
        if key in c.fields:
            b = _bound(c.fields[key], in0_rank)
            if b is not None and bool(np.any(op(arr, float(b)))):
                return text.format(c.fields[key] if b == c.fields[key] else f"{c.fields[key]} = {b:g}")
    if "equal_elements" in c.fields:
        i, j = c.fields["equal_elements"]
        if max(i, j) < arr.size and arr[i] != arr[j]:
            return f"must have elements [{i}] and [{j}] equal"
        return None
    if "equals" in c.fields:
        b = _bound(c.fields["equals"], in0_rank)
        if b is not None and not bool(np.all(arr == float(b))):
            return f"must be {str(b).lower() if isinstance(b, bool) else b}"
    if "one_of" in c.fields and not all(x in c.fields["one_of"] for x in arr.tolist()):
        return f"must be one of {sorted(c.fields['one_of'])}"
    if "not_one_of" in c.fields and any(x in c.fields["not_one_of"] for x in arr.tolist()):
        return f"must not be {sorted(c.fields['not_one_of'])}"
    return None


def _rule_matches(rule: StaticRule, t: QnnTensor) -> bool:
    if rule.datatype is not None and t.datatype != rule.datatype:
        return False
    if rule.encoding is not None and (t.encoding is None or t.encoding.kind.name != rule.encoding):
        return False
    return True


def _match(plan: _Plan, key: tuple, values: Mapping[str, list[DataType]], v: Context) -> tuple:
    """Configs of the rows every value fits; when none fits, the diagnostic text naming the closest rows."""
    matched: set[str] = set()
    scored = []
    for row in plan.rows:
        bad = [name for name, allowed in row.checks if any(dt not in allowed for dt in values.get(name, ()))]
        if not bad:
            matched.add(row.config)
        elif not matched:
            scored.append((len(bad), row, bad))
    if matched:
        return frozenset(matched), None
    best = min((s for s, _, _ in scored), default=math.inf)
    closest = [(row, bad) for s, row, bad in scored if s == best][:_MAX_NOTES]
    have = ", ".join(f"{k}={'/'.join(dt.name for dt in dict.fromkeys(x))}" for k, x in key)
    notes = tuple(Note(f"closest {row.config} row: " + "  ".join(
        f"{n}={'|'.join(dt.name for dt in sorted(dts))}" for n, dts in row.checks if n in values)
        + f" (differs at {', '.join(bad)})") for row, bad in closest)
    return frozenset(), (f"datatypes {have} match no allowed combination on {v.label}",
                         f"see `qlower opdefs {plan.opdef.name} --backend {v.backend}`", notes)


def datatypes_allowed(registry: OpDefRegistry, op_type: str, backend: str, ins: Sequence[DataType | None],
                      outs: Sequence[DataType | None]) -> bool:
    """Whether some datatype row of `op_type` on `backend` takes these input and output datatypes.

    Only the datatype rows are consulted (params, ranks and shapes are not): a quick question for
    passes that choose datatypes, such as computing in a wider type behind Casts.
    """
    opdef = registry.op(op_type)
    if opdef is None:
        return False
    plan = _plan(registry, opdef, backend)
    if not plan.supported:
        return False
    if not plan.rows:
        return True
    values: dict[str, list[DataType]] = {}
    for defs, dts in ((opdef.inputs, ins), (opdef.outputs, outs)):
        for dt, di in zip(dts, _bind(defs, len(dts))):
            if dt is not None:
                values.setdefault(defs[di].name, []).append(dt)
    return any(all(dt in allowed for name, allowed in row.checks for dt in values.get(name, ())) for row in plan.rows)
