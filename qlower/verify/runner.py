"""`qlower test`: run every test block of rule files without pytest."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from qlower.diagnostics import QlowerError, error


def default_examples() -> int:
    return int(os.environ.get("QLOWER_EXAMPLES", "8"))


def rule_files(paths: Sequence[str | Path]) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(p.rglob("*.qpat")))
        elif p.exists():
            files.append(p)
        else:
            raise QlowerError(error(f"no such file or folder: {p}", code="io"))
    return files


def load_for(file: Path, load_rules: Callable[..., Any], opdefs: Sequence[str] = (), cache: dict | None = None,
             pack_roots: Collection[Path] = ()):
    """The rule set a file's tests run against: the file as given (with what it imports), like
    `qlower check`; a file inside one of `pack_roots` (a rule pack, whose files use each other
    without imports) with its whole pack.

    `load_rules` is `qlower.api.load_rules`, passed in by the caller (the CLI, the pytest plugin):
    verify sits below the API."""
    roots = {Path(p).resolve() for p in pack_roots}
    target = next((d for d in file.resolve().parents if d in roots), file)
    key = (str(target.resolve()), tuple(opdefs))
    if cache is not None and key in cache:
        return cache[key]
    rules = load_rules([target], opdefs=opdefs)
    if cache is not None:
        cache[key] = rules
    return rules


def run_paths(paths: Sequence[str], *, load_rules: Callable[..., Any], keyword: str | None = None,
              examples: int | None = None, opdefs: Sequence[str] = (), pack_roots: Collection[Path] = ()) -> int:
    from qlower.verify.testcase import RuleTest, RuleTestFailure, missing_semantics, missing_semantics_reason

    n = examples or default_examples()
    cache: dict = {}
    passed = failed = skipped = 0
    t0 = time.perf_counter()
    for f in rule_files(paths):
        rules = load_for(f, load_rules, opdefs, cache, pack_roots)
        tests = [t for t in rules.ruleset.tests if Path(t.span.file).resolve() == f.resolve()]
        for t in tests:
            if keyword and keyword not in t.name:
                continue
            label = f"{f}::{t.name}"
            missing = missing_semantics(t, rules)
            if missing:
                skipped += 1
                print(f"skipped {label}: {missing_semantics_reason(missing)}")
                continue
            try:
                RuleTest(t, rules, str(f)).run(n)
            except RuleTestFailure as exc:
                failed += 1
                print(f"FAILED {label}\n  {exc}\n", file=sys.stderr)
            else:
                passed += 1
                print(f"passed {label}")
    print(f"{passed} passed, {failed} failed, {skipped} skipped in {time.perf_counter() - t0:.1f}s")
    return 1 if failed or not passed else 0
