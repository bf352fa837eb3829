"""The engine's short path for rules that only retype an op (`map A(x) -> B(x)`, see
`qlower.rewrite.driver.pure_retype`) must lower exactly as the general matcher and planner do:
the same ops, types, attributes, operands, provenance, coverage, rule statistics and diagnostics,
on every backend (including ones where the emitted op is unsupported and the next rule wins)."""

from __future__ import annotations

import functools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import qlower
from qlower import Graph
from qlower.lang.parser import parse
from qlower.rewrite.driver import Engine, pure_retype

UNARY = ["mllm.Sigmoid", "mllm.Neg", "mllm.Exp", "mllm.ReLU", "mllm.Tanh", "mllm.Abs"]
BINARY = ["mllm.Add", "mllm.Mul", "mllm.Sub", "mllm.Div"]


@functools.cache
def _rules() -> qlower.Rules:
    return qlower.load_rules(packs=["mllm"])


def _engines(backend: str) -> tuple[Engine, Engine]:
    r = _rules()
    fast = r.engine(backend)
    slow = Engine(r.ruleset.rules, r.ruleset.ops, registry=fast.registry, backend=backend,
                  functions=r.functions, target=r.registry.dialect, fast_retypes=False)
    return fast, slow


@st.composite
def graphs(draw) -> list[tuple[str, list[int]]]:
    """A chain of ops over one [2, 3] float32 value: (op type, operand indices into earlier values)."""
    steps = []
    n = 1
    for _ in range(draw(st.integers(1, 12))):
        if draw(st.booleans()):
            steps.append((draw(st.sampled_from(UNARY)), [draw(st.integers(0, n - 1))]))
        else:
            steps.append((draw(st.sampled_from(BINARY)), [draw(st.integers(0, n - 1)) for _ in range(2)]))
        n += 1
    return steps


def _build(steps: list[tuple[str, list[int]]], dtype: str) -> Graph:
    g = Graph("g")
    vals = [g.add_value("v0", dtype, [2, 3])]
    for i, (op, ins) in enumerate(steps, 1):
        v = g.add_value(f"v{i}", dtype, [2, 3])
        g.add_op(f"n{i}", op, [vals[j] for j in ins], [v])
        vals.append(v)
    g.set_io([vals[0]], [vals[-1]])
    return g


def _lowered(engine: Engine, g: Graph):
    out = engine.run(g)
    ops = [(o.name, o.type, o.attrs, [v.name if v is not None else None for v in o.operands],
            [r.name for r in o.results], o.provenance) for o in g.ops]
    return (ops, {k: v.to_json() for k, v in out.coverage.items()},
            {k: (s.tries, s.matches, s.applied) for k, s in out.stats.items()},
            [(d.code, d.message, d.subject) for d in out.diagnostics])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.sampled_from(["cpu", "htp", "gpu", "lpai"]), st.sampled_from(["float32", "int32", "uint8"]))
def test_the_short_path_lowers_as_the_general_path(steps, backend, dtype) -> None:
    fast, slow = _engines(backend)
    assert fast.retypes and not slow.retypes
    assert _lowered(fast, _build(steps, dtype)) == _lowered(slow, _build(steps, dtype))


def _rule(text: str):
    (item,) = [i for i in parse(text, "t.qpat").items if i.__class__.__name__ == "Rule"]
    return item


def test_what_counts_as_a_pure_retype() -> None:
    assert pure_retype(_rule("rule r { match y = m.A(x, z)\n emit y = qnn.B(x, z) }")) == ("qnn.B", 2, 1)
    not_pure = [
        "rule r { match y = m.A(x, z)\n emit y = qnn.B(z, x) }",  # operands reordered
        "rule r { match y = m.A(x: f32[_], z)\n emit y = qnn.B(x, z) }",  # a typed capture
        "rule r { match y = m.A(x) { k: 1 }\n emit y = qnn.B(x) }",  # an attribute pattern
        "rule r { match y = m.A(x)\n require rank(x) == 2\n emit y = qnn.B(x) }",  # a guard
        "rule r { match y = m.A(x)\n emit y = qnn.B(x) { k: 1 } }",  # a param
        "rule r { match y = m.A(x, z?)\n emit y = qnn.B(x, z) }",  # an optional operand
    ]
    for text in not_pure:
        assert pure_retype(_rule(text)) is None, text


STAGED = """\
op m.A(x) -> y
op m.B(x) -> y
op m.C(x, z) -> y
rule twice_b {
  match y = m.A(x)
  emit {
    t = m.B(x) : shape shape(x)
    y = m.B(t)
  }
}
map m.B(x) -> qnn.Relu(x)
map m.C(x, z) -> qnn.ElementWiseAdd(x, z)
"""


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["m.A", "m.B", "m.C"]), min_size=1, max_size=8))
def test_ops_an_earlier_rule_made_keep_their_sources(types) -> None:
    """A source rewrite (A -> B(B)) runs first and makes ops of new names; lowering them records the
    input-graph op they stem from."""
    r = qlower.rules_from_text(STAGED)
    fast = r.engine("cpu")
    slow = Engine(r.ruleset.rules, r.ruleset.ops, registry=fast.registry, backend="cpu", functions=r.functions,
                  target=r.registry.dialect, fast_retypes=False)
    assert len(fast.retypes) == 2  # the two maps; twice_b emits two ops

    def build() -> Graph:
        g = Graph("g")
        vals = [g.add_value("v0", "float32", [4])]
        for i, t in enumerate(types, 1):
            v = g.add_value(f"v{i}", "float32", [4])
            g.add_op(f"n{i}", t, [vals[-1], vals[0]] if t == "m.C" else [vals[-1]], [v])
            vals.append(v)
        g.set_io([vals[0]], [vals[-1]])
        return g

    got, want = _lowered(fast, build()), _lowered(slow, build())
    assert got == want
    assert all(p is not None and p.sources for *_, p in got[0])
