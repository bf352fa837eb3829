"""The rewrite driver: rule order, determinism, termination, transactional rewrites, provenance,
naming, legality reports and backend choice."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qlower
from qlower.api import Rules
from qlower.graph import Graph
from qlower.lang.parser import parse
from qlower.rewrite.driver import Engine, RewriteConfig
from rewrite_support import B, load_text, registry

OPS = """
op m.Mul(a, b) -> y commutative
op m.Sub(a, b) -> y
op m.Sigmoid(x) -> y
op m.Neg(x) -> y
op m.Relu(x) -> y
op m.Sin(x) -> y
op m.Cos(x) -> y
op m.Rep(x) -> y { times: int }
op m.MinMax(x) -> (lo, hi)
"""


def rules(tmp_path: Path, text: str) -> Rules:
    """Rules loaded through the checker (so they are rules a user could ship)."""
    return load_text(tmp_path, OPS + text)


def unchecked_engine(text: str, backend: str = "htp") -> Engine:
    """An engine straight from the parser, for rules the checker would refuse."""
    module = parse(OPS + text, "t.qpat")
    return Engine(module.rules, {o.op: o for o in module.ops}, registry=registry(), backend=backend)


def run(r, g: Graph, backend: str = "htp", **config):
    engine = r if isinstance(r, Engine) else r.engine(backend)
    return engine.run(g, config=RewriteConfig(**config)) if config else engine.run(g)


def rule_of(g: Graph, node: str) -> str | None:
    op = g.op(node)
    return op.provenance.rule if op.provenance else None


def snapshot(g: Graph):
    """Everything about a graph's structure, by name."""
    ops = [(o.name, o.type, repr(sorted(o.attrs.items())), [v.name if v is not None else None for v in o.operands],
            [v.name for v in o.results]) for o in g.ops]
    values = [(v.name, str(v.dtype), v.shape, v.producer.name if v.producer else None,
               sorted((u.name, i) for u, i in v.users), v.data is not None) for v in g.values]
    return ops, values, [v.name for v in g.inputs], [v.name for v in g.outputs]


def by_code(out, code: str):
    return [d for d in out.diagnostics if d.code == code]


# -------------------------------------------------------------- rule ordering

def neg_rules(first: str, second: str) -> str:
    return f"""
rule first {first} {{
  match y = m.Neg(x)
  emit y = qnn.ElementWiseNeg(x)
}}

rule second {second} {{
  match y = m.Neg(x)
  emit y = qnn.ElementWiseAbs(x)
}}
"""


@pytest.mark.parametrize("first, second, winner", [
    ("", "", "first"),  # equal benefit: file order
    ("benefit 3", "benefit 3", "first"),
    ("", "benefit 2", "second"),  # higher benefit wins over file order
    ("benefit -1", "", "second"),  # negative benefit: a fallback tried last
    ("benefit 7", "benefit 6", "first"),
])
def test_highest_benefit_first_then_file_order(tmp_path, first, second, winner):
    r = rules(tmp_path, neg_rules(first, second))
    b = B()
    x = b.inp("x")
    y = b.op("n", "m.Neg", [x])
    g = b.done(y)
    out = run(r, g)
    assert out.ok
    assert rule_of(g, "n") == winner


def test_a_lower_benefit_rule_applies_when_the_better_one_does_not_match(tmp_path):
    r = rules(tmp_path, """
rule big benefit 10 {
  match y = m.Neg(x: [_, _, _])
  emit y = qnn.ElementWiseNeg(x)
}

rule any_neg {
  match y = m.Neg(x)
  emit y = qnn.ElementWiseAbs(x)
}
""")
    b = B()
    y = b.op("n", "m.Neg", [b.inp("x")])
    g = b.done(y)
    run(r, g)
    assert rule_of(g, "n") == "any_neg"
    assert g.op("n").type == "qnn.ElementWiseAbs"


def test_default_benefit_prefers_the_larger_fusion(tmp_path):
    # the single-op rule comes first in the file, the fusion still wins (benefit 2 > 1)
    r = rules(tmp_path, """
rule mul {
  match y = m.Mul(a, b)
  emit y = qnn.ElementWiseMultiply(a, b)
}

rule sigmoid {
  match y = m.Sigmoid(x)
  emit y = qnn.Sigmoid(x)
}

rule silu {
  match y = m.Mul(x, m.Sigmoid(x))
  emit {
    s = qnn.Sigmoid(x)
    y = qnn.ElementWiseMultiply(x, s)
  }
}
""")
    b = B()
    x = b.inp("x")
    s = b.op("sig", "m.Sigmoid", [x])
    y = b.op("mul", "m.Mul", [x, s])
    g = b.done(y)
    out = run(r, g)
    assert out.ok
    assert {o.provenance.rule for o in g.ops} == {"silu"}
    assert out.stats["silu"].applied == 1
    assert "mul" not in out.stats or out.stats["mul"].applied == 0


def test_default_benefit_counts_every_matched_op(tmp_path):
    r = rules(tmp_path, """
rule neg2 {
  match y = m.Neg(m.Neg(x))
  emit y = qnn.ElementWiseNeg(x)
}

rule neg3 {
  match y = m.Neg(m.Neg(m.Neg(x)))
  emit y = qnn.ElementWiseAbs(x)
}

rule neg1 {
  match y = m.Neg(x)
  emit y = qnn.Relu(x)
}
""")
    b = B()
    x = b.inp("x")
    v = x
    for i in range(3):
        v = b.op(f"n{i}", "m.Neg", [v])
    g = b.done(v)
    run(r, g)
    assert [o.name for o in g.ops] == ["n2"]
    assert rule_of(g, "n2") == "neg3"


# --------------------------------------------------------------- determinism

MLLM_STEPS = ["repeat", "silu", "neg", "add_self", "softmax", "mul_sigmoid"]


@functools.cache
def _mllm() -> Rules:
    return qlower.load_rules(packs=["mllm"])


def build_mllm(steps: list[str]) -> Graph:
    g = Graph("det")
    x = g.add_value("x", "float32", [1, 2, 3, 4])
    v = x
    for i, s in enumerate(steps):
        shape = list(v.shape)
        if s == "repeat":
            shape[1] *= 2
            out = g.add_value(f"v{i}", "float32", shape)
            g.add_op(f"op{i}", "mllm.Repeat", [v], [out], {"dim": 1, "times": 2})
        elif s == "silu":
            out = g.add_value(f"v{i}", "float32", shape)
            g.add_op(f"op{i}", "mllm.SiLU", [v], [out])
        elif s == "neg":
            out = g.add_value(f"v{i}", "float32", shape)
            g.add_op(f"op{i}", "mllm.Neg", [v], [out])
        elif s == "add_self":
            out = g.add_value(f"v{i}", "float32", shape)
            g.add_op(f"op{i}", "mllm.Add", [v, v], [out])
        elif s == "softmax":
            out = g.add_value(f"v{i}", "float32", shape)
            g.add_op(f"op{i}", "mllm.Softmax", [v], [out], {"dim": 1})
        else:
            sg = g.add_value(f"s{i}", "float32", shape)
            g.add_op(f"sig{i}", "mllm.Sigmoid", [v], [sg])
            out = g.add_value(f"v{i}", "float32", shape)
            g.add_op(f"op{i}", "mllm.Mul", [v, sg], [out])
        v = out
    g.set_io([x], [v])
    return g


@settings(max_examples=15, deadline=None)
@given(st.lists(st.sampled_from(MLLM_STEPS), min_size=1, max_size=5))
def test_lowering_is_deterministic(steps):
    results = []
    for _ in range(2):
        g = build_mllm(steps)
        res = qlower.lower(g, _mllm(), "htp")
        assert res.ok, [str(d) for d in res.diagnostics]
        results.append((snapshot(g), [(o.name, o.type) for o in g.topo_order()],
                        [(o.name, o.provenance) for o in g.ops]))
    assert results[0] == results[1]


def test_deterministic_names_for_a_known_graph():
    g = build_mllm(["repeat", "silu"])
    res = qlower.lower(g, _mllm(), "cpu")
    assert res.ok
    assert [(o.name, o.type) for o in g.topo_order()] == [
        ("op0.t", "qnn.Reshape"), ("op0.u", "qnn.Tile"), ("op0", "qnn.Reshape"),
        ("op1.s", "qnn.Sigmoid"), ("op1", "qnn.ElementWiseMultiply"),
    ]


# ---------------------------------------------------------------- termination

def test_source_rules_that_undo_each_other_stop_with_no_fixpoint(tmp_path):
    r = rules(tmp_path, """
rule sin_to_cos {
  match y = m.Sin(x)
  emit y = m.Cos(x)
}

rule cos_to_sin {
  match y = m.Cos(x)
  emit y = m.Sin(x)
}
""")
    b = B()
    y = b.op("t", "m.Sin", [b.inp("x")])
    g = b.done(y)
    out = run(r, g)
    (d,) = by_code(out, "no-fixpoint")
    assert d.is_error
    assert "sin_to_cos" in d.message and "cos_to_sin" in d.message
    assert not out.ok


def test_a_rule_that_rematches_its_own_output_stops(tmp_path):
    r = rules(tmp_path, """
rule grow {
  match y = m.Sin(x)
  require rank(x) >= 0  # always true: the checker cannot tell this rule never stops
  emit {
    t = m.Sin(x) : shape shape(x)
    y = m.Relu(t)
  }
}
""")
    b = B()
    y = b.op("t", "m.Sin", [b.inp("x")])
    g = b.done(y)
    # a small growth cap keeps the test quick; the default's 100,000 ops stop it the same way
    out = run(r, g, growth_factor=4, growth_slack=2000)
    (d,) = by_code(out, "no-fixpoint")
    assert "grow" in d.message and "grew from 1 to" in d.message
    # the names of what it emitted stayed short (they used to grow by one `.t` an application)
    assert max(len(o.name) for o in out.graph.ops) < 16


def test_converging_source_rules_then_lowering(tmp_path):
    r = rules(tmp_path, """
rule double_neg {
  match y = m.Neg(m.Neg(x))
  emit y = m.Relu(x)
}

rule relu {
  match y = m.Relu(x)
  emit y = qnn.Relu(x)
}
""")
    b = B()
    v = b.inp("x")
    for i in range(4):
        v = b.op(f"n{i}", "m.Neg", [v])
    g = b.done(v)
    out = run(r, g)
    assert by_code(out, "no-fixpoint") == []
    # neg(neg(neg(neg(x)))) -> relu(relu(x)) via source rewrites, then lowered
    assert sorted(o.type for o in g.ops) == ["qnn.Relu", "qnn.Relu"]
    assert out.ok


def test_lowering_rules_apply_once_per_op(tmp_path):
    r = rules(tmp_path, """
rule neg {
  match y = m.Neg(x)
  emit {
    a = qnn.ElementWiseNeg(x)
    y = qnn.ElementWiseNeg(a)
  }
}
""")
    b = B()
    v = b.inp("x")
    for i in range(3):
        v = b.op(f"n{i}", "m.Neg", [v])
    g = b.done(v)
    out = run(r, g)
    assert out.ok
    assert out.stats["neg"].applied == 3
    assert len(g) == 6
    assert all(o.type == "qnn.ElementWiseNeg" for o in g.ops)


# ------------------------------------------------------------- transactional

def assert_failed_cleanly(out, g: Graph, before, rule: str, node: str, code: str = "emit-error") -> None:
    assert snapshot(g) == before
    found = [d for d in out.diagnostics if d.code == code]
    assert found, [str(d) for d in out.diagnostics]
    d = found[0]
    assert d.is_error
    assert rule in d.message
    assert d.subject is not None and node in d.subject


def two_input_graph():
    b = B()
    x = b.inp("x")
    w = b.const("w", (3, 3))
    y = b.op("sub", "m.Sub", [x, w])
    z = b.op("after", "m.Sin", [y])
    return b.done(z)


def test_bad_param_value_leaves_the_graph_unchanged():
    e = unchecked_engine("""
rule bad_param {
  match y = m.Sub(x, w)
  emit {
    t = qnn.Relu(x)
    y = qnn.MatMul(t, w) { transpose_in0: 5 }
  }
}
""")
    g = two_input_graph()
    before = snapshot(g)
    out = run(e, g)
    assert_failed_cleanly(out, g, before, "bad_param", "node sub")
    assert "transpose_in0" in by_code(out, "emit-error")[0].message


def test_unknown_shape_of_a_new_value_leaves_the_graph_unchanged(tmp_path):
    r = rules(tmp_path, """
rule no_shape {
  match y = m.Sub(x, w)
  emit {
    t = m.Neg(x)
    y = m.Relu(t)
  }
}
""")
    g = two_input_graph()
    before = snapshot(g)
    out = run(r, g)
    assert_failed_cleanly(out, g, before, "no_shape", "node sub")
    assert "shape" in by_code(out, "emit-error")[0].message


def test_guard_that_raises_is_reported_and_changes_nothing(tmp_path):
    r = rules(tmp_path, """
rule bad_guard {
  match y = m.Sub(x, w)
  require shape(x)[7] == 1
  emit y = qnn.ElementWiseSubtract(x, w)
}
""")
    g = two_input_graph()
    before = snapshot(g)
    out = run(r, g)
    assert_failed_cleanly(out, g, before, "bad_guard", "node sub", code="guard-error")
    d = by_code(out, "guard-error")[0]
    assert d.span is not None and d.span.line == OPS.count("\n") + 4  # the require line


def test_guard_error_lets_the_next_candidate_apply(tmp_path):
    r = rules(tmp_path, """
rule bad_guard benefit 2 {
  match y = m.Sub(x, w)
  require shape(x)[7] == 1
  emit y = qnn.ElementWiseAdd(x, w)
}

rule sub {
  match y = m.Sub(x, w)
  emit y = qnn.ElementWiseSubtract(x, w)
}
""")
    g = two_input_graph()
    out = run(r, g)
    assert rule_of(g, "sub") == "sub"
    assert [d.subject for d in by_code(out, "guard-error")] == ["node sub (m.Sub)"]


def test_emission_failure_lets_the_next_candidate_apply():
    e = unchecked_engine("""
rule bad_param benefit 5 {
  match y = m.Sub(x, w)
  emit {
    t = qnn.Relu(x)
    y = qnn.MatMul(t, w) { transpose_in0: 5 }
  }
}

rule sub {
  match y = m.Sub(x, w)
  emit y = qnn.ElementWiseSubtract(x, w)
}
""")
    g = two_input_graph()
    out = run(e, g)
    assert rule_of(g, "sub") == "sub"
    assert sorted(o.name for o in g.ops) == ["after", "sub"]
    assert not any(o.name.startswith("sub.") for o in g.ops)
    assert len(by_code(out, "emit-error")) == 1


@pytest.mark.parametrize("emit", [
    "emit y = qnn.Relu(y)",
    "emit {\n    t = qnn.Relu(y)\n    y = qnn.Relu(t)\n  }",
    "let z = y\n  emit y = qnn.Relu(z)",
], ids=["direct", "through-new-value", "through-let"])
def test_rule_that_would_create_a_cycle_is_reported(emit):
    e = unchecked_engine(f"""
rule loop {{
  match y = m.Neg(x)
  {emit}
}}
""")
    b = B()
    y = b.op("n", "m.Neg", [b.inp("x")])
    z = b.op("after", "m.Sin", [y])
    g = b.done(z)
    before = snapshot(g)
    out = run(e, g)
    assert_failed_cleanly(out, g, before, "loop", "node n")
    assert "cycle" in by_code(out, "emit-error")[0].message
    g.topo_order()  # still acyclic


def test_cycle_through_a_spread_list_is_reported(tmp_path):
    r = rules(tmp_path, """
rule loop_list {
  match y = m.Neg(x)
  let vs = [x, y]
  emit y = qnn.Concat(vs...) { axis: 0 }
}
""")
    b = B()
    y = b.op("n", "m.Neg", [b.inp("x")], shape=(4, 3))
    z = b.op("after", "m.Sin", [y])
    g = b.done(z)
    before = snapshot(g)
    out = run(r, g)
    assert_failed_cleanly(out, g, before, "loop_list", "node n")


@pytest.mark.parametrize("used_by", ["op", "output"])
def test_used_result_left_unproduced_is_reported(used_by):
    e = unchecked_engine("""
rule only_lo {
  match lo, hi = m.MinMax(x)
  emit {
    lo = qnn.ReduceMin(x) { axes: [1], keep_dims: true }
    t = qnn.Relu(x)
  }
}
""")
    b = B()
    lo, hi = b.op("mm", "m.MinMax", [b.inp("x")], n_out=2, shape=(2, 1))
    if used_by == "op":
        g = b.done(lo, b.op("after", "m.Sin", [hi]))
    else:
        g = b.done(lo, hi)
    before = snapshot(g)
    out = run(e, g)
    assert_failed_cleanly(out, g, before, "only_lo", "node mm")
    assert "mm.1" in by_code(out, "emit-error")[0].message


@pytest.mark.parametrize("used_by", ["op", "output"])
def test_unnamed_used_result_left_unproduced_is_reported(tmp_path, used_by):
    r = rules(tmp_path, """
rule only_lo {
  match lo, _ = m.MinMax(x)
  emit lo = qnn.ReduceMin(x) { axes: [1], keep_dims: true }
}
""")
    b = B()
    lo, hi = b.op("mm", "m.MinMax", [b.inp("x")], n_out=2, shape=(2, 1))
    if used_by == "op":
        g = b.done(lo, b.op("after", "m.Sin", [hi]))
    else:
        g = b.done(lo, hi)
    before = snapshot(g)
    out = run(r, g)
    assert_failed_cleanly(out, g, before, "only_lo", "node mm")


def test_unused_results_need_not_be_produced(tmp_path):
    r = rules(tmp_path, """
rule only_lo {
  match lo, _ = m.MinMax(x)
  emit lo = qnn.ReduceMin(x) { axes: [1], keep_dims: true }
}
""")
    b = B()
    lo, hi = b.op("mm", "m.MinMax", [b.inp("x")], n_out=2, shape=(2, 1))
    g = b.done(lo)
    out = run(r, g)
    assert out.ok, [str(d) for d in out.diagnostics]
    assert g.op("mm").type == "qnn.ReduceMin"
    assert not g.has_value("mm.1")


# -------------------------------------------------------- provenance / names

EMIT3 = """
rule neg3 {
  match y = m.Neg(x)
  emit {
    a = qnn.ElementWiseNeg(x)
    b = qnn.ElementWiseAbs(a)
    y = qnn.Relu(b)
  }
}
"""


def test_emitted_ops_carry_provenance(tmp_path):
    r = rules(tmp_path, EMIT3)
    b = B()
    y = b.op("n", "m.Neg", [b.inp("x")])
    g = b.done(y)
    run(r, g)
    (rule_file,) = [m.file for m in r.ruleset.modules]
    assert len(g) == 3
    for o in g.ops:
        assert o.provenance.rule == "neg3"
        assert o.provenance.source == "n"
        file, line, col = o.provenance.location.rsplit(":", 2)
        assert Path(file).resolve() == Path(rule_file).resolve()
        assert (int(line), int(col)) == (OPS.count("\n") + 2, 1)


def test_new_values_and_ops_are_named_after_the_node(tmp_path):
    r = rules(tmp_path, EMIT3)
    b = B()
    y = b.op("n", "m.Neg", [b.inp("x")])
    g = b.done(y)
    run(r, g)
    assert [(o.name, o.type, [v.name for v in o.operands], [v.name for v in o.results])
            for o in g.topo_order()] == [
        ("n.a", "qnn.ElementWiseNeg", ["x"], ["n.a"]),
        ("n.b", "qnn.ElementWiseAbs", ["n.a"], ["n.b"]),
        ("n", "qnn.Relu", ["n.b"], ["n"]),
    ]


def test_new_names_avoid_existing_ones(tmp_path):
    r = rules(tmp_path, EMIT3)
    b = B()
    x = b.inp("x")
    taken = b.inp("n.a")  # a graph input that happens to be called n.a
    y = b.op("n", "m.Neg", [x])
    z = b.op("sub", "m.Sub", [y, taken])
    g = b.done(z)
    run(r, g)
    assert g.value("n.a") is taken and taken.producer is None
    assert [(o.name, [v.name for v in o.results]) for o in g.topo_order() if o.provenance] == [
        ("n.a", ["n.a_1"]), ("n.b", ["n.b"]), ("n", ["n"])]


def test_one_to_one_lowering_keeps_node_and_value_names(tmp_path):
    r = rules(tmp_path, """
rule neg {
  match y = m.Neg(x)
  emit y = qnn.ElementWiseNeg(x)
}
""")
    b = B()
    y = b.op("n", "m.Neg", [b.inp("x")])
    g = b.done(y)
    run(r, g)
    assert [(o.name, [v.name for v in o.results]) for o in g.ops] == [("n", ["n"])]
    assert g.outputs[0].name == "n"


# ---------------------------------------------------------------- legality

def test_unlowered_ops_are_reported_per_node_with_candidates(tmp_path):
    r = rules(tmp_path, """
rule neg_rank3 {
  match y = m.Neg(x: [_, _, _])
  emit y = qnn.ElementWiseNeg(x)
}
""")
    b = B()
    x = b.inp("x")
    n1 = b.op("n1", "m.Neg", [x])
    n2 = b.op("n2", "m.Neg", [n1])
    s = b.op("s", "m.Sin", [n2])
    g = b.done(s)
    out = run(r, g)
    assert not out.ok
    found = {d.subject: d for d in by_code(out, "not-lowered")}
    assert set(found) == {"node n1 (m.Neg)", "node n2 (m.Neg)", "node s (m.Sin)"}
    for n in ["node n1 (m.Neg)", "node n2 (m.Neg)"]:
        assert any("neg_rank3" in note.message for note in found[n].notes)
    assert found["node s (m.Sin)"].notes == ()
    assert out.coverage["m.Neg"].count == 2
    assert out.coverage["m.Neg"].unlowered == 2


def test_unlowered_op_type_gets_a_did_you_mean_hint(tmp_path):
    r = rules(tmp_path, """
rule neg {
  match y = m.Neg(x)
  emit y = qnn.ElementWiseNeg(x)
}
""")
    b = B()
    y = b.op("n", "m.Negg", [b.inp("x")])
    g = b.done(y)
    out = run(r, g)
    (d,) = by_code(out, "not-lowered")
    assert d.hint is not None and "m.Neg" in d.hint


def test_failing_rule_reports_its_message_once(tmp_path):
    r = rules(tmp_path, """
rule neg_int {
  match y = m.Neg(x: int)
  fail "integer neg of rank " ++ str(rank(x)) ++ " is not supported"
}

rule neg {
  match y = m.Neg(x)
  emit y = qnn.ElementWiseNeg(x)
}
""")
    b = B()
    y = b.op("n", "m.Neg", [b.inp("x", dtype="int32")])
    g = b.done(y)
    before = snapshot(g)
    out = run(r, g)
    assert [d.message for d in out.diagnostics] == ["integer neg of rank 2 is not supported"]
    d = out.diagnostics[0]
    assert d.code == "rule-fail" and d.subject == "node n (m.Neg)"
    assert any("neg_int" in n.message for n in d.notes)
    assert snapshot(g) == before  # fail stops: no later candidate applies


def test_coverage_and_stats(tmp_path):
    r = rules(tmp_path, """
rule neg {
  match y = m.Neg(x)
  emit {
    a = qnn.ElementWiseNeg(x)
    y = qnn.Relu(a)
  }
}
""")
    b = B()
    v = b.inp("x")
    for i in range(2):
        v = b.op(f"n{i}", "m.Neg", [v])
    v = b.op("s", "m.Sin", [v])
    g = b.done(v)
    out = run(r, g)
    neg = out.coverage["m.Neg"]
    assert (neg.count, neg.rules, neg.emitted, neg.unlowered) == (
        2, {"neg": 2}, {"qnn.ElementWiseNeg": 2, "qnn.Relu": 2}, 0)
    sin = out.coverage["m.Sin"]
    assert (sin.count, sin.rules, sin.unlowered) == (1, {}, 1)
    assert out.stats["neg"].applied == 2 and out.stats["neg"].matches == 2


# ------------------------------------------------------------------ backends

BACKEND_RULES = """
rule neg_lpai backends(lpai) {
  match y = m.Neg(x)
  emit y = qnn.ElementWiseMultiply(x, x)
}

rule neg_htp backends(htp, dsp) {
  match y = m.Neg(x)
  emit y = qnn.ElementWiseNeg(x)
}
"""


@pytest.mark.parametrize("backend, winner", [("lpai", "neg_lpai"), ("htp", "neg_htp"), ("dsp", "neg_htp")])
def test_rules_are_chosen_by_backend(tmp_path, backend, winner):
    r = rules(tmp_path, BACKEND_RULES)
    b = B()
    y = b.op("n", "m.Neg", [b.inp("x")])
    g = b.done(y)
    out = run(r, g, backend)
    assert out.ok
    assert rule_of(g, "n") == winner


def test_no_rule_for_the_backend_is_reported_with_a_hint(tmp_path):
    r = rules(tmp_path, BACKEND_RULES)
    b = B()
    y = b.op("n", "m.Neg", [b.inp("x")])
    g = b.done(y)
    out = run(r, g, "cpu")
    (d,) = by_code(out, "not-lowered")
    assert d.subject == "node n (m.Neg)"
    assert "cpu" in (d.hint or "") and "neg_lpai" in d.hint and "neg_htp" in d.hint


TILE_RULES = """
rule rep_tile benefit 5 {
  match y = m.Rep(x) { times: n }
  emit y = qnn.Tile(x) { multiples: [n, 1] }
}

rule rep_concat {
  match y = m.Rep(x) { times: n }
  let copies = [x] * n
  emit y = qnn.Concat(copies...) { axis: 0 }
}
"""


@pytest.mark.parametrize("backend, winner, qnn_type", [
    ("htp", "rep_tile", "qnn.Tile"),
    ("lpai", "rep_concat", "qnn.Concat"),  # LPAI has no Tile: the next candidate applies
])
def test_unsupported_op_on_the_backend_is_skipped_softly(tmp_path, backend, winner, qnn_type):
    r = rules(tmp_path, TILE_RULES)
    b = B()
    y = b.op("rep", "m.Rep", [b.inp("x")], {"times": 3}, shape=(6, 3))
    g = b.done(y)
    out = run(r, g, backend)
    assert out.ok, [str(d) for d in out.diagnostics]
    assert rule_of(g, "rep") == winner
    assert g.op("rep").type == qnn_type


def test_unsupported_op_without_alternative_names_the_reason(tmp_path):
    r = rules(tmp_path, TILE_RULES.split("rule rep_concat")[0])
    b = B()
    y = b.op("rep", "m.Rep", [b.inp("x")], {"times": 3}, shape=(6, 3))
    g = b.done(y)
    before = snapshot(g)
    out = run(r, g, "lpai")
    assert snapshot(g) == before
    (d,) = by_code(out, "not-lowered")
    text = d.message + " ".join(n.message for n in d.notes)
    assert "Tile" in text and "LPAI" in text
    assert by_code(out, "emit-error") == []  # soft: not an emission error


ALIAS_RULES = """
rule rep_identity {
  match y = m.Rep(x) { times: 1 }
  emit y = x
}

rule rep_copy {
  match y = m.Rep(x) { times: 1 }
  emit y = qnn.Reshape(x)
}
"""


def test_alias_removes_an_identity_op(tmp_path):
    r = rules(tmp_path, ALIAS_RULES)
    b = B()
    x = b.inp("x")
    inner = b.op("inner", "m.Rep", [x], {"times": 1})
    after = b.op("after", "m.Neg", [inner])
    g = b.done(after)
    out = run(r, g)
    assert not g.has_op("inner") and not g.has_value("inner")
    assert [v.name for v in g.op("after").operands] == ["x"]
    assert [d.subject for d in out.diagnostics] == ["node after (m.Neg)"]  # no rule for m.Neg here


def test_alias_of_an_output_to_an_input_is_skipped_for_the_next_candidate(tmp_path):
    r = rules(tmp_path, ALIAS_RULES)
    b = B()
    y = b.op("rep", "m.Rep", [b.inp("x")], {"times": 1})
    g = b.done(y)
    out = run(r, g)
    assert out.ok, [str(d) for d in out.diagnostics]
    assert rule_of(g, "rep") == "rep_copy"
    assert [v.name for v in g.outputs] == ["rep"]


def test_graph_outputs_keep_their_names_through_aliases(tmp_path):
    r = rules(tmp_path, ALIAS_RULES)
    b = B()
    x = b.inp("x")
    inner = b.op("inner", "m.Rep", [x], {"times": 1})
    outer = b.op("outer", "m.Rep", [inner], {"times": 1})
    g = b.done(outer)
    out = run(r, g)
    assert out.ok, [str(d) for d in out.diagnostics]
    assert [v.name for v in g.outputs] == ["outer"]


# ------------------------------------------------------------ static tensors

def test_emitted_tensors_are_named_after_the_node_and_hold_their_data(tmp_path):
    r = rules(tmp_path, """
rule scale {
  match y = m.Neg(x)
  emit {
    k = tensor(full([1], -1.0, f32)) : dtype f32, encoding none
    q = tensor(full([1], 1.0, f32)) : dtype u8, encoding quant(0.5, 10)
    t = qnn.ElementWiseMultiply(x, k)
    y = qnn.ElementWiseAdd(t, tensor([[1, 2, 3]]))
  }
}
""")
    b = B()
    y = b.op("n", "m.Neg", [b.inp("x")])
    g = b.done(y)
    out = run(r, g, "cpu")
    assert out.ok, [str(d) for d in out.diagnostics]
    k = g.value("n.k")
    assert k.is_const and k.dtype == np.float32 and k.data.tolist() == [-1.0] and k.quant is None
    q = g.value("n.q")
    assert q.dtype == np.uint8 and q.data.tolist() == [12] and q.quant == qlower.Quant(0.5, 10)
    assert q.users == []  # emitted but unused
    (inline,) = [v for v in g.op("n").operands if v.is_const]
    assert inline.name.startswith("n.") and inline.dtype == np.int32  # 64-bit ints become int32
    assert inline.data.tolist() == [[1, 2, 3]]
    assert [v.name for v in g.op("n.t").operands] == ["x", "n.k"]


def test_value_properties_of_emitted_values(tmp_path):
    r = rules(tmp_path, """
rule cast {
  match y = m.Neg(x)
  emit {
    t = qnn.Reshape(x) : shape [numel(x)]
    c = qnn.Cast(t) : dtype f16, encoding none
    y = qnn.Reshape(c)
  }
}
""")
    b = B()
    y = b.op("n", "m.Neg", [b.inp("x")], dtype="float16")
    g = b.done(y)
    out = run(r, g, "cpu")
    assert out.ok, [str(d) for d in out.diagnostics]
    assert g.value("n.t").shape == (6,) and g.value("n.t").dtype == np.float32
    assert g.value("n.c").shape == (6,) and g.value("n.c").dtype == np.float16
    assert g.value("n").shape == (2, 3)  # the root's result keeps its own type


def test_result_emitted_twice_is_reported_not_half_applied():
    e = unchecked_engine("""
rule twice {
  match y = m.Neg(x)
  emit {
    y = qnn.Relu(x)
    y = qnn.ElementWiseNeg(x)
  }
}
""")
    b = B()
    y = b.op("n", "m.Neg", [b.inp("x")])
    g = b.done(b.op("after", "m.Sin", [y]))
    before = snapshot(g)
    out = run(e, g)
    assert_failed_cleanly(out, g, before, "twice", "node n")


def test_cyclic_graph_is_reported_not_lowered(tmp_path):
    r = rules(tmp_path, """
rule neg {
  match y = m.Neg(x)
  emit y = qnn.ElementWiseNeg(x)
}

rule sin_to_cos {
  match y = m.Sin(x)
  emit y = m.Cos(x)
}
""")
    b = B()
    x = b.inp("x")
    n1 = b.op("n1", "m.Neg", [x])
    n2 = b.op("n2", "m.Neg", [n1])
    g = b.done(n2)
    g.set_operand(g.op("n1"), 0, n2)  # n1 <-> n2
    out = run(r, g)
    found = by_code(out, "cycle")
    assert found  # (currently reported twice: once per phase)
    assert all("n1" in d.message and "n2" in d.message and d.is_error for d in found)
    assert g.op("n1").type == "m.Neg" and g.op("n2").type == "m.Neg"


def test_a_param_of_minus_zero_is_not_the_last_zero_planned(tmp_path):
    """The planner memoises coerced scalar params; -0.0 == 0.0 (and NaN != NaN) must not make one
    op's param depend on what an earlier op, or an earlier graph, was given."""
    r = rules(tmp_path, """
op m.Soft(x) -> y { beta: float = 1.0 }
rule soft {
  match y = m.Soft(x) { beta: b }
  emit y = qnn.Softmax(x) { beta: b }
}
""")
    engine = Engine(r.ruleset.rules, r.ruleset.ops, registry=r.engine("cpu").registry, backend="cpu",
                    functions=r.functions, target="qnn", fast_retypes=False)
    got = []
    for beta in (-0.0, 0.0, -0.0, float("nan")):
        b = B()
        g = b.done(b.op("s", "m.Soft", [b.inp("x")], {"beta": beta}))
        assert engine.run(g).ok
        got.append(g.op("s").attrs["beta"])
    assert [np.copysign(1.0, v) for v in got[:3]] == [-1.0, 1.0, -1.0] and np.isnan(got[3])


# -------------------------------------------------------------- captures named like engine keys

@pytest.mark.parametrize("name", ["__fail__", "__ops__", "__listen__"])
def test_a_capture_may_have_any_name_the_grammar_allows(tmp_path, name):
    """Bindings and the engine's own state are kept apart: a capture named like a control key
    (once `__fail__`, `__ops__`, `__listen__` in the same dict) binds like any other."""
    r = rules(tmp_path, f"""
rule rep_as_tile {{
  match y = m.Rep({name}) {{ times: n }}
  let {name}_t = n
  emit y = qnn.Tile({name}) {{ multiples: [1, {name}_t] }}
}}
""")
    b = B()
    g = b.done(b.op("n", "m.Rep", [b.inp("x")], {"times": 2}, shape=(2, 6)))
    out = run(r, g)
    assert not out.diagnostics, [d.message for d in out.diagnostics]
    assert g.op("n").type == "qnn.Tile" and list(g.op("n").attrs["multiples"]) == [1, 2]


def test_an_identity_at_a_graph_output_renames_the_producer():
    """`emit y = x` where y is a graph output: x's producer writes y (no copy op), x's other users read y."""
    g = Graph("t")
    x = g.add_value("x", "float32", [2, 3])
    t = g.add_value("t", "float32", [2, 3])
    y = g.add_value("y", "float32", [2, 3])
    z = g.add_value("z", "float32", [2, 3])
    g.add_op("neg", "mllm.Neg", [x], [t])
    g.add_op("view", "mllm.View", [t], [y], {"shape": [2, 3]})
    g.add_op("relu", "mllm.ReLU", [t], [z])
    g.set_io([x], [y, z])
    result = qlower.lower(g, qlower.load_rules(packs=["mllm"]), backend="cpu")
    result.raise_for_errors()
    assert sorted(result.qnn_op_counts()) == ["ElementWiseNeg", "Relu"]
    assert [v.name for v in g.outputs] == ["y", "z"]
    assert g.op("neg").results[0] is g.value("y") and g.op("relu").operands[0] is g.value("y")
    assert not g.has_value("t")
