"""The Python API: load_rules, lower, LowerResult (save, raise_for_errors) and structured errors."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest

import qlower
from qlower import Diagnostic, Graph, LowerResult, QlowerError, Rules, Severity

RULES = """\
op m.Neg(x) -> y
op m.Rep(x) -> y { times: int }

rule neg {
  match y = m.Neg(x)
  emit y = qnn.ElementWiseNeg(x)
}

rule rep {
  match y = m.Rep(x) { times: n }
  emit y = qnn.Tile(x) { multiples: [n, 1] }
}
"""


@functools.cache
def _registry():
    return qlower.load_registry()


@pytest.fixture
def rules(tmp_path) -> Rules:
    p = tmp_path / "rules.qpat"
    p.write_text(RULES)
    return qlower.load_rules([p], registry=_registry())


def tiny(dtype: str = "float32") -> Graph:
    g = Graph("tiny")
    x = g.add_value("x", dtype, [2, 3])
    y = g.add_value("y", dtype, [2, 3])
    z = g.add_value("z", dtype, [4, 3])
    g.add_op("n", "m.Neg", [x], [y])
    g.add_op("r", "m.Rep", [y], [z], {"times": 2})
    g.set_io([x], [z])
    return g


@functools.cache
def _mllm() -> Rules:
    return qlower.load_rules(packs=["mllm"])


def repeat_graph() -> Graph:
    g = Graph("rep")
    x = g.add_value("x", "float32", [1, 8, 2, 64])
    y = g.add_value("y", "float32", [1, 8, 12, 64])
    g.add_op("rep", "mllm.Repeat", [x], [y], {"dim": 2, "times": 6})
    g.set_io([x], [y])
    return g


# ----------------------------------------------------------------- load_rules

def test_load_shipped_pack():
    r = _mllm()
    assert isinstance(r, Rules)
    assert r.ruleset.rule("repeat_interleave") is not None
    assert "mllm.Repeat" in r.ruleset.ops
    assert r.registry.op("Tile") is not None
    assert r.functions.get("rank") is not None
    assert "Repeat" in r.kernels["mllm"]


def test_unknown_pack_is_a_structured_error():
    with pytest.raises(QlowerError) as exc:
        qlower.load_rules(packs=["mlm"])
    (d,) = exc.value.diagnostics
    assert isinstance(d, Diagnostic) and d.severity is Severity.ERROR
    assert d.code == "no-pack" and "mlm" in d.message
    assert "mllm" in (d.hint or "")


def test_rule_errors_carry_every_diagnostic(tmp_path):
    p = tmp_path / "bad.qpat"
    p.write_text("op m.Neg(x) -> y\n\nrule r {\n  match y = m.Negg(x)\n  emit y = qnn.Relu(z)\n}\n")
    with pytest.raises(QlowerError) as exc:
        qlower.load_rules([p], registry=_registry())
    errors = [d for d in exc.value.diagnostics if d.is_error]
    assert {d.code for d in errors} >= {"unknown-op", "undefined-name"}
    for d in errors:
        assert d.span is not None and Path(d.span.file).name == "bad.qpat"
    assert {(d.span.line, d.span.column) for d in errors} >= {(4, 13), (5, 21)}
    rendered = exc.value.render()
    assert "bad.qpat:4:13" in rendered and "^" in rendered


def test_load_rules_from_a_folder(tmp_path):
    d = tmp_path / "pack"
    d.mkdir()
    (d / "a.qpat").write_text(RULES.split("rule rep")[0])
    (d / "b.qpat").write_text("rule rep {\n  match y = m.Rep(x) { times: n }\n  emit y = qnn.Tile(x) "
                              "{ multiples: [n, 1] }\n}\n")
    r = qlower.load_rules([d], registry=_registry(), cleanup=False)
    assert [x.name for x in r.ruleset.rules] == ["neg", "rep"]


def test_warnings_do_not_stop_loading(tmp_path):
    p = tmp_path / "w.qpat"
    p.write_text("op m.Neg(x) -> y\n\nrule r {\n  match y = m.Neg(x)\n  fail \"no\"\n}\n")
    r = qlower.load_rules([p], registry=_registry())
    assert [d.code for d in r.ruleset.warnings] == ["unused-capture"]


# ---------------------------------------------------------------------- lower

def test_lower_result_fields(rules):
    g = tiny()
    res = qlower.lower(g, rules, "cpu")
    assert isinstance(res, LowerResult)
    assert res.ok and res.errors == [] and res.diagnostics == []
    assert res.graph is g  # rewritten in place
    assert res.backend == "cpu" and res.ops_in == 2
    assert sorted(o.type for o in g.ops) == ["qnn.ElementWiseNeg", "qnn.Tile"]
    assert res.qnn is not None and len(res.qnn.ops) == 2
    assert res.qnn_op_counts() == {"ElementWiseNeg": 1, "Tile": 1}
    cov = res.coverage_json()
    assert cov["m.Neg"] == {"count": 1, "rules": {"neg": 1}, "qnn_ops": {"qnn.ElementWiseNeg": 1}, "unlowered": 0}
    assert set(res.timings) >= {"lower", "validate"}
    assert all(t >= 0 for t in res.timings.values())
    res.raise_for_errors()  # no error: no raise
    for o in g.ops:
        assert o.provenance.source in {"n", "r"}


def test_lower_on_htp_runs_float_graphs_in_float16(rules):
    g = tiny()
    res = qlower.lower(g, rules, "htp")
    assert res.ok, [str(d) for d in res.diagnostics]
    assert res.qnn_op_counts().get("Cast") == 2  # float32 input and output stay float32 behind Casts
    assert [v.name for v in g.inputs] == ["x"] and [str(v.dtype) for v in g.inputs + g.outputs] == ["float32"] * 2
    g2 = tiny()
    res2 = qlower.lower(g2, rules, "htp", float16=False)
    assert res2.ok and "Cast" not in res2.qnn_op_counts()


def test_save_writes_three_artifacts(rules, tmp_path):
    res = qlower.lower(tiny(), rules, "cpu")
    paths = res.save(tmp_path / "out")
    assert sorted(Path(p).name for p in paths) == ["tiny.bin", "tiny.cpp", "tiny_net.json"]
    assert all(Path(p).is_file() and Path(p).stat().st_size > 0 for p in paths)
    assert "emit" in res.timings
    json.loads((tmp_path / "out" / "tiny_net.json").read_text())


def test_saved_graph_runs_with_the_reference_interpreter(rules, tmp_path):
    from qlower.qnn.reader import load
    from qlower.reference.interpreter import run

    res = qlower.lower(tiny(), rules, "cpu")
    res.save(tmp_path)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = run(load(tmp_path / "tiny_net.json"), {"x": x})
    np.testing.assert_array_equal(out["z"], np.tile(-x, (2, 1)))


def test_failed_lowering_raises_structured_errors(tmp_path):
    p = tmp_path / "only_neg.qpat"
    p.write_text(RULES.split("rule rep")[0])
    r = qlower.load_rules([p], registry=_registry())
    res = qlower.lower(tiny(), r, "cpu")
    assert not res.ok and res.qnn is None
    with pytest.raises(QlowerError) as exc:
        res.raise_for_errors()
    (d,) = exc.value.diagnostics
    assert d.code == "not-lowered" and d.subject == "node r (m.Rep)" and d.is_error
    assert res.coverage_json()["m.Rep"]["unlowered"] == 1
    with pytest.raises(QlowerError):
        res.save(tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_allow_partial_keeps_going(tmp_path):
    p = tmp_path / "only_neg.qpat"
    p.write_text(RULES.split("rule rep")[0])
    r = qlower.load_rules([p], registry=_registry())
    g = tiny()
    res = qlower.lower(g, r, "cpu", allow_partial=True)
    assert not res.ok
    assert g.op("n").type == "qnn.ElementWiseNeg"  # what could be lowered was
    assert any(d.subject == "node r (m.Rep)" for d in res.errors)


def test_unknown_backend(rules):
    with pytest.raises(QlowerError) as exc:
        qlower.lower(tiny(), rules, "tpu")
    (d,) = exc.value.diagnostics
    assert d.code == "backend" and "tpu" in d.message


def test_backend_without_support_reports_per_node(rules):
    res = qlower.lower(tiny(), rules, "lpai")
    assert not res.ok
    subjects = {d.subject for d in res.errors}
    assert "node r (m.Rep)" in subjects


def test_an_engine_is_reusable_across_graphs(rules):
    engine = rules.engine("cpu")
    a, b = tiny(), tiny()
    assert engine.run(a).ok and engine.run(b).ok
    assert [(o.name, o.type) for o in a.topo_order()] == [(o.name, o.type) for o in b.topo_order()]


def test_lower_through_the_graph_format(rules, tmp_path):
    qlower.save_graph(tiny(), tmp_path / "g.json")
    g = qlower.load_graph(tmp_path / "g.json")
    res = qlower.lower(g, rules, "cpu")
    assert res.ok and res.qnn_op_counts() == {"ElementWiseNeg": 1, "Tile": 1}


# ----------------------------------------------------------- the mllm pack

def test_lower_with_the_mllm_pack():
    g = repeat_graph()
    res = qlower.lower(g, _mllm(), "cpu")
    res.raise_for_errors()
    assert res.qnn_op_counts() == {"Reshape": 2, "Tile": 1}
    assert {o.provenance.rule for o in g.ops} == {"mllm.repeat_interleave"}
    assert res.coverage_json()["mllm.Repeat"]["rules"] == {"mllm.repeat_interleave": 1}


def test_mllm_pack_on_lpai_uses_its_own_rule():
    g = repeat_graph()
    res = qlower.lower(g, _mllm(), "lpai")
    assert {o.provenance.rule for o in g.ops if o.provenance} == {"mllm.repeat_interleave_concat"}
    assert "Tile" not in res.qnn_op_counts()


# ------------------------------------------------------- validation while saving

@pytest.mark.parametrize("parallel_ops", [10**9, 1])  # written here / the .cpp by a child process
def test_save_can_validate_while_writing(rules, tmp_path, monkeypatch, parallel_ops):
    from qlower.qnn import artifacts

    monkeypatch.setattr(artifacts, "PARALLEL_OPS", parallel_ops)
    early = qlower.lower(tiny(), rules, "cpu")
    late = qlower.lower(tiny(), rules, "cpu", validate=False)
    assert late.ok and not late.validated
    want = early.save(tmp_path / "early")
    got = late.save(tmp_path / "late", validate=True)
    assert late.validated and late.ok and late.diagnostics == early.diagnostics
    assert [p.read_bytes() for p in got] == [p.read_bytes() for p in want]


@pytest.mark.parametrize("parallel_ops", [10**9, 1])
def test_a_graph_that_fails_validation_while_saving_writes_nothing(rules, tmp_path, monkeypatch, parallel_ops):
    from qlower.qnn import artifacts

    monkeypatch.setattr(artifacts, "PARALLEL_OPS", parallel_ops)
    early = qlower.lower(tiny("int8"), rules, "cpu")  # INT_8 Neg: no CPU datatype combination allows it
    assert not early.ok and {d.code for d in early.errors} == {"datatype"}
    late = qlower.lower(tiny("int8"), rules, "cpu", validate=False)
    assert late.ok
    assert late.save(tmp_path / "out", validate=True) == []
    assert not late.ok
    assert [d.message for d in late.errors] == [d.message for d in early.errors]
    assert list((tmp_path / "out").iterdir()) == []  # no artifact, no temporary
    assert late.validate() == []  # once only


def test_a_gate_that_fails_in_save_stops_the_child_and_leaves_nothing(tmp_path):
    from qlower.qnn import artifacts

    res = qlower.lower(repeat_graph(), _mllm(), "cpu")
    ran = []
    for parallel in (False, True):
        out = tmp_path / str(parallel)
        assert artifacts.save(res.qnn, out, parallel=parallel, gate=lambda: ran.append(1) or False) == []
        assert list(out.iterdir()) == []
    assert ran == [1, 1]


def test_rule_stats_come_back_in_the_result(rules):
    res = qlower.lower(tiny(), rules, backend="cpu")
    assert res.ok
    assert {k: v for k, v in res.rule_stats_json().items() if k in ("neg", "rep")} == {
        "neg": {"tries": 1, "matches": 1, "applied": 1}, "rep": {"tries": 1, "matches": 1, "applied": 1}}
    assert all(v["applied"] <= v["matches"] <= v["tries"] for v in res.rule_stats_json().values())
