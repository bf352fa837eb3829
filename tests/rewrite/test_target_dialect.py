"""The target dialect is a parameter of the checker and the engine (from the registry), not a
`"qnn."` string test: the same machinery lowers to a dialect with another name."""

from __future__ import annotations

import attrs

from qlower.diagnostics import SourceCache
from qlower.graph import Graph
from qlower.lang.builtins import builtin_functions
from qlower.lang.checker import check
from qlower.lang.parser import parse
from qlower.lang.registry import MinimalRegistry
from qlower.rewrite.driver import Engine

TEXT = """
op m.Sig(x) -> y

rule sig {
  match y = m.Sig(x)
  emit y = toyq.Sigmoid(x)
}
"""


def _check(text: str, dialect: str):
    cache = SourceCache()
    cache.add("t.qpat", text)
    registry = attrs.evolve(MinimalRegistry(), dialect=dialect)
    return check([parse(text, "t.qpat")], registry=registry, functions=builtin_functions(), sources=cache)


def test_the_checker_takes_the_target_dialect_from_the_registry():
    assert [str(d) for d in _check(TEXT, "toyq") if d.is_error] == []
    (err,) = [d for d in _check(TEXT.replace("toyq.Sigmoid", "toyq.Sigmoyd"), "toyq") if d.is_error]
    assert err.code == "unknown-target-op" and "TOYQ" in err.message and "toyq.Sigmoid" in (err.hint or "")
    (err,) = [d for d in _check(TEXT.replace("op m.Sig", "op toyq.Sig").replace("m.Sig(x)", "toyq.Sig(x)"), "toyq")
              if d.code == "reserved-dialect"]
    assert "toyq" in err.message
    # with the qnn registry, `toyq.Sigmoid` is just an undeclared source op
    assert {d.code for d in _check(TEXT, "qnn") if d.is_error} == {"unknown-op"}


def _graph() -> Graph:
    g = Graph("g")
    x, y = g.add_value("x", "float32", (2, 3)), g.add_value("y", "float32", (2, 3))
    g.add_op("s", "m.Sig", [x], [y])
    g.set_io([x], [y])
    return g


def test_the_engine_lowers_to_the_dialect_it_is_given():
    module = parse(TEXT, "t.qpat")
    decls = {d.op: d for d in module.ops}
    rules = [i for i in module.items if hasattr(i, "matches")]
    g = _graph()
    out = Engine(rules, decls, registry=None, backend=None, target="toyq").run(g)
    assert out.ok and [o.type for o in g.ops] == ["toyq.Sigmoid"]
    assert out.coverage["m.Sig"].emitted == {"toyq.Sigmoid": 1}
    # for a qnn engine the same rule rewrites source to source, and nothing is lowered
    g = _graph()
    out = Engine(rules, decls, registry=None, backend=None, target="qnn").run(g)
    assert [o.type for o in g.ops] == ["toyq.Sigmoid"]
    assert "toyq.Sigmoid" in out.coverage and not out.ok
