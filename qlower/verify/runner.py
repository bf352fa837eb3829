"""`qlower test`: run every test block of rule files without pytest."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
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


def load_for(file: Path, load_rules: Callable[..., Any], opdefs: Sequence[str] = (), cache: dict | None = None):
    """The rule set a file's tests run against: its whole folder (the pack), so needed rules are there.

    `load_rules` is `qlower.api.load_rules`, passed in by the caller (the CLI, the pytest plugin):
    verify sits below the API."""
    key = (str(file.parent.resolve()), tuple(opdefs))
    if cache is not None and key in cache:
        return cache[key]
    rules = load_rules([file.parent], opdefs=opdefs)
    if cache is not None:
        cache[key] = rules
    return rules


def run_paths(paths: Sequence[str], *, load_rules: Callable[..., Any], keyword: str | None = None, examples: int | None = None,
              opdefs: Sequence[str] = ()) -> int:
    from qlower.verify.testcase import RuleTest, RuleTestFailure, missing_semantics, missing_semantics_reason

    n = examples or default_examples()
    cache: dict = {}
    passed = failed = skipped = 0
    t0 = time.perf_counter()
    for f in rule_files(paths):
        rules = load_for(f, load_rules, opdefs, cache)
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
