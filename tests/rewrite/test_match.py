"""The pattern matcher, observed through the rewrite engine: which rule applies to which node,
with which bindings.

Bindings are made visible either through what a rule emits (operands, params, shapes) or
through a `fail` message built from them (`fail "n=" ++ str(n)`), which the engine reports
at the node.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qlower.api import Rules
from qlower.graph import Graph
from rewrite_support import B, load_text

OPS = """
op m.Mul(a, b) -> y commutative
op m.Sub(a, b) -> y
op m.Max(a, b) -> y
op m.Sigmoid(x) -> y
op m.Neg(x) -> y
op m.Relu(x) -> y
op m.Cat(xs...) -> y { dim: int = 0 }
op m.Sin(x) -> y
op m.Cos(x) -> y
op m.Tan(x) -> y
op m.Act(x) -> y { mode: str = "none", alpha: float = 0.5, dim: int = -1, flag: bool = false }
op m.A(x) -> y { k: int = 1 }
op m.B(x) -> y { k: int = 2 }
op m.Lin(x, w, b?) -> y
op m.MinMax(x) -> (lo, hi)
"""


def rules(tmp_path: Path, text: str) -> Rules:
    """Load `text` (after the op declarations above) through the checker."""
    return load_text(tmp_path, OPS + text)


def run(r: Rules, g: Graph, backend: str = "htp"):
    return r.engine(backend).run(g)


def rule_of(g: Graph, node: str) -> str | None:
    op = g.op(node)
    return op.provenance.rule if op.provenance else None


def messages(out, code: str | None = None) -> list[str]:
    return [d.message for d in out.diagnostics if code is None or d.code == code]


def operand_names(g: Graph, node: str) -> list[str | None]:
    return [v.name if v is not None else None for v in g.op(node).operands]


# ------------------------------------------------------------------ single op


def test_single_op_pattern_rewrites_only_its_op_type(tmp_path):
    r = rules(tmp_path, """
rule neg {
  match y = m.Neg(x)
  emit y = qnn.ElementWiseNeg(x)
}
""")
    b = B()
    x = b.inp("x")
    n = b.op("n", "m.Neg", [x])
    s = b.op("s", "m.Sin", [n])
    g = b.done(s)
    out = run(r, g)
    assert g.op("n").type == "qnn.ElementWiseNeg"
    assert rule_of(g, "n") == "neg"
    assert operand_names(g, "n") == ["x"]
    assert [v.name for v in g.op("n").results] == ["n"]
    assert g.op("s").type == "m.Sin"  # no rule for it
    assert [d.subject for d in out.diagnostics if d.code == "not-lowered"] == ["node s (m.Sin)"]


# --------------------------------------------------------------- DAG patterns

SILU_NESTED = """
rule silu {
  match y = m.Mul(h, m.Sigmoid(h))
  emit y = qnn.ElementWiseMultiply(h, h)
}
"""

SILU_DAG = """
rule silu {
  match y = m.Mul(h, s)
  match s = m.Sigmoid(h)
  emit y = qnn.ElementWiseMultiply(h, h)
}
"""


@pytest.mark.parametrize("text", [SILU_NESTED, SILU_DAG], ids=["nested", "two-matches"])
@pytest.mark.parametrize("sigmoid_first", [False, True])
def test_dag_pattern_fuses_both_ops(tmp_path, text, sigmoid_first):
    r = rules(tmp_path, text)
    b = B()
    x = b.inp("x")
    s = b.op("sig", "m.Sigmoid", [x])
    y = b.op("mul", "m.Mul", [s, x] if sigmoid_first else [x, s])
    g = b.done(y)
    out = run(r, g)
    assert out.ok, messages(out)
    assert [o.name for o in g.ops] == ["mul"]
    assert g.op("mul").type == "qnn.ElementWiseMultiply"
    assert operand_names(g, "mul") == ["x", "x"]
    assert not g.has_value("sig")


@pytest.mark.parametrize("text", [SILU_NESTED, SILU_DAG], ids=["nested", "two-matches"])
def test_dag_pattern_needs_the_same_value_in_both_places(tmp_path, text):
    r = rules(tmp_path, text)
    b = B()
    x, z = b.inp("x"), b.inp("z")
    s = b.op("sig", "m.Sigmoid", [z])
    y = b.op("mul", "m.Mul", [x, s])  # x * sigmoid(z)
    g = b.done(y)
    run(r, g)
    assert g.op("mul").type == "m.Mul"
    assert g.op("sig").type == "m.Sigmoid"


@pytest.mark.parametrize("text", [SILU_NESTED, SILU_DAG], ids=["nested", "two-matches"])
def test_nested_operand_with_no_producer_does_not_match(tmp_path, text):
    r = rules(tmp_path, text)
    b = B()
    x, z = b.inp("x"), b.inp("z")
    y = b.op("mul", "m.Mul", [x, z])
    g = b.done(y)
    run(r, g)
    assert g.op("mul").type == "m.Mul"


# ---------------------------------------------------------- repeated captures

SQUARE = """
rule square {
  match y = m.Sub(a, a)
  fail "same"
}

rule sub {
  match y = m.Sub(a, b)
  emit y = qnn.ElementWiseSubtract(a, b)
}
"""


def test_repeated_capture_matches_the_same_value(tmp_path):
    r = rules(tmp_path, SQUARE)
    b = B()
    x = b.inp("x")
    y = b.op("sub", "m.Sub", [x, x])
    g = b.done(y)
    out = run(r, g)
    assert messages(out, "rule-fail") == ["same"]


def test_repeated_capture_rejects_different_values(tmp_path):
    r = rules(tmp_path, SQUARE)
    b = B()
    x, z = b.inp("x"), b.inp("z")
    y = b.op("sub", "m.Sub", [x, z])
    g = b.done(y)
    out = run(r, g)
    assert out.ok
    assert rule_of(g, "sub") == "sub"


def test_repeated_capture_compares_identity_not_equal_contents(tmp_path):
    # two constants with the same data are still different values
    r = rules(tmp_path, SQUARE)
    b = B()
    c1, c2 = b.const("c1"), b.const("c2")
    y = b.op("sub", "m.Sub", [c1, c2])
    g = b.done(y)
    out = run(r, g)
    assert rule_of(g, "sub") == "sub", messages(out)


# ---------------------------------------------------------------- commutative

MAX_CONST = """
rule max_const {
  match y = m.Max(x, c: const) commutative
  emit y = qnn.ElementWiseMaximum(x, c)
}
"""

# the same pattern, written with a (trivial) alternative so it takes the general matcher
MAX_CONST_GENERAL = """
rule max_const {
  match y = m.Max(x, (c: const | c: const)) commutative
  emit y = qnn.ElementWiseMaximum(x, c)
}
"""


@pytest.mark.parametrize("text", [MAX_CONST, MAX_CONST_GENERAL], ids=["simple", "general"])
@pytest.mark.parametrize("const_first", [False, True])
def test_commutative_pattern_matches_both_operand_orders(tmp_path, text, const_first):
    r = rules(tmp_path, text)
    b = B()
    x, c = b.inp("x"), b.const("c")
    y = b.op("max", "m.Max", [c, x] if const_first else [x, c])
    g = b.done(y)
    out = run(r, g)
    assert out.ok, messages(out)
    assert g.op("max").type == "qnn.ElementWiseMaximum"
    assert operand_names(g, "max") == ["x", "c"]  # the constant goes second either way


def test_non_commutative_pattern_tries_one_order_only(tmp_path):
    r = rules(tmp_path, """
rule max_const {
  match y = m.Max(x, c: const)
  emit y = qnn.ElementWiseMaximum(x, c)
}
""")
    b = B()
    x, c = b.inp("x"), b.const("c")
    y = b.op("max", "m.Max", [c, x])
    g = b.done(y)
    run(r, g)
    assert g.op("max").type == "m.Max"


@pytest.mark.parametrize("pattern", ["m.Mul(x, c: const)", "m.Mul(x, (c: const | c: const))"],
                         ids=["simple", "general"])
@pytest.mark.parametrize("const_first", [False, True])
def test_op_declared_commutative_matches_both_orders(tmp_path, pattern, const_first):
    r = rules(tmp_path, f"""
rule mul_const {{
  match y = {pattern}
  emit y = qnn.ElementWiseMultiply(x, c)
}}
""")
    b = B()
    x, c = b.inp("x"), b.const("c")
    y = b.op("mul", "m.Mul", [c, x] if const_first else [x, c])
    g = b.done(y)
    out = run(r, g)
    assert out.ok, messages(out)
    assert operand_names(g, "mul") == ["x", "c"]


@pytest.mark.parametrize("pattern", ["m.Max(a, b)", "m.Max(a, (b | b))"], ids=["simple", "general"])
def test_commutative_swap_is_retried_when_a_guard_fails(tmp_path, pattern):
    r = rules(tmp_path, f"""
rule max_input_first {{
  match y = {pattern} commutative
  require is_input(a) and not is_input(b)
  emit y = qnn.ElementWiseMaximum(a, b)
}}
""")
    b = B()
    x = b.inp("x")
    n = b.op("n", "m.Neg", [x])
    y = b.op("max", "m.Max", [n, x])
    g = b.done(y)
    out = run(r, g)
    assert g.op("max").type == "qnn.ElementWiseMaximum", messages(out)
    assert operand_names(g, "max") == ["x", "n"]


# ------------------------------------------------------------------- variadic

@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_rest_capture_takes_all_remaining_operands(tmp_path, n):
    r = rules(tmp_path, """
rule cat {
  match y = m.Cat(x, rest...) { dim: _ }
  emit y = qnn.Concat(rest..., x) { axis: 0 }
}
""")
    b = B()
    xs = [b.inp(f"x{i}") for i in range(n)]
    y = b.op("cat", "m.Cat", xs, shape=(2 * n, 3))
    g = b.done(y)
    out = run(r, g)
    assert out.ok, messages(out)
    assert operand_names(g, "cat") == [f"x{i}" for i in range(1, n)] + ["x0"]


@pytest.mark.parametrize("n", [0, 1, 2, 4])
def test_rest_capture_length_is_visible_to_guards(tmp_path, n):
    r = rules(tmp_path, """
rule cat_one {
  match y = m.Cat(x, rest...)
  require len(rest) == 0
  emit y = x
}

rule cat_many {
  match y = m.Cat(x, rest...)
  fail "rest has " ++ str(len(rest))
}
""")
    b = B()
    xs = [b.inp(f"x{i}") for i in range(n + 1)]
    y = b.op("cat", "m.Cat", xs)
    z = b.op("neg", "m.Neg", [y])
    g = b.done(z)
    out = run(r, g)
    if n == 0:
        assert not g.has_op("cat")
        assert operand_names(g, "neg") == ["x0"]
    else:
        assert messages(out, "rule-fail") == [f"rest has {n}"]


def test_rest_capture_after_two_fixed_operands_needs_two(tmp_path):
    r = rules(tmp_path, """
rule cat2 {
  match y = m.Cat(a, b, rest...)
  fail "at least two, rest " ++ str(len(rest))
}
""")
    b = B()
    x = b.inp("x")
    y1 = b.op("one", "m.Cat", [x])
    y2 = b.op("two", "m.Cat", [x, x])
    g = b.done(y1, y2)
    out = run(r, g)
    fails = {d.subject: d.message for d in out.diagnostics if d.code == "rule-fail"}
    assert fails == {"node two (m.Cat)": "at least two, rest 0"}


# ---------------------------------------------------------------- attributes

ACT_RULES = """
rule act_tanh {
  match y = m.Act(x) { mode: "tanh" }
  fail "tanh"
}

rule act_dim {
  match y = m.Act(x) { mode: "none", dim: -1 }
  fail "last"
}

rule act_any {
  match y = m.Act(x) { mode: md, alpha: a, dim: d, flag: f }
  fail "mode=" ++ md ++ " alpha=" ++ str(a) ++ " dim=" ++ str(d) ++ " flag=" ++ str(f)
}
"""


@pytest.mark.parametrize("attrs, expected", [
    ({"mode": "tanh"}, "tanh"),
    ({"mode": "none", "dim": -1}, "last"),
    ({}, "last"),  # defaults: mode "none", dim -1
    ({"dim": 2}, "mode=none alpha=0.5 dim=2 flag=false"),
    ({"mode": "erf", "alpha": 0.25, "flag": True}, "mode=erf alpha=0.25 dim=-1 flag=true"),
])
def test_attribute_literals_captures_and_defaults(tmp_path, attrs, expected):
    r = rules(tmp_path, ACT_RULES)
    b = B()
    x = b.inp("x")
    y = b.op("act", "m.Act", [x], attrs)
    g = b.done(y)
    out = run(r, g)
    assert messages(out, "rule-fail") == [expected]


def test_attribute_capture_feeds_emitted_params(tmp_path):
    r = rules(tmp_path, """
rule cat {
  match y = m.Cat(xs...) { dim: d }
  emit y = qnn.Concat(xs...) { axis: normdim(d, rank(xs[0])) }
}
""")
    b = B()
    x1, x2 = b.inp("x1"), b.inp("x2")
    y = b.op("cat", "m.Cat", [x1, x2], {"dim": -1}, shape=(2, 6))
    g = b.done(y)
    out = run(r, g)
    assert out.ok, messages(out)
    assert g.op("cat").attrs["axis"] == 1


@pytest.mark.parametrize("op_type, given", [
    pytest.param("m.A", None),
    ("m.B", None), ("m.A", 1), ("m.A", 2), ("m.B", 1), ("m.B", 2),
])
def test_op_type_alternatives_use_each_ops_own_default(tmp_path, op_type, given):
    # m.A defaults k to 1, m.B to 2; the literal compares against the matched op's value
    r = rules(tmp_path, """
rule k_is_one {
  match y = m.A | m.B(x) { k: 1 }
  emit y = qnn.Relu(x)
}
""")
    b = B()
    x = b.inp("x")
    y = b.op("n", op_type, [x], {} if given is None else {"k": given})
    g = b.done(y)
    run(r, g)
    k = given if given is not None else {"m.A": 1, "m.B": 2}[op_type]
    assert (g.op("n").type == "qnn.Relu") == (k == 1)


# ------------------------------------------------------ value type constraints

TYPES = """
rule f16_only {
  match y = m.Neg(x: f16)
  fail "f16"
}

rule ints {
  match y = m.Neg(x: int)
  fail "int"
}

rule floats_rank2 {
  match y = m.Neg(x: float[a, b])
  fail "float2 a=" ++ str(a) ++ " b=" ++ str(b)
}

rule anything {
  match y = m.Neg(x)
  fail "other"
}
"""


@pytest.mark.parametrize("dtype, shape, expected", [
    ("float16", (2, 3), "f16"),
    ("int8", (4,), "int"),
    ("uint8", (4,), "int"),
    ("int64", (4,), "int"),
    ("float32", (5, 7), "float2 a=5 b=7"),
    ("float64", (1, 1), "float2 a=1 b=1"),
    ("float32", (2, 3, 4), "other"),
    ("bool", (2, 3), "other"),
])
def test_dtype_families_and_shape_captures(tmp_path, dtype, shape, expected):
    r = rules(tmp_path, TYPES)
    b = B()
    x = b.inp("x", shape, dtype)
    y = b.op("n", "m.Neg", [x])
    g = b.done(y)
    out = run(r, g)
    assert messages(out, "rule-fail") == [expected]


SHAPES = """
rule square {
  match y = m.Neg(x: [n, n])
  fail "square " ++ str(n)
}

rule lead_one {
  match y = m.Neg(x: [1, ..., w])
  fail "lead1 w=" ++ str(w)
}

rule last_dim {
  match y = m.Neg(x: [..., w])
  fail "w=" ++ str(w)
}

rule rank3 {
  match y = m.Neg(x: [_, 4, _])
  fail "rank3"
}

rule any_rank {
  match y = m.Neg(x: [...])
  fail "any"
}
"""


@pytest.mark.parametrize("shape, expected", [
    ((3, 3), "square 3"),
    ((3, 4), "w=4"),
    ((1, 5), "lead1 w=5"),
    ((1,), "w=1"),  # `...` may be empty, but `1` and `w` are two dims: [1] has only one
    ((1, 2, 3, 9), "lead1 w=9"),
    ((7, 4, 2), "w=2"),  # rank3 comes after last_dim (file order)
    ((), "any"),
])
def test_shape_patterns(tmp_path, shape, expected):
    r = rules(tmp_path, SHAPES)
    b = B()
    x = b.inp("x", shape)
    y = b.op("n", "m.Neg", [x])
    g = b.done(y)
    out = run(r, g)
    assert messages(out, "rule-fail") == [expected]


def test_fixed_dims_and_wildcards_constrain_rank(tmp_path):
    r = rules(tmp_path, """
rule rank3 {
  match y = m.Neg(x: [_, 4, _])
  fail "rank3"
}
""")
    b = B()
    xs = {s: b.inp(f"x{i}", s) for i, s in enumerate([(1, 4, 1), (1, 4), (1, 4, 1, 1), (1, 5, 1)])}
    ys = [b.op(f"n{i}", "m.Neg", [x]) for i, x in enumerate(xs.values())]
    g = b.done(*ys)
    out = run(r, g)
    assert [d.subject for d in out.diagnostics if d.code == "rule-fail"] == ["node n0 (m.Neg)"]


def test_shape_pattern_does_not_match_an_unknown_shape(tmp_path):
    r = rules(tmp_path, """
rule ranked {
  match y = m.Neg(x: [...])
  fail "ranked"
}
""")
    b = B()
    x = b.g.add_value("x", "float32", None)
    b.inputs.append(x)
    y = b.op("n", "m.Neg", [x], shape=(2,))
    g = b.done(y)
    out = run(r, g)
    assert messages(out, "rule-fail") == []


def test_dim_captures_are_shared_across_operands(tmp_path):
    r = rules(tmp_path, """
rule matmul_like {
  match y = m.Sub(a: [m, k], b: [k, n])
  fail str(m) ++ "x" ++ str(k) ++ "x" ++ str(n)
}
""")
    b = B()
    a, c, d = b.inp("a", (2, 3)), b.inp("c", (3, 4)), b.inp("d", (5, 4))
    y1 = b.op("good", "m.Sub", [a, c])
    y2 = b.op("bad", "m.Sub", [a, d])
    g = b.done(y1, y2)
    out = run(r, g)
    fails = {d.subject: d.message for d in out.diagnostics if d.code == "rule-fail"}
    assert fails == {"node good (m.Sub)": "2x3x4"}


def test_const_constraint(tmp_path):
    r = rules(tmp_path, """
rule lin {
  match y = m.Lin(x, w: const)
  fail "const"
}
""")
    b = B()
    x, w_in, w_c = b.inp("x"), b.inp("w_in"), b.const("w_c")
    y1 = b.op("a", "m.Lin", [x, w_in])
    y2 = b.op("b", "m.Lin", [x, w_c])
    g = b.done(y1, y2)
    out = run(r, g)
    fails = {d.subject: d.message for d in out.diagnostics if d.code == "rule-fail"}
    assert fails == {"node b (m.Lin)": "const"}


@pytest.mark.parametrize("operands", [["x", "w"], ["x", "w", None]], ids=["two", "absent-third"])
def test_optional_operand_absent_matches_a_shorter_pattern(tmp_path, operands):
    r = rules(tmp_path, """
rule lin2 {
  match y = m.Lin(x, w)
  fail "two"
}
""")
    b = B()
    vals = {"x": b.inp("x"), "w": b.const("w"), None: None}
    y = b.op("lin", "m.Lin", [vals[o] for o in operands])
    g = b.done(y)
    out = run(r, g)
    assert messages(out, "rule-fail") == ["two"]


def test_a_longer_pattern_does_not_match_an_absent_operand(tmp_path):
    r = rules(tmp_path, """
rule lin3 {
  match y = m.Lin(x, w, bias)
  fail "three"
}
""")
    b = B()
    x, w = b.inp("x"), b.const("w")
    y = b.op("lin", "m.Lin", [x, w, None])
    g = b.done(y)
    out = run(r, g)
    assert messages(out, "rule-fail") == []


# --------------------------------------------------------------- alternatives


def test_operand_alternatives_prefer_the_first_option(tmp_path):
    r = rules(tmp_path, """
rule relu {
  match y = m.Relu((m.Relu(x) | x))
  emit y = qnn.Relu(x)
}
""")
    b = B()
    x = b.inp("x")
    r1 = b.op("r1", "m.Relu", [x])
    r2 = b.op("r2", "m.Relu", [r1])
    g = b.done(r2)
    out = run(r, g)
    assert out.ok, messages(out)
    # relu(relu(x)): the outer rule takes the inner relu along
    assert [o.name for o in g.ops] == ["r2"]
    assert operand_names(g, "r2") == ["x"]


def test_operand_alternatives_fall_back_to_a_later_option(tmp_path):
    r = rules(tmp_path, """
rule relu {
  match y = m.Relu((m.Relu(x) | x))
  emit y = qnn.Relu(x)
}
""")
    b = B()
    x = b.inp("x")
    n = b.op("n", "m.Neg", [x])
    y = b.op("r", "m.Relu", [n])
    g = b.done(y)
    run(r, g)
    assert g.op("r").type == "qnn.Relu"
    assert operand_names(g, "r") == ["n"]


@pytest.mark.parametrize("pattern", ["m.Neg((m.Neg(x) | x))", "m.Neg((m.Neg(x) | x: float))"])
def test_failing_guard_backtracks_into_the_next_alternative(tmp_path, pattern):
    r = rules(tmp_path, f"""
rule neg {{
  match y = {pattern}
  require not is_input(x)
  emit y = qnn.ElementWiseNeg(x)
}}
""")
    b = B()
    x = b.inp("x")
    n1 = b.op("n1", "m.Neg", [x])
    n2 = b.op("n2", "m.Neg", [n1])
    g = b.done(n2)
    run(r, g)
    # first option binds x to the graph input (guard false); the second binds x = n1
    assert g.op("n2").type == "qnn.ElementWiseNeg"
    assert operand_names(g, "n2") == ["n1"]
    # n1 was not part of the match: it stays and is lowered on its own (x is an input there)
    assert g.has_op("n1")


def test_bindings_of_a_failed_alternative_are_undone(tmp_path):
    r = rules(tmp_path, """
rule sub_same {
  match y = m.Sub((m.Neg(x) | x), x)
  emit y = qnn.ElementWiseSubtract(x, x)
}
""")
    b = B()
    a = b.inp("a")
    n = b.op("n", "m.Neg", [a])
    y = b.op("sub", "m.Sub", [n, n])  # first option binds x = a, then n != a; second binds x = n
    g = b.done(y)
    out = run(r, g)
    assert g.op("sub").type == "qnn.ElementWiseSubtract", messages(out)
    assert operand_names(g, "sub") == ["n", "n"]
    assert g.has_op("n")


@pytest.mark.parametrize("op_type, expected", [("m.Sin", "trig"), ("m.Cos", "trig"), ("m.Tan", None)])
def test_op_type_alternatives(tmp_path, op_type, expected):
    r = rules(tmp_path, """
rule trig {
  match y = m.Sin | m.Cos(x)
  emit y = qnn.ElementWiseSin(x)
}
""")
    b = B()
    x = b.inp("x")
    y = b.op("t", op_type, [x])
    g = b.done(y)
    run(r, g)
    assert rule_of(g, "t") == expected


def test_nested_op_type_alternatives(tmp_path):
    r = rules(tmp_path, """
rule neg_trig {
  match y = m.Neg(m.Sin | m.Cos(x))
  emit y = qnn.ElementWiseNeg(x)
}
""")
    b = B()
    x = b.inp("x")
    s = b.op("s", "m.Sin", [x])
    c = b.op("c", "m.Cos", [x])
    t = b.op("t", "m.Tan", [x])
    n1, n2, n3 = (b.op(f"n{i}", "m.Neg", [v]) for i, v in enumerate([s, c, t], 1))
    g = b.done(n1, n2, n3)
    run(r, g)
    assert [rule_of(g, n) for n in ["n1", "n2", "n3"]] == ["neg_trig", "neg_trig", None]
    assert not g.has_op("s") and not g.has_op("c") and g.has_op("t")


# ----------------------------------------------------------- one use / shared

FUSE = """
rule silu {
  match y = m.Mul(h, m.Sigmoid(h))
  emit y = qnn.ElementWiseMultiply(h, h)
}

rule sigmoid {
  match y = m.Sigmoid(x)
  emit y = qnn.Sigmoid(x)
}

rule mul {
  match y = m.Mul(a, b)
  emit y = qnn.ElementWiseMultiply(a, b)
}

rule neg {
  match y = m.Neg(x)
  emit y = qnn.ElementWiseNeg(x)
}
"""


def test_interior_value_used_elsewhere_is_not_fused(tmp_path):
    r = rules(tmp_path, FUSE)
    b = B()
    x = b.inp("x")
    s = b.op("sig", "m.Sigmoid", [x])
    y = b.op("mul", "m.Mul", [x, s])
    z = b.op("neg", "m.Neg", [s])  # a second user of the sigmoid
    g = b.done(y, z)
    out = run(r, g)
    assert out.ok, messages(out)
    assert rule_of(g, "mul") == "mul"
    assert rule_of(g, "sig") == "sigmoid"
    assert operand_names(g, "mul") == ["x", "sig"]


def test_interior_value_that_is_a_graph_output_is_not_fused(tmp_path):
    r = rules(tmp_path, FUSE)
    b = B()
    x = b.inp("x")
    s = b.op("sig", "m.Sigmoid", [x])
    y = b.op("mul", "m.Mul", [x, s])
    g = b.done(y, s)
    out = run(r, g)
    assert out.ok, messages(out)
    assert rule_of(g, "mul") == "mul"
    assert rule_of(g, "sig") == "sigmoid"


def test_interior_value_used_twice_inside_the_pattern_is_fused(tmp_path):
    r = rules(tmp_path, """
rule sq_sig {
  match y = m.Mul(s, s)
  match s = m.Sigmoid(x)
  emit y = qnn.ElementWiseMultiply(x, x)
}
""")
    b = B()
    x = b.inp("x")
    s = b.op("sig", "m.Sigmoid", [x])
    y = b.op("mul", "m.Mul", [s, s])
    g = b.done(y)
    out = run(r, g)
    assert out.ok, messages(out)
    assert [o.name for o in g.ops] == ["mul"]


SHARED = FUSE.replace("m.Mul(h, m.Sigmoid(h))", "m.Mul(h, m.Sigmoid(h) shared)")


def test_shared_interior_op_is_fused_and_kept_for_its_other_users(tmp_path):
    r = rules(tmp_path, SHARED)
    b = B()
    x = b.inp("x")
    s = b.op("sig", "m.Sigmoid", [x])
    y = b.op("mul", "m.Mul", [x, s])
    z = b.op("neg", "m.Neg", [s])
    g = b.done(y, z)
    out = run(r, g)
    assert out.ok, messages(out)
    assert rule_of(g, "mul") == "silu"
    assert operand_names(g, "mul") == ["x", "x"]
    assert rule_of(g, "sig") == "sigmoid"  # kept for neg, and lowered on its own
    assert operand_names(g, "neg") == ["sig"]


def test_shared_interior_op_without_other_users_is_removed(tmp_path):
    r = rules(tmp_path, SHARED)
    b = B()
    x = b.inp("x")
    s = b.op("sig", "m.Sigmoid", [x])
    y = b.op("mul", "m.Mul", [x, s])
    g = b.done(y)
    run(r, g)
    assert [o.name for o in g.ops] == ["mul"]


def test_named_shared_interior_value_is_visible_to_guards(tmp_path):
    r = rules(tmp_path, """
rule silu_shared {
  match y = m.Mul(x, s = m.Sigmoid(x) shared)
  require uses(s) > 1
  fail "uses " ++ str(uses(s))
}
""")
    b = B()
    x = b.inp("x")
    s = b.op("sig", "m.Sigmoid", [x])
    y = b.op("mul", "m.Mul", [x, s])
    z1 = b.op("neg1", "m.Neg", [s])
    z2 = b.op("neg2", "m.Neg", [s])
    g = b.done(y, z1, z2)
    out = run(r, g)
    assert messages(out, "rule-fail") == ["uses 3"]


# ---------------------------------------------------------------------- guards


def test_false_guard_lets_the_next_candidate_apply(tmp_path):
    r = rules(tmp_path, """
rule neg_small benefit 2 {
  match y = m.Neg(x)
  require numel(x) < 10
  emit y = qnn.ElementWiseNeg(x)
}

rule neg_big {
  match y = m.Neg(x)
  emit y = qnn.ElementWiseMultiply(x, x)
}
""")
    b = B()
    x1, x2 = b.inp("x1", (2, 3)), b.inp("x2", (4, 4))
    y1, y2 = b.op("small", "m.Neg", [x1]), b.op("big", "m.Neg", [x2])
    g = b.done(y1, y2)
    out = run(r, g)
    assert out.ok, messages(out)
    assert rule_of(g, "small") == "neg_small"
    assert rule_of(g, "big") == "neg_big"


def test_lets_are_visible_to_later_guards_and_emission(tmp_path):
    r = rules(tmp_path, """
rule neg {
  match y = m.Neg(x: [a, b])
  let n = a * b
  require n == 6
  emit y = qnn.Reshape(x) : shape [n]
}
""")
    b = B()
    x = b.inp("x", (2, 3))
    y = b.op("n", "m.Neg", [x], shape=(6,))
    g = b.done(y)
    out = run(r, g)
    assert out.ok, messages(out)
    assert g.op("n").type == "qnn.Reshape"


# ------------------------------------------------------- property: x*x vs x*y

@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(["x", "y", "c"]), min_size=2, max_size=2))
def test_square_matches_exactly_when_both_operands_are_one_value(tmp_path_factory, names):
    tmp = tmp_path_factory.mktemp("sq")
    r = rules(tmp, SQUARE)
    b = B()
    vals = {"x": b.inp("x"), "y": b.inp("y"), "c": b.const("c")}
    out_v = b.op("sub", "m.Sub", [vals[n] for n in names])
    g = b.done(out_v)
    out = run(r, g)
    same = names[0] == names[1]
    assert (messages(out, "rule-fail") == ["same"]) == same
    assert (rule_of(g, "sub") == "sub") == (not same)


def test_multi_result_root_binders(tmp_path):
    r = rules(tmp_path, """
rule minmax {
  match lo, hi = m.MinMax(x)
  emit {
    lo = qnn.ReduceMin(x) { axes: [rank(x) - 1], keep_dims: true }
    hi = qnn.ReduceMax(x) { axes: [rank(x) - 1], keep_dims: true }
  }
}
""")
    b = B()
    x = b.inp("x")
    lo, hi = b.op("mm", "m.MinMax", [x], n_out=2, shape=(2, 1))
    g = b.done(lo, hi)
    out = run(r, g)
    assert out.ok, messages(out)
    types = {v.name: v.producer.type for v in g.outputs}
    assert types == {"mm.0": "qnn.ReduceMin", "mm.1": "qnn.ReduceMax"}


def test_wildcard_binder_matches_any_number_of_results(tmp_path):
    r = rules(tmp_path, """
rule minmax_int {
  match _ = m.MinMax(_: int)
  fail "int"
}
""")
    b = B()
    x = b.inp("x", dtype="int32")
    lo, hi = b.op("mm", "m.MinMax", [x], n_out=2)
    g = b.done(lo, hi)
    out = run(r, g)
    assert messages(out, "rule-fail") == ["int"]


@pytest.mark.parametrize("pattern, operands", [
    pytest.param("m.Lin(x, w, _)", 2),
    ("m.Lin(x, w, _)", 3),
    ("m.Lin(x, (w | w), _)", 2),
    ("m.Lin(x, (w | w), _)", 3),
])
def test_wildcard_matches_an_absent_optional_operand_however_it_is_stored(tmp_path, pattern, operands):
    r = rules(tmp_path, f"""
rule lin {{
  match y = {pattern}
  fail "matched"
}}
""")
    b = B()
    x, w = b.inp("x"), b.const("w")
    y = b.op("lin", "m.Lin", [x, w] + [None] * (operands - 2))
    g = b.done(y)
    out = run(r, g)
    assert messages(out, "rule-fail") == ["matched"]


@pytest.mark.parametrize("inner, outer, expected", [
    (1, 1, "k=1"),
    (None, -1, "k=-1"),  # the inner op's default
    (1, 2, None),
])
def test_repeated_attribute_capture_across_matched_ops(tmp_path, inner, outer, expected):
    r = rules(tmp_path, """
rule same_dim {
  match y = m.Act(d) { dim: k }
  match d = m.Act(x) { dim: k }
  fail "k=" ++ str(k)
}
""")
    b = B()
    x = b.inp("x")
    a1 = b.op("a1", "m.Act", [x], {} if inner is None else {"dim": inner})
    a2 = b.op("a2", "m.Act", [a1], {"dim": outer})
    g = b.done(a2)
    out = run(r, g)
    assert messages(out, "rule-fail") == ([expected] if expected else [])
