"""Text to syntax tree: lark (LALR, contextual lexer, strict) configured once.

Syntax errors become diagnostics that say what was expected in a rule
author's words, never lark's token names.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, MutableMapping
from pathlib import Path

import lark
from lark import Lark

from qlower.diagnostics import Diagnostic, QlowerError, Span, did_you_mean, error
from qlower.lang import ast
from qlower.lang.fragments import with_inlined_rules
from qlower.lang.builder import DEPTH, FILE, LARK_PLUGINS, Builder
from qlower.lang.grammar import anonymous_terminals, grammar_text, tree_parser  # noqa: F401 - anonymous_terminals re-exported


@functools.cache
def _parser() -> Lark:
    """The parser, built once: tokens are kept so spans come from them (cheaper than lark's
    position propagation), and the AST is built during parsing (no intermediate tree)."""
    return Lark(grammar_text(), parser="lalr", lexer="contextual", strict=True, keep_all_tokens=True,
                maybe_placeholders=True, transformer=Builder(), _plugins=LARK_PLUGINS, cache=True)


def parse(text: str, file: str = "<string>", *, inline: bool = True) -> ast.Module:
    """Parse .qpat text; raises QlowerError with one located diagnostic on bad syntax. `inline`: the
    rules with the file's own fragments and defs inlined; the loader, which sees a file's whole pack,
    asks for none and inlines once with the pack's."""
    text = text.removeprefix("\ufeff")  # a byte-order mark some editors write; not part of line 1
    comments: list[ast.Comment] = []

    def keep(line: int, body: str, own_line: bool) -> None:
        comments.append(ast.Comment(line, body, own_line))

    token = FILE.set(file)
    depth_token = DEPTH.set({})
    try:
        tree = _parse_with_comments(text, keep)
        items = tree.children
    except lark.exceptions.UnexpectedInput:
        raise QlowerError(_describe_error(text, file)) from None
    except lark.exceptions.VisitError as exc:
        # A bad literal (string escape, oversized integer) found while building the tree.
        if isinstance(exc.orig_exc, QlowerError):
            raise exc.orig_exc from None
        if isinstance(exc.orig_exc, RecursionError):
            raise QlowerError(_too_deep(file)) from None
        raise
    except RecursionError:
        raise QlowerError(_too_deep(file)) from None
    finally:
        FILE.reset(token)
        DEPTH.reset(depth_token)
    module = _attach_docs(ast.Module(file, tuple(items), tuple(comments)))
    return with_inlined_rules(module) if inline else module


_ITEM_START = re.compile(r"(?:import|op|rule|test|map|fragment|def|compute)\b")


def parse_pieces(text: str, file: str, cache: MutableMapping,
                 whole: Callable[[str, str], ast.Module] | None = None) -> ast.Module:
    """`parse(text, file, inline=False)`, parsing only the top-level items whose text changed since the texts
    `cache` has seen (an editor's buffer after a keystroke). The text is cut before each line that starts an
    item at column 0 (with the comment lines right above it, its doc); each piece is parsed at its own lines
    and cached by its text and first line. A text whose pieces are mostly new (just opened, or lines
    inserted above most of it) is parsed whole, which is cheaper, and its items are filed under their
    pieces for the next edit. Any piece that does not parse alone sends the whole text to `parse`, so
    errors, and any text the cut misjudges, read exactly as the whole-file parse has them. `whole`: how a
    whole text is parsed when it is (default `parse(text, file, inline=False)`; the loader's reads its
    disk store first)."""
    text = text.removeprefix("\ufeff")
    lines = text.split("\n")
    starts = [0]
    for i, line in enumerate(lines):
        if i and _ITEM_START.match(line):
            j = i
            while j - 1 >= starts[-1] and lines[j - 1].startswith("#"):
                j -= 1
            if j > starts[-1]:
                starts.append(j)
    pieces = [(a, "\n".join(lines[a:b])) for a, b in zip(starts, [*starts[1:], len(lines)], strict=True)]
    keys = [("piece", file, a, piece) for a, piece in pieces]
    if sum(1 for k in keys if k not in cache) * 2 > len(keys):  # mostly new (opened, or lines shifted): whole
        module = whole(text, file) if whole is not None else parse(text, file, inline=False)
        if any(getattr(i, "span", None) is None for i in module.items):
            return module
        bounds = [*starts[1:], len(lines)]
        for (a, _), b, key in zip(pieces, bounds, keys, strict=True):  # what each piece holds, for the next edit
            cache[key] = ast.Module(file, tuple(i for i in module.items if a < i.span.line <= b),
                                    tuple(c for c in module.comments if a < c.line <= b))
        return module
    items: list = []
    comments: list = []
    for (a, piece), key in zip(pieces, keys, strict=True):
        got = cache.get(key)
        if got is None:
            try:
                got = parse("\n" * a + piece, file, inline=False)
            except QlowerError:
                return parse(text, file, inline=False)
            cache[key] = got
        items.extend(got.items)
        comments.extend(got.comments)
    return ast.Module(file, tuple(items), tuple(comments))


def _line_before(text: str, tok: lark.Token) -> str:
    """The text of the token's line before it (empty when lark gave no position)."""
    pos = getattr(tok, "start_pos", None)
    if pos is None or tok.type == "$END":
        return ""
    return text[text.rfind("\n", 0, pos) + 1:pos]


def _describe_error(text: str, file: str) -> Diagnostic:
    try:
        tree_parser().parse(text)
    except lark.exceptions.UnexpectedInput as exc:
        return _syntax_diagnostic(exc, text, file)
    return error("syntax error", span=Span(file, 1, 1, 1, 2), code="syntax")  # pragma: no cover


def _too_deep(file: str) -> Diagnostic:
    return error("expression is nested too deeply", span=Span(file, 1, 1, 1, 2), code="syntax")


def parse_file(path: str | Path) -> ast.Module:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise QlowerError(error(f"cannot read rule file {p}: {exc}", code="io")) from None
    return parse(text, str(p))


def _parse_with_comments(text: str, keep) -> lark.Tree:
    # lexer_callbacks need a parser built with them; comments are rare enough
    # that re-scanning them separately is simpler and keeps one cached parser.
    tree = _parser().parse(text)
    # Split on "\n" only: that is how lark counts lines (str.splitlines also
    # breaks on \r, \x0c, \u2028..., which may sit inside strings).
    for i, line in enumerate(text.split("\n"), start=1):
        idx = _comment_start(line)
        if idx is not None:
            keep(i, line[idx:].rstrip(), not line[:idx].strip())
    return tree


def _comment_start(line: str) -> int | None:
    """Index of a `#` that starts a comment (not inside a string), or None."""
    in_str = False
    esc = False
    for i, ch in enumerate(line):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch == "#":
            return i
    return None


def _attach_docs(module: ast.Module) -> ast.Module:
    """Comment lines directly above an op, compute, rule or test become its doc."""
    by_line = {c.line: c for c in module.comments}
    used: set[int] = set()
    items = []
    for item in module.items:
        span = getattr(item, "span", None)
        if isinstance(item, (ast.OpDecl, ast.ComputeDecl, ast.Rule, ast.MapDecl, ast.Fragment, ast.Define, ast.Test)) \
                and span is not None:
            lines = []
            ln = span.line - 1
            while ln in by_line and by_line[ln].own_line:
                lines.append(by_line[ln])
                ln -= 1
            if lines:
                lines.reverse()
                used.update(c.line for c in lines)
                doc = "\n".join(_strip_hash(c.text) for c in lines)
                item = _evolve(item, doc=doc)
        items.append(item)
    rest = tuple(c for c in module.comments if c.line not in used)
    return ast.Module(module.file, tuple(items), rest)


def _strip_hash(text: str) -> str:
    body = text[1:]
    return body[1:] if body.startswith(" ") else body


def _evolve(item, **changes):
    import attrs

    return attrs.evolve(item, **changes)


# ------------------------------------------------------------------ errors

_WORDS = {
    "NAME": "a name", "INT": "an integer", "FLOAT": "a number", "STRING": "a string",
    "LBRACE": "`{`", "RBRACE": "`}`", "LPAR": "`(`", "RPAR": "`)`", "LSQB": "`[`", "RSQB": "`]`",
    "COMMA": "`,`", "COLON": "`:`", "EQUAL": "`=`", "DOT": "`.`", "MINUS": "`-`", "VBAR": "`|`",
    "ELLIPSIS": "`...`", "OPTIONAL": "`?`", "__ANON_0": "`->`", "RARROW": "`->`",
    "COMP_OP": "a comparison", "ADD_OP": "`+` or `-`", "MUL_OP": "`*`, `/`, `//` or `%`",
    "$END": "end of file", "SHAPE": "`shape`", "DTYPE": "`dtype`", "ENCODING": "`encoding`",
    "ATOL": "`atol`", "RTOL": "`rtol`", "STEPS": "`steps`", "TRUE": "`true`", "FALSE": "`false`",
    "NONE": "`none`", "COMMUTATIVE": "`commutative`", "SHARED": "`shared`", "CONST": "`const`",
}


def _word(term: str) -> str:
    if term in _WORDS:
        return _WORDS[term]
    pattern = _terminal_text(term)
    if pattern is not None:
        return f"`{pattern}`"
    return term.lower()


@functools.cache
def _terminal_map() -> dict[str, str]:
    out = {}
    for t in _parser().terminals:
        if t.pattern.type == "str":
            out[t.name] = t.pattern.value
    return out


def _terminal_text(term: str) -> str | None:
    return _terminal_map().get(term)


_STARTERS = {"op": "an op declaration", "rule": "a rule", "test": "a test", "import": "an import"}


def _syntax_diagnostic(exc: lark.exceptions.UnexpectedInput, text: str, file: str) -> Diagnostic:
    line = getattr(exc, "line", 1) or 1
    column = getattr(exc, "column", 1) or 1
    if line < 1:  # unexpected end of input
        lines = text.split("\n")
        line, column = len(lines), len(lines[-1]) + 1
    expected: set[str] = set()
    found = "this"
    if isinstance(exc, lark.exceptions.UnexpectedToken):
        expected = set(exc.accepts or exc.expected)
        tok = exc.token
        found = "end of file" if tok.type == "$END" else f"`{tok.value}`"
        if tok.type == "$END" and getattr(tok, "end_line", None):
            # lark places $END at the last token; point just past it instead.
            line, column = tok.end_line, tok.end_column
        length = max(1, len(str(tok.value))) if tok.type != "$END" else 1
    elif isinstance(exc, lark.exceptions.UnexpectedCharacters):
        expected = set(exc.allowed or ())
        found = _shown_char(text[exc.pos_in_stream]) if exc.pos_in_stream < len(text) else "end of file"
        length = 1
    else:
        length = 1
    words = sorted({_word(t) for t in expected if not t.startswith("_")})
    hint = None
    if expected and expected <= {"IMPORT", "OP", "RULE", "TEST", "$END"} | set(_terminal_map()):
        kw = {v for k, v in _terminal_map().items() if k in expected}
        if kw & set(_STARTERS):
            words = [_STARTERS[k] for k in sorted(kw & set(_STARTERS))] + (["end of file"] if "$END" in expected else [])
    if isinstance(exc, lark.exceptions.UnexpectedToken) and exc.token.type == "NAME":
        keywords = [v for k, v in _terminal_map().items() if k in expected and v.isidentifier()]
        hint = did_you_mean(str(exc.token.value), keywords)
    if "RBRACE" in expected and found == "end of file":
        hint = "a `{` block is not closed"
    if isinstance(exc, lark.exceptions.UnexpectedToken) and re.match(r"\s*if\s*$", _line_before(text, exc.token)):
        # `if` read as a result name: an emit `if` whose `{` is not on its line (or whose condition wraps)
        hint = "in emit, an `if` keeps its condition and `{` on the `if`'s line"
    msg = f"unexpected {found}"
    if words:
        msg += "; expected " + _join(words)
    span = Span(file, line, column, line, column + length)
    return error(msg, span=span, hint=hint, code="syntax")


def _shown_char(ch: str) -> str:
    """A character as a message shows it: control and odd characters escaped."""
    return f"`{ch}`" if ch.isprintable() else f"`{ascii(ch)[1:-1]}`"


def _join(words: list[str]) -> str:
    if len(words) > 8:
        words = words[:8] + ["..."]
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " or " + words[-1]


# ------------------------------------------------------------ tree → AST
