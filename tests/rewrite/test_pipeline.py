"""The declared lowering pipeline (qlower.rewrite.pipeline): one runner for `qlower.lower` and rule tests."""

from __future__ import annotations

import ast as pyast
import functools
from pathlib import Path

import pytest

import qlower
from qlower import Graph
from qlower.rewrite.pipeline import STAGES, TIMING, Lowering
from tests.test_api import RULES, tiny as api_tiny

ROOT = Path(__file__).resolve().parents[2]

@functools.cache
def _rules() -> qlower.Rules:
    return qlower.rules_from_text(RULES, name="pipeline.qpat")


def tiny() -> Graph:
    return api_tiny()


def undeclared() -> Graph:
    g = Graph("undeclared")
    x, y = g.add_value("x", "float32", [2, 3]), g.add_value("y", "float32", [2, 3])
    g.add_op("n", "m.Undeclared", [x], [y])
    g.set_io([x], [y])
    return g


def _lowering(graph: Graph, backend: str = "htp") -> Lowering:
    rules = _rules()
    return Lowering(graph, rules.target(backend), rules.engine(backend).run, decls=rules.ruleset.ops,
                    computes=rules.ruleset.computes)


def test_stages_run_in_their_declared_order_and_each_has_a_timing():
    run = _lowering(tiny()).run()
    assert run.ok and tuple(run.done) == STAGES
    assert set(TIMING) == set(STAGES)
    assert set(run.timings) == set(TIMING.values())


@pytest.mark.parametrize("backend", ["htp", "cpu"])
@pytest.mark.parametrize("until", STAGES)
def test_a_run_in_two_steps_makes_what_one_run_makes(until, backend):
    whole = _lowering(tiny(), backend).run()
    stepped = _lowering(tiny(), backend).run(until=until)
    assert stepped.done[-1] == until and len(stepped.done) == STAGES.index(until) + 1
    stepped.run()
    assert stepped.done == whole.done
    assert [str(d) for d in stepped.diagnostics] == [str(d) for d in whole.diagnostics]
    a, b = stepped.table, whole.table
    assert (a.op_names, a.tensor_names, a.op_type_counts()) == (b.op_names, b.tensor_names, b.op_type_counts())
    assert [str(t.datatype) for t in a.tensor_kinds] == [str(t.datatype) for t in b.tensor_kinds]
    assert stepped.float16_changed == whole.float16_changed


def test_float16_runs_where_the_backend_runs_float_so_and_can_be_turned_off():
    assert _lowering(tiny(), "htp").run().float16_changed > 0
    assert _lowering(tiny(), "cpu").run().float16_changed == 0
    off = _lowering(tiny(), "htp")
    off.float16 = False
    assert off.run().float16_changed == 0


def test_a_stage_with_errors_stops_the_run_and_says_why():
    run = _lowering(undeclared()).run()
    assert not run.ok and run.done == ["check"] and run.table is None
    assert any("m.Undeclared" in d.message for d in run.diagnostics if d.is_error)


def test_an_unknown_stage_is_refused():
    with pytest.raises(ValueError, match="no stage 'lower'"):
        _lowering(tiny()).run(until="lower")


def test_qlower_lower_is_the_pipeline():
    """`qlower.lower` gives what the runner gives, timings named as always."""
    res = qlower.lower(tiny(), _rules(), backend="htp")
    run = _lowering(tiny()).run()
    assert res.ok and res.qnn_op_counts() == run.table.op_type_counts()
    assert {"check", "lower", "validate"} <= set(res.timings)


def _calls(path: Path) -> set[str]:
    tree = pyast.parse(path.read_text())
    return {n.func.id if isinstance(n.func, pyast.Name) else n.func.attr
            for n in pyast.walk(tree) if isinstance(n, pyast.Call)
            and isinstance(n.func, (pyast.Name, pyast.Attribute))}


def test_the_stages_are_run_only_by_the_runner():
    """`qlower.lower` and rule tests no longer chain the passes themselves (they did, and differed)."""
    passes = {"check_graph", "reencode_unsupported", "to_float16", "compute_in_supported_types", "to_table",
              "validate_graph"}
    for f in ("qlower/api.py", "qlower/verify/testcase.py"):
        assert not passes & _calls(ROOT / f), f
    assert {"Lowering"} <= _calls(ROOT / "qlower/api.py") & _calls(ROOT / "qlower/verify/testcase.py")
