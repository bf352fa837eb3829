"""Does a pack rewrite change what models lower to? Lower each model with the packs as they were
at a git revision and as they are now, and compare the QNN graphs.

Usage: python tools/pack_diff.py --base REV --pack aten [--pack qnn] [--backends cpu,htp] MODEL...

MODEL is any file `qlower lower` reads (a qlower-graph JSON, .onnx, a torch.export .pt2). The
packs named are read from REV (`git archive`, the working tree untouched) and from the working
tree; the `qnn` cleanup pack runs after lowering in both (from each side if it is named, else
the working tree's). Two QNN graphs are the same when their ops, in order, have the same types,
params (static data compared by content), datatypes, shapes and encodings, with tensors renamed
by their first appearance — so the names a rule gives its values and the rule/provenance
recorded in `_net.json` do not count. One line per model and backend: `same`, `DIFF` (with the
first op that differs) or the lowering error of either side. Exit 0 when every pair is the same,
1 when one differs or cannot be loaded, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

from qlower.diagnostics import QlowerError

PATTERNS = Path(__file__).resolve().parents[1] / "patterns"


def _digest(data) -> str | None:
    return None if data is None else hashlib.sha1(np.ascontiguousarray(np.asarray(data)).tobytes()).hexdigest()[:12]


def canonical(qnn) -> list[tuple]:
    """A QnnGraph as a list of op rows, tensors renamed t0, t1, ... by first appearance."""
    names: dict[str, str] = {}

    def t(name: str) -> str:
        return names.setdefault(name, f"t{len(names)}")

    def tensor(name: str) -> tuple:
        q = qnn.tensors[name]
        return (t(name), q.type.name, q.datatype.name, tuple(q.dims), repr(q.encoding), _digest(q.data))

    rows: list[tuple] = [("inputs", tuple(tensor(n) for n in qnn.inputs))]
    for op in qnn.ops:
        params = tuple((p.name, p.datatype.name, repr(p.value)) if hasattr(p, "value")
                       else (p.name, p.tensor.datatype.name, tuple(p.tensor.dims), _digest(p.tensor.data))
                       for p in op.params)
        rows.append((op.package, op.type, tuple(tensor(n) for n in op.inputs),
                     tuple(tensor(n) for n in op.outputs), params))
    rows.append(("outputs", tuple(t(n) for n in qnn.outputs)))
    return rows


def _extract(rev: str, packs: list[str], into: Path) -> Path:
    """The named pack folders of `patterns/` at `rev`, unpacked under `into`; returns that patterns folder."""
    prefix = subprocess.run(["git", "-C", str(PATTERNS), "rev-parse", "--show-prefix"],
                            capture_output=True, text=True).stdout.strip()
    top = subprocess.run(["git", "-C", str(PATTERNS), "rev-parse", "--show-toplevel"],
                         capture_output=True, text=True).stdout.strip()
    done = subprocess.run(["git", "-C", top or str(PATTERNS), "archive", "--format=tar", rev,
                           *(f"{prefix}{p}" for p in packs)], capture_output=True)
    if done.returncode != 0:
        raise QlowerError(f"git archive {rev}: {done.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into / prefix


def _rules(root: Path, packs: list[str]):
    import qlower

    paths = [root / p for p in packs if p != "qnn"]
    if "qnn" in packs:
        return qlower.load_rules([*paths, root / "qnn"], cleanup=False)
    return qlower.load_rules(paths, cleanup=True)


def _lower(model: Path, rules, backend: str):
    import qlower
    from qlower.api import load_model

    result = qlower.lower(load_model(model), rules, backend=backend)
    if result.errors:
        d = result.errors[0]
        # the subject names the rule that emitted the node and its file: provenance, not behaviour
        subject = re.sub(r", from rule [^)]*\)", ")", d.subject) + ": " if d.subject else ""
        return f"error: {subject}{d.message.splitlines()[0]}"
    return canonical(result.qnn)


def _first_difference(a: list[tuple], b: list[tuple]) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"row {i}: {x[1] if len(x) > 1 else x[0]} vs {y[1] if len(y) > 1 else y[0]}"
    return f"{len(a)} vs {len(b)} rows"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="pack_diff.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", type=Path, metavar="MODEL")
    ap.add_argument("--base", required=True, metavar="REV", help="git revision of the packs before")
    ap.add_argument("--pack", action="append", required=True, metavar="NAME", help="a pack to compare (repeatable)")
    ap.add_argument("--backends", default="cpu,htp", help="comma-separated backends (default cpu,htp)")
    args = ap.parse_args(argv[1:])
    unknown = [p for p in args.pack if not (PATTERNS / p).is_dir()]
    if unknown:
        print(f"pack_diff.py: no shipped pack {', '.join(unknown)}", file=sys.stderr)
        return 2
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sides = {"base": _rules(_extract(args.base, args.pack, Path(tmp)), args.pack),
                     "now": _rules(PATTERNS, args.pack)}
            rows = compare(sides["base"], sides["now"], args.models, args.backends.split(","))
    except QlowerError as exc:
        print(f"pack_diff.py: {exc}", file=sys.stderr)
        return 1
    for backend, model, verdict in rows:
        print(f"{backend}\t{model.name}\t{verdict}")
    differ = sum(1 for *_, verdict in rows if verdict.startswith("DIFF"))
    print(f"{differ} difference(s)")
    return 1 if differ else 0


def compare(base, now, models: list[Path], backends: list[str]) -> list[tuple[str, Path, str]]:
    """(backend, model, verdict) for each pair: `same`, `same (error: ...)` or `DIFF ...`."""
    rows = []
    for backend in backends:
        for model in models:
            got = {k: _lower(model, r, backend) for k, r in (("base", base), ("now", now))}
            if got["base"] == got["now"]:
                verdict = "same" + (f" ({got['now']})" if isinstance(got["now"], str) else "")
            elif isinstance(got["base"], str) or isinstance(got["now"], str):
                verdict = f"DIFF base: {got['base'] if isinstance(got['base'], str) else 'lowers'}; " \
                          f"now: {got['now'] if isinstance(got['now'], str) else 'lowers'}"
            else:
                verdict = f"DIFF {_first_difference(got['base'], got['now'])}"
            rows.append((backend, model, verdict))
    return rows


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
