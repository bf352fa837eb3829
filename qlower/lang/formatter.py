"""Syntax tree to canonical .qpat text (`qlower fmt`).

One layout for every file keeps reviews about meaning, not spacing. The output
parses back to an equal tree (`parse(format(x)) == parse(x)`), keeps every
comment, and formatting it again changes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from qlower.lang import ast
from qlower.lang.parser import parse

WIDTH = 100  # param blocks of longer lines are wrapped, one param a line
INDENT = "  "

# ----------------------------------------------------------------- expressions

# Binding strength, loosest first; mirrors the grammar's expression rules.
_COND, _OR, _AND, _NOT, _CMP, _CONCAT, _SUM, _PRODUCT, _UNARY, _POSTFIX, _ATOM = range(11)
_BINARY = {
    "or": _OR, "and": _AND, "++": _CONCAT, "+": _SUM, "-": _SUM,
    "*": _PRODUCT, "/": _PRODUCT, "//": _PRODUCT, "%": _PRODUCT,
    **{op: _CMP for op in ("==", "!=", "<", "<=", ">", ">=", "in", "not in")},
}
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b", "\f": "\\f"}


def quote(text: str) -> str:
    """A string literal with JSON-style escapes; anything not printable is escaped."""
    out = ['"']
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) > 0xFFFF:  # JSON spells these as a surrogate pair
            code = ord(ch) - 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            out.append(f"\\u{ord(ch):04x}")
    out.append('"')
    return "".join(out)


def literal_text(value: object) -> str:
    """A literal's spelling; floats keep their exact value, infinity is `1e999`."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "none"
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, float):
        if math.isnan(value):
            raise ValueError("NaN has no .qpat spelling")
        if math.isinf(value):
            return "1e999" if value > 0 else "-1e999"
        return float_text(value)
    return str(value)


def float_text(x: float) -> str:
    """The shortest text that reads back as exactly `x`, as rule authors write it:
    `1e-5` rather than `1e-05`, and `1e-4` rather than `0.0001`."""
    text = repr(x)
    if "e" in text:
        mantissa, exp = text.split("e")
        return f"{mantissa.removesuffix('.0')}e{int(exp)}"
    if 0 < abs(x) < 0.01:
        for digits in range(17):
            mantissa, exp = f"{x:.{digits}e}".split("e")
            if float(f"{mantissa}e{exp}") == x:
                short = f"{mantissa}e{int(exp)}"
                return short if len(short) < len(text) else text
    return text


def _prec(e: ast.Expr) -> int:
    if isinstance(e, ast.Conditional):
        return _COND
    if isinstance(e, ast.Binary):
        return _BINARY[e.op]
    if isinstance(e, ast.Unary):
        return _NOT if e.op == "not" else _UNARY
    if isinstance(e, (ast.Index, ast.Slice, ast.Call)):
        return _POSTFIX
    if isinstance(e, ast.Literal) and _is_negative(e.value):
        return _UNARY  # only built by hand; prints as `-n`
    return _ATOM


def _is_negative(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.copysign(1, v) < 0


def format_expr(e: ast.Expr, min_prec: int = _COND) -> str:
    """Expression text with only the parentheses the grammar needs."""
    text = _expr(e)
    return f"({text})" if _prec(e) < min_prec else text


def _expr(e: ast.Expr) -> str:
    if isinstance(e, ast.Literal):
        return literal_text(e.value)
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.ListExpr):
        return "[" + _exprs(e.items) + "]"
    if isinstance(e, ast.Call):
        return f"{e.func}({_exprs(e.args)})"
    if isinstance(e, ast.Index):
        return f"{format_expr(e.target, _POSTFIX)}[{format_expr(e.index)}]"
    if isinstance(e, ast.Slice):
        lo = format_expr(e.lo) if e.lo is not None else ""
        hi = format_expr(e.hi) if e.hi is not None else ""
        return f"{format_expr(e.target, _POSTFIX)}[{lo}:{hi}]"
    if isinstance(e, ast.Unary):
        if e.op == "not":
            return "not " + format_expr(e.operand, _NOT)
        return "-" + format_expr(e.operand, _UNARY)
    if isinstance(e, ast.Binary):
        p = _BINARY[e.op]
        # Left-associative levels accept their own level on the left; comparisons chain nowhere.
        left = format_expr(e.left, p + 1 if p == _CMP else p)
        return f"{left} {e.op} {format_expr(e.right, p + 1)}"
    if isinstance(e, ast.Conditional):
        return f"{format_expr(e.then, _OR)} if {format_expr(e.cond, _OR)} else {format_expr(e.otherwise)}"
    raise TypeError(f"not an expression: {e!r}")


def _exprs(items: Sequence[ast.Expr]) -> str:
    return ", ".join(format_expr(i) for i in items)


# -------------------------------------------------------------- small pieces


def _binders(b: ast.Binders) -> str:
    if not b.names:
        return "_"
    return f"{b.names[0]}..." if b.rest else ", ".join(b.names)


def _shape(dims: Sequence[ast.DimPat]) -> str:
    spell = {"any": "_", "rest": "..."}
    return "[" + ", ".join(spell.get(d.kind, str(d.value)) for d in dims) + "]"


def _value_type(name: str, vt: ast.ValueType | None) -> str:
    if vt is None:
        return name
    shape = _shape(vt.shape) if vt.shape is not None else ""
    parts = (["const"] if vt.const else []) + ([vt.dtype + shape] if vt.dtype else [shape] if shape else [])
    return f"{name}: {' '.join(parts)}" if parts else f"{name}:"


def _attr_value(a: ast.AttrPat) -> str:
    if a.kind == "capture":
        return str(a.value)
    return "_" if a.kind == "any" else literal_text(a.value)


def format_pattern(p: ast.OpPattern) -> str:
    text = f"{' | '.join(p.op_types)}({', '.join(_operand(o) for o in p.operands)})"
    if p.attrs:
        text += " { " + ", ".join(f"{a.name}: {_attr_value(a)}" for a in p.attrs) + " }"
    return text + _flags(p)


def _flags(p: ast.OpPattern) -> str:
    return (" commutative" if p.commutative else "") + (" shared" if p.shared else "")


def _operand(o: ast.OperandPat) -> str:
    if isinstance(o, ast.Capture):
        return _value_type(o.name, o.type)
    if isinstance(o, ast.Wildcard):
        return _value_type("_", o.type)
    if isinstance(o, ast.RestCapture):
        return f"{o.name}..."
    if isinstance(o, ast.NamedNested):
        return f"{o.name} = {format_pattern(o.pattern)}"
    if isinstance(o, ast.Alternatives):
        return "(" + " | ".join(_operand(x) for x in o.options) + ")"
    return format_pattern(o)


def _arg(a: ast.Arg) -> str:
    if a.kind == "rest":
        return f"{a.name}..."
    if a.kind == "none":
        return "_"
    if a.kind == "tensor":
        return f"tensor({format_expr(a.expr)})"
    return str(a.name)


def _props(props: Sequence[ast.ValueProp]) -> str:
    return (" : " + ", ".join(f"{p.kind} {format_expr(p.expr)}" for p in props)) if props else ""


def _tensor_type(t: ast.TensorType) -> str:
    dims = (str(d.lo) if d.hi is None else f"{d.lo}..{d.hi}" for d in t.dims)
    return f"{t.dtype}[{', '.join(dims)}]"


def _number(v: float) -> str:
    """A tolerance: integral ones without a fraction (`steps 2`, `atol 0`)."""
    return str(int(v)) if math.isfinite(v) and v == int(v) and abs(v) < 1e16 else literal_text(float(v))


def _op_decl(d: ast.OpDecl) -> str:
    marks = {"one": "", "optional": "?", "variadic": "..."}
    operands = ", ".join(o.name + marks[o.kind] for o in d.operands)
    results = [r.name + ("..." if r.variadic else "") for r in d.results]
    res = results[0] if len(results) == 1 and not d.results[0].variadic else f"({', '.join(results)})"
    text = f"op {d.op}({operands}) -> {res}" + (" commutative" if d.commutative else "")
    if d.attrs:
        decls = (f"{a.name}: {a.type}" + (f" = {format_expr(a.default)}" if a.default is not None else "")
                 for a in d.attrs)
        text += " { " + ", ".join(decls) + " }"
    return text


def _backends(names: tuple[str, ...] | None) -> str:
    return f" backends({', '.join(names)})" if names else ""


def _block_lines(indent: str, head: str, items: Sequence[str], tail: str) -> list[str]:
    """`head { a: 1, b: 2 } tail` on one line, or, when the line is too long
    mostly because of the block, one item a line."""
    block = (" { " + ", ".join(items) + " }") if items else ""
    line = indent + head + block + tail
    if len(line) <= WIDTH or not items or len(block) <= len(tail):
        return [line]
    return [indent + head + " {", *(indent + INDENT + i + "," for i in items), indent + "}" + tail]


def _op_lines(indent: str, head: str, params: Sequence[ast.Param], props: Sequence[ast.ValueProp]) -> list[str]:
    """An emitted op or graph node."""
    return _block_lines(indent, head, [f"{p.name}: {format_expr(p.expr)}" for p in params], _props(props))


def _match_lines(indent: str, m: ast.Match) -> list[str]:
    """A match statement; the root pattern's attribute block wraps like params."""
    p = m.pattern
    head = f"match {_binders(m.binders)} = {' | '.join(p.op_types)}({', '.join(_operand(o) for o in p.operands)})"
    return _block_lines(indent, head, [f"{a.name}: {_attr_value(a)}" for a in p.attrs], _flags(p))


def _item_lines(indent: str, prefix: str, item) -> list[str]:
    if isinstance(item, ast.EmitLet):
        return [indent + prefix + f"let {item.name} = {format_expr(item.expr)}"]
    head = prefix + _binders(item.binders) + " = "
    if isinstance(item, ast.EmitAlias):
        return [indent + head + item.source]
    if isinstance(item, ast.EmitTensor):
        return [indent + head + f"tensor({format_expr(item.expr)})" + _props(item.props)]
    args = ", ".join(_arg(a) for a in item.args)
    return _op_lines(indent, head + f"{item.op}({args})", item.params, item.props)


def _expect(e: ast.Expect) -> str:
    if e.kind == "ops":
        return "expect ops " + ", ".join(e.ops)
    if e.kind == "no_ops":
        return "expect ops none"
    if e.kind == "close":
        return "expect close" + "".join(f" {k} {_number(v)}" for k, v in e.tolerances)
    if e.kind == "error":
        return "expect error " + quote(e.text or "")
    return f"expect rule {e.text}"


# --------------------------------------------------------------- comments


def _children(node) -> Sequence | None:
    """The nodes a comment may sit between, for nodes laid out one child a line."""
    if isinstance(node, ast.Module):
        return node.items
    if isinstance(node, (ast.Rule, ast.Test)):
        return node.body
    if isinstance(node, ast.Emit):
        return node.items
    if isinstance(node, ast.TestGraph):
        return node.nodes
    return None


class _Comments:
    """Where each free comment goes: before some node, or at the end of a block.

    A comment goes before the innermost item/statement whose lines contain it
    (trailing comments move above their line) or else before the next one;
    keys are node ids since equal-looking statements may repeat.
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
    """One-line op declarations written on consecutive lines stay grouped."""
    if not (isinstance(prev, ast.OpDecl) and isinstance(item, ast.OpDecl)) or item.doc is not None:
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

    def emit_lines(self, depth: int, lines: list[str], node, comments: Sequence[ast.Comment]) -> None:
        """Lines of one node with the comments placed before it."""
        above, suffix = _split(comments, node, lines)
        self.notes(depth, above)
        self.lines.extend(lines[:-1] + [lines[-1] + suffix])

    def module(self, m: ast.Module) -> None:
        prev = None
        for item in m.items:
            lines = self.item_lines(item)
            above, suffix = _split(self.comments.before.get(id(item), []), item, lines)
            grouped = not above and (isinstance(prev, ast.Import) and isinstance(item, ast.Import)
                                     or _adjacent_ops(prev, item))
            if prev is not None and not grouped:
                self.lines.append("")
            self.top_notes(above)
            if above and (not isinstance(item, ast.Import) or _gap(above[-1], item)):
                self.lines.append("")  # keeps them free comments, not the item's doc
            doc = getattr(item, "doc", None)
            if doc is not None:
                self.lines.extend(f"# {line}" if line else "#" for line in doc.split("\n"))
            self.lines.extend(lines[:-1] + [lines[-1] + suffix])
            prev = item
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
            return [_op_decl(item)]
        saved, self.lines = self.lines, []
        try:
            if isinstance(item, ast.Rule):
                meta = (f" benefit {item.benefit}" if item.benefit is not None else "") + _backends(item.backends)
                self.body(0, f"rule {item.name}{meta}", item, self.stmt)
            else:
                head = f"test {item.name}" + (f" for {item.rule}" if item.rule is not None else "")
                self.body(0, head + _backends(item.backends), item, self.test_stmt)
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
            lines = _match_lines(indent, s)
        elif isinstance(s, ast.Require):
            lines = [indent + "require " + format_expr(s.expr)]
        elif isinstance(s, ast.Let):
            lines = [indent + f"let {s.name} = {format_expr(s.expr)}"]
        elif isinstance(s, ast.Fail):
            lines = [indent + "fail " + format_expr(s.message)]
        else:
            return self.block(depth, "emit", s, s.items, s.block, comments)
        self.emit_lines(depth, lines, s, comments)

    def test_stmt(self, depth: int, s: ast.TestStmt, comments: Sequence[ast.Comment]) -> None:
        indent = INDENT * depth
        if isinstance(s, ast.TestInput):
            line = f"input {s.name}: {_tensor_type(s.type)}{_props(s.props)}"
        elif isinstance(s, ast.TestConst):
            value = f" = {format_expr(s.value)}" if s.value is not None else ""
            line = f"const {s.name}: {_tensor_type(s.type)}{value}{_props(s.props)}"
        elif isinstance(s, ast.TestGraph):
            return self.block(depth, "graph", s, s.nodes, s.block, comments)
        else:
            line = _expect(s)
        self.emit_lines(depth, [indent + line], s, comments)

    def block(self, depth: int, keyword: str, node, items: Sequence, block: bool,
              comments: Sequence[ast.Comment]) -> None:
        """`emit`/`graph`: one item on one line unless marked as a block or too long."""
        if len(items) == 1 and not block:
            lines = _item_lines(INDENT * depth, keyword + " ", items[0])
            if len(lines) == 1:
                return self.emit_lines(depth, lines, node, [*comments, *self.comments.inside(node)])
        self.notes(depth, comments)
        self.body(depth, keyword, node,
                  lambda d, it, cs: self.emit_lines(d, _item_lines(INDENT * d, "", it), it, cs))


def format_module(module: ast.Module) -> str:
    """Canonical text for a parsed (or built) module; ends with a newline unless empty."""
    printer = _Printer(module)
    printer.module(module)
    return "\n".join(printer.lines) + "\n" if printer.lines else ""


def format_text(text: str, file: str = "<string>") -> str:
    """Parse and reformat; raises QlowerError when the text does not parse."""
    return format_module(parse(text, file))
