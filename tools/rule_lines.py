"""Rule lines per pack: non-blank, non-comment lines inside `rule`, `map` and `fragment` items.

Usage: python tools/rule_lines.py [PATTERNS_DIR] [--base REV] [--by-op] [--pack NAME ...]

Without `--base`: one line per pack (folder of .qpat files) with its rule-line total — the
figure issue 17 quoted (mllm 344, onnx 1,452, aten 635 at commit ea74b33).

With `--base REV`: the same packs as they were at git revision REV (read with `git show`, so
the worktree is untouched) against the packs now, per op type. A raw total grows when a pack
gains coverage, so it cannot tell whether rules got shorter; comparing the op types the base
already lowered can. Each rule or map is attributed to the op types its root pattern matches;
a root `A | B | C` splits its lines evenly between A, B and C (so per-op figures add up to
the total and a merged rule compares fairly with the separate rules it replaced). Fragments
(and any other item kind that is not a rule, map, test or declaration) belong to no op
type and get their own line. Reported per pack:
  (a) op types the base lowered: lines then and now (now 0 if no rule roots there any more),
  (b) op types new since the base: lines now,
  (c) fragments, and totals then and now.
`--by-op` lists every op type of a pack (then, now, items now), largest now first.

Lines are counted from the parsed items' spans, so comments, blank lines, and braces or `#`
inside strings never miscount. Tests, op and compute declarations do not count.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import attrs

from qlower.diagnostics import QlowerError
from qlower.lang import ast
from qlower.lang.parser import parse

FRAGMENTS = "(fragments)"


@attrs.frozen
class Item:
    """One counted item: a rule, map line or fragment, with the op types its root matches."""

    kind: str  # "rule", "map", "fragment" (or a later item kind, lower-cased class name)
    name: str
    roots: tuple[str, ...]  # () for a fragment
    lines: int


@attrs.frozen
class PackLines:
    """A pack's rule lines by op type (fractional where a root has alternatives)."""

    by_op: Mapping[str, float]
    items_by_op: Mapping[str, int]
    fragments: int

    @property
    def total(self) -> float:
        return sum(self.by_op.values()) + self.fragments


@attrs.frozen
class Comparison:
    """A pack then (at the base revision) and now, split by whether the base lowered the op type."""

    then: PackLines
    now: PackLines

    @property
    def base_ops(self) -> tuple[str, ...]:
        return tuple(sorted(self.then.by_op))

    @property
    def new_ops(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.now.by_op) - set(self.then.by_op)))

    @property
    def base_then(self) -> float:
        return sum(self.then.by_op.values())

    @property
    def base_now(self) -> float:
        return sum(self.now.by_op.get(op, 0.0) for op in self.base_ops)

    @property
    def new_now(self) -> float:
        return sum(self.now.by_op[op] for op in self.new_ops)


def _code_lines(lines: list[str], first: int, last: int) -> int:
    """Lines `first`..`last` (1-based) holding code; strings cannot span lines, so a line whose
    first visible character is `#` is a comment."""
    return sum(1 for ln in lines[first - 1:last] if ln.strip() and not ln.lstrip().startswith("#"))


def items(text: str, file: str = "<string>") -> list[Item]:
    """The counted items of one .qpat text; a syntax error raises QlowerError with its location."""
    module = parse(text, file)
    lines = text.removeprefix("\ufeff").splitlines()
    out: list[Item] = []
    # An item runs to the line before the next item (or the end of the file): spans of
    # multi-line `map` params stop before their closing brace, and what lies between two
    # items besides the first one's code is blank lines and comments, which do not count.
    starts = [i.span.line for i in module.items] + [len(lines) + 1]
    for k, item in enumerate(module.items):
        if isinstance(item, ast.Rule):
            roots = item.matches[0].pattern.op_types if item.matches else ()
            kind, name = "rule", item.name
        elif isinstance(item, ast.MapDecl):
            roots, kind, name = item.pattern.op_types, "map", item.rule_name
        elif isinstance(item, (ast.Test, ast.OpDecl, ast.ComputeDecl, ast.Import)):
            continue
        else:  # a fragment, or any item kind added later (shared by rules, so never uncounted)
            roots, kind, name = (), type(item).__name__.lower(), getattr(item, "name", "")
        out.append(Item(kind, name, tuple(roots), _code_lines(lines, item.span.line, starts[k + 1] - 1)))
    return out


def rule_lines(text: str) -> int:
    """Rule lines of one .qpat text (rules, maps and fragments; tests and declarations excluded)."""
    return sum(i.lines for i in items(text))


def pack_lines(files: Iterable[tuple[str, str]]) -> PackLines:
    """Rule lines of a pack given as (file name, text) pairs, attributed to root op types."""
    by_op: dict[str, float] = {}
    count: dict[str, int] = {}
    fragments = 0
    for name, text in files:
        for item in items(text, name):
            if not item.roots:
                fragments += item.lines
                continue
            share = item.lines / len(item.roots)
            for op in item.roots:
                by_op[op] = by_op.get(op, 0.0) + share
                count[op] = count.get(op, 0) + 1
    return PackLines(by_op, count, fragments)


def packs_on_disk(root: Path) -> dict[str, list[tuple[str, str]]]:
    """Every pack folder under `root` with its .qpat files' texts."""
    return {d.name: [(str(f), f.read_text(encoding="utf-8")) for f in sorted(d.rglob("*.qpat"))]
            for d in sorted(p for p in root.iterdir() if p.is_dir())}


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise QlowerError(f"git {' '.join(args)}: {done.stderr.strip() or 'failed'}")
    return done.stdout


def packs_at(root: Path, rev: str) -> dict[str, list[tuple[str, str]]]:
    """Every pack folder under `root` as it was at git revision `rev` (read with git show)."""
    prefix = _git(root, "rev-parse", "--show-prefix").strip()
    names = _git(root, "ls-tree", "-r", "--name-only", "--full-name", rev, "--", ".").splitlines()
    packs: dict[str, list[tuple[str, str]]] = {}
    for name in sorted(names):
        rel = name[len(prefix):]
        if not rel.endswith(".qpat") or "/" not in rel:
            continue
        packs.setdefault(rel.split("/", 1)[0], []).append(
            (f"{rev}:{name}", _git(root, "show", f"{rev}:{name}")))
    return packs


def _fmt(x: float) -> str:
    return str(round(x)) if abs(x - round(x)) < 0.05 else f"{x:.1f}"


def report(pack: str, c: Comparison, by_op: bool) -> list[str]:
    """The comparison of one pack as text lines."""
    out = [f"{pack}",
           f"  (a) op types lowered at base  {len(c.base_ops):4d} ops  then {_fmt(c.base_then):>6}  now {_fmt(c.base_now):>6}",
           f"  (b) op types new since base   {len(c.new_ops):4d} ops  then {0:>6}  now {_fmt(c.new_now):>6}",
           f"      fragments                            then {c.then.fragments:>6}  now {c.now.fragments:>6}",
           f"  (c) total                                then {_fmt(c.then.total):>6}  now {_fmt(c.now.total):>6}"]
    if by_op:
        ops = sorted(set(c.then.by_op) | set(c.now.by_op), key=lambda o: (-c.now.by_op.get(o, 0.0), o))
        out.append(f"      {'op type':<44}{'then':>7}{'now':>7}{'items':>7}")
        for op in ops:
            then = _fmt(c.then.by_op[op]) if op in c.then.by_op else "-"
            out.append(f"      {op:<44}{then:>7}{_fmt(c.now.by_op.get(op, 0.0)):>7}{c.now.items_by_op.get(op, 0):>7}")
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="rule_lines.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", type=Path, default=None, help="folder of packs (default: the shipped patterns/)")
    ap.add_argument("--base", metavar="REV", help="compare against the packs at this git revision")
    ap.add_argument("--by-op", action="store_true", help="with --base: list every op type")
    ap.add_argument("--pack", action="append", metavar="NAME", help="only this pack (repeatable)")
    args = ap.parse_args(argv[1:])
    shown = str(args.root) if args.root else "patterns/"
    args.root = args.root or Path(__file__).resolve().parents[1] / "patterns"
    if not args.root.is_dir():
        print(f"rule_lines.py: no such folder: {args.root}", file=sys.stderr)
        return 1
    try:
        now = packs_on_disk(args.root)
        then = packs_at(args.root, args.base) if args.base else {}
        names = sorted(set(now) | set(then))
        if args.pack:
            unknown = [p for p in args.pack if p not in names]
            if unknown:
                print(f"rule_lines.py: no pack {', '.join(unknown)} (packs: {', '.join(names)})", file=sys.stderr)
                return 1
            names = [n for n in names if n in args.pack]
        if not args.base:
            total = 0
            for name in names:
                n = sum(i.lines for file, text in now[name] for i in items(text, file))
                total += n
                print(f"{name}\t{n}")
            print(f"total\t{total}")
            return 0
        print(f"rule lines: {shown} at {args.base} (then) against the files now")
        for name in names:
            c = Comparison(pack_lines(then.get(name, [])), pack_lines(now.get(name, [])))
            print("\n".join(report(name, c, args.by_op)))
    except QlowerError as exc:
        print(f"rule_lines.py: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # a reader that went away (rule_lines.py | head): stop quietly
        sys.stdout = None
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
