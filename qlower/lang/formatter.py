"""Syntax tree to canonical .qpat text (`qlower fmt`).

One layout for every file keeps reviews about meaning, not spacing. The output
parses back to an equal tree (`parse(format(x)) == parse(x)`), keeps every
comment, and formatting it again changes nothing. The text of each piece comes
from `formatter_parts`; this module places comments and lays out items.
"""

from __future__ import annotations

from collections.abc import Sequence

from qlower.lang import ast
from qlower.lang.formatter_parts import (
    map_lines,
    INDENT, WIDTH, backends_text, expect_text, float_text, format_expr, format_pattern, item_lines,
    literal_text, match_lines, op_decl_text, props_text, quote, tensor_type_text,
)
from qlower.lang.parser import parse

__all__ = ["INDENT", "WIDTH", "float_text", "format_expr", "format_module", "format_pattern", "format_text",
           "literal_text", "quote"]


# --------------------------------------------------------------- comments


def _children(node) -> Sequence | None:
    """The nodes a comment may sit between, for nodes laid out one child a line."""
    if isinstance(node, ast.Module):
        return node.items
    if isinstance(node, (ast.Rule, ast.Test, ast.Fragment)):
        return node.body
    if isinstance(node, ast.Emit):
        return node.items
    if isinstance(node, ast.EmitIf):
        return (*node.then, *node.otherwise)
    if isinstance(node, ast.TestGraph):
        return node.nodes
    return None


class _Comments:
    """Where each free comment goes: before some node, or at the end of a block.

    A comment goes before the innermost item/statement whose lines contain it
    (a trailing comment: see `_split`), or else before the next one; keys are
    node ids since equal-looking statements may repeat.
    """

    def __init__(self, module: ast.Module) -> None:
        self.before: dict[int, list[ast.Comment]] = {}
        self.end: dict[int, list[ast.Comment]] = {}
        for c in module.comments:
            self._place(module, c)

    def _place(self, container, c: ast.Comment) -> None:
        for kid in _children(container):
            span = getattr(kid, "span", None)
            if span is None:
                continue
            if span.line <= c.line <= span.end_line:
                if _children(kid) is not None:
                    return self._place(kid, c)
                self.before.setdefault(id(kid), []).append(c)
                return
            if span.line > c.line:
                self.before.setdefault(id(kid), []).append(c)
                return
        self.end.setdefault(id(container), []).append(c)

    def inside(self, node) -> list[ast.Comment]:
        """All comments placed within a block, for when it is printed on one line."""
        out = [t for kid in _children(node) for t in self.before.get(id(kid), [])]
        return out + self.end.get(id(node), [])


def _gap(c: ast.Comment, below: ast.Comment | ast.Item) -> bool:
    """Whether a blank line (or more) separated a comment from what is below it."""
    line = below.line if isinstance(below, ast.Comment) else getattr(below.span, "line", None)
    return c.own_line and line is not None and line > c.line + 1


def _split(comments: Sequence[ast.Comment], node, lines: Sequence[str]) -> tuple[list[ast.Comment], str]:
    """Comments to print above a node, and the suffix of its line: a comment that
    trailed the node keeps trailing it when the node is still one line."""
    span = getattr(node, "span", None)
    trailing = [c for c in comments if not c.own_line and span is not None and span.line <= c.line <= span.end_line]
    if len(trailing) != 1 or len(lines) != 1:
        return list(comments), ""
    return [c for c in comments if c is not trailing[0]], "  " + trailing[0].text


def _adjacent_ops(prev, item) -> bool:
    """One-line op declarations (or map lines) written on consecutive lines stay grouped."""
    same = (isinstance(prev, ast.OpDecl) and isinstance(item, ast.OpDecl)
            or isinstance(prev, ast.MapDecl) and isinstance(item, ast.MapDecl))
    if not same or item.doc is not None:
        return False
    return prev.span is not None and item.span is not None and item.span.line <= prev.span.end_line + 1


# ------------------------------------------------------------------ layout


class _Printer:
    def __init__(self, module: ast.Module) -> None:
        self.comments = _Comments(module)
        self.lines: list[str] = []

    def put(self, depth: int, text: str) -> None:
        self.lines.append(INDENT * depth + text)

    def notes(self, depth: int, comments: Sequence[ast.Comment]) -> None:
        for c in comments:
            self.put(depth, c.text)

    def node_lines(self, depth: int, lines: list[str], node, comments: Sequence[ast.Comment]) -> None:
        """Lines of one node with the comments placed before it."""
        above, suffix = _split(comments, node, lines)
        self.notes(depth, above)
        self.lines.extend(lines[:-1] + [lines[-1] + suffix])

    def module(self, m: ast.Module) -> None:
        prev, prev_single = None, True
        for item in m.items:
            lines = self.item_lines(item)
            above, suffix = _split(self.comments.before.get(id(item), []), item, lines)
            grouped = not above and (isinstance(prev, ast.Import) and isinstance(item, ast.Import)
                                     or _adjacent_ops(prev, item) and (len(lines) == 1 and prev_single
                                                                       or isinstance(item, ast.OpDecl)))
            if prev is not None and not grouped:
                self.lines.append("")
            self.top_notes(above)
            if above and (not isinstance(item, ast.Import) or _gap(above[-1], item)):
                self.lines.append("")  # keeps them free comments, not the item's doc
            doc = getattr(item, "doc", None)
            if doc is not None:
                self.lines.extend(f"# {line}" if line else "#" for line in doc.split("\n"))
            self.lines.extend(lines[:-1] + [lines[-1] + suffix])
            prev, prev_single = item, len(lines) == 1
        tail = self.comments.end.get(id(m), [])
        if tail and m.items:
            self.lines.append("")
        self.top_notes(tail)

    def top_notes(self, comments: Sequence[ast.Comment]) -> None:
        """Top-level comments keep the blank lines that separated them."""
        for prev, c in zip([None, *comments], comments):
            if prev is not None and _gap(prev, c):
                self.lines.append("")
            self.put(0, c.text)

    def item_lines(self, item: ast.Item) -> list[str]:
        """An item's lines (its doc comment aside)."""
        if isinstance(item, ast.Import):
            return [f"import {quote(item.target) if item.is_path else item.target}"]
        if isinstance(item, ast.OpDecl):
            return [op_decl_text(item)]
        if isinstance(item, ast.MapDecl):
            return map_lines(item)
        if isinstance(item, ast.ComputeDecl):
            return [f"compute {', '.join(item.sources)} as {item.target}" + (" wrapping" if item.wrapping else "")
                    + (f" for {', '.join(item.ops)}" if item.ops else "") + backends_text(item.backends)]
        if isinstance(item, ast.Define):
            return [f"def {item.name}({', '.join(item.params)}) = {format_expr(item.expr)}"]
        saved, self.lines = self.lines, []
        try:
            if isinstance(item, ast.Fragment):
                params = ", ".join(p.name + (": op" if p.op else "...") if p.op or p.rest else p.name
                                   for p in item.params)
                head = f"fragment {item.name}({params}) -> {', '.join(item.results)}"
                self.body(0, head, item, self.emit_entry)
            elif isinstance(item, ast.Rule):
                meta = (f" benefit {item.benefit}" if item.benefit is not None else "") + backends_text(item.backends)
                meta += f" overrides {item.overrides}" if item.overrides else ""
                self.body(0, f"rule {item.name}{meta}", item, self.stmt)
            else:
                head = f"test {item.name}" + (f" for {item.rule}" if item.rule is not None else "")
                self.body(0, head + backends_text(item.backends), item, self.test_stmt)
            return self.lines
        finally:
            self.lines = saved

    def body(self, depth: int, head: str, node, each) -> None:
        kids, tail = _children(node), self.comments.end.get(id(node), [])
        if not kids and not tail:
            self.put(depth, head + " {}")
            return
        self.put(depth, head + " {")
        for kid in kids:
            each(depth + 1, kid, self.comments.before.get(id(kid), []))
        self.notes(depth + 1, tail)
        self.put(depth, "}")

    def stmt(self, depth: int, s: ast.Stmt, comments: Sequence[ast.Comment]) -> None:
        indent = INDENT * depth
        if isinstance(s, ast.Match):
            lines = match_lines(indent, s)
        elif isinstance(s, ast.Require):
            lines = [indent + "require " + format_expr(s.expr)]
        elif isinstance(s, ast.Let):
            lines = [indent + f"let {s.name} = {format_expr(s.expr)}"]
        elif isinstance(s, ast.Fail):
            lines = [indent + "fail " + format_expr(s.message)]
        else:
            return self.block(depth, "emit", s, s.items, s.block, comments)
        self.node_lines(depth, lines, s, comments)

    def test_stmt(self, depth: int, s: ast.TestStmt, comments: Sequence[ast.Comment]) -> None:
        indent = INDENT * depth
        if isinstance(s, ast.TestInput):
            line = f"input {s.name}: {tensor_type_text(s.type)}{props_text(s.props)}"
        elif isinstance(s, ast.TestConst):
            value = f" = {format_expr(s.value)}" if s.value is not None else ""
            line = f"const {s.name}: {tensor_type_text(s.type)}{value}{props_text(s.props)}"
        elif isinstance(s, ast.TestGraph):
            return self.block(depth, "graph", s, s.nodes, s.block, comments)
        else:
            line = expect_text(s)
        self.node_lines(depth, [indent + line], s, comments)

    def block(self, depth: int, keyword: str, node, items: Sequence, block: bool,
              comments: Sequence[ast.Comment]) -> None:
        """`emit`/`graph`: one item on one line unless marked as a block or too long (an `if` never is)."""
        if len(items) == 1 and not block and not isinstance(items[0], ast.EmitIf):
            lines = item_lines(INDENT * depth, keyword + " ", items[0])
            if len(lines) == 1:
                return self.node_lines(depth, lines, node, [*comments, *self.comments.inside(node)])
        self.notes(depth, comments)
        self.body(depth, keyword, node, self.emit_entry)

    def emit_entry(self, depth: int, item, comments: Sequence[ast.Comment]) -> None:
        if isinstance(item, ast.EmitIf):
            self.notes(depth, comments)
            self.emit_if(depth, "if", item)
        else:
            self.node_lines(depth, item_lines(INDENT * depth, "", item), item, comments)

    def emit_if(self, depth: int, keyword: str, item: ast.EmitIf) -> None:
        """`if COND {` ... `} else {` ... `}`; an else holding just another `if` prints as `} else if`."""
        cond = format_expr(item.cond)
        if isinstance(item.cond, ast.Conditional):  # `if (a if c else b) {`: the bracket keeps `if` an emit `if`
            cond = f"({cond})"
        self.put(depth, f"{keyword} {cond} {{")
        for kid in item.then:
            self.emit_entry(depth + 1, kid, self.comments.before.get(id(kid), []))
        rest = item.otherwise
        tail = self.comments.end.get(id(item), [])
        if len(rest) == 1 and isinstance(rest[0], ast.EmitIf) and not self.comments.before.get(id(rest[0])):
            self.lines.append(INDENT * depth + "}")
            start = len(self.lines)
            self.emit_if(depth, "} else if", rest[0])
            del self.lines[start - 1]  # the `}` joins the `else if` line
            self.notes(depth + 1, tail)
            return
        if rest:
            self.put(depth, "} else {")
            for kid in rest:
                self.emit_entry(depth + 1, kid, self.comments.before.get(id(kid), []))
        self.notes(depth + 1, tail)
        self.put(depth, "}")


def format_module(module: ast.Module) -> str:
    """Canonical text for a parsed (or built) module; ends with a newline unless empty."""
    printer = _Printer(module)
    printer.module(module)
    return "\n".join(printer.lines) + "\n" if printer.lines else ""


def format_text(text: str, file: str = "<string>") -> str:
    """Parse and reformat; raises QlowerError when the text does not parse."""
    return format_module(parse(text, file))
