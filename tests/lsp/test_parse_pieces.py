"""The language server's piecewise parse gives exactly the whole-file parse, for every shipped file and after edits."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qlower.diagnostics import QlowerError
from qlower.lang.parser import parse, parse_pieces

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "patterns").rglob("*.qpat"))


def _same(text: str, file: str, cache: dict) -> None:
    try:
        whole = parse(text, file, inline=False)
    except QlowerError as exc:
        with pytest.raises(QlowerError) as got:
            parse_pieces(text, file, cache)
        assert [str(d) for d in got.value.diagnostics] == [str(d) for d in exc.diagnostics]
        return
    pieces = parse_pieces(text, file, cache)
    assert pieces == whole  # items, their spans and docs
    assert pieces.comments == whole.comments
    assert pieces.rules == whole.rules


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_file_parses_the_same_in_pieces(path):
    _same(path.read_text(encoding="utf-8"), str(path), {})


EDITS = st.sampled_from(["", "# a comment", "rule extra {", "}", "  let k = 1", "op x.Y(a) -> b",
                         "test t for r {", "import mllm", "  emit y = x", "# doc", 'let s = "é'])


@settings(max_examples=12, deadline=None)
@given(st.sampled_from([f for f in FILES if len(f.read_text().splitlines()) > 100]),
       st.lists(st.tuples(st.integers(0, 10_000), st.booleans(), EDITS), min_size=1, max_size=3))
def test_edited_texts_parse_the_same_in_pieces(path, edits):
    """A shared cache across successive edits (lines inserted or replaced), as a buffer being typed in has."""
    lines = path.read_text(encoding="utf-8").split("\n")
    cache: dict = {}
    _same("\n".join(lines), str(path), cache)
    for at, replace, new in edits:
        at %= len(lines)
        lines[at:at + (1 if replace else 0)] = [new]
        _same("\n".join(lines), str(path), cache)
