"""`qlower opdefs`: what a QNN op accepts, in words, from the op-definition registry."""

from __future__ import annotations

from collections.abc import Iterable

from qlower.diagnostics import QlowerError, did_you_mean, error
from qlower.qnn.constraints import Check
from qlower.qnn.datatypes import DataType
from qlower.qnn.opdef import ALL_CONFIGS, QNN_PACKAGE, IODef, OpDef, OpDefRegistry, ParamDef, unknown_op


def _dts(dts: Iterable[DataType], backend_specific: bool = False) -> str:
    names = [dt.name for dt in dts] + (["backend specific"] if backend_specific else [])
    return ", ".join(names) or "backend specific"


def _io_line(io: IODef) -> str:
    bits = ["mandatory" if io.mandatory else "optional"]
    if io.repeated:
        bits.append(f"repeated up to {io.max_repeat}" if io.max_repeat else "repeated")
    bits.append(_dts(io.datatypes, io.backend_specific and bool(io.datatypes)))
    bits.append(io.rank if io.rank != "ND" else "any rank")
    bits.extend(str(r) for r in io.rank_limits)
    if io.is_static:
        bits.append("static")
    if io.default:
        bits.append(f"default {io.default}")
    return f"  {io.name:<12} " + "; ".join(bits)


def _param_line(p: ParamDef) -> str:
    kind = "scalar" if p.is_scalar else ("tensor" if p.rank == "ND" else f"{p.rank} tensor")
    dtype = _dts(p.datatypes or ((p.datatype,) if p.datatype else ()))
    bits = ["mandatory" if p.mandatory else "optional", f"{dtype} {kind}"]
    if p.default is not None:
        bits.append(f"default {p.default}")
    if p.enum:
        bits.append("enum " + ", ".join(f"{n}={i}" for i, n in enumerate(p.enum)))
    return f"  {p.name:<12} " + "; ".join(bits)


def _range(lo: int, hi: int | None) -> str:
    return str(lo) if lo == hi else (f"{lo}+" if hi is None else f"{lo}..{hi}")


def describe_op(registry: OpDefRegistry, d: OpDef, backend: str | None) -> str:
    prefix = "qnn" if d.package == QNN_PACKAGE else d.package
    lines = [f"{prefix}.{d.name}  (package {d.package})",
             f"inputs ({_range(*d.input_count_range())}):", *map(_io_line, d.inputs),
             f"outputs ({_range(*d.output_count_range())}):", *map(_io_line, d.outputs)]
    lines += ["params:", *map(_param_line, d.params)] if d.params else ["params: none"]
    marks = [f"{b.upper()} {'yes' if registry.supported(d.name, b, d.package) else 'no'}" for b in registry.backends]
    lines.append("support: " + ", ".join(marks))
    if backend is not None:
        lines.extend(_backend_lines(registry, d, backend))
    return "\n".join(lines)


def _backend_lines(registry: OpDefRegistry, d: OpDef, backend: str) -> list[str]:
    name = backend.upper()
    if not registry.supported(d.name, backend, d.package):
        return [f"on {name}: not supported"]
    supp = registry.supplement(d.name, backend, d.package)
    if supp is None:
        return [f"on {name}: supported, no backend-specific restrictions"]
    lines = [f"on {name}:"]
    for t in supp.targets:
        bits = [_dts(t.datatypes)] if t.datatypes else []
        bits += [str(r) for r in t.rank_limits]
        bits += [f"only default ({c})" if c != ALL_CONFIGS else "only default" for c in t.only_default]
        for s in t.static:
            cond = " and ".join(x for x in (s.datatype and s.datatype.name, s.encoding and f"encoding {s.encoding}")
                                if x)
            text = f"static if {cond}" if cond else "static"
            bits.append(text if s.config == ALL_CONFIGS else f"{text} ({s.config})")
        lines.append(f"  {t.name:<12} " + "; ".join(bits))
    if supp.rows:
        lines.append(f"  datatype combinations ({len(supp.rows)}; one row must match all listed entries):")
        for row in supp.rows:
            cells = [f"{n}={'|'.join(dt.name for dt in sorted(dts))}" for n, dts in row.entries]
            lines.append(f"    {row.config:<7} " + "  ".join(cells))
    checks = registry.checks(d.name, backend, d.package)
    if checks:
        lines.append(f"  documented constraints ({len(checks)} checks; master ones included):")
        lines += [f"    {c.config:<7} {check_text(c)}" for c in checks]
    return lines


def check_text(c: Check) -> str:
    """One constraints-file check in words, e.g. `in[0]: rank 2..5 (operation SQRT)`."""
    fields = {k: v for k, v in c.fields.items()}
    if c.kind == "rank":
        ranks = fields.get("ranks")
        lo, hi = fields.get("min"), fields.get("max")
        what = ("rank " + "/".join(map(str, sorted(ranks)))) if ranks is not None else (
            f"rank {lo}" if lo is not None and lo == hi else
            f"rank {'' if lo is None else lo}..{'' if hi is None else hi}")
        if fields.get("lower_if_leading_one"):
            what += " (lower rank only with outermost dimension 1)"
    elif c.kind in ("datatype", "operation"):
        allowed, forbidden = fields.get("allowed"), fields.get("forbidden")
        name = (lambda x: x.name) if c.kind == "datatype" else str
        what = (f"{c.kind} not supported" if allowed is not None and not allowed else
                f"{c.kind} one of " + "/".join(sorted(map(name, allowed))) if allowed is not None else
                f"{c.kind} not " + "/".join(sorted(map(name, forbidden or ()))))
    elif c.kind == "count":
        what = f"at least {fields.get('min')} tensors"
    elif c.kind == "value":
        what = "value " + ", ".join(f"{k} {v}" for k, v in sorted(fields.items()))
    elif c.kind in ("same_datatype", "same_rank", "same_shape"):
        what = f"{c.kind.replace('_', ' ')} as {fields.get('as')}"
    else:
        what = c.kind.replace("_", " ") + (f" (encoding {fields['encoding']})" if fields.get("encoding") else "")
    when = f" (when {c.when})" if str(c.when) else ""
    return f"{c.target + ': ' if c.target else ''}{what}{when}"


def list_ops(registry: OpDefRegistry, backend: str | None = None) -> str:
    """One line per op with a support mark per backend; `backend` keeps only ops it supports."""
    backends = registry.backends
    rows = []
    for pkg, name in sorted(registry.ops, key=lambda k: (k[0] != QNN_PACKAGE, k)):
        if backend is not None and not registry.supported(name, backend, pkg):
            continue
        label = name if pkg == QNN_PACKAGE else f"{pkg}.{name}"
        rows.append((label, ["x" if registry.supported(name, b, pkg) else "-" for b in backends]))
    width = max([len(r[0]) for r in rows] + [2])
    head = f"{'op':<{width}}  " + " ".join(f"{b:<4}" for b in backends)
    body = [(f"{label:<{width}}  " + " ".join(f"{m:<4}" for m in marks)).rstrip() for label, marks in rows]
    return "\n".join([head.rstrip(), *body])


def describe(registry: OpDefRegistry, op: str | None = None, backend: str | None = None) -> str:
    """What an op accepts; without `op`, every op with its per-backend support marks."""
    if backend is not None and backend.lower() not in registry.backends:
        raise QlowerError(error(f"unknown backend `{backend}`", hint=did_you_mean(backend.lower(), registry.backends),
                                code="unknown-backend"))
    b = backend.lower() if backend else None
    if op is None:
        return list_ops(registry, b)
    d = registry.op(op)
    if d is None:
        raise QlowerError(unknown_op(op, registry.names()))
    return describe_op(registry, d, b)
