"""tools/pack_diff.py: two rule sets lower a model to the same QNN graph, or say where they part."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import qlower
from qlower import Graph

_PATH = Path(__file__).resolve().parents[1] / "tools" / "pack_diff.py"
_spec = importlib.util.spec_from_file_location("pack_diff", _PATH)
pack_diff = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pack_diff)

DECL = "op demo.Neg(x) -> y\nop demo.Sigmoid(x) -> y\n"
NEG = "rule neg {\n  match y = demo.Neg(x)\n  emit y = qnn.ElementWiseNeg(x)\n}\n"
SIGMOID = "rule sigmoid {\n  match y = demo.Sigmoid(x)\n  emit y = qnn.Sigmoid(x)\n}\n"
# The same graph, values named otherwise (and a map instead of a rule): not a difference.
NEG_RENAMED = "map negate: demo.Neg(x) -> qnn.ElementWiseNeg(x)\n"
# Another op for the same numbers: a difference.
NEG_MULTIPLY = ("rule neg {\n  match y = demo.Neg(x)\n  emit {\n"
                "    m = tensor(full([1], -1.0, dtype(x))) : dtype dtype(x), encoding none\n"
                "    y = qnn.ElementWiseMultiply(x, m)\n  }\n}\n")


@pytest.fixture
def model(tmp_path):
    g = Graph("m")
    x = g.add_value("x", "float32", [2, 3])
    n = g.add_value("n", "float32", [2, 3])
    y = g.add_value("y", "float32", [2, 3])
    g.add_op("neg", "demo.Neg", [x], [n], {})
    g.add_op("sig", "demo.Sigmoid", [n], [y], {})
    g.set_io([x], [y])
    path = tmp_path / "m.json"
    qlower.save_graph(g, path)
    return path


def _rules(*parts: str):
    return qlower.rules_from_text(DECL + "".join(parts), name="demo_rules.qpat")


def test_renamed_values_are_the_same(model):
    rows = pack_diff.compare(_rules(NEG, SIGMOID), _rules(NEG_RENAMED, SIGMOID), [model], ["cpu"])
    assert rows == [("cpu", model, "same")]


def test_another_op_is_a_difference_at_its_row(model):
    rows = pack_diff.compare(_rules(NEG, SIGMOID), _rules(NEG_MULTIPLY, SIGMOID), [model], ["cpu", "htp"])
    assert [b for b, _, _ in rows] == ["cpu", "htp"]
    assert rows[0][2] == "DIFF row 1: ElementWiseNeg vs ElementWiseMultiply"
    # HTP runs float graphs in float16: a Cast comes first, then the op that differs
    assert rows[1][2] == "DIFF row 2: ElementWiseNeg vs ElementWiseMultiply"


def test_a_rule_gone_is_a_difference_naming_the_error(model):
    [(_, _, verdict)] = pack_diff.compare(_rules(NEG, SIGMOID), _rules(NEG), [model], ["cpu"])
    assert verdict.startswith("DIFF base: lowers; now: error:") and "sig" in verdict


def test_canonical_names_follow_first_appearance(model):
    result = qlower.lower(qlower.load_graph(model), _rules(NEG, SIGMOID), backend="cpu")
    rows = pack_diff.canonical(result.qnn)
    assert [r[1] for r in rows[1:-1]] == ["ElementWiseNeg", "Sigmoid"]
    assert rows[0][1][0][0] == "t0" and rows[-1] == ("outputs", ("t2",))


def test_unknown_pack_is_a_usage_error(model, capsys):
    assert pack_diff.main(["pack_diff.py", "--base", "HEAD", "--pack", "no_such_pack", str(model)]) == 2
    assert "no shipped pack no_such_pack" in capsys.readouterr().err


def test_the_same_error_on_both_sides_is_the_same(model):
    [(_, _, verdict)] = pack_diff.compare(_rules(NEG), _rules(NEG_RENAMED), [model], ["cpu"])
    assert verdict.startswith("same (error:") and "sig" in verdict
