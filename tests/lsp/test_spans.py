"""Spans an editor underlines: for every pattern form, each node starts before it ends and ends on its last token.

A law over generated `match` patterns (captures, typed and shaped captures, wildcards, rest captures, nested and
named nested patterns, alternatives, attribute patterns of every value kind, flags), checked on the parser's AST.
"""

from __future__ import annotations

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from qlower.lang import ast
from qlower.lang.parser import parse

NAMES = st.sampled_from(["x", "a", "b", "n", "dim_0", "w2"])
QNAMES = st.sampled_from(["mllm.Repeat", "foo.Bar", "mllm.Add"])
VALUE_TYPES = st.sampled_from(["f32", "const", "const f32", "u8[1, _, n, ...]", "[2, 3]", "i32[]"])
ATTR_VALUES = st.sampled_from(["1", "-2", "0.5", "-1.5e3", '"s"', '"é"', "true", "false", "none", "k", "_"])


def _join(items: list[str], trailing: bool) -> str:
    return ", ".join(items) + ("," if trailing and items else "")


@st.composite
def _attrs(draw) -> tuple[str, set[str]]:
    names = draw(st.lists(st.sampled_from(["times", "dim", "alpha", "mode"]), unique=True, max_size=3))
    items = [f"{n}: {draw(ATTR_VALUES)}" for n in names]
    return "{ " + _join(items, draw(st.booleans())) + " }", set(items)


def _operand(depth: int):
    leaves = st.one_of(
        st.tuples(NAMES, st.booleans(), st.none() | VALUE_TYPES).map(
            lambda t: t[0] + ("?" if t[1] else "") + (f": {t[2]}" if t[2] else "")),
        (st.none() | VALUE_TYPES).map(lambda vt: "_" + (f": {vt}" if vt else "")),
        NAMES.map(lambda n: n + "..."),
    ).map(lambda s: (s, set(), set()))
    if depth == 0:
        return leaves
    nested = _pattern(depth - 1)
    return st.one_of(
        leaves,
        nested,
        st.tuples(NAMES, nested).map(lambda t: (f"{t[0]} = {t[1][0]}", t[1][1], t[1][2])),
        st.tuples(leaves, nested).map(lambda t: (f"({t[0][0]} | {t[1][0]})", t[1][1], t[1][2])),
    )


def _pattern(depth: int):
    @st.composite
    def build(draw) -> tuple[str, set[str], set[str]]:
        """The pattern's text, the texts of every op pattern in it, and of every attribute pattern."""
        types = " | ".join(draw(st.lists(QNAMES, min_size=1, max_size=2)))
        operands = draw(st.lists(_operand(depth), max_size=3))
        text = f"{types}({_join([o[0] for o in operands], draw(st.booleans()))})"
        patterns = set().union(*(o[1] for o in operands)) if operands else set()
        attr_texts = set().union(*(o[2] for o in operands)) if operands else set()
        if draw(st.booleans()):
            block, items = draw(_attrs())
            text += " " + block
            attr_texts |= items
        for flag in draw(st.lists(st.sampled_from(["commutative", "shared"]), unique=True, max_size=2)):
            text += " " + flag
        return text, patterns | {text}, attr_texts

    return build()


def _nodes(x):
    if attrs.has(type(x)):
        if isinstance(getattr(x, "span", None), object) and hasattr(x, "span"):
            yield x
        for f in attrs.fields(type(x)):
            yield from _nodes(getattr(x, f.name))
    elif isinstance(x, (tuple, list)):
        for y in x:
            yield from _nodes(y)


def _text(lines: list[str], span) -> str:
    if span.line == span.end_line:
        return lines[span.line - 1][span.column - 1:span.end_column - 1]
    return "\n".join([lines[span.line - 1][span.column - 1:], *lines[span.line:span.end_line - 1],
                      lines[span.end_line - 1][:span.end_column - 1]])


@settings(max_examples=150, deadline=None)
@given(_pattern(2), st.booleans())
def test_every_pattern_node_ends_on_its_last_token(generated, two_lines):
    pattern, patterns, attr_texts = generated
    match = f"match y = {pattern}"
    body = f"  {match}\n" + ("  require true\n" if two_lines else "")
    source = f"rule r {{\n{body}  emit y = x\n}}\n"
    lines = source.split("\n")
    rule = parse(source, "t.qpat", inline=False).rules[0]
    stmt = rule.body[0]
    assert isinstance(stmt, ast.Match)
    assert _text(lines, stmt.span) == match
    for node in _nodes(stmt):
        s = node.span
        assert (s.line, s.column) <= (s.end_line, s.end_column), (type(node).__name__, s)
        assert (rule.span.line, rule.span.column) <= (s.line, s.column), (type(node).__name__, s)
        if isinstance(node, ast.OpPattern):
            assert _text(lines, s) in patterns, (type(node).__name__, s, _text(lines, s))
        elif isinstance(node, ast.AttrPat):
            assert _text(lines, s) in attr_texts, (type(node).__name__, s, _text(lines, s))
        else:
            text = _text(lines, s)
            assert text == text.strip() and text, (type(node).__name__, s, text)


def test_a_literal_last_attribute_value_keeps_the_span_forward():
    """The case from the issue: `{ times: 1 }` last made the pattern end on line 1."""
    source = "rule r {\n  match y = foo.Bar(x) { times: 1 }\n  emit y = x\n}\n"
    p = parse(source, "t.qpat", inline=False).rules[0].body[0].pattern
    assert (p.span.line, p.span.column, p.span.end_line, p.span.end_column) == (2, 13, 2, 36)


DECLS = ["op mllm.Repeat(x) -> y { dim: int, times: int }", "op a.B(x, w?) -> (y, z)", "op a.C(xs...) -> (ys...)",
         "op a.D(x) -> y commutative", "op a.E(x) -> y { k: list[int] = [1, 2], }"]


@given(st.lists(st.sampled_from(DECLS), min_size=1, max_size=5, unique=True))
def test_op_declarations_span_their_whole_text(decls):
    source = "\n".join(decls) + "\n"
    lines = source.split("\n")
    for text, decl in zip(decls, parse(source, "t.qpat", inline=False).ops, strict=True):
        assert _text(lines, decl.span) == text


def test_an_emit_ends_on_the_brace_of_its_params():
    source = "rule r {\n  match y = a.B(x)\n  emit y = qnn.Tile(x) { multiples: [1, 2] }\n}\n"
    emit = parse(source, "t.qpat", inline=False).rules[0].body[1]
    assert _text(source.split("\n"), emit.span) == "emit y = qnn.Tile(x) { multiples: [1, 2] }"
