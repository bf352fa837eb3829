"""The straight-line root matcher (`simple_root`) is a fast path only: on random small graphs and
random simple rules it must agree with the general continuation-passing matcher (same match or no
match, same bindings, same guard errors). And the failure listener is an observer only: a match with
a `MatchTrace` attached gives the same answer, and a failed match always says why.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from qlower.graph import Graph
from qlower.lang import ast
from qlower.lang.builtins import builtin_functions
from qlower.lang.parser import parse
from qlower.rewrite.compile import FAIL, GuardError, compile_rule
from qlower.rewrite.match import OPS, MatchTrace

DECLS = """
op m.A(a, b?, c?) -> y { k: int = 1, s: str = "x" }
op m.C(a, b) -> y commutative
op m.D(a, b?) -> (p, q) { k: int = 2 }
op m.P(a) -> y
"""
_FUNCTIONS = builtin_functions()

# ------------------------------------------------------------------ rule text

value_types = st.sampled_from(["", ": f32", ": f16", ": float", ": int", ": const", ": [n, m]", ": [2, _]",
                               ": [..., 3]", ": f32[n, n]", ": const f32[_, m]"])


@st.composite
def operand_pats(draw) -> str:
    kind = draw(st.sampled_from(["cap", "cap", "cap", "opt", "wild"]))
    if kind == "wild":
        return "_"
    name = draw(st.sampled_from(["a", "b", "c", "a2"]))
    if kind == "opt":
        return name + "?"
    return name + draw(value_types)


@st.composite
def simple_rules(draw) -> str:
    """A one-op rule of the shapes `simple_root` takes (and some it declines)."""
    op = draw(st.sampled_from(["m.A", "m.C", "m.D", "m.P"]))
    operands = draw(st.lists(operand_pats(), max_size=3))
    attrs = []
    if op in ("m.A", "m.D") and draw(st.booleans()):
        attrs.append("k: " + draw(st.sampled_from(["1", "2", "kk", "n"])))
    if op == "m.A" and draw(st.booleans()):
        attrs.append("s: " + draw(st.sampled_from(['"x"', '"y"', "ss"])))
    binders = draw(st.sampled_from(["p, q", "ys..."] if op == "m.D" else ["y", "_", "p, q"]))
    comm = " commutative" if draw(st.integers(0, 3)) == 0 else ""
    attr_text = f" {{ {', '.join(attrs)} }}" if attrs else ""
    body = [f"  match {binders} = {op}({', '.join(operands)}){attr_text}{comm}"]
    required = [o.split(":")[0] for o in operands if o != "_" and not o.endswith("?")]
    if required and draw(st.booleans()):
        first = required[0]
        body.append("  require " + draw(st.sampled_from([
            f"is_input({first})", f"not is_input({first})", f"rank({first}) == 2", f"shape({first})[2] == 3"])))
    captured = [o.split(":")[0].rstrip("?") for o in operands if o != "_"]
    shown = " ++ ".join(f'str(is_input({c}))' for c in captured[:1] if c in required) or '"m"'
    body.append(f"  fail {shown}")
    return "rule r {\n" + "\n".join(body) + "\n}\n"


# ---------------------------------------------------------------- the graph

SHAPES = [(2, 3), (3, 3), (2, 2), (4, 2, 3), (3,)]
DTYPES = ["float32", "float16", "int32"]


@st.composite
def graphs(draw, op_type: str | None = None, arity: int | None = None) -> tuple[Graph, str]:
    """A few values (inputs, constants, op results) and one root op `root`: mostly of `op_type` with
    about `arity` operands (so that matches are common), sometimes anything."""
    g = Graph("g")
    values = []
    for i in range(draw(st.integers(1, 4))):
        shape = draw(st.sampled_from(SHAPES))
        dtype = draw(st.sampled_from(DTYPES))
        kind = draw(st.sampled_from(["input", "const", "produced"]))
        if kind == "const":
            v = g.add_value(f"v{i}", dtype, shape, data=np.zeros(shape, dtype))
        else:
            v = g.add_value(f"v{i}", dtype, shape)
            if kind == "produced":
                src = g.add_value(f"src{i}", dtype, shape)
                g.add_op(f"p{i}", "m.P", [src], [v])
        values.append(v)
    if op_type is None or draw(st.integers(0, 9)) == 0:
        op_type = draw(st.sampled_from(["m.A", "m.C", "m.D", "m.P", "m.Other"]))
    if arity is None or draw(st.integers(0, 4)) == 0:
        arity = draw(st.integers(0, 4))
    operands = [draw(st.sampled_from(values)) for _ in range(arity)]
    operands = [None if draw(st.integers(0, 5)) == 0 else v for v in operands]
    attrs: dict[str, Any] = {}
    k = draw(st.sampled_from([None, 1, 2]))
    if k is not None:
        attrs["k"] = k
    s = draw(st.sampled_from([None, "x", "y"]))
    if s is not None:
        attrs["s"] = s
    n_results = 2 if op_type == "m.D" else 1
    if draw(st.integers(0, 5)) == 0:
        n_results = 3 - n_results
    results = [g.add_value(f"r{i}", "float32", (2, 3)) for i in range(n_results)]
    g.add_op("root", op_type, operands, results, attrs)
    return g, "root"


def _root_of(text: str) -> tuple[str, int]:
    """The op type and operand count of a rule's root pattern."""
    pat = _compiled(text, True).rule.matches[0].pattern
    return pat.op_types[0], len(pat.operands)


# ----------------------------------------------------------------- compare


def _outcome(match, op, trace: MatchTrace | None = None) -> Any:
    try:
        env = match(op) if trace is None else match(op, trace)
    except GuardError as exc:
        return ("guard error", str(exc))
    if env is None:
        return None
    return {k: (("value", id(v)) if hasattr(v, "producer") else
                [id(x) for x in v] if isinstance(v, list) and k != OPS else v)
            for k, v in env.items() if k != OPS}


@functools.lru_cache(maxsize=None)
def _compiled(text: str, fast: bool):
    module = parse(DECLS + text)
    decls = {d.op: d for d in module.ops}
    (rule,) = [i for i in module.items if isinstance(i, ast.Rule)]
    return compile_rule(rule, 0, decls, _FUNCTIONS, fast=fast)


@settings(max_examples=300, deadline=None)
@given(simple_rules(), st.data())
def test_simple_root_agrees_with_the_general_matcher(text, data):
    g, root = data.draw(graphs(*_root_of(text)))
    op = g.op(root)
    fast = _compiled(text, fast=True)
    general = _compiled(text, fast=False)
    assert _outcome(fast.match, op) == _outcome(general.match, op), text


def _with_and_without_listener(text: str, data, fast: bool):
    """The rule's outcome on a drawn graph without and with a listener, and the listener."""
    g, root = data.draw(graphs(*_root_of(text)))
    op = g.op(root)
    rule = _compiled(text, fast=fast)
    trace = MatchTrace()
    return _outcome(rule.match, op), _outcome(rule.match, op, trace), trace


@settings(max_examples=150, deadline=None)
@given(simple_rules(), st.data(), st.booleans())
def test_the_listener_observes_and_explains_every_failure(text, data, fast):
    plain, traced, trace = _with_and_without_listener(text, data, fast)
    assert plain == traced, text
    if traced is None:
        assert trace.best() is not None, text  # no silent failure branch
    if isinstance(traced, dict):
        assert FAIL in traced  # the rule's `fail` ran: the listener left no trace in the bindings
        assert all(isinstance(k, str) or k == FAIL for k in traced)


NESTED = [
    "rule r {\n  match y = m.C(x, m.P(x))\n  fail \"m\"\n}\n",
    "rule r {\n  match y = m.C(x, s)\n  match s = m.P(x)\n  fail \"m\"\n}\n",
    "rule r {\n  match y = m.A((m.P(x) | x: const), _)\n  fail \"m\"\n}\n",
    "rule r {\n  match y = m.A(m.P(a: f32), m.P(a))\n  require rank(a) == 2\n  fail \"m\"\n}\n",
    "rule r {\n  match p, q = m.D(t = m.P(_))\n  fail \"m\"\n}\n",
]


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(NESTED), st.data())
def test_the_listener_explains_failures_of_nested_patterns(text, data):
    plain, traced, trace = _with_and_without_listener(text, data, fast=True)
    assert plain == traced, text
    if traced is None:
        best = trace.best()
        assert best is not None and best.span is not None, text


def test_commutative_rule_on_an_op_without_its_optional_second_operand():
    """Found by the listener test: the fast path swapped two operands the op did not have."""
    text = "rule r {\n  match y = m.C(a, b?) commutative\n  require not is_input(a)\n  fail \"m\"\n}\n"
    g = Graph("g")
    x = g.add_value("x", "float32", (2, 3))
    y = g.add_value("y", "float32", (2, 3))
    g.add_op("root", "m.C", [x], [y])
    g.set_io([x], [y])
    for fast in (True, False):
        trace = MatchTrace()
        assert _compiled(text, fast).match(g.op("root"), trace) is None
        assert trace.best().stage == "guard"
