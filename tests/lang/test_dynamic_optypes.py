"""Op types given per match (`k: op` passed an expression): which types an emitted item can have
(`qlower.lang.optypes`), and the checker finding, for each of them, what lowering would hit."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from qlower.api import lower
from qlower.graph import Graph
from qlower.lang.loader import check_paths
from qlower.lang.optypes import emitted_op_types, expr_op_types, fragment_op_types
from qlower.lang.parser import parse
from tests.rewrite.rewrite_support import load_text, registry

_DECLS = "op demo.A(x) -> y\nop demo.B(x) -> y\nop demo.C(x) -> y\n\nfragment apply(x, k: op) -> y {\n  y = k(x)%s\n}\n\n"


def _types(text: str) -> list:
    (rule,) = parse(text).rules
    got = emitted_op_types(rule)
    return [got[id(i)] for i in rule.emits]


def test_an_alternation_gives_each_alternative_and_a_static_op_itself() -> None:
    assert _types("rule r {\n  match y = qnn.Relu | qnn.Tanh(x)\n  emit {\n    t = qnn.Sigmoid(x)\n"
                  "    y = apply(t, optype(y))\n  }\n}\n" + _DECLS % "") == [("qnn.Sigmoid",), ("qnn.Relu", "qnn.Tanh")]


def test_a_plain_pattern_gives_one_and_a_plain_capture_is_open() -> None:
    text = "rule r {\n  match y = demo.A(x)\n  emit y = apply(x, %s)\n}\n" + _DECLS % ""
    assert _types(text % "optype(y)") == [("demo.A",)]
    assert _types(text % "optype(x)") == [None]  # x's producer is whatever the graph has
    assert _types(text % '"qnn." ++ "Relu"') == [None]


def test_the_value_an_emitted_item_rebinds_has_the_emitted_type_after_it() -> None:
    """`optype(y)` before `y` is emitted is the root's type; after, the emitted op's."""
    text = ("rule r {\n  match y = qnn.Relu | qnn.Tanh(x)\n  emit {\n    t = apply(x, optype(y))\n"
            "    u = qnn.Sigmoid(t)\n    v = apply(u, optype(u))\n    y = qnn.Transpose(v) { perm: [1, 0] }\n"
            "    w = apply(y, optype(y))\n  }\n}\n" + _DECLS % "")
    assert _types(text) == [("qnn.Relu", "qnn.Tanh"), ("qnn.Sigmoid",), ("qnn.Sigmoid",), ("qnn.Transpose",),
                            ("qnn.Transpose",)]


def test_a_default_leaves_the_value_either_what_it_was_or_the_default() -> None:
    text = ("rule r {\n  match y = demo.A(x, b?)\n  emit {\n    b ?= qnn.Sigmoid(x)\n    t = apply(b, optype(b))\n"
            "    y = qnn.Relu(t)\n  }\n}\n" + _DECLS % "")
    assert _types(text) == [("qnn.Sigmoid",), None, ("qnn.Relu",)]  # b captured: its producer is open


def test_require_and_emit_if_narrow_and_a_dead_branch_has_none() -> None:
    text = ("rule r {\n  match y = demo.A | demo.B | demo.C(x)\n  require optype(y) != \"demo.C\"\n  let k = optype(y)\n"
            "  emit {\n    if optype(y) == \"demo.A\" {\n      y = apply(x, optype(y))\n"
            "    } else if k in [\"demo.B\"] {\n      y = apply(x, k)\n    } else if not (k == \"demo.B\" or k == \"demo.A\") {\n"
            "      y = apply(x, k)\n    } else {\n      y = apply(x, \"qnn.Relu\" if k == \"demo.C\" else \"qnn.Tanh\")\n"
            "    }\n  }\n}\n" + _DECLS % "")
    assert _types(text) == [("demo.A",), ("demo.B",), (), ("qnn.Tanh",)]


def test_an_expression_alone_is_asked_about_where_the_rule_emits() -> None:
    (rule,) = parse("rule r {\n  match ys... = demo.A | demo.B(x, t = demo.C(_))\n  emit ys... = qnn.Relu(x)\n}\n").rules
    pick = parse('rule q {\n  match y = demo.A(x)\n  emit y = qnn.Relu(x) { p: ["qnn.Relu", "qnn.Tanh"][0] }\n}\n')
    assert expr_op_types(rule.matches[0].pattern and pick.rules[0].emits[0].params[0].expr, rule) == (
        "qnn.Relu", "qnn.Tanh")
    call = parse("rule q {\n  match y = demo.A(x)\n  emit y = qnn.Relu(x) { p: optype(ys[0]), q: optype(t) }\n}\n")
    p, q = call.rules[0].emits[0].params
    assert expr_op_types(p.expr, rule) == ("demo.A", "demo.B")
    assert expr_op_types(q.expr, rule) == ("demo.C",)


def test_a_fragments_op_parameter_has_the_union_of_its_calls() -> None:
    base = _DECLS % "" + "rule r {\n  match y = demo.A | demo.B(x)\n  emit y = apply(x, %s)\n}\n"
    other = "\nrule s {\n  match y = demo.C(x)\n  emit y = apply(x, qnn.Sigmoid)\n}\n"
    cases = [("qnn.Relu", ("qnn.Relu", "qnn.Sigmoid")),
             ('"qnn.Tanh" if optype(y) == "demo.A" else "qnn.Relu"', ("qnn.Tanh", "qnn.Relu", "qnn.Sigmoid")),
             ('"qnn." ++ "Relu"', None)]  # one open call: open
    for arg, want in cases:
        m = parse(base % arg + other)
        assert fragment_op_types(m.fragments[0], "k", m.rules) == want
    alone = parse(_DECLS % "")
    assert fragment_op_types(alone.fragments[0], "k", alone.rules) == ()


# ---------------------------------------------------------------- the law

_UNARY = ["qnn.Relu", "qnn.Sigmoid", "qnn.Tanh", "qnn.Softmax", "qnn.LogSoftmax", "qnn.ElementWiseNeg"]
_PARAMS = {"axis": "1", "beta": "1.0", "foo": "1"}
_SOURCES = ["demo.A", "demo.B", "demo.C"]


def _pick(sources: list[str], ops: list[str], form: str) -> str:
    if form == "list":
        return (f"[{', '.join(repr(o).replace(chr(39), chr(34)) for o in ops)}]"
                f"[index_of([{', '.join(chr(34) + s + chr(34) for s in sources)}], optype(y))]")
    expr = f'"{ops[-1]}"'
    for s, o in reversed(list(zip(sources[:-1], ops[:-1]))):
        expr = f'"{o}" if optype(y) == "{s}" else ({expr})'
    return expr


def _graph(op: str) -> Graph:
    g = Graph("t")
    x = g.add_value("x", "float32", (2, 3))
    y = g.add_value("y", "float32", (2, 3))
    g.add_op("n", op, [x], [y], {})
    g.set_io([x], [y])
    return g


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_checker_reports_a_param_fault_iff_lowering_hits_it(tmp_path_factory, data) -> None:
    """For a random rule emitting an op type by `optype(y)` over an alternation (the root's own type in a
    cleanup rule, or a pick among QNN ops by it), with a random param: the QNN ops the checker says lack it
    (or need another) are those lowering fails on. Lowering runs the same rule with the op type hidden from
    the checker (`"" ++ (...)`, open: checked when it emits)."""
    n = data.draw(st.integers(1, 3))
    form = data.draw(st.sampled_from(["direct", "list", "cond"]))
    if form == "direct":  # a cleanup rule: its roots are QNN ops, re-emitted on a reshaped operand
        sources = ops = data.draw(st.lists(st.sampled_from(_UNARY), min_size=n, max_size=n, unique=True))
        pick = "optype(y)"
    else:
        sources = _SOURCES[:n]
        ops = data.draw(st.lists(st.sampled_from(_UNARY), min_size=n, max_size=n))
        pick = _pick(sources, ops, form)
    param = data.draw(st.sampled_from(sorted(_PARAMS)))
    head = _DECLS % f" {{ {param}: {_PARAMS[param]} }}"
    rule = (f"rule r {{\n  match y = {' | '.join(sources)}(x: [2, 3])\n  emit {{\n"
            f"    xt = qnn.Reshape(x) : shape [3, 2]\n    t = apply(xt, %s)\n    y = qnn.Reshape(t) : shape [2, 3]\n"
            f"  }}\n}}\n")
    d = tmp_path_factory.mktemp("law")
    known = d / "known.qpat"
    known.write_text(head + rule % pick, encoding="utf-8")
    found, _ = check_paths([known], registry=registry())
    assert {f.code for f in found if f.is_error} <= {"unknown-param", "missing-param"}, [str(f) for f in found]
    flagged = {f.message.rpartition(" for ")[2] for f in found if f.is_error}
    rules = load_text(d, head + rule % f'"" ++ ({pick})')
    failing = set()
    for s, o in zip(sources, ops):
        res = lower(_graph(s), rules, "cpu", validate=False)
        if any("has no param" in e.message or "needs param" in e.message for e in res.errors):
            failing.add(o)
        else:
            assert res.ok and [op.type for op in res.graph.ops] == ["qnn.Reshape", o, "qnn.Reshape"], [
                str(e) for e in res.errors]
    assert flagged == failing


def test_a_self_feeding_cleanup_rule_is_found_before_it_fails_to_converge(tmp_path: Path) -> None:
    """`optype(y)` re-emitted by a cleanup rule matching every op of its alternation: the checker says so;
    the same rule with the op type hidden from it loads, and lowering never converges."""
    rule = ("rule lower_a {\n  match y = demo.A(x)\n  emit y = qnn.ElementWiseAdd(x, x)\n}\n\n"
            "fragment binary(a, b, k: op) -> y {\n  y = k(a, b)\n}\n\n"
            "rule again {\n  match y = qnn.ElementWiseAdd | qnn.ElementWiseMultiply(a, b)\n"
            "  emit y = binary(a, b, %s)\n}\n")
    known = tmp_path / "known.qpat"
    known.write_text(_DECLS % "" + rule % "optype(y)", encoding="utf-8")
    found, _ = check_paths([known], registry=registry())
    (d,) = [f for f in found if f.is_error]
    assert d.code == "self-feeding" and "when optype(y) is qnn.ElementWiseAdd" in d.message
    assert (d.span.line, d.span.column) == (15, 7)  # the `k` of the emitted item
    res = lower(_graph("demo.A"), load_text(tmp_path, _DECLS % "" + rule % '"" ++ optype(y)'), "cpu",
                validate=False)
    assert not res.ok and "did not converge" in res.errors[0].message
