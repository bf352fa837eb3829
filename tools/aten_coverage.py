"""What the aten pack does with every core ATen op and every op ExecuTorch's Qualcomm backend has a
builder for, per QNN backend: lowered (by which rules, and whether they have a test block), refused
by an explicit `fail` (its reason), computed by the importer itself, or missing.

    python tools/aten_coverage.py [--markdown docs/aten-coverage.md] [--json out.json]

The core ATen opset is read from torch's own registry at run time (the overloads tagged
`torch.Tag.core`); the Qualcomm builders' ops from the `target` lists of the installed executorch
package's `backends/qualcomm/builders/op_*.py` (parsed, not imported: importing them needs the QNN
SDK's Python bindings). An overload maps to its `aten.*` dialect type as the importer maps it
(`qlower.reference.aten_kernels.AtenOps`). A rule counts for a backend when its `backends(...)`
allow it and every QNN op it emits (through the `aten.*` ops it rewrites to, recursively) is
supported there by the op definitions; the numbers are the rules' test blocks' business
(`qlower test patterns/aten`) and bench/aten_corpus.py's.
"""

from __future__ import annotations

import argparse
import ast as pyast
import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

BACKENDS = ("cpu", "gpu", "htp", "dsp", "lpai")

# Ops the importer resolves itself, never reaching a rule.
IMPORTED = {
    "sym_size.int": "a size: a number at import", "sym_numel.default": "a size: a number at import",
    "sym_stride.int": "refused by the importer: strides do not exist in QNN graphs (symbolic)",
    "sym_storage_offset.default": "refused by the importer: storage offsets do not exist in QNN graphs",
    "_local_scalar_dense.default": "item(): computed at import when its tensor is constant, else refused as data-dependent",
    "empty.memory_format": "uninitialized memory: folded to a zero constant at import",
    "empty_strided.default": "uninitialized memory: folded to a zero constant at import",
    "getitem": "tuple access: resolved at import",
    "unbind.int": "one aten.select per result at import (lowered by the select rule)",
    "dim_order_ops._to_dim_order_copy.default": "ExecuTorch edge dialect (not a torch.export op): export's _to_copy",
}


def core_aten_ops() -> list[str]:
    import torch

    out = []
    for packet in dir(torch.ops.aten):
        if packet.startswith("__"):
            continue
        p = getattr(torch.ops.aten, packet, None)
        try:
            overloads = p.overloads()
        except Exception:  # noqa: BLE001 - not an op packet
            continue
        for o in overloads:
            if torch.Tag.core in getattr(p, o).tags:
                out.append(f"{packet}.{o}")
    return sorted(out)


def qualcomm_builder_ops() -> tuple[list[str], str | None]:
    """The ops ExecuTorch's Qualcomm builders name in their `target` lists, and where they were read."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("executorch")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return [], None
    folder = Path(next(iter(spec.submodule_search_locations))) / "backends" / "qualcomm" / "builders"
    ops: set[str] = set()
    for f in sorted(folder.glob("op_*.py")):
        for node in pyast.walk(pyast.parse(f.read_text())):
            if isinstance(node, pyast.Assign) and any(isinstance(t, pyast.Name) and t.id == "target" for t in node.targets):
                try:
                    value = pyast.literal_eval(node.value)
                except ValueError:
                    continue
                ops.update(v for v in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(v, str))
    return sorted(o.removeprefix("aten.") if o.startswith("aten.") else o for o in ops), str(folder)


def _emitted(node: Any) -> set[str]:
    """Op types an emit block names (`qnn.X`, `aten.y`), fragments resolved by the caller."""
    return set(re.findall(r"op='([A-Za-z_]+\.\w+)'", repr(node)))


def _fragment_calls(node: Any) -> set[str]:
    return set(re.findall(r"op='(\w+)'", repr(node)))


class Coverage:
    def __init__(self, rules: Any) -> None:
        from qlower.lang import ast

        self.rules = rules
        self.registry = rules.registry
        self.by_type: dict[str, list[Any]] = {}
        for rule in rules.ruleset.rules:
            for m in rule.matches[:1]:
                for t in getattr(m.pattern, "op_types", ()):
                    self.by_type.setdefault(t, []).append(rule)
        self.tested = {t.rule_name for t in rules.ruleset.tests}
        self.fragments = self._fragments(ast)
        self._memo: dict[tuple[str, str], bool] = {}

    def _fragments(self, ast: Any) -> dict[str, set[str]]:
        frags: dict[str, Any] = {}
        for module in getattr(self.rules.ruleset, "modules", ()):
            for item in getattr(module, "items", ()):
                if type(item).__name__ == "Fragment":
                    frags[item.name] = item
        out: dict[str, set[str]] = {}

        def ops_of(name: str, seen: frozenset[str]) -> set[str]:
            f = frags.get(name)
            if f is None or name in seen:
                return set()
            found = _emitted(f.body)
            for call in _fragment_calls(f.body) - {o.split(".")[-1] for o in found}:
                found |= ops_of(call, seen | {name})
            return found

        for name in frags:
            out[name] = ops_of(name, frozenset())
        return out

    def _rule_ops(self, rule: Any) -> set[str]:
        body = [b for b in rule.body if type(b).__name__ == "Emit"]
        found = _emitted(body)
        for call in _fragment_calls(body):
            found |= self.fragments.get(call, set())
        return found

    @staticmethod
    def _fails(rule: Any) -> bool:
        return any(type(b).__name__ == "Fail" for b in rule.body)

    def lowered(self, op_type: str, backend: str, depth: int = 0) -> list[str]:
        """The rules that can lower `op_type` on `backend` (empty: none)."""
        out = []
        for rule in self.by_type.get(op_type, []):
            if self._fails(rule) or (rule.backends and backend not in rule.backends):
                continue
            ok = True
            for o in self._rule_ops(rule):
                if o.startswith("qnn."):
                    ok = ok and self.registry.supported(o[4:], backend)
                elif o.startswith("aten.") and o != op_type and depth < 6:
                    ok = ok and bool(self.lowered(o, backend, depth + 1))
            if ok:
                out.append(rule.name)
        return out

    def reasons(self, op_type: str) -> list[str]:
        out = []
        for rule in self.by_type.get(op_type, []):
            for b in rule.body:
                if type(b).__name__ == "Fail":
                    out.append(_message(b.message, op_type))
        return out


def _message(e: Any, op_type: str) -> str:
    """A `fail` message as the user reads it: its string literals joined by `++`, `optype(v)` of the
    matched op as its type (`aten.avg_pool2d_backward`), anything else as written, in braces."""
    from qlower.lang import ast
    from qlower.lang.formatter_parts import format_expr

    if isinstance(e, ast.Binary) and e.op == "++":
        return _message(e.left, op_type) + _message(e.right, op_type)
    if isinstance(e, ast.Literal) and isinstance(e.value, str):
        return e.value
    if isinstance(e, ast.Call) and e.func == "optype":
        return op_type
    if isinstance(e, ast.Call) and e.func == "str" and len(e.args) == 1:
        return "{" + format_expr(e.args[0]) + "}"
    return "{" + format_expr(e) + "}"


def table(ops: Iterable[str], cov: Coverage, source: dict[str, set[str]]) -> list[dict[str, Any]]:
    from qlower.reference.aten_kernels import AtenOps

    forms = AtenOps()
    rows = []
    for op in ops:
        row: dict[str, Any] = {"op": op, "source": sorted(source.get(op, ()))}
        if op in IMPORTED:
            row.update(kind="importer", type=None, note=IMPORTED[op])
            rows.append(row)
            continue
        if op.startswith("quantized_decomposed."):
            row.update(kind="importer", type=None, note="pt2e quantize/dequantize: read by the importer as the "
                       "encoding of the tensor between them (qlower/frontends/torch_quant.py), not lowered as ops")
            rows.append(row)
            continue
        if not op:
            row.update(op="(custom op builder)", kind="no-form", type=None, note="ExecuTorch's builder for QNN "
                       "op-package ops, its target set per registered custom op: in qlower a plugin's rule and "
                       "op definition lower a custom op (docs/api.md, plugins)")
            rows.append(row)
            continue
        if "." in op and not op.startswith(("qnn_custom.", "dim_order_ops.")):
            packet, overload = op.split(".", 1)
            if packet == "scalar_tensor":
                overload = "default"
            found = forms.form_of_overload(packet, overload)
            if found is None:
                found, row["note"] = _imported_as(forms, packet, overload)
            if packet.endswith("_with_indices"):
                row["note"] = "imported as " + packet.removesuffix("_with_indices") + " when its indices are not read"
            if found is None and packet.endswith("_with_indices"):
                found = forms.form_of_overload(packet.removesuffix("_with_indices"), "default")
                row["note"] = "imported as " + packet.removesuffix("_with_indices") + " when its indices are not read"
            type_name = f"aten.{found[0].type_name}" if found else None
        else:
            type_name = None
        row["type"] = type_name
        if type_name is None:
            row.update(kind="no-form", note=row.get("note") or (
                "not an ATen op of torch.export programs" if "." not in op or op.startswith(("qnn_custom.", "dim_order_ops."))
                else "no aten dialect form (generator, complex or non-tensor arguments)"))
            rows.append(row)
            continue
        values_only = None
        if op.split(".")[0].endswith("_with_indices"):
            f = forms.form_of_overload(op.split(".")[0].removesuffix("_with_indices"), "default")
            values_only = f"aten.{f[0].type_name}" if f else None
        per = {b: cov.lowered(type_name, b) or (cov.lowered(values_only, b) if values_only else []) for b in BACKENDS}
        row["lowered"] = {b: r for b, r in per.items() if r}
        row["tested"] = all(any(r in cov.tested for r in rs) for rs in row["lowered"].values()) if row["lowered"] else False
        row["reasons"] = cov.reasons(type_name)
        row["kind"] = "lowered" if row["lowered"] else "refused" if row["reasons"] else "missing"
        rows.append(row)
    return rows


def _imported_as(forms: Any, packet: str, overload: str) -> tuple[Any, str | None]:
    """The form the importer gives an overload the dialect has none for: an `.out` variant is its
    functional overload; an in-place op that export functionalizes, its `_functional` twin."""
    import torch

    ops = getattr(torch.ops.aten, packet, None)
    schema = getattr(ops, overload)._schema if ops is not None and hasattr(ops, overload) else None
    if schema is None:
        return None, None
    outs = [a.name for a in schema.arguments if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write]
    if outs:
        wanted = [a.name for a in schema.arguments if a.name not in outs]
        for o in ops.overloads():
            if [a.name for a in getattr(ops, o)._schema.arguments] == wanted:
                found = forms.form_of_overload(packet, o)
                if found is not None:
                    return found, f"an out= variant, which export keeps: functionalized at import to {packet}.{o}"
    if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
        found = forms.form_of_overload(packet + "_functional", "default")
        if found is not None:
            return found, f"updates its arguments in place; export programs carry {packet}_functional.default"
    return None, None


def markdown(rows: list[dict[str, Any]], builder_dir: str | None) -> str:
    import torch

    def cell(row: dict[str, Any], b: str) -> str:
        return "yes" if b in row.get("lowered", {}) else "—"

    core = [r for r in rows if "core" in r["source"]]
    et = [r for r in rows if "executorch" in r["source"]]
    lines = ["# torch.export coverage: core ATen and ExecuTorch's Qualcomm builders", "",
             "Generated by `python tools/aten_coverage.py --markdown docs/aten-coverage.md` "
             f"(torch {torch.__version__}; the builders' ops read from the installed executorch package). "
             "`yes`: a rule of `patterns/aten` lowers the op on that backend (the rules named, all with test "
             "blocks against ATen unless marked); otherwise the reason the pack gives, or how the importer "
             "handles it.", ""]
    for title, group in (("Core ATen opset", core), ("ExecuTorch Qualcomm builder ops", et)):
        n = len(group)
        htp = sum(1 for r in group if "htp" in r.get("lowered", {}))
        done = sum(1 for r in group if r["kind"] != "missing")
        lines += [f"## {title}", "",
                  f"{n} ops: {done} lowered or refused with a reason ({100 * done / max(n, 1):.0f}%), "
                  f"{htp} lowered on HTP, {sum(1 for r in group if 'cpu' in r.get('lowered', {}))} on CPU.", "",
                  "| op | cpu | gpu | htp | dsp | lpai | rules / reason |", "|---|---|---|---|---|---|---|"]
        for r in group:
            if r.get("lowered"):
                rules = sorted({x for rs in r["lowered"].values() for x in rs})
                note = ", ".join(rules) + ("" if r.get("tested") else " (untested)")
                if r.get("note"):
                    note += f" ({r['note']})"
                if r.get("reasons") and len(r["lowered"]) < len(BACKENDS):
                    note += "; else: " + r["reasons"][0]
            else:
                note = (r.get("reasons") or [r.get("note") or "no rule"])[0]
            note = note.replace("|", "\\|")
            lines.append(f"| `{r['op']}` | " + " | ".join(cell(r, b) for b in BACKENDS) + f" | {note} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import warnings

    import qlower

    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", help="write the table here")
    ap.add_argument("--json", help="write every row here")
    a = ap.parse_args(argv)
    core = core_aten_ops()
    builders, folder = qualcomm_builder_ops()
    source: dict[str, set[str]] = {}
    for o in core:
        source.setdefault(o, set()).add("core")
    for o in builders:
        source.setdefault(o, set()).add("executorch")
    cov = Coverage(qlower.load_rules(packs=["aten"]))
    rows = table(sorted(source), cov, source)
    for title, tag in (("core ATen", "core"), ("ExecuTorch Qualcomm builders", "executorch")):
        group = [r for r in rows if tag in r["source"]]
        kinds = {k: sum(1 for r in group if r["kind"] == k) for k in ("lowered", "refused", "importer", "no-form", "missing")}
        htp = sum(1 for r in group if "htp" in r.get("lowered", {}))
        print(f"{title}: {len(group)} ops; " + ", ".join(f"{k} {v}" for k, v in kinds.items()) + f"; on HTP {htp}")
    for r in rows:
        if r["kind"] == "missing":
            print(f"  missing: {r['op']} ({r['type']})")
    if folder is None:
        print("executorch is not installed: the Qualcomm builders' ops were not read", file=sys.stderr)
    if a.markdown:
        Path(a.markdown).write_text(markdown(rows, folder) + "\n")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
