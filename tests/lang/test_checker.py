"""The semantic checker: a PDLL-style failure corpus plus a few direct checks.

Each file in `failures/` is bad .qpat with its expected findings in comments:

    # expect: <severity> <line>:<col> <exact message>
    # expect-hint: <exact hint of the finding just above>

The file must produce exactly the expected (severity, line, col, message) set.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qlower.lang.checker import check
from qlower.lang.loader import check_paths
from qlower.lang.parser import parse
from qlower.lang.registry import MinimalRegistry
from qlower.rewrite.functions import builtin_functions

FAILURES = Path(__file__).parent / "failures"
_EXPECT = re.compile(r"#\s*expect:\s*(error|warning|note)\s+(\d+):(\d+)\s+(.*?)\s*$")
_HINT = re.compile(r"#\s*expect-hint:\s*(.*?)\s*$")


def _expectations(text: str) -> tuple[set[tuple[str, int, int, str]], dict[tuple[str, int, int, str], str]]:
    found: set[tuple[str, int, int, str]] = set()
    hints: dict[tuple[str, int, int, str], str] = {}
    last = None
    for line in text.splitlines():
        if m := _EXPECT.search(line):
            last = (m[1], int(m[2]), int(m[3]), m[4])
            found.add(last)
        elif (h := _HINT.search(line)) and last is not None:
            hints[last] = h[1]
    return found, hints


def _key(d) -> tuple[str, int, int, str]:
    return (str(d.severity), d.span.line if d.span else 0, d.span.column if d.span else 0, d.message)


@pytest.mark.parametrize("path", sorted(FAILURES.glob("*.qpat")), ids=lambda p: p.stem)
def test_failure_corpus(path: Path) -> None:
    expected, hints = _expectations(path.read_text(encoding="utf-8"))
    assert expected, f"{path.name} states no expectations"
    diags, _ = check_paths([path], registry=MinimalRegistry(), packs_dir=FAILURES / "packs")
    got = {_key(d) for d in diags if d.span is None or Path(d.span.file) == path}
    assert sorted(got) == sorted(expected)
    by_key = {_key(d): d for d in diags}
    for key, hint in hints.items():
        assert by_key[key].hint == hint, key
    assert all(d.code for d in diags), [str(d) for d in diags if not d.code]
