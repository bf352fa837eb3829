"""qlower's constraints file: what QNN's OpDef schema cannot say, keyed by op, backend and config.

The file (``opdefs/constraints.json``; schema ``qlower-opdef-constraints/1``, described in
``opdefs/README.md``) holds per op and backend (``all`` = the master definition) the datatype
combinations and one item per documented constraint: either structured checks or the reason it is
not modelled. ``load_constraints`` checks the whole structure and reports every problem with its
JSON path, so a hand-written file for a custom op package fails with a clear message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from qlower.diagnostics import Diagnostic, error
from qlower.qnn import cexpr
from qlower.qnn.datatypes import DataType
from qlower.qnn.model import EncodingKind

SCHEMA = "qlower-opdef-constraints/1"
ALL_BACKENDS = "all"
KINDS = {
    # kind: (required fields, optional fields)
    "rank": ((), ("min", "max", "ranks", "lower_if_leading_one")),
    "datatype": ((), ("allowed", "forbidden")),
    "operation": ((), ("allowed", "forbidden")),
    "value": ((), ("min", "max", "min_exclusive", "max_exclusive", "equals", "one_of", "not_one_of",
                   "equal_elements")),
    "count": (("min",), ()),
    "static": ((), ("encoding",)),
    "only_default": ((), ()),
    "absent": ((), ()),
    "required": ((), ()),
    "same_datatype": (("as",), ()),
    "same_rank": (("as",), ()),
    "same_shape": (("as",), ()),
    # a relation over the op's tensors and params (qlower.qnn.cexpr), under an optional condition
    "expr": (("require", "says"), ("if", "severity")),
    # a quantization-encoding requirement on one tensor
    "encoding": ((), ("kinds", "forbidden_kinds", "symmetric", "signed", "offset", "scale", "axis", "same_as",
                      "defined", "if", "severity")),
}
_NEEDS_TARGET = set(KINDS) - {"operation", "expr"}
ENCODING_KINDS = tuple(k.name for k in EncodingKind if k != EncodingKind.UNDEFINED)
WHEN_KEYS = ("operations", "except_operations", "datatypes", "except_datatypes", "min_rank", "max_rank")
_MAX_BYTES = 64 * 1024 * 1024


@attrs.frozen
class When:
    """Conditions under which a check applies: the op's `operation` param, the target's datatype and rank."""

    operations: frozenset[str] | None = None
    except_operations: frozenset[str] = frozenset()
    datatypes: frozenset[DataType] | None = None
    except_datatypes: frozenset[DataType] = frozenset()
    min_rank: int | None = None
    max_rank: int | None = None

    def holds(self, operation: str | None, datatype: DataType | None, rank: int | None) -> bool:
        if self.operations is not None and operation not in self.operations:
            return False
        if operation is not None and operation in self.except_operations:
            return False
        if self.datatypes is not None and datatype not in self.datatypes:
            return False
        if datatype is not None and datatype in self.except_datatypes:
            return False
        if rank is not None and ((self.min_rank is not None and rank < self.min_rank)
                                 or (self.max_rank is not None and rank > self.max_rank)):
            return False
        return True

    def __str__(self) -> str:
        parts = []
        if self.operations is not None:
            parts.append("operation " + "/".join(sorted(self.operations)))
        if self.except_operations:
            parts.append("operation not " + "/".join(sorted(self.except_operations)))
        if self.datatypes is not None:
            parts.append("datatype " + "/".join(sorted(d.name for d in self.datatypes)))
        if self.except_datatypes:
            parts.append("datatype not " + "/".join(sorted(d.name for d in self.except_datatypes)))
        if self.min_rank is not None or self.max_rank is not None:
            parts.append(f"rank {self.min_rank or 0}..{'' if self.max_rank is None else self.max_rank}")
        return ", ".join(parts)


@attrs.frozen
class Check:
    """One structured check of a documented constraint."""

    kind: str
    config: str
    target: str | None
    fields: Mapping[str, Any] = attrs.field(hash=False, eq=False)
    when: When = When()
    ref: str = ""
    except_backends: frozenset[str] = frozenset()

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)


@attrs.frozen
class ConstraintItem:
    """One documented constraint: its checks, or why it is not modelled."""

    ref: str
    config: str
    doc_target: str
    checks: tuple[Check, ...] = ()
    not_modelled: str | None = None
    section: str = "constraint"
    partly_not_modelled: str | None = None


@attrs.frozen
class OpConstraints:
    rows: tuple[tuple[str, tuple[tuple[str, frozenset[DataType]], ...]], ...] = ()
    items: tuple[ConstraintItem, ...] = ()

    @property
    def checks(self) -> tuple[Check, ...]:
        return tuple(c for item in self.items for c in item.checks)


@attrs.frozen
class ConstraintSet:
    package: str
    reasons: Mapping[str, str] = attrs.field(hash=False)
    ops: Mapping[tuple[str, str], OpConstraints] = attrs.field(hash=False)  # (op, backend) -> constraints


class _Checker:
    def __init__(self, where: str) -> None:
        self.where = where
        self.diags: list[Diagnostic] = []

    def fail(self, path: str, message: str) -> None:
        self.diags.append(error(f"{path}: {message}", subject=self.where, code="constraints-file"))

    def obj(self, value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(path, f"expected an object, got {type(value).__name__}")
            return {}
        return value

    def lst(self, value: Any, path: str) -> list[Any]:
        if not isinstance(value, list):
            self.fail(path, f"expected a list, got {type(value).__name__}")
            return []
        return value

    def string(self, value: Any, path: str) -> str:
        if not isinstance(value, str):
            self.fail(path, f"expected a string, got {type(value).__name__}")
            return ""
        return value

    def dtype(self, value: Any, path: str) -> DataType | None:
        try:
            return DataType.parse(self.string(value, path))
        except (KeyError, ValueError):
            self.fail(path, f"unknown datatype {value!r}")
            return None

    def dtypes(self, value: Any, path: str) -> frozenset[DataType]:
        return frozenset(d for i, v in enumerate(self.lst(value, path)) if (d := self.dtype(v, f"{path}[{i}]")))

    def integer(self, value: Any, path: str) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"expected an integer, got {value!r}")
            return None
        return value

    def when(self, value: Any, path: str) -> When:
        w = self.obj(value, path)
        for key in sorted(set(w) - set(WHEN_KEYS)):
            self.fail(f"{path}.{key}", f"unknown condition (expected one of {', '.join(WHEN_KEYS)})")
        ops = lambda k: frozenset(self.string(x, f"{path}.{k}") for x in self.lst(w[k], f"{path}.{k}"))  # noqa: E731
        return When(
            operations=ops("operations") if "operations" in w else None,
            except_operations=ops("except_operations") if "except_operations" in w else frozenset(),
            datatypes=self.dtypes(w["datatypes"], f"{path}.datatypes") if "datatypes" in w else None,
            except_datatypes=self.dtypes(w["except_datatypes"], f"{path}.except_datatypes")
            if "except_datatypes" in w else frozenset(),
            min_rank=self.integer(w["min_rank"], f"{path}.min_rank") if "min_rank" in w else None,
            max_rank=self.integer(w["max_rank"], f"{path}.max_rank") if "max_rank" in w else None,
        )

    def check(self, value: Any, path: str, config: str, ref: str, skip: frozenset[str]) -> Check | None:
        c = self.obj(value, path)
        kind = c.get("kind")
        if kind not in KINDS:
            self.fail(f"{path}.kind", f"unknown check kind {kind!r} (expected one of {', '.join(KINDS)})")
            return None
        required, optional = KINDS[kind]
        allowed = set(required) | set(optional) | {"kind", "target", "when"}
        for key in sorted(set(c) - allowed):
            self.fail(f"{path}.{key}", f"unknown field for a {kind} check")
        for key in required:
            if key not in c:
                self.fail(path, f"a {kind} check needs `{key}`")
        target = c.get("target")
        if kind in _NEEDS_TARGET and not isinstance(target, str):
            self.fail(path, f"a {kind} check needs a `target` (an input, output or param name)")
        fields = {k: v for k, v in c.items() if k not in ("kind", "target", "when")}
        for key in ("allowed", "forbidden"):
            if key in fields:
                if kind == "datatype":
                    fields[key] = self.dtypes(fields[key], f"{path}.{key}")
                else:
                    fields[key] = frozenset(self.string(x, f"{path}.{key}") for x in self.lst(fields[key], f"{path}.{key}"))
        for key in ("min", "max"):
            if kind == "rank" and key in fields:
                self.integer(fields[key], f"{path}.{key}")
        for key in ("min", "max", "min_exclusive", "max_exclusive", "equals"):
            v = fields.get(key)
            if kind == "value" and key in fields and not (isinstance(v, (int, float, bool))
                                                           or (isinstance(v, str) and v in ("N", "N-1"))):
                self.fail(f"{path}.{key}", f"expected a number, true/false, \"N\" or \"N-1\", got {v!r}")
        for key in ("require", "if"):
            if key in fields:
                try:
                    fields[key] = cexpr.parse(fields[key])
                except cexpr.ExprError as exc:
                    self.fail(f"{path}.{key}", str(exc))
                    fields.pop(key)
        if fields.get("severity", "error") not in ("error", "warning"):
            self.fail(f"{path}.severity", f"expected \"error\" or \"warning\", got {fields['severity']!r}")
        if kind == "expr" and "says" in fields:
            self.string(fields["says"], f"{path}.says")
        if kind == "encoding":
            for key in ("kinds", "forbidden_kinds"):
                for x in self.lst(fields.get(key, []), f"{path}.{key}"):
                    if x not in ENCODING_KINDS:
                        self.fail(f"{path}.{key}", f"unknown encoding kind {x!r} (expected one of "
                                                   f"{', '.join(ENCODING_KINDS)})")
                if key in fields:
                    fields[key] = frozenset(fields[key])
            for key in ("symmetric", "signed", "defined"):
                if key in fields and not isinstance(fields[key], bool):
                    self.fail(f"{path}.{key}", f"expected true or false, got {fields[key]!r}")
            for key in ("offset", "scale"):
                v = fields.get(key)
                if key in fields and (isinstance(v, bool) or not isinstance(v, (int, float))):
                    self.fail(f"{path}.{key}", f"expected a number, got {v!r}")
            v = fields.get("axis")
            if "axis" in fields and not (v == "N-1" or (isinstance(v, int) and not isinstance(v, bool))):
                self.fail(f"{path}.axis", f"expected an integer or \"N-1\" (the target's last axis), got {v!r}")
            if "same_as" in fields:
                self.string(fields["same_as"], f"{path}.same_as")
        if "ranks" in fields:
            fields["ranks"] = frozenset(self.integer(x, f"{path}.ranks") for x in self.lst(fields["ranks"], f"{path}.ranks"))
        when = self.when(c["when"], f"{path}.when") if "when" in c else When()
        return Check(kind, config, target, fields, when, ref, skip)


def parse_constraints(data: Any, where: str) -> tuple[ConstraintSet | None, list[Diagnostic]]:
    """A constraint set from decoded JSON, or the problems found (each with its JSON path)."""
    ck = _Checker(where)
    root = ck.obj(data, "$")
    if root.get("schema") != SCHEMA:
        ck.fail("$.schema", f"expected {SCHEMA!r}, got {root.get('schema')!r}")
        return None, ck.diags
    package = ck.string(root.get("package"), "$.package")
    reasons = ck.obj(root.get("not_modelled_reasons", {}), "$.not_modelled_reasons")
    ops: dict[tuple[str, str], OpConstraints] = {}
    for op, per in ck.obj(root.get("ops"), "$.ops").items():
        for backend, entry in ck.obj(per, f"$.ops.{op}").items():
            path = f"$.ops.{op}.{backend}"
            entry = ck.obj(entry, path)
            for key in sorted(set(entry) - {"rows", "constraints"}):
                ck.fail(f"{path}.{key}", "unknown key (expected rows, constraints)")
            rows = []
            for i, row in enumerate(ck.lst(entry.get("rows", []), f"{path}.rows")):
                row = ck.obj(row, f"{path}.rows[{i}]")
                dts = ck.obj(row.get("datatypes"), f"{path}.rows[{i}].datatypes")
                rows.append((ck.string(row.get("config", "All"), f"{path}.rows[{i}].config"),
                             tuple((n, ck.dtypes(v, f"{path}.rows[{i}].datatypes.{n}")) for n, v in dts.items())))
            items = []
            for i, it in enumerate(ck.lst(entry.get("constraints", []), f"{path}.constraints")):
                ipath = f"{path}.constraints[{i}]"
                it = ck.obj(it, ipath)
                config = ck.string(it.get("config", "All"), f"{ipath}.config")
                ref = ck.string(it.get("ref", ""), f"{ipath}.ref")
                skip = frozenset(it.get("except_backends", []))
                if ("checks" in it) == ("not_modelled" in it):
                    ck.fail(ipath, "needs exactly one of `checks` and `not_modelled`")
                    continue
                if "not_modelled" in it:
                    why = ck.string(it["not_modelled"], f"{ipath}.not_modelled")
                    if why not in reasons:
                        ck.fail(f"{ipath}.not_modelled", f"reason {why!r} is not in $.not_modelled_reasons")
                    items.append(ConstraintItem(ref, config, it.get("doc_target", ""), (), why,
                                                it.get("section", "constraint")))
                    continue
                partly = it.get("partly_not_modelled")
                if partly is not None and partly not in reasons:
                    ck.fail(f"{ipath}.partly_not_modelled", f"reason {partly!r} is not in $.not_modelled_reasons")
                checks = [ck.check(c, f"{ipath}.checks[{j}]", config, ref, skip)
                          for j, c in enumerate(ck.lst(it["checks"], f"{ipath}.checks"))]
                if not checks:
                    ck.fail(f"{ipath}.checks", "is empty")
                items.append(ConstraintItem(ref, config, it.get("doc_target", ""), tuple(c for c in checks if c),
                                            None, it.get("section", "constraint"), partly))
            ops[(op, backend.lower())] = OpConstraints(tuple(rows), tuple(items))
    if ck.diags:
        return None, ck.diags
    return ConstraintSet(package, dict(reasons), ops), []


def load_constraints(path: Path) -> tuple[ConstraintSet | None, list[Diagnostic]]:
    where = str(path)
    if path.exists() and not path.is_file():  # (a FIFO would block the read forever)
        return None, [error("cannot read constraints file: not a regular file", subject=where,
                            code="constraints-file")]
    try:
        with path.open("rb") as fh:
            raw = fh.read(_MAX_BYTES + 1)
    except OSError as exc:
        return None, [error(f"cannot read constraints file: {exc.strerror or exc}", subject=where,
                            code="constraints-file")]
    if len(raw) > _MAX_BYTES:
        return None, [error("constraints file is larger than 64 MiB", subject=where, code="constraints-file")]
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return None, [error(f"not valid JSON: not UTF-8 (byte {exc.start})", subject=where, code="constraints-file")]
    except ValueError as exc:
        return None, [error(f"not valid JSON: {exc}", subject=where, code="constraints-file")]
    except RecursionError:
        return None, [error("not valid JSON: nested too deeply", subject=where, code="constraints-file")]
    return parse_constraints(data, where)
