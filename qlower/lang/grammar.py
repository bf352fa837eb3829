"""The .qpat grammar and what both the parser and the AST builder need to know about it."""

from __future__ import annotations

import functools
import re

from lark import Lark

from qlower import _resources


def grammar_text() -> str:
    return (_resources.data_dir("grammars") / "qpat.lark").read_text(encoding="utf-8")


@functools.cache
def tree_parser() -> Lark:
    """A tree-building twin of the parser, used only to describe syntax errors (its
    error objects carry the expected-token sets and the parser state)."""
    return Lark(grammar_text(), parser="lalr", lexer="contextual", strict=True, maybe_placeholders=True, cache=True)


@functools.cache
def anonymous_terminals() -> frozenset[str]:
    """Terminals the grammar writes inline (keywords, punctuation): not values the builder needs."""
    defined = set(re.findall(r"(?m)^([A-Z_][A-Z0-9_]*)(?:\.\d+)?\s*:", grammar_text()))
    return frozenset(t.name for t in tree_parser().terminals if t.name not in defined)


@functools.cache
def keywords() -> tuple[str, ...]:
    """The language's words (`rule`, `match`, `map`, `fold`, ...), as the grammar spells them: every terminal
    that is a literal word. Editors complete and colour from this, so a new keyword needs no second list."""
    words = {t.pattern.value for t in tree_parser().terminals
             if t.pattern.type == "str" and re.fullmatch(r"[a-z][a-z_]*", t.pattern.value)}
    if re.search(r"(?m)^EMIT_IF(?:\.\d+)?\s*:\s*/if\\b", grammar_text()):  # `if` is a lookahead regex there
        words.add("if")
    return tuple(sorted(words))
