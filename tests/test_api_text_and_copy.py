"""Rules from a string, and lowering a copy so one graph serves several backends."""

from __future__ import annotations

import pytest

import qlower
from qlower.diagnostics import QlowerError
from qlower.graph import Graph

RULES = """\
import mllm.ops

rule my_neg {
  match y = mllm.Neg(x)
  emit y = qnn.ElementWiseNeg(x)
}
"""


def _graph() -> Graph:
    g = Graph("g")
    x = g.add_value("x", "float32", [2, 3])
    y = g.add_value("y", "float32", [2, 3])
    g.add_op("neg", "mllm.Neg", [x], [y], {})
    g.set_io([x], [y])
    return g


def test_rules_from_text_load_like_a_file():
    rules = qlower.rules_from_text(RULES)
    assert [r.name for r in rules.ruleset.rules] == ["my_neg"]
    result = qlower.lower(_graph(), rules, backend="cpu")
    result.raise_for_errors()
    assert result.qnn_op_counts() == {"ElementWiseNeg": 1}


def test_rules_from_text_report_errors_at_their_line():
    with pytest.raises(QlowerError) as caught:
        qlower.rules_from_text(RULES.replace("qnn.ElementWiseNeg", "qnn.ElementWiseNg"), name="mine.qpat")
    (d,) = [d for d in caught.value.diagnostics if d.is_error]
    assert d.span.file.endswith("mine.qpat") and (d.span.line, d.span.column) == (5, 12)


def test_lowering_a_copy_leaves_the_graph_as_it_was():
    g = _graph()
    rules = qlower.rules_from_text(RULES)
    results = {b: qlower.lower(g, rules, backend=b, inplace=False) for b in ("cpu", "htp")}
    assert [op.type for op in g.ops] == ["mllm.Neg"]
    for r in results.values():
        r.raise_for_errors()
        assert r.graph is not g and [op.type for op in r.graph.ops if not op.dead] != ["mllm.Neg"]


def test_copy_is_independent_and_shares_constant_data():
    g = _graph()
    import numpy as np

    w = g.add_value("w", "float32", [3], data=np.ones(3, np.float32))
    c = g.copy()
    c.add_value("extra", "float32", [1])
    assert not g.has_value("extra") and c.value("w").data is w.data
    assert [v.name for v in c.inputs] == ["x"] and [v.name for v in c.outputs] == ["y"]
    assert c.op("neg").operands[0] is c.value("x") and c.value("y").producer is c.op("neg")
