"""Hypothesis strategies for .qpat syntax trees, plus a strict tree comparison.

Generated trees are ones the parser can produce (e.g. number literals in
expressions are never negative: `-1` parses as unary minus), so
`parse(format_module(tree))` must give the tree back exactly.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
from hypothesis import strategies as st

from qlower.lang import ast

# Words that are keywords somewhere in the grammar; generated names avoid all of
# them (keywords *are* usable as names where unambiguous: tests cover that by hand).
KEYWORDS = frozenset("""
map tested fold fragment def
    import op rule test match require let emit fail benefit backends commutative shared const overrides
    true false none shape dtype encoding atol rtol steps for input graph expect ops close error
    tensor if else and or not in _
""".split())

_FIRST = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"
_REST = _FIRST + "0123456789"
_POOL = ("x", "y", "z", "w", "h", "s", "xs", "ys", "n", "d", "axis", "dims", "f32", "int", "cpu", "_tmp")

names = st.one_of(
    st.sampled_from(_POOL),
    st.builds(lambda a, b: a + b, st.sampled_from(_FIRST), st.text(_REST, max_size=6)),
).filter(lambda s: s not in KEYWORDS)
qnames = st.builds(lambda d, n: f"{d}.{n}", st.sampled_from(["mllm", "qnn", "onnx", "my_dialect"]),
                   st.one_of(st.sampled_from(["Repeat", "Tile", "Sigmoid", "ElementWiseAdd"]), names))
dotted = st.lists(names, min_size=1, max_size=3).map(".".join)
small_ints = st.integers(0, 10**6)
nonneg_floats = st.floats(min_value=0.0, allow_nan=False).map(abs)  # abs: never -0.0
any_floats = st.floats(allow_nan=False)
texts = st.text(max_size=8)  # any code point but surrogates: escaping is exercised
doc_lines = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=20).map(str.rstrip)
docs = st.lists(doc_lines, min_size=1, max_size=3).map("\n".join)


def _tuples(elements, min_size: int = 0, max_size: int = 3):
    return st.lists(elements, min_size=min_size, max_size=max_size).map(tuple)


# ---------------------------------------------------------------- expressions

literals = st.one_of(
    st.integers(0, 2**64 - 1), nonneg_floats, texts, st.booleans(), st.none(),
).map(ast.Literal)
_BINOPS = ["or", "and", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "++", "+", "-", "*", "/", "//", "%"]


def _compound(children):
    return st.one_of(
        _tuples(children).map(ast.ListExpr),
        st.builds(ast.Call, names, _tuples(children)),
        st.builds(ast.Index, children, children),
        st.builds(ast.Slice, children, st.none() | children, st.none() | children),
        st.builds(ast.Unary, st.sampled_from(["-", "not"]), children),
        st.builds(ast.Binary, st.sampled_from(_BINOPS), children, children),
        st.builds(ast.Conditional, children, children, children),
    )


# `backend()` and its comparisons with backend names (`backend() == "htp"`, `backend() in ["cpu", "htp"]`)
BACKEND_NAMES = ("cpu", "gpu", "htp", "dsp", "lpai")
backend_call = st.just(ast.Call("backend", ()))
backend_tests = st.one_of(
    st.builds(lambda op, b, flip: ast.Binary(op, ast.Literal(b), ast.Call("backend", ())) if flip
              else ast.Binary(op, ast.Call("backend", ()), ast.Literal(b)),
              st.sampled_from(["==", "!="]), st.sampled_from(BACKEND_NAMES), st.booleans()),
    st.builds(lambda op, bs: ast.Binary(op, ast.Call("backend", ()), ast.ListExpr(tuple(map(ast.Literal, bs)))),
              st.sampled_from(["in", "not in"]), st.lists(st.sampled_from(BACKEND_NAMES), min_size=1, max_size=3)),
)
exprs = st.recursive(literals | names.map(ast.Name) | backend_call | backend_tests, _compound, max_leaves=10)

# ------------------------------------------------------------------- patterns

dim_pats = st.one_of(
    st.builds(ast.DimPat, st.just("int"), small_ints),
    st.builds(ast.DimPat, st.just("capture"), names),
    st.just(ast.DimPat("any")),
    st.just(ast.DimPat("rest")),
)
value_types = st.builds(ast.ValueType, st.booleans(), st.none() | names, st.none() | _tuples(dim_pats, max_size=4))
attr_literal_values = st.one_of(st.integers(-(10**12), 10**12), any_floats, texts, st.booleans(), st.none())
attr_pats = st.one_of(
    st.builds(ast.AttrPat, names, st.just("capture"), names),
    st.builds(ast.AttrPat, names, st.just("any"), st.none()),
    st.builds(ast.AttrPat, names, st.just("literal"), attr_literal_values),
)
binders = st.one_of(
    names.map(lambda n: ast.Binders((n,))),
    _tuples(names, 2, 3).map(ast.Binders),
    names.map(lambda n: ast.Binders((n,), True)),
    st.just(ast.Binders(())),
)


def _op_pattern(operands):
    return st.builds(ast.OpPattern, _tuples(qnames, 1, 3), _tuples(operands), _tuples(attr_pats, max_size=2),
                     st.booleans(), st.booleans())


_simple_operands = st.one_of(
    st.builds(ast.Capture, names, st.none() | value_types, st.booleans()),
    st.builds(ast.Wildcard, st.none() | value_types),
    st.builds(ast.RestCapture, names),
)
operand_pats = st.recursive(
    _simple_operands,
    lambda ch: st.one_of(_op_pattern(ch), st.builds(ast.NamedNested, names, _op_pattern(ch)),
                         _tuples(ch, 2, 3).map(ast.Alternatives)),
    max_leaves=6,
)
op_patterns = _op_pattern(operand_pats)

# ------------------------------------------------------------------ statements

params = _tuples(st.builds(ast.Param, names, exprs), max_size=3)
props = _tuples(st.builds(ast.ValueProp, st.sampled_from(["shape", "dtype", "encoding"]), exprs), max_size=3)
emit_args = st.one_of(
    names.map(lambda n: ast.Arg("value", n)),
    names.map(lambda n: ast.Arg("rest", n)),
    st.just(ast.Arg("none")),
    exprs.map(lambda e: ast.Arg("tensor", expr=e)),
)
_call_args = st.one_of(names.map(lambda n: ast.Arg("rest", n)), exprs.map(lambda e: ast.Arg("expr", expr=e)),
                       qnames.map(lambda q: ast.Arg("op", q)))
_emit_leaves = st.one_of(
    st.builds(ast.EmitOp, binders, qnames, _tuples(emit_args), params, props, st.booleans(), st.booleans()),
    st.builds(ast.EmitAlias, binders, names, st.booleans()),
    st.builds(ast.EmitTensor, binders, exprs, props, st.booleans()),
    st.builds(ast.EmitLet, names, exprs),
    st.builds(lambda b, n, a, p, q: ast.FragmentCall(b, n, a, params=p, props=q), binders, names,
              _tuples(_call_args), params, props),
)
# `if COND { ... } else { ... }`, nested; a condition holding a conditional expression is bracketed by the formatter
_conds = st.one_of(exprs, backend_tests)
_if = st.builds(ast.EmitIf, _conds, _tuples(_emit_leaves, max_size=2), _tuples(_emit_leaves, max_size=1))
emit_items = st.one_of(_emit_leaves, _if, st.builds(ast.EmitIf, _conds, _tuples(_emit_leaves, max_size=1),
                                                    st.tuples(_if)))  # `} else if ... {`
stmts = st.one_of(
    st.builds(ast.Match, binders, op_patterns),
    st.builds(ast.Require, exprs),
    st.builds(ast.Let, names, exprs),
    st.builds(ast.Fail, exprs),
    st.builds(ast.Emit, _tuples(emit_items), st.booleans()),
)
rules = st.builds(ast.Rule, names, _tuples(stmts, max_size=5), st.none() | st.integers(-1000, 1000),
                  st.none() | _tuples(names, 1, 3), st.none() | docs,
                  st.none() | st.lists(names, min_size=1, max_size=3).map(".".join))

# --------------------------------------------------------------- declarations

type_refs = st.recursive(names.map(ast.TypeRef), lambda ch: st.builds(ast.TypeRef, names, ch), max_leaves=3)
op_decls = st.builds(
    ast.OpDecl, qnames,
    _tuples(st.builds(ast.OperandDecl, names, st.sampled_from(["one", "optional", "variadic"]))),
    _tuples(st.builds(ast.ResultDecl, names, st.booleans()), 1, 3),
    _tuples(st.builds(ast.AttrDecl, names, type_refs, st.none() | exprs)),
    st.booleans(), st.none() | docs,
)
imports = st.one_of(st.builds(ast.Import, texts, st.just(True)), st.builds(ast.Import, dotted, st.just(False)))

# ----------------------------------------------------------------------- tests

tensor_types = st.builds(ast.TensorType, names,
                         _tuples(st.builds(ast.DimRange, small_ints, st.none() | small_ints), max_size=4))
graph_nodes = st.builds(ast.GraphNode, binders, qnames,
                        _tuples(names.map(lambda n: ast.Arg("value", n)) | st.just(ast.Arg("none"))), params, props)
expects = st.one_of(
    _tuples(qnames, 1, 3).map(lambda ops: ast.Expect("ops", ops=ops)),
    st.just(ast.Expect("no_ops")),
    _tuples(st.tuples(st.sampled_from(["atol", "rtol", "steps"]), nonneg_floats))
    .map(lambda t: ast.Expect("close", tolerances=t)),
    texts.map(lambda t: ast.Expect("error", text=t)),
    names.map(lambda n: ast.Expect("rule", text=n)),
)
test_stmts = st.one_of(
    st.builds(ast.TestInput, names, tensor_types, props),
    st.builds(ast.TestConst, names, tensor_types, st.none() | exprs, props),
    st.builds(ast.TestGraph, _tuples(graph_nodes), st.booleans()),
    expects,
)
tests = st.builds(ast.Test, names, _tuples(test_stmts, max_size=5), st.none() | names,
                  st.none() | _tuples(names, 1, 3), st.none() | docs)

map_decls = st.builds(ast.MapDecl, st.none() | names, op_patterns, qnames, _tuples(emit_args), params,
                      st.none() | st.integers(-1000, 1000), st.none() | _tuples(names, 1, 3),
                      st.none() | st.lists(names, min_size=1, max_size=3).map(".".join),
                      st.none() | tensor_types, st.none() | docs)

_frag_params = st.one_of(st.builds(ast.FragmentParam, names, st.booleans()),
                         names.map(lambda n: ast.FragmentParam(n, op=True)))
fragments = st.builds(ast.Fragment, names, _tuples(_frag_params),
                      _tuples(names, 1, 3), _tuples(emit_items, max_size=3), st.none() | docs)
defines = st.builds(ast.Define, names, _tuples(names, max_size=3), exprs, st.none() | docs)

items = st.one_of(imports, op_decls, rules, map_decls, fragments, defines, tests)
modules = st.builds(ast.Module, st.just("<generated>"), _tuples(items, max_size=4))


# ------------------------------------------------------------- comparisons


def tree_key(obj: Any) -> Any:
    """A comparison key stricter than `==`: literal types count (1 vs 1.0 vs true)
    and so does the sign of zero; fields outside equality (spans, layout) do not."""
    if attrs.has(type(obj)):
        fields = attrs.fields(type(obj))
        return (type(obj).__name__, tuple(tree_key(getattr(obj, f.name)) for f in fields if f.eq))
    if isinstance(obj, (tuple, list)):
        return tuple(tree_key(x) for x in obj)
    if isinstance(obj, bool) or obj is None:
        return ("const", obj)
    if isinstance(obj, float):
        return ("float", obj if not math.isnan(obj) else "nan", math.copysign(1, obj))
    if isinstance(obj, int):
        return ("int", obj)
    return obj
