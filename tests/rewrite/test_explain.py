"""`qlower explain`: for each candidate rule, the first constraint that fails, located in the rule file."""

from __future__ import annotations

import functools

import pytest

from qlower.api import Rules, load_registry, load_rules
from qlower.diagnostics import QlowerError, Span
from qlower.graph import Graph
from qlower.rewrite.explain import explain

OPS = """\
op m.Mul(a, b) -> y commutative
op m.Sigmoid(x) -> y
op m.Neg(x) -> y
op m.Relu(x) -> y
op m.Rep(x) -> y { times: int }
op m.Act(x) -> y { mode: str = "none" }
"""

RULES = """
rule act_tanh {
  match y = m.Act(x) { mode: "tanh" }
  emit y = qnn.Tanh(x)
}

rule silu {
  match y = m.Mul(x, m.Sigmoid(x))
  emit y = qnn.Sigmoid(x)
}

rule neg_half {
  match y = m.Neg(x: f16)
  emit y = qnn.ElementWiseNeg(x)
}

rule neg_square {
  match y = m.Neg(x: [n, n])
  emit y = qnn.ElementWiseNeg(x)
}

rule neg_rank4 {
  match y = m.Neg(x)
  require rank(x) == 4
  emit y = qnn.ElementWiseNeg(x)
}

rule relu2 {
  match y = m.Relu(x)
  emit {
    t = qnn.Relu(x)
    y = qnn.Relu(t)
  }
}

rule relu_lpai backends(lpai) {
  match y = m.Relu(x)
  fail "no relu on lpai"
}

rule rep_tile {
  match y = m.Rep(x) { times: n }
  emit y = qnn.Tile(x) { multiples: [n, 1] }
}

rule rep_bad_guard benefit 5 {
  match y = m.Rep(x)
  require shape(x)[9] == 1
  emit y = qnn.Relu(x)
}
"""


@functools.cache
def _registry():
    return load_registry()


@pytest.fixture
def rules(tmp_path) -> Rules:
    p = tmp_path / "rules.qpat"
    p.write_text(OPS + RULES, encoding="utf-8")
    return load_rules([p], registry=_registry(), plugins=False)


def at(rules: Rules, needle: str, occurrence: int = 0) -> str:
    """`file:line:col` of the start of `needle` (its n-th occurrence) in the rule file, as spans print it."""
    (file,) = [m.file for m in rules.ruleset.modules]
    text = OPS + RULES
    pos = -1
    for _ in range(occurrence + 1):
        pos = text.index(needle, pos + 1)
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return str(Span(file, line, col, line, col + 1))


@pytest.fixture
def graph() -> Graph:
    g = Graph("t")
    x = g.add_value("x", "float32", [2, 3])
    vals = {}

    def op(name, type, operands, attrs=None, shape=(2, 3)):
        v = g.add_value(name, "float32", shape)
        g.add_op(name, type, operands, [v], attrs or {})
        vals[name] = v
        return v

    a = op("act", "m.Act", [x], {"mode": "none"})
    n = op("neg", "m.Neg", [a])
    m = op("mul", "m.Mul", [x, n])
    r = op("relu", "m.Relu", [m])
    s2 = op("sig2", "m.Sigmoid", [x])
    m2 = op("mul2", "m.Mul", [s2, x])  # x * sigmoid(x), operands swapped
    s = op("sig", "m.Sigmoid", [x])
    m3 = op("mul3", "m.Mul", [r, s])  # s is used twice
    t = op("rep", "m.Rep", [m3], {"times": 2}, shape=(4, 3))
    g.set_io([x], [m2, t])
    return g


def section(text: str, rule: str) -> str:
    """The lines explain wrote about one rule."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(f"rule {rule} "))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("  rule ")), len(lines))
    return "\n".join(lines[start:end])


def stop_line(text: str) -> str:
    (line,) = [l for l in text.splitlines() if "stops:" in l]
    return line


def snapshot(g: Graph):
    return ([(o.name, o.type, [v.name for v in o.operands], [v.name for v in o.results]) for o in g.ops],
            [v.name for v in g.values])


def test_attribute_mismatch_names_the_attribute_and_its_location(rules, graph):
    text = explain(graph, rules, "act", backend="htp")
    s = section(text, "act_tanh")
    assert "no match" in s
    line = stop_line(s)
    assert "mode" in line and "'none'" in line and "'tanh'" in line
    assert line.endswith(f"({at(rules, 'mode: ' + chr(34) + 'tanh')})")


def test_op_type_mismatch_names_the_node_and_the_nested_pattern(rules, graph):
    text = explain(graph, rules, "mul", rule="silu", backend="htp")
    s = section(text, "silu")
    assert "no match" in s
    assert "node neg is m.Neg, not m.Sigmoid" in s  # the first operand order
    assert stop_line(s).endswith(f"({at(rules, 'm.Sigmoid(x))')})")


def test_dtype_constraint(rules, graph):
    s = section(explain(graph, rules, "neg", backend="htp"), "neg_half")
    line = stop_line(s)
    assert "float32" in line and "f16" in line
    assert line.endswith(f"({at(rules, 'f16')})")


def test_shape_constraint(rules, graph):
    s = section(explain(graph, rules, "neg", backend="htp"), "neg_square")
    line = stop_line(s)
    assert "[2, 3]" in line
    where = at(rules, "[n, n]")
    assert f"{where.rsplit(':', 1)[0]}:" in line  # file and line


def test_shape_constraint_column(rules, graph):
    s = section(explain(graph, rules, "neg", backend="htp"), "neg_square")
    assert stop_line(s).endswith(f"({at(rules, '[n, n]')})")


def test_false_guard(rules, graph):
    s = section(explain(graph, rules, "neg", backend="htp"), "neg_rank4")
    line = stop_line(s)
    assert "guard is false" in line
    assert line.endswith(f"({at(rules, 'require rank(x) == 4')})")


def test_matching_rule_says_what_it_would_emit(rules, graph):
    s = section(explain(graph, rules, "relu", backend="htp"), "relu2")
    assert "matches; would emit qnn.Relu, qnn.Relu" in s
    assert "stops" not in s


def test_matching_in_the_other_operand_order(rules, graph):
    s = section(explain(graph, rules, "mul2", rule="silu", backend="htp"), "silu")
    assert "matches; would emit qnn.Sigmoid" in s


def test_interior_value_used_outside_the_pattern(rules, graph):
    s = section(explain(graph, rules, "mul3", rule="silu", backend="htp"), "silu")
    assert "no match" in s  # relu is not a sigmoid either way
    g = graph
    # make a sigmoid with a second user match structurally
    x = g.value("x")
    s_out = g.value("sig")
    v = g.add_value("mul4", "float32", [2, 3])
    g.add_op("mul4", "m.Mul", [x, s_out], [v])
    s = section(explain(g, rules, "mul4", rule="silu", backend="htp"), "silu")
    assert "shared" in s and "outside" in s


def test_fail_rule_and_backend_filter(rules, graph):
    on_lpai = explain(graph, rules, "relu", backend="lpai")
    assert "matches and reports an error: no relu on lpai" in section(on_lpai, "relu_lpai")
    on_htp = explain(graph, rules, "relu", backend="htp")
    s = section(on_htp, "relu_lpai")
    assert "not used on htp" in s and "lpai" in s


def test_emission_that_cannot_happen_on_the_backend(rules, graph):
    s = section(explain(graph, rules, "rep", rule="rep_tile", backend="lpai"), "rep_tile")
    assert "cannot emit" in s and "Tile" in s and "LPAI" in s
    s = section(explain(graph, rules, "rep", rule="rep_tile", backend="htp"), "rep_tile")
    assert "matches; would emit qnn.Tile" in s


def test_guard_that_fails_to_evaluate(rules, graph):
    s = section(explain(graph, rules, "rep", backend="htp"), "rep_bad_guard")
    assert "fails to evaluate" in s and "9" in s


def test_candidates_are_listed_in_the_order_they_are_tried(rules, graph):
    text = explain(graph, rules, "neg", backend="htp")
    assert text.splitlines()[0].startswith("node neg (m.Neg); 3 candidate rule(s)")
    order = [l.split()[1] for l in text.splitlines()[1:] if l.startswith("  rule ")]
    assert order == ["neg_half", "neg_square", "neg_rank4"]
    text = explain(graph, rules, "rep", backend="htp")
    order = [l.split()[1] for l in text.splitlines()[1:] if l.startswith("  rule ")]
    assert order == ["rep_bad_guard", "rep_tile"]  # benefit 5 first


def test_node_without_rules(rules, graph):
    text = explain(graph, rules, "sig", backend="htp")
    assert "no rule is rooted at m.Sigmoid" in text


def test_explain_does_not_change_the_graph(rules, graph):
    before = snapshot(graph)
    for node in ["act", "neg", "mul", "mul2", "relu", "rep"]:
        explain(graph, rules, node, backend="htp")
        explain(graph, rules, node, backend="lpai")
    assert snapshot(graph) == before


def test_unknown_node_suggests_a_close_name(rules, graph):
    with pytest.raises(QlowerError) as exc:
        explain(graph, rules, "nag")
    (d,) = exc.value.diagnostics
    assert "nag" in d.message
    assert d.hint is not None and "neg" in d.hint
    assert d.code == "unknown-node"


def test_unknown_rule_suggests_a_close_name(rules, graph):
    with pytest.raises(QlowerError) as exc:
        explain(graph, rules, "neg", rule="neg_rank5")
    (d,) = exc.value.diagnostics
    assert d.hint is not None and "neg_rank4" in d.hint


def test_explain_agrees_with_lowering(rules, graph):
    """A rule explain says matches is the one lowering applies (for the best candidate)."""
    text = explain(graph, rules, "relu", backend="htp")
    assert "matches; would emit" in section(text, "relu2")
    out = rules.engine("htp").run(graph)
    relu_ops = [o for o in graph.ops if o.provenance and o.provenance.source == "relu"]
    assert {o.provenance.rule for o in relu_ops} == {"relu2"}
    assert not any(d.subject == "node relu (m.Relu)" for d in out.diagnostics)


MORE_RULES = """
rule silu_dag {
  match y = m.Mul(x, s)
  match s = m.Sigmoid(x)
  emit y = qnn.Sigmoid(x)
}

rule relu_of_relu {
  match y = m.Relu((m.Relu(x) | m.Neg(x)))
  emit y = qnn.Relu(x)
}

rule max_input_first {
  match y = m.Max(a, b) commutative
  require is_input(a) and not is_input(b)
  emit y = qnn.ElementWiseMaximum(a, b)
}

rule neg_of_neg {
  match y = m.Neg((m.Neg(x) | x))
  require not is_input(x)
  emit y = qnn.ElementWiseNeg(x)
}
"""


@pytest.fixture
def more(tmp_path) -> tuple[Rules, Graph]:
    p = tmp_path / "more.qpat"
    p.write_text(OPS + "op m.Max(a, b) -> y\n" + MORE_RULES, encoding="utf-8")
    r = load_rules([p], registry=_registry(), plugins=False)
    g = Graph("more")
    x = g.add_value("x", "float32", [2, 3])

    def op(name, type, operands):
        v = g.add_value(name, "float32", [2, 3])
        g.add_op(name, type, operands, [v])
        return v

    n = op("n", "m.Neg", [x])
    m = op("mul", "m.Mul", [x, n])  # x * neg(x): the DAG's second match fails
    r1 = op("r1", "m.Relu", [m])  # relu(mul): neither alternative
    mx = op("max", "m.Max", [n, x])  # needs the swapped order for its guard
    n2 = op("n2", "m.Neg", [n])  # needs the second alternative for its guard
    g.set_io([x], [r1, mx, n2])
    return r, g


def test_dag_pattern_stops_at_the_later_match(more):
    r, g = more
    (file,) = [m.file for m in r.ruleset.modules]
    s = section(explain(g, r, "mul", rule="silu_dag"), "silu_dag")
    line = stop_line(s)
    assert "node n is m.Neg, not m.Sigmoid" in line
    text = OPS + "op m.Max(a, b) -> y\n" + MORE_RULES
    lineno = text[: text.index("match s = m.Sigmoid")].count("\n") + 1
    assert line.endswith(f"({str(Span(file, lineno, 13, lineno, 14))})")


def test_alternatives_list_why_each_option_fails(more):
    r, g = more
    s = section(explain(g, r, "r1", rule="relu_of_relu"), "relu_of_relu")
    line = stop_line(s)
    assert "no alternative matches" in line
    assert "m.Relu" in line and "m.Neg" in line and "node mul is m.Mul" in line


@pytest.mark.parametrize("node, rule", [("max", "max_input_first"), ("n2", "neg_of_neg")])
def test_explain_backtracks_like_the_matcher(more, node, rule):
    r, g = more
    s = section(explain(g, r, node, rule=rule, backend="htp"), rule)
    r.engine("htp").run(g)
    assert g.op(node).provenance.rule == rule  # lowering applies it...
    assert "matches; would emit" in s  # ...so explain must say it matches


def test_optional_operand_absent_is_traced_not_refused(tmp_path):
    """`b?` matches an op without that operand: explain agrees with the matcher."""
    p = tmp_path / "opt.qpat"
    p.write_text("op m.Norm(x, w, b?) -> y\n\nrule norm {\n  match y = m.Norm(x, w, b?)\n  require rank(x) == 9\n"
                 "  emit y = qnn.LayerNorm(x, w, b) { axes: [rank(x) - 1] }\n}\n")
    rules = load_rules([p], registry=_registry(), plugins=False)
    g = Graph("g")
    x, w, y = g.add_value("x", "float32", [2, 3]), g.add_value("w", "float32", [3]), g.add_value("y", "float32", [2, 3])
    g.add_op("n", "m.Norm", [x, w], [y], {})
    g.set_io([x, w], [y])
    text = explain(g, rules, "n", backend="htp")
    assert "the guard is false" in stop_line(section(text, "norm"))  # past the operands, to the require


def test_the_other_operand_order_is_listed_too(rules, graph):
    s = section(explain(graph, rules, "mul", rule="silu", backend="htp"), "silu")
    (other,) = [l for l in s.splitlines() if "other attempt:" in l]
    assert "x has no producer" in other and other.endswith(f"({at(rules, 'm.Sigmoid(x))')})")


def test_an_alternative_that_matches_and_fails_later_reports_the_later_failure(more):
    """The attempt that got furthest is shown: here the second option, stopped by the guard."""
    r, g = more
    s = section(explain(g, r, "n", rule="neg_of_neg", backend="htp"), "neg_of_neg")
    assert "the guard is false" in stop_line(s)
    assert "ok: `x` = x" in s
    assert any("the other alternatives do not match" in l and "no producer" in l for l in s.splitlines())
