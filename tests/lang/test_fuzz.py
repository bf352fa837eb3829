"""Robustness: broken rule files give a clean, located QlowerError, never a crash.

Valid files are truncated and mutated (characters and tokens deleted, inserted,
replaced); random text and token soup are fed in too. Whatever still parses
must also survive the formatter (same tree, same comments, idempotent).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qlower.diagnostics import QlowerError, SourceCache
from qlower.lang import ast
from qlower.lang.formatter import format_module, format_text
from qlower.lang.parser import parse
from tests.lang import strategies as S

FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
FILE = "fuzz.qpat"

SAMPLE = '''\
import "common.qpat"
import mllm  # the shipped pack

# Repeat along one dim.
op mllm.Repeat(x) -> y { dim: int, times: int = 2 }
op my.Split(x, w?, rest...) -> (ys...) commutative { axes: list[int] = [1, -2], tag: str = "a\\"b" }

# Repeat -> Tile
rule repeat_to_tile benefit -2 backends(cpu, htp) {
  match y = mllm.Repeat(x: const f32[1, n, _, ...]) { dim: d, times: 4, eps: -1.5e-7, s: "q", z: _ } shared
  match s = mllm.A | mllm.B(h, (p | _: [] | q = mllm.C(r...) | mllm.D()), ) commutative
  require (rank(x) > 0 and not (d in [1, 2])) or x if a else -(-(1 + 2) * 3) // 4 % 0x10
  let m = shape(x)[1:] ++ shape(x)[:-1] + s[a:b][0] + (-x)[0] + [1] * n
  emit {
    # inside
    y = qnn.Tile(x, _, tensor([1, 2]), xs...) { multiples: [1] * d ++ [4] } : shape shape(x), dtype f32
    w = tensor(zeros([4], f32)) : encoding none
    z = y
  }
  emit a, b = qnn.Split(x) { axis: 1 }
  fail "unsupported: " ++ str(1.0)
}

test t1 for repeat_to_tile backends(cpu) {
  input x: f32[1, 2..8] : encoding quant(0.1, 0)
  const w: f32[] = 1.5
  graph y = mllm.Repeat(x, _) { dim: 1, times: 4 }
  graph {
    a = mllm.A(x)
  }
  expect ops qnn.Tile, qnn.X
  expect ops none
  expect close atol 1e-3 rtol 0 steps 5
  expect error "bad\\n"
  expect rule repeat_to_tile
}
'''

TOKENS = [
    "{", "}", "(", ")", "[", "]", ",", ":", "=", "==", "<", "|", "...", "..", ".", "?", "->", "-", "+", "*",
    "//", "%", "++", '"', '"s"', '"\\q"', "\\", "#", "\n", " ", "\t", "\r", "_", "0", "007", "1.5", "1e", "0x",
    "1e999", "99999999999999999999", "match", "require", "let", "emit", "fail", "rule", "op", "test", "import",
    "not", "in", "if", "else", "and", "or", "tensor", "shape", "dtype", "encoding", "commutative", "shared",
    "const", "benefit", "backends", "expect", "ops", "close", "error", "graph", "input", "for", "none", "true",
    "x", "y", "qnn.Tile", "m.A", "é", "\u2028", "\x00",
]


ROOT = Path(__file__).resolve().parents[2]


def _doc_examples() -> list[str]:
    doc = ROOT / "docs" / "language.md"
    if not doc.exists():
        return []
    return re.findall(r"^```qpat\n(.*?)^```", doc.read_text(encoding="utf-8"), re.S | re.M)


def _shipped() -> list[str]:
    return [p.read_text(encoding="utf-8") for p in sorted((ROOT / "patterns").glob("**/*.qpat"))]


CORPUS = [SAMPLE, *_doc_examples(), *_shipped()]


def check(text: str) -> ast.Module | None:
    """Parse: a tree that formats faithfully, or a QlowerError located inside `text`."""
    try:
        module = parse(text, FILE)
    except QlowerError as exc:
        lines = text.split("\n")
        assert exc.diagnostics
        for d in exc.diagnostics:
            assert d.is_error and d.span is not None and d.span.file == FILE, d
            assert 1 <= d.span.line <= len(lines), (d, len(lines))
            assert 1 <= d.span.column <= len(lines[d.span.line - 1]) + 1, d
            sources = SourceCache()
            sources.add(FILE, text)
            assert d.message in d.render(sources)
        return None
    out = format_module(module)
    again = parse(out, "formatted.qpat")
    assert S.tree_key(again.items) == S.tree_key(module.items), out
    assert _comments(again) == _comments(module), out
    assert format_text(out) == out
    return module


def _comments(m: ast.Module) -> list[str]:
    words = [c.text[1:].strip() for c in m.comments]
    words += [w.strip() for i in m.items if getattr(i, "doc", None) is not None for w in i.doc.split("\n")]
    return sorted(words)


def test_corpus_is_valid() -> None:
    for text in CORPUS:
        assert check(text) is not None


def test_every_truncation_of_the_sample() -> None:
    for cut in range(len(SAMPLE) + 1):
        check(SAMPLE[:cut])


@FUZZ
@given(st.sampled_from(CORPUS), st.data())
def test_truncated_examples(text: str, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(text)))
    check(text[:cut])


@st.composite
def mutated(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(CORPUS))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["delete", "delete_span", "insert", "token", "replace", "swap_token"]))
        if kind == "delete":
            text = text[:at] + text[at + 1:]
        elif kind == "delete_span":
            text = text[:at] + text[at + draw(st.integers(1, 40)):]
        elif kind == "insert":
            text = text[:at] + draw(st.characters(blacklist_categories=("Cs",))) + text[at:]
        elif kind == "token":
            text = text[:at] + draw(st.sampled_from(TOKENS)) + text[at:]
        elif kind == "replace":
            text = text[:at] + draw(st.characters(blacklist_categories=("Cs",))) + text[at + 1:]
        else:  # replace the word under `at` with a token
            m = re.compile(r"\w+|\S").search(text, at)
            if m:
                text = text[:m.start()] + draw(st.sampled_from(TOKENS)) + text[m.end():]
    return text


@FUZZ
@given(mutated())
def test_mutated_examples(text: str) -> None:
    check(text)


@FUZZ
@given(st.text(st.characters(min_codepoint=9, max_codepoint=126, blacklist_characters="\x0b\x0c"), max_size=80))
def test_random_printable_text(text: str) -> None:
    check(text)


@FUZZ
@given(st.lists(st.sampled_from(TOKENS), max_size=30).map(" ".join))
def test_token_soup(text: str) -> None:
    check(text)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(S.modules, st.data())
def test_mutated_generated_modules(module: ast.Module, data: st.DataObject) -> None:
    text = format_module(module)
    at = data.draw(st.integers(0, len(text)))
    check(text[:at] + data.draw(st.sampled_from(TOKENS)) + text[at:])
    check(text[:at])


@pytest.mark.parametrize("text", ["\ufeffrule r {}", "rule r {}\r\n", "\r\nrule r {\r\n  let a = 1\r\n}\r\n",
                                  "rule r { let s = \"\u2028#x\" }", "rule r { let s = \"\\ud800\" }"])
def test_odd_encodings_and_line_ends(text: str) -> None:
    check(text)
