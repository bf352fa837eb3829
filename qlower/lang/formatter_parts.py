"""Text for the pieces of a .qpat file: expressions, patterns, one-line
declarations and (possibly wrapped) blocks. `formatter` lays them out.

Each piece parses back to the node it came from: expressions get exactly the
parentheses the grammar's precedence needs, literals keep their exact value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from qlower.lang import ast

WIDTH = 100  # attribute/param blocks of longer lines are wrapped, one item a line
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
    """Text that reads back as exactly `x`, spelled as rule authors write it:
    `1e-5` rather than `1e-05`, `1e-4` rather than `0.0001`, but `0.001`."""
    text = repr(x)
    if "e" in text:
        mantissa, exp = text.split("e")
        return f"{mantissa.removesuffix('.0')}e{int(exp)}"
    if 0 < abs(x) < 0.01:
        for digits in range(17):
            mantissa, exp = f"{x:.{digits}e}".split("e")
            if float(f"{mantissa}e{exp}") == x:
                short = f"{mantissa}e{int(exp)}"
                return short if len(short) <= len(text) - 2 else text
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
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return v < 0 if isinstance(v, int) else math.copysign(1, v) < 0


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


def binders_text(b: ast.Binders) -> str:
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
        return _value_type(o.name + ("?" if o.optional else ""), o.type)
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
    if a.kind == "expr":
        return format_expr(a.expr)
    if a.kind == "rest":
        return f"{a.name}..."
    if a.kind == "none":
        return "_"
    if a.kind == "tensor":
        return f"tensor({format_expr(a.expr)})"
    return str(a.name)


def props_text(props: Sequence[ast.ValueProp]) -> str:
    return (" : " + ", ".join(f"{p.kind} {format_expr(p.expr)}" for p in props)) if props else ""


def tensor_type_text(t: ast.TensorType) -> str:
    dims = (str(d.lo) if d.hi is None else f"{d.lo}..{d.hi}" for d in t.dims)
    return f"{t.dtype}[{', '.join(dims)}]"


def _number(v: float) -> str:
    """A tolerance: integral ones without a fraction (`steps 2`, `atol 0`)."""
    return str(int(v)) if math.isfinite(v) and v == int(v) and abs(v) < 1e16 else literal_text(float(v))


def op_decl_text(d: ast.OpDecl) -> str:
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


def backends_text(names: tuple[str, ...] | None) -> str:
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
    return _block_lines(indent, head, [f"{p.name}: {format_expr(p.expr)}" for p in params], props_text(props))


def match_lines(indent: str, m: ast.Match) -> list[str]:
    """A match statement; the root pattern's attribute block wraps like params."""
    p = m.pattern
    head = f"match {binders_text(m.binders)} = {' | '.join(p.op_types)}({', '.join(_operand(o) for o in p.operands)})"
    return _block_lines(indent, head, [f"{a.name}: {_attr_value(a)}" for a in p.attrs], _flags(p))


def item_lines(indent: str, prefix: str, item) -> list[str]:
    if isinstance(item, ast.EmitLet):
        return [indent + prefix + f"let {item.name} = {format_expr(item.expr)}"]
    head = prefix + binders_text(item.binders) + (" ?= " if getattr(item, "default", False) else " = ")
    if isinstance(item, ast.EmitAlias):
        return [indent + head + item.source]
    if isinstance(item, ast.EmitTensor):
        return [indent + head + f"tensor({format_expr(item.expr)})" + props_text(item.props)]
    if isinstance(item, ast.FragmentCall):
        return _op_lines(indent, head + f"{item.name}({', '.join(_arg(a) for a in item.args)})", item.params,
                         item.props)
    args = ", ".join(_arg(a) for a in item.args)
    fold = "fold " if getattr(item, "fold", False) else ""
    return _op_lines(indent, head + f"{fold}{item.op}({args})", item.params, item.props)


def map_lines(m: ast.MapDecl) -> list[str]:
    """`map [name:] PATTERN -> OP(args) {params} meta [tested TYPE]`; blocks wrap like an emitted op's."""
    p = m.pattern
    name = f"{m.name}: " if m.name is not None else ""
    head = f"map {name}{' | '.join(p.op_types)}({', '.join(_operand(o) for o in p.operands)})"
    attrs = [f"{a.name}: {_attr_value(a)}" for a in p.attrs]
    target = _flags(p) + f" -> {m.op}({', '.join(_arg(a) for a in m.args)})"
    first: list[str] = []
    if attrs and len(head + " { " + ", ".join(attrs) + " }" + target) > WIDTH:
        # the pattern's attribute block wraps like a rule's match block, one attribute a line
        first = [head + " {", *(INDENT + a + "," for a in attrs)]
        head = "}"
    elif attrs:
        head += " { " + ", ".join(attrs) + " }"
    head += target
    tail = (f" benefit {m.benefit}" if m.benefit is not None else "") + backends_text(m.backends)
    tail += f" overrides {m.overrides}" if m.overrides else ""
    tail += f" tested {tensor_type_text(m.test_type)}" if m.test_type is not None else ""
    return first + _block_lines("", head, [f"{q.name}: {format_expr(q.expr)}" for q in m.params], tail)


def expect_text(e: ast.Expect) -> str:
    if e.kind == "ops":
        return "expect ops " + ", ".join(e.ops)
    if e.kind == "no_ops":
        return "expect ops none"
    if e.kind == "close":
        return "expect close" + "".join(f" {k} {_number(v)}" for k, v in e.tolerances)
    if e.kind == "error":
        return "expect error " + quote(e.text or "")
    return f"expect rule {e.text}"
