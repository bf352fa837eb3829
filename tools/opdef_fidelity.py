"""Compare qlower's op definitions and constraints with the QNN SDK's OpDef HTML documentation.

    python tools/opdef_fidelity.py SDK_DOCS_DIR [--verbose]

SDK_DOCS_DIR is the SDK's ``docs/QNN/OpDef`` folder. For every op and backend it compares what
qlower ships (``qlower/qnn/opdefs``: the OpDef XML and ``constraints.json``) with the documentation:
the ops (master and per backend), inputs/outputs/params (mandatory, datatype, default), the rows
of the Datatypes tables, and every Constraints/Support bullet (present in the constraints file,
and modelled with the checks its text gives today). Each difference is printed with its kind;
differences qlower makes on purpose are listed as *explained* with the reason, the others as
*unexplained*. Exit status: 0 when nothing is unexplained, 1 otherwise, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS))
sys.path.insert(0, str(TOOLS.parent))

import classify_constraints  # noqa: E402
import qnn_docs  # noqa: E402

from qlower.diagnostics import QlowerError  # noqa: E402
from qlower.qnn.opdef import BACKENDS, SHIPPED_DIR, OpDefRegistry  # noqa: E402

# Differences qlower makes on purpose, by kind (see qlower/qnn/opdefs/README.md).
EXPLAINED = {
    "default-added": "optional param without a documented default value: QNN's translator needs a <Default>, "
                     "so the documented phrase (or per-operation defaults) is written",
    "datatype-column-unknown": "the supplement's Datatypes table has a column for an input the master definition "
                               "does not have; qlower drops that column",
    "contradiction": "the documentation contradicts itself here; opdefs/contradictions.json gives the evidence and "
                     "what qlower checks",
}
# check kinds written by hand from a bullet's text (expressions, encodings): the classifier has no patterns for them
HAND_KINDS = ("expr", "encoding")


@attrs.frozen
class Difference:
    op: str
    backend: str  # "master" or a backend
    kind: str
    detail: str
    explained: str | None = None

    def __str__(self) -> str:
        tag = "explained" if self.explained else "UNEXPLAINED"
        why = f" [{self.explained}]" if self.explained else ""
        return f"{tag:11} {self.backend:6} {self.op:28} {self.kind}: {self.detail}{why}"


def _norm_default(text: str | None, datatype: str | None) -> str | None:
    if text is None:
        return None
    t = re.sub(r"\s+", "", text).lower()
    if t in ("", "none"):
        return None
    if datatype == "QNN_DATATYPE_BOOL_8" and t in ("0", "1"):
        return "true" if t == "1" else "false"
    t = re.sub(r"\[(\S+?),ellipsis,\1\]", r"{\1,..,\1}", t)
    t = t.replace("…", "..").rstrip(".")
    return t


def _dts(text: str) -> frozenset[str]:
    return frozenset(p.strip() for p in text.split(",") if p.strip().startswith("QNN_DATATYPE_"))


def _entry_name(name: str) -> str:
    return name.replace("…", "..").replace("]..in[", "..").replace("]..out[", "..")


class Fidelity:
    def __init__(self, docs: Path, registry: OpDefRegistry, constraints: Mapping[str, Any]) -> None:
        self.docs = docs
        self.reg = registry
        self.cons = constraints
        self.diffs: list[Difference] = []
        self.stats: Counter[str] = Counter()
        self._reported: set[tuple[str, str]] = set()

    @functools.cached_property
    def contradictions(self) -> set[tuple[str, str, str]]:
        data = json.loads((SHIPPED_DIR / "contradictions.json").read_text(encoding="utf-8"))
        return {(op, x["backend"], ref) for x in data["contradictions"] for op in x["op"].split() for ref in x["refs"]}

    def add(self, op: str, backend: str, kind: str, detail: str, explained: str | None = None) -> None:
        self.diffs.append(Difference(op, backend, kind, detail, explained))

    # ------------------------------------------------------------ master

    def master(self) -> None:
        doc = qnn_docs.read_master(self.docs / qnn_docs.MASTER_PAGE)
        ours = set(self.reg.names("qti.aisw"))
        for op in sorted(set(doc) - ours):
            self.add(op, "master", "op-missing", "documented op not in master.xml")
        for op in sorted(ours - set(doc)):
            self.add(op, "master", "op-extra", "op in master.xml is not documented")
        for op in sorted(set(doc) & ours):
            self.stats["ops compared"] += 1
            d = self.reg.op(op)
            for group, ios in (("inputs", d.inputs), ("outputs", d.outputs)):
                documented = {_entry_name(n): e for n, e in doc[op][group].items()}
                mine = {io.name: io for io in ios}
                for n in sorted(set(documented) - set(mine)):
                    self.add(op, "master", f"{group[:-1]}-missing", n)
                for n in sorted(set(mine) - set(documented)):
                    self.add(op, "master", f"{group[:-1]}-extra", n)
                for n in sorted(set(mine) & set(documented)):
                    self.stats[f"{group} compared"] += 1
                    want = documented[n].get("mandatory", "").lower() == "true"
                    if want != mine[n].mandatory:
                        self.add(op, "master", "mandatory", f"{n}: documented {want}, qlower {mine[n].mandatory}")
            documented = doc[op]["parameters"]
            mine = {p.name: p for p in d.params}
            for n in sorted(set(documented) - set(mine)):
                self.add(op, "master", "param-missing", n)
            for n in sorted(set(mine) - set(documented)):
                self.add(op, "master", "param-extra", n)
            for n in sorted(set(mine) & set(documented)):
                self.stats["params compared"] += 1
                e, p = documented[n], mine[n]
                want = e.get("mandatory", "").lower() == "true"
                if want != p.mandatory:
                    self.add(op, "master", "mandatory", f"param {n}: documented {want}, qlower {p.mandatory}")
                dt = e.get("data type", "")
                if dt.startswith("QNN_DATATYPE_") and p.datatype is not None and p.datatype.qnn_name != dt:
                    self.add(op, "master", "param-datatype", f"{n}: documented {dt}, qlower {p.datatype.qnn_name}")
                theirs = _norm_default(e.get("default"), dt)
                own = _norm_default(p.default, dt)
                if theirs != own:
                    if p.enum and theirs is not None and own is not None and self._enum_default(p, theirs, own):
                        continue
                    if theirs is None and own is not None and not p.mandatory:
                        self.add(op, "master", "default-added", f"{n}: qlower {p.default!r}", EXPLAINED["default-added"])
                    else:
                        self.add(op, "master", "default", f"{n}: documented {e.get('default')!r}, qlower {p.default!r}")

    @staticmethod
    def _enum_default(p: Any, theirs: str, own: str) -> bool:
        """Enum defaults are documented by name or value; equal when they denote the same value."""
        names = [x.lower() for x in p.enum]
        def value(t: str) -> int | None:
            t = re.sub(r"^.*_", "", t) if t not in names else t
            return int(t) if t.isdigit() else (names.index(t) if t in names else None)
        return value(theirs) is not None and value(theirs) == value(own)

    # ------------------------------------------------------------ backends

    def backends(self) -> None:
        for backend, page in qnn_docs.BACKEND_PAGES.items():
            if not (self.docs / page).is_file():
                self.add("-", backend, "page-missing", f"{page} is not in {self.docs}")
                continue
            doc = qnn_docs.read_supplement(self.docs / page, backend)
            bs = self.reg.backend_support(backend)
            supported = set(bs.supported) if bs else set()
            for op in sorted(set(doc) - supported):
                self.add(op, backend, "op-not-supported", "documented in the supplement, not in SupportedOps")
            for op in sorted(supported - set(doc)):
                self.stats[f"{backend} ops without supplement section"] += 1
            for op in sorted(set(doc) & supported):
                self.stats[f"{backend} ops compared"] += 1
                self.rows(op, backend, doc[op]["datatypes"])
                self.bullets(op, backend, doc[op]["constraints"] + doc[op]["support"])

    def rows(self, op: str, backend: str, table: list[dict[str, str]]) -> None:
        entry = self.cons["ops"].get(op, {}).get(backend, {})
        mine = Counter()
        for row in entry.get("rows", []):
            mine[(row["config"], frozenset((k, frozenset(v)) for k, v in row["datatypes"].items()))] += 1
        theirs = Counter()
        d = self.reg.op(op)
        names = {io.name for io in d.inputs + d.outputs} | {p.name for p in d.params}
        config = "All"
        for row in table:
            config = row.get("Configuration") or config
            ents = []
            for col, text in row.items():
                if col == "Configuration":
                    continue
                dts = _dts(text)
                if not dts:
                    continue
                name = self._target(d, _entry_name(col), names)
                if name not in names:
                    if (op, col) not in self._reported:
                        self._reported.add((op, col))
                        self.add(op, backend, "datatype-column-unknown", col, EXPLAINED["datatype-column-unknown"])
                    continue
                ents.append((name, dts))
            merged: dict[str, set[str]] = {}
            for n, dts in ents:
                merged.setdefault(n, set()).update(dts)
            if merged:
                theirs[(config, frozenset((k, frozenset(v)) for k, v in merged.items()))] += 1
        self.stats["datatype rows compared"] += sum(theirs.values())
        for key in sorted(set(theirs) - set(mine), key=str):
            self.add(op, backend, "datatype-row-missing", _show_row(key))
        for key in sorted(set(mine) - set(theirs), key=str):
            self.add(op, backend, "datatype-row-extra", _show_row(key))

    @staticmethod
    def _target(d: Any, col: str, names: set[str]) -> str:
        if col in names:
            return col
        m = re.fullmatch(r"(in|out)\[(\d+)\]", col)
        if m:
            i = int(m.group(2))
            for io in (d.inputs if m.group(1) == "in" else d.outputs):
                r = re.fullmatch(r"(?:in|out)\[(\d+)(?:\.\.(\w+))?\]", io.name)
                if r and int(r.group(1)) <= i and (r.group(2) is None and int(r.group(1)) == i
                                                    or r.group(2) is not None and (not r.group(2).isdigit()
                                                                                   or i <= int(r.group(2)))):
                    return io.name
        return col

    def bullets(self, op: str, backend: str, bullets: Iterable[Any]) -> None:
        items = self.cons["ops"].get(op, {}).get(backend, {}).get("constraints", [])
        self._compare_bullets(op, backend, list(bullets), items)

    def master_bullets(self) -> None:
        doc = qnn_docs.read_master(self.docs / qnn_docs.MASTER_PAGE)
        by_op: dict[str, list[Any]] = {}
        for c in qnn_docs.master_constraints(doc):
            by_op.setdefault(c.op, []).append(c)
        for op, bullets in sorted(by_op.items()):
            items = self.cons["ops"].get(op, {}).get("all", {}).get("constraints", [])
            self._compare_bullets(op, "master", bullets, items)

    def _compare_bullets(self, op: str, backend: str, bullets: list[Any], items: list[dict[str, Any]]) -> None:
        by_ref: dict[str, list[dict[str, Any]]] = {}
        for it in items:
            by_ref.setdefault(it["ref"], []).append(it)
        enums = {p.name: p.enum for p in self.reg.op(op).params if p.enum}
        from qlower.qnn.datatypes import DataType
        classifier = classify_constraints.Classifier(op, enums, [d.qnn_name for d in DataType])
        for c in bullets:
            self.stats["constraints compared"] += 1
            found = by_ref.get(c.digest)
            if not found:
                self.add(op, backend, "constraint-missing", f"{c.config} {c.target}: {c.text[:80]!r}")
                continue
            it = found.pop(0)
            if "not_modelled" in it:
                self.stats[f"not modelled ({backend if backend != 'master' else 'all'})"] += 1
                self.stats[f"not modelled: {it['not_modelled']} ({backend if backend != 'master' else 'all'})"] += 1
                continue
            be = backend if backend != 'master' else 'all'
            self.stats[f"modelled ({be})"] += 1
            checks, reason = classifier.classify(c.text, c.target, c.kind)
            hand = [ch for ch in it["checks"] if ch["kind"] in HAND_KINDS]
            if hand:
                # the hand-written part replaces what the classifier leaves unmodelled (its reason is the count's key)
                self.stats[f"modelled by hand: {reason or 'partly patterned'} ({be})"] += 1
                it = {**it, "checks": [ch for ch in it["checks"] if ch["kind"] not in HAND_KINDS]}
                if not it["checks"]:
                    continue
            if backend != "master" and [ch["kind"] for ch in checks] == ["same_shape"]:
                # in a supplement "Same as in[0]" repeats that column's rank limits
                checks = [ch for other in bullets if other.config == c.config and other.target == checks[0]["as"]
                          for ch in classifier.classify(other.text, other.target, other.kind)[0]
                          if ch["kind"] == "rank"]
            kinds_now = sorted(ch["kind"] for ch in checks)
            kinds_file = sorted(ch["kind"] for ch in it["checks"])
            if kinds_now != kinds_file:
                self.add(op, backend, "constraint-changed", f"{c.config} {c.target}: file has {kinds_file}, "
                                                            f"the documentation's text gives {kinds_now}")
            else:
                for a, b in zip(sorted(checks, key=_key), sorted(it["checks"], key=_key)):
                    fa = {k: v for k, v in a.items() if k not in ("target", "as")}
                    fb = {k: v for k, v in b.items() if k not in ("target", "as")}
                    if _canon(fa) != _canon(fb):
                        self.add(op, backend, f"{a['kind']}-differs", f"{c.config} {c.target}: file {fb}, docs {fa}",
                                 EXPLAINED["contradiction"] if (op, be, c.digest) in self.contradictions else None)
        for rest in by_ref.values():
            for it in rest:
                self.add(op, backend, "constraint-extra", f"{it['config']} {it.get('doc_target')}: ref {it['ref']} "
                                                          "is not in the documentation")


def _key(ch: Mapping[str, Any]) -> str:
    return json.dumps({k: v for k, v in ch.items() if k not in ("target", "as")}, sort_keys=True)


def _canon(x: Any) -> Any:
    return json.loads(json.dumps(x, sort_keys=True))


def _show_row(key: tuple) -> str:
    config, ents = key
    return f"{config}: " + "  ".join(f"{n}={'|'.join(sorted(d.replace('QNN_DATATYPE_', '') for d in dts))}"
                                     for n, dts in sorted(ents))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("docs", type=Path, help="the SDK's docs/QNN/OpDef folder")
    ap.add_argument("--verbose", action="store_true", help="print explained differences too")
    args = ap.parse_args(argv)
    if not (args.docs / qnn_docs.MASTER_PAGE).is_file():
        print(f"opdef_fidelity: error: {args.docs} has no {qnn_docs.MASTER_PAGE}", file=sys.stderr)
        return 2
    try:
        registry = OpDefRegistry.load()
    except QlowerError as exc:
        print(f"opdef_fidelity: error: {exc}", file=sys.stderr)
        return 1
    constraints = json.loads((SHIPPED_DIR / "constraints.json").read_text(encoding="utf-8"))
    f = Fidelity(args.docs, registry, constraints)
    f.master()
    f.master_bullets()
    f.backends()
    for d in f.diffs:
        if args.verbose or not d.explained:
            print(d)
    unexplained = [d for d in f.diffs if not d.explained]
    print("\nsummary")
    for key, n in sorted(f.stats.items()):
        print(f"  {key}: {n}")
    kinds = Counter((d.kind, bool(d.explained)) for d in f.diffs)
    for (kind, explained), n in sorted(kinds.items()):
        print(f"  {'explained' if explained else 'UNEXPLAINED'} {kind}: {n}")
    print(f"  differences: {len(f.diffs)} ({len(unexplained)} unexplained) over backends "
          f"{', '.join(BACKENDS)} and the master definitions")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
