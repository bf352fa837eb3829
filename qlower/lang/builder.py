"""Building the .qpat AST while lark parses: one method per grammar rule.

The parser keeps every token, so each node's span comes from its first and
last tokens (keywords and brackets included) without lark's position
propagation, and the tree is never materialised.
"""

from __future__ import annotations

import contextvars
import json

import attrs

from lark import Token, Transformer, v_args

from qlower.diagnostics import QlowerError, Span, error
from qlower.lang import ast
from qlower.lang.grammar import anonymous_terminals

# The file being parsed, for the spans the builder makes; a context variable so
# the one cached parser (with its inline builder) stays safe across threads.
FILE: contextvars.ContextVar[str] = contextvars.ContextVar("qpat_file", default="<string>")
# Nesting depth of the AST nodes built so far in this parse (by id; the nodes outlive the parse).
DEPTH: contextvars.ContextVar[dict[int, int]] = contextvars.ContextVar("qpat_depth")
MAX_DEPTH = 200  # deeper expressions would exhaust Python's stack in later stages

try:  # optional: lark's Cython LALR/lexer (same results, about twice as fast)
    import lark_cython
    LARK_PLUGINS = lark_cython.plugins
    _TOKENS: tuple[type, ...] = (Token, lark_cython.Token)
except ImportError:  # pragma: no cover - depends on the environment
    LARK_PLUGINS = {}
    _TOKENS = (Token,)


def _unquote(tok: Token, file: str) -> str:
    """A STRING token's text; a bad escape is a located syntax error."""
    try:
        # strict=False: raw tabs and other control characters are allowed inside strings.
        return json.loads(str(tok), strict=False)
    except ValueError as exc:
        msg = getattr(exc, "msg", str(exc))
        raise QlowerError(error(f"bad string literal: {msg.lower()}", span=_token_span(file, tok),
                                hint='escapes are JSON-style: \\" \\\\ \\n \\t \\uXXXX',
                                code="syntax")) from None


def _int(tok: Token, file: str) -> int:
    """An INT token's value: decimal (leading zeros allowed) or 0x hex."""
    text = str(tok)
    try:
        value = int(text[2:], 16) if text.startswith("0x") else int(text, 10)
    except ValueError:  # more digits than Python converts
        value = None
    if value is None or value >= _INT_LIMIT:  # no QNN param or dim holds it, and no float either
        raise QlowerError(error("integer literal is too large (the limit is 2**64 - 1)",
                                span=_token_span(file, tok), code="syntax")) from None
    return value


_INT_LIMIT = 1 << 64


def _token_span(file: str, tok: Token) -> Span:
    line, col = tok.line or 1, tok.column or 1
    return Span(file, line, col, tok.end_line or line, tok.end_column or col + 1)


class _Dims(tuple):
    """A shape pattern's dims that remember the span of their brackets."""

    def __new__(cls, items, span: Span) -> _Dims:
        self = super().__new__(cls, items)
        self.span = span
        return self

    def __reduce__(self):
        return tuple, (tuple(self),)


class _Spanned(list):
    """A list built from a bracketed group (`{ a: 1 }`) that remembers the span of its brackets, so the
    node it ends also ends on its closing bracket."""

    def __init__(self, items, span: Span) -> None:
        super().__init__(items)
        self.span = span

    def __reduce__(self):
        return list, (list(self),)


class _SpannedTuple(tuple):
    """A tuple built from a bracketed group (`(y, z)`) that remembers the span of its brackets."""

    def __new__(cls, items, span: Span) -> _SpannedTuple:
        self = super().__new__(cls, items)
        self.span = span
        return self

    def __reduce__(self):
        return tuple, (tuple(self),)


@attrs.frozen
class _Value:
    """A literal's value with the span of its token: a bare int has none, and a node ending on one would
    otherwise end nowhere."""

    value: object
    span: Span


class _Name(str):
    """A dotted name (`mllm.Repeat`) that remembers where it was written, so nodes
    starting with one get their span; it is a plain string in every other respect."""

    def __new__(cls, text: str, span: Span) -> _Name:
        self = super().__new__(cls, text)
        self.span = span
        return self

    def __reduce__(self):
        return str, (str(self),)


def _edge(x, first: bool):
    """(line, column) where the first token under x starts, or (end_line, end_column) where
    the last one ends; None when x holds no token."""
    if x is None:
        return None
    if isinstance(x, _TOKENS):
        return (x.line, x.column) if first else (x.end_line, x.end_column)
    span = x if isinstance(x, Span) else getattr(x, "span", None)
    if span is not None:
        return (span.line, span.column) if first else (span.end_line, span.end_column)
    items = x.items if isinstance(x, (_Params, _Props, _Else)) else x if isinstance(x, (list, tuple)) else ()
    for y in (items if first else reversed(items)):
        r = _edge(y, first)
        if r is not None:
            return r
    return None


def _with_span(f, data, children, meta):
    """Give each builder method the node's span (from all its tokens, punctuation and
    keywords included) and its children without the anonymous tokens."""
    first = _edge(children, True)
    last = _edge(children, False)
    file = FILE.get()
    span = Span(file, first[0], first[1], last[0], last[1]) if first and last else Span(file, 1, 1, 1, 2)
    anon = anonymous_terminals()
    kept = [c for c in children if not (isinstance(c, _TOKENS) and c.type in anon)]
    depths = DEPTH.get()
    d = 0
    for c in kept:
        dc = depths.get(id(c), 0)
        if dc > d:
            d = dc
    result = f(span, kept)
    if hasattr(result, "span"):
        if d >= MAX_DEPTH:
            raise QlowerError(error(f"expression is nested too deeply (more than {MAX_DEPTH} levels)", span=span,
                                    code="syntax"))
        depths[id(result)] = d + 1
    return result


@v_args(wrapper=_with_span)
class Builder(Transformer):

    @property
    def file(self) -> str:
        return FILE.get()

    def _s(self, meta) -> Span:
        return meta

    def atom(self, meta, ch):
        return ch[0]  # a parenthesised expression

    # modules
    def import_decl(self, meta, ch):
        (t,) = ch
        if isinstance(t, _TOKENS) and t.type == "STRING":
            return ast.Import(_unquote(t, self.file), True, span=self._s(meta))
        return ast.Import(t, False, span=self._s(meta))

    def dotted(self, meta, ch):
        return _Name(".".join(map(str, ch)), meta)

    def qname(self, meta, ch):
        return _Name(f"{ch[0]}.{ch[1]}", meta)

    # declarations
    def compute_decl(self, meta, ch):
        names, ops, backends, wrapping = [], (), None, False
        for c in ch:
            if isinstance(c, tuple) and c and c[0] == "wrap":
                wrapping = True
            elif isinstance(c, tuple) and c and c[0] == "ops":
                ops = c[1]
            elif isinstance(c, tuple) and c and c[0] == "backends":
                backends = c[1]
            else:
                names.append(str(c))
        return ast.ComputeDecl(tuple(names[:-1]), names[-1], ops, backends, span=self._s(meta), wrapping=wrapping)

    def compute_wrap(self, meta, ch):
        return ("wrap", True)

    def compute_ops(self, meta, ch):
        return ("ops", tuple(str(c) for c in ch))

    def compute_backends(self, meta, ch):
        return ("backends", tuple(str(c) for c in ch))

    def op_decl(self, meta, ch):
        op, *rest = ch
        operands, results, flags, attr_decls = [], (), False, ()
        for c in rest:
            if isinstance(c, ast.OperandDecl):
                operands.append(c)
            elif isinstance(c, tuple) and c and isinstance(c[0], ast.ResultDecl):
                results = c
            elif c == "commutative":
                flags = True
            elif isinstance(c, list):
                attr_decls = tuple(c)
        return ast.OpDecl(op, tuple(operands), results, attr_decls, flags, span=self._s(meta))

    def operand_decl(self, meta, ch):
        name, mark = ch
        kind = "one" if mark is None else ("optional" if mark == "?" else "variadic")
        return ast.OperandDecl(str(name), kind, span=self._s(meta))

    def result_decls(self, meta, ch):
        return _SpannedTuple(ch, meta)

    def result_decl(self, meta, ch):
        return ast.ResultDecl(str(ch[0]), ch[1] is not None, span=self._s(meta))

    def op_flag(self, meta, ch):
        return _Name("commutative", meta)

    def attr_decls(self, meta, ch):
        return _Spanned((c for c in ch if c is not None), meta)

    # An optional group holding a keyword (`["=" expr]`) leaves one placeholder per kept
    # token when absent, so these read their optional parts by kind, not by position.
    def attr_decl(self, meta, ch):
        default = next((c for c in ch[2:] if c is not None), None)
        return ast.AttrDecl(str(ch[0]), ch[1], default, span=self._s(meta))

    def type_ref(self, meta, ch):
        arg = next((c for c in ch[1:] if isinstance(c, ast.TypeRef)), None)
        return ast.TypeRef(str(ch[0]), arg, span=self._s(meta))

    # rules
    def rule_decl(self, meta, ch):
        name, *rest = ch
        benefit = backends = overrides = None
        body = []
        for c in rest:
            if isinstance(c, tuple) and c[0] == "benefit":
                benefit = c[1]
            elif isinstance(c, tuple) and c[0] == "backends":
                backends = c[1]
            elif isinstance(c, tuple) and c[0] == "overrides":
                overrides = c[1]
            else:
                body.append(c)
        return ast.Rule(str(name), tuple(body), benefit, backends, overrides=overrides, span=self._s(meta))

    def benefit(self, meta, ch):
        return ("benefit", ch[0])

    def backends(self, meta, ch):
        return ("backends", tuple(str(c) for c in ch))

    def overrides(self, meta, ch):
        return ("overrides", str(ch[0]))

    def signed_int(self, meta, ch):
        return _int(ch[0], self.file)

    def negative_int(self, meta, ch):
        return -_int(ch[0], self.file)

    def match_stmt(self, meta, ch):
        return ast.Match(ch[0], ch[1], span=self._s(meta))

    def bind_one(self, meta, ch):
        return ast.Binders((str(ch[0]),), span=self._s(meta))

    def bind_rest(self, meta, ch):
        return ast.Binders((str(ch[0]),), True, span=self._s(meta))

    def bind_many(self, meta, ch):
        return ast.Binders(tuple(map(str, ch)), span=self._s(meta))

    def bind_none(self, meta, ch):
        return ast.Binders((), span=self._s(meta))

    def op_pattern(self, meta, ch):
        types, *rest = ch
        operands, attr_pats, comm, shared = [], (), False, False
        for c in rest:
            if c is None:
                continue
            if isinstance(c, list):
                attr_pats = tuple(c)
            elif c == "commutative":
                comm = True
            elif c == "shared":
                shared = True
            else:
                operands.append(c)
        return ast.OpPattern(types, tuple(operands), attr_pats, comm, shared, span=self._s(meta))

    def op_types(self, meta, ch):
        return tuple(ch)

    def pattern_flag(self, meta, ch):
        return _Name(str(ch[0]), meta)

    def capture(self, meta, ch):
        vt = next((c for c in ch[1:] if isinstance(c, ast.ValueType)), None)
        optional = any(isinstance(c, _TOKENS) and c.type == "OPTIONAL" for c in ch[1:])
        return ast.Capture(str(ch[0]), vt, optional, span=self._s(meta))

    def wildcard(self, meta, ch):
        vt = next((c for c in ch if isinstance(c, ast.ValueType)), None)
        return ast.Wildcard(vt, span=self._s(meta))

    def rest_capture(self, meta, ch):
        return ast.RestCapture(str(ch[0]), span=self._s(meta))

    def nested(self, meta, ch):
        return ch[0]

    def named_nested(self, meta, ch):
        return ast.NamedNested(str(ch[0]), ch[1], span=self._s(meta))

    def alternatives(self, meta, ch):
        return ast.Alternatives(tuple(ch), span=self._s(meta))

    def value_type(self, meta, ch):
        const, dtype, shape = False, None, None
        for c in ch:
            if isinstance(c, _TOKENS) and c.type == "CONST":
                const = True
            elif isinstance(c, _TOKENS):
                dtype = str(c)
            elif isinstance(c, tuple):
                shape = tuple(c)
        return ast.ValueType(const, dtype, shape, span=self._s(meta))

    def shape_pat(self, meta, ch):
        return _Dims((c for c in ch if c is not None), meta)

    def dim_int(self, meta, ch):
        return ast.DimPat("int", _int(ch[0], self.file), span=self._s(meta))

    def dim_capture(self, meta, ch):
        return ast.DimPat("capture", str(ch[0]), span=self._s(meta))

    def dim_any(self, meta, ch):
        return ast.DimPat("any", span=self._s(meta))

    def dim_rest(self, meta, ch):
        return ast.DimPat("rest", span=self._s(meta))

    def attr_pats(self, meta, ch):
        return _Spanned((c for c in ch if c is not None), meta)

    def attr_pat(self, meta, ch):
        kind, value, _where = ch[1]
        return ast.AttrPat(str(ch[0]), kind, value, span=self._s(meta))

    def attr_capture(self, meta, ch):
        return ("capture", str(ch[0]), meta)

    def attr_any(self, meta, ch):
        return ("any", None, meta)

    def attr_literal(self, meta, ch):
        return ("literal", ch[0].value, meta)

    def attr_lit(self, meta, ch):
        c = ch[0]
        if isinstance(c, ast.Literal):
            return _Value(c.value, meta)
        if isinstance(c, ast.Unary):
            return _Value(-c.operand.value, meta)
        return _Value(_token_value(c, self.file), meta)

    # statements
    def require_stmt(self, meta, ch):
        return ast.Require(ch[0], span=self._s(meta))

    def let_stmt(self, meta, ch):
        return ast.Let(str(ch[0]), ch[1], span=self._s(meta))

    def fail_stmt(self, meta, ch):
        return ast.Fail(ch[0], span=self._s(meta))

    def emit_stmt(self, meta, ch):
        block = len(ch) != 1 or not _single_line(meta)
        return ast.Emit(tuple(ch), block, span=self._s(meta))

    def emit_item(self, meta, ch):
        binders, (kind, payload, _where) = ch
        s = self._s(meta)
        if kind in ("op", "fold"):
            op, args, params, props = payload
            return ast.EmitOp(binders, op, args, params, props, fold=kind == "fold", span=s)
        if kind == "alias":
            return ast.EmitAlias(binders, payload, span=s)
        if kind == "call":
            name, args, params, props = payload
            return ast.FragmentCall(binders, name, args, span=s, params=params, props=props)
        expr, props = payload
        return ast.EmitTensor(binders, expr, props, span=s)

    def emit_default(self, meta, ch):
        item = self.emit_item(meta, ch)
        if isinstance(item, ast.FragmentCall):
            raise QlowerError(error("a default (`?=`) emits one op, alias or tensor; it cannot call a fragment",
                                    span=item.span, code="default-fragment",
                                    hint="bind the fragment's result with `=` in an `if` on the operand instead"))
        return attrs.evolve(item, default=True)

    def emit_fold(self, meta, ch):
        kind, payload, where = ch[0]
        return ("fold", payload, where)

    def map_decl(self, meta, ch):
        name = next((str(c) for c in ch if isinstance(c, _TOKENS) and c.type == "NAME"), None)
        i = next(i for i, c in enumerate(ch) if isinstance(c, ast.OpPattern))
        pattern, op, *rest = ch[i:]
        benefit = backends = overrides = test_type = None
        args: list[ast.Arg] = []
        params: tuple = ()
        for c in rest:
            if isinstance(c, ast.Arg):
                args.append(c)
            elif isinstance(c, _Params):
                params = c.items
            elif isinstance(c, ast.TensorType):
                test_type = c
            elif isinstance(c, tuple) and c[0] == "benefit":
                benefit = c[1]
            elif isinstance(c, tuple) and c[0] == "backends":
                backends = c[1]
            elif isinstance(c, tuple) and c[0] == "overrides":
                overrides = c[1]
        return ast.MapDecl(name, pattern, op, tuple(args), params, benefit, backends, overrides, test_type,
                           span=self._s(meta))

    def fragment_decl(self, meta, ch):
        toks = [c for c in ch if isinstance(c, _TOKENS) and c.type == "NAME"]
        params = tuple(c for c in ch if isinstance(c, ast.FragmentParam))
        body = tuple(c for c in ch if c is not None and not isinstance(c, (*_TOKENS, ast.FragmentParam)))
        return ast.Fragment(str(toks[0]), params, tuple(str(t) for t in toks[1:]), body, span=self._s(meta))

    def frag_param(self, meta, ch):
        return ast.FragmentParam(str(ch[0]), ch[1] is not None, span=self._s(meta))

    def frag_op_param(self, meta, ch):
        return ast.FragmentParam(str(ch[0]), span=self._s(meta), op=True)

    def def_decl(self, meta, ch):
        names = [str(c) for c in ch if isinstance(c, _TOKENS) and c.type == "NAME"]
        return ast.Define(names[0], tuple(names[1:]), ch[-1], span=self._s(meta))

    def emit_call(self, meta, ch):
        args, params, props = _call_parts([c for c in ch[1:] if c is not None])
        return ("call", (str(ch[0]), args, params, props), meta)

    def emit_if(self, meta, ch):
        cond, *rest = [c for c in ch if not (isinstance(c, _TOKENS) and c.type == "EMIT_IF")]
        otherwise: tuple = ()
        if rest and isinstance(rest[-1], _Else):
            otherwise = rest.pop().items
        return ast.EmitIf(cond, tuple(c for c in rest if c is not None), otherwise, span=self._s(meta))

    def emit_else(self, meta, ch):
        return _Else(tuple(c for c in ch if c is not None), meta)

    def else_if(self, meta, ch):
        return _Else((ch[0],), meta)

    def arg_expr(self, meta, ch):
        return ast.Arg("expr", expr=ch[0], span=self._s(meta))

    def arg_op(self, meta, ch):
        return ast.Arg("op", str(ch[0]), span=self._s(meta))

    def map_test(self, meta, ch):
        return ch[0]

    def emit_let(self, meta, ch):
        return ast.EmitLet(str(ch[0]), ch[1], span=self._s(meta))

    def emit_op(self, meta, ch):
        op, *rest = ch
        return ("op", (op, *_call_parts(rest)), meta)

    def emit_alias(self, meta, ch):
        return ("alias", str(ch[0]), meta)

    def emit_tensor(self, meta, ch):
        props = ch[1].items if len(ch) > 1 and ch[1] is not None else ()
        return ("tensor", (ch[0], props), meta)

    def arg_value(self, meta, ch):
        return ast.Arg("value", str(ch[0]), span=self._s(meta))

    def arg_rest(self, meta, ch):
        return ast.Arg("rest", str(ch[0]), span=self._s(meta))

    def arg_none(self, meta, ch):
        return ast.Arg("none", span=self._s(meta))

    def arg_tensor(self, meta, ch):
        return ast.Arg("tensor", expr=ch[0], span=self._s(meta))

    def params(self, meta, ch):
        return _Params(tuple(c for c in ch if c is not None), meta)

    def param(self, meta, ch):
        return ast.Param(str(ch[0]), ch[1], span=self._s(meta))

    def value_props(self, meta, ch):
        return _Props(tuple(ch))

    def value_prop(self, meta, ch):
        return ast.ValueProp(str(ch[0]), ch[1], span=self._s(meta))

    # tests
    def test_decl(self, meta, ch):
        names = [c for c in ch if isinstance(c, _TOKENS)]
        name, rule = names[0], (names[1] if len(names) > 1 else None)
        backends = None
        body = []
        for c in ch:
            if isinstance(c, tuple) and c and c[0] == "backends":
                backends = c[1]
            elif c is not None and not isinstance(c, _TOKENS):
                body.append(c)
        return ast.Test(str(name), tuple(body), str(rule) if rule is not None else None, backends,
                        span=self._s(meta))

    def test_backends(self, meta, ch):
        return ("backends", tuple(str(c) for c in ch))

    def test_input(self, meta, ch):
        return ast.TestInput(str(ch[0]), ch[1], ch[2].items if ch[2] is not None else (), span=self._s(meta))

    def test_const(self, meta, ch):
        ch = ch[1:]  # the `const` keyword is a named terminal (value types use it too), so it is kept
        rest = [c for c in ch[2:] if c is not None]
        props = next((c.items for c in rest if isinstance(c, _Props)), ())
        value = next((c for c in rest if not isinstance(c, _Props)), None)
        return ast.TestConst(str(ch[0]), ch[1], value, props, span=self._s(meta))

    def tensor_type(self, meta, ch):
        return ast.TensorType(str(ch[0]), tuple(c for c in ch[1:] if c is not None), span=self._s(meta))

    def dim_range(self, meta, ch):
        ints = [c for c in ch if c is not None]
        hi = _int(ints[1], self.file) if len(ints) > 1 else None
        return ast.DimRange(_int(ints[0], self.file), hi, span=self._s(meta))

    def test_graph(self, meta, ch):
        return ast.TestGraph(tuple(ch), block=not (len(ch) == 1 and _single_line(meta)), span=self._s(meta))

    def graph_node(self, meta, ch):
        binders, op, *rest = ch
        return ast.GraphNode(binders, op, *_call_parts(rest), span=self._s(meta))

    def expect_ops(self, meta, ch):
        return ast.Expect("ops", ops=tuple(ch), span=self._s(meta))

    def expect_no_ops(self, meta, ch):
        return ast.Expect("no_ops", span=self._s(meta))

    def expect_close(self, meta, ch):
        return ast.Expect("close", tolerances=tuple(ch), span=self._s(meta))

    def expect_error(self, meta, ch):
        return ast.Expect("error", text=_unquote(ch[0], self.file), span=self._s(meta))

    def expect_rule(self, meta, ch):
        return ast.Expect("rule", text=str(ch[0]), span=self._s(meta))

    def tolerance(self, meta, ch):
        return (str(ch[0]), float(ch[1].value))

    # expressions
    def conditional(self, meta, ch):
        return ast.Conditional(ch[0], ch[1], ch[2], span=self._s(meta))

    def or_(self, meta, ch):
        return ast.Binary("or", ch[0], ch[1], span=self._s(meta))

    def and_(self, meta, ch):
        return ast.Binary("and", ch[0], ch[1], span=self._s(meta))

    def not_(self, meta, ch):
        return ast.Unary("not", ch[0], span=self._s(meta))

    def compare(self, meta, ch):
        return ast.Binary(str(ch[1]), ch[0], ch[2], span=self._s(meta))

    def contains(self, meta, ch):
        return ast.Binary("in", ch[0], ch[1], span=self._s(meta))

    def not_contains(self, meta, ch):
        return ast.Binary("not in", ch[0], ch[1], span=self._s(meta))

    def concat(self, meta, ch):
        return ast.Binary("++", ch[0], ch[1], span=self._s(meta))

    def binop(self, meta, ch):
        return ast.Binary(str(ch[1]), ch[0], ch[2], span=self._s(meta))

    def neg(self, meta, ch):
        return ast.Unary("-", ch[0], span=self._s(meta))

    def index(self, meta, ch):
        return ast.Index(ch[0], ch[1], span=self._s(meta))

    def slice(self, meta, ch):
        return ast.Slice(ch[0], ch[1], ch[2], span=self._s(meta))

    def call(self, meta, ch):
        return ast.Call(str(ch[0]), tuple(c for c in ch[1:] if c is not None), span=self._s(meta))

    def name(self, meta, ch):
        return ast.Name(str(ch[0]), span=self._s(meta))

    def list(self, meta, ch):
        return ast.ListExpr(tuple(c for c in ch if c is not None), span=self._s(meta))

    def literal(self, meta, ch):
        c = ch[0]
        if isinstance(c, ast.Literal):
            return c
        return ast.Literal(_token_value(c, self.file), span=self._s(meta))

    def int_lit(self, meta, ch):
        return ast.Literal(_int(ch[0], self.file), span=self._s(meta))

    def float_lit(self, meta, ch):
        return ast.Literal(float(str(ch[0])), span=self._s(meta))

    def negative(self, meta, ch):
        lit = ch[0]
        return ast.Literal(-lit.value, span=self._s(meta))


class _Params:
    """An emit's `{ k: v }`: its params, and the span of its braces (the emit ends on the `}`)."""

    def __init__(self, items, span: Span | None = None):
        self.items = items
        self.span = span


class _Props:
    def __init__(self, items):
        self.items = items


class _Else:
    """An `else` block's items and its span (to its closing brace, so comments inside stay inside)."""

    def __init__(self, items, span):
        self.items = items
        self.span = span


def _call_parts(rest: list) -> tuple[tuple[ast.Arg, ...], tuple, tuple]:
    """The arguments, params and value props of an op call (emitted or in a test graph)."""
    args: list[ast.Arg] = []
    params: tuple = ()
    props: tuple = ()
    for c in rest:
        if isinstance(c, ast.Arg):
            args.append(c)
        elif isinstance(c, _Params):
            params = c.items
        elif isinstance(c, _Props):
            props = c.items
    return tuple(args), params, props


def _token_value(tok: Token, file: str):
    if tok.type == "STRING":
        return _unquote(tok, file)
    if tok.type == "TRUE":
        return True
    if tok.type == "FALSE":
        return False
    if tok.type == "NONE":
        return None
    if tok.type == "INT":
        return _int(tok, file)
    if tok.type == "FLOAT":
        return float(str(tok))
    return str(tok)


def _single_line(meta) -> bool:
    return getattr(meta, "line", 0) == getattr(meta, "end_line", -1)
