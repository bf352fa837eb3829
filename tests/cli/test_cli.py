"""The `qlower` command, run in-process through `qlower.cli.main.main(argv)` (it returns the exit code)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from qlower.cli.main import main

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

GRAPH = {
    "format": "qlower-graph/1", "name": "tiny", "inputs": ["x"], "outputs": ["z"],
    "tensors": {
        "x": {"dtype": "float32", "shape": [2, 3]},
        "y": {"dtype": "float32", "shape": [2, 3]},
        "z": {"dtype": "float32", "shape": [4, 3]},
    },
    "nodes": [
        {"name": "n", "op": "m.Neg", "inputs": ["x"], "outputs": ["y"]},
        {"name": "r", "op": "m.Rep", "inputs": ["y"], "outputs": ["z"], "attrs": {"times": 2}},
    ],
}

# a rule pack with a test block, in the mllm dialect (whose reference kernels qlower ships)
TESTED = """\
op mllm.Neg(x) -> y

rule my_neg {
  match y = mllm.Neg(x)
  emit y = qnn.ElementWiseNeg(x)
}

test my_neg {
  input x: f32[2, 1..4]
  graph y = mllm.Neg(x)
  expect ops qnn.ElementWiseNeg
  expect close atol 0 rtol 0
}
"""


def qlower(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


@pytest.fixture
def work(tmp_path) -> Path:
    (tmp_path / "rules.qpat").write_text(RULES, encoding="utf-8")
    (tmp_path / "tiny.json").write_text(json.dumps(GRAPH), encoding="utf-8")
    return tmp_path


@pytest.fixture(scope="module")
def lowered(tmp_path_factory) -> Path:
    """The artifacts of lowering the tiny graph for CPU (made once for the module)."""
    d = tmp_path_factory.mktemp("lowered")
    (d / "rules.qpat").write_text(RULES, encoding="utf-8")
    (d / "tiny.json").write_text(json.dumps(GRAPH), encoding="utf-8")
    code = main(["lower", str(d / "tiny.json"), "--rules", str(d / "rules.qpat"), "--backend", "cpu",
                 "-o", str(d / "out"), "-q"])
    assert code == 0
    return d / "out"


# -------------------------------------------------------------------- usage

@pytest.mark.parametrize("argv", [
    [], ["check"], ["frobnicate"], ["check", "--bogus", "x.qpat"], ["lower"], ["run", "net.json"],
    ["validate", "net.json"], ["lower", "g.json", "--backend", "tpu"], ["explain", "g.json"],
])
def test_usage_errors_exit_2(capsys, argv):
    code, out, err = qlower(capsys, *argv)
    assert code == 2
    assert "usage" in err


def test_help_exits_0(capsys):
    code, out, _ = qlower(capsys, "--help")
    assert code == 0 and "lower" in out and "check" in out


# -------------------------------------------------------------------- check

def test_check_clean_file(capsys, work):
    code, out, err = qlower(capsys, "check", work / "rules.qpat")
    assert code == 0
    assert "0 error(s)" in out
    assert err == ""


def test_check_reports_errors_with_locations(capsys, work):
    bad = work / "bad.qpat"
    bad.write_text("op m.Neg(x) -> y\n\nrule r {\n  match y = m.Negg(x)\n  emit y = qnn.Relu(z)\n}\n")
    code, out, err = qlower(capsys, "check", bad)
    assert code == 1
    assert "bad.qpat:4:13" in err and "m.Negg" in err
    assert "bad.qpat:5:21" in err and "`z`" in err
    assert "2 error(s)" in out


def test_check_quiet_prints_no_summary(capsys, work):
    code, out, _ = qlower(capsys, "check", "-q", work / "rules.qpat")
    assert code == 0 and out == ""


def test_check_shows_notes_only_when_asked(capsys, work):
    """A rule emitting both source and QNN ops is fine (it lowers in stages): its note is counted,
    and printed with -v only."""
    f = work / "staged.qpat"
    f.write_text("op m.Sq(x) -> y\nop m.Mul(a, b) -> y\n\nrule square {\n  match y = m.Sq(x)\n  emit {\n"
                 "    t = m.Mul(x, x)\n    y = qnn.Relu(t)\n  }\n}\n")
    code, out, err = qlower(capsys, "check", f)
    assert code == 0 and err == ""
    assert "0 error(s), 0 warning(s), 1 note(s) (-v shows them)" in out
    code, out, err = qlower(capsys, "check", "-v", f)
    assert code == 0 and "emits both QNN ops" in err and "staged.qpat:4:6" in err
    assert "1 note(s)" in out and "-v shows" not in out


def test_check_warnings_do_not_fail(capsys, work):
    f = work / "warn.qpat"
    f.write_text("op m.Neg(x) -> y\n\nrule r {\n  match y = m.Neg(x)\n  fail \"no\"\n}\n")
    code, out, err = qlower(capsys, "check", f)
    assert code == 0
    assert "warning" in err and "1 warning(s)" in out


def test_check_syntax_error(capsys, work):
    f = work / "syntax.qpat"
    f.write_text("rule r {\n  match y = m.Neg(x)\n  requir rank(x) == 4\n}\n")
    code, _, err = qlower(capsys, "check", f)
    assert code == 1
    assert "syntax.qpat:3:3" in err and "require" in err


def test_check_missing_file(capsys, work):
    code, _, err = qlower(capsys, "check", work / "nope.qpat")
    assert code == 1
    assert "nope.qpat" in err


# ---------------------------------------------------------------------- fmt

UNFORMATTED = "op m.Neg(x)->y\nrule   neg { match y = m.Neg(x)\nemit y = qnn.ElementWiseNeg(x) }\n"


def test_fmt_check_reports_and_changes_nothing(capsys, work):
    f = work / "u.qpat"
    f.write_text(UNFORMATTED)
    code, out, _ = qlower(capsys, "fmt", "--check", f)
    assert code == 1
    assert "u.qpat" in out
    assert f.read_text() == UNFORMATTED


def test_fmt_rewrites_then_check_passes(capsys, work):
    f = work / "u.qpat"
    f.write_text(UNFORMATTED)
    code, _, _ = qlower(capsys, "fmt", f)
    assert code == 0
    formatted = f.read_text()
    assert formatted != UNFORMATTED
    assert "rule neg {\n  match y = m.Neg(x)\n  emit y = qnn.ElementWiseNeg(x)\n}" in formatted
    code, _, _ = qlower(capsys, "fmt", "--check", f)
    assert code == 0
    code, _, _ = qlower(capsys, "check", f)
    assert code == 0


def test_fmt_stdout(capsys, work):
    f = work / "u.qpat"
    f.write_text(UNFORMATTED)
    code, out, _ = qlower(capsys, "fmt", "--stdout", f)
    assert code == 0
    assert out.startswith("op m.Neg(x) -> y\n")
    assert f.read_text() == UNFORMATTED


def test_fmt_check_of_a_formatted_file(capsys, work):
    code, out, _ = qlower(capsys, "fmt", "--check", work / "rules.qpat")
    assert code == 0 and out == ""


# -------------------------------------------------------------------- lower

def test_lower_writes_the_three_artifacts_and_timings_and_report(capsys, work):
    code, out, err = qlower(capsys, "lower", work / "tiny.json", "--rules", work / "rules.qpat", "--backend", "cpu",
                            "-o", work / "out", "--timings", work / "t.json", "--report", work / "r.json")
    assert code == 0, err
    names = sorted(p.name for p in (work / "out").iterdir())
    assert names == ["tiny.bin", "tiny.cpp", "tiny_net.json"]
    for p in (work / "out").iterdir():
        assert p.stat().st_size > 0
    net = json.loads((work / "out" / "tiny_net.json").read_text())
    assert net
    timings = json.loads((work / "t.json").read_text())
    assert set(timings) == {"load", "lower", "validate", "emit", "total", "ops_in", "ops_out"}
    assert (timings["ops_in"], timings["ops_out"]) == (2, 2)
    for k in ["load", "lower", "validate", "emit", "total"]:
        assert isinstance(timings[k], float) and timings[k] >= 0
    report = json.loads((work / "r.json").read_text())
    assert report["ok"] is True and report["backend"] == "cpu" and report["ops_in"] == 2
    assert report["qnn_ops"] == {"ElementWiseNeg": 1, "Tile": 1}
    assert report["coverage"]["m.Rep"]["rules"] == {"rep": 1}
    assert report["coverage"]["m.Neg"]["qnn_ops"] == {"qnn.ElementWiseNeg": 1}
    assert "tiny_net.json" in out


def test_lower_that_fails_validation_writes_no_artifacts(capsys, work):
    """Validation runs while the artifacts are written; when it fails none is kept (nor any temporary)."""
    graph = json.loads(json.dumps(GRAPH))
    for t in graph["tensors"].values():
        t["dtype"] = "int8"  # INT_8 Neg: no CPU datatype combination allows it
    (work / "int8.json").write_text(json.dumps(graph), encoding="utf-8")
    (work / "out").mkdir()
    code, _, err = qlower(capsys, "lower", work / "int8.json", "--rules", work / "rules.qpat", "--backend", "cpu",
                          "-o", work / "out", "--report", work / "r.json")
    assert code == 1
    assert "match no allowed combination on CPU" in err and "node n" in err
    assert list((work / "out").iterdir()) == []
    assert json.loads((work / "r.json").read_text())["ok"] is False


def test_lower_report_without_file_prints_the_table(capsys, work):
    code, out, _ = qlower(capsys, "lower", work / "tiny.json", "--rules", work / "rules.qpat", "--backend", "cpu",
                          "-o", work / "out", "--report")
    assert code == 0
    assert "m.Rep" in out and "rep×1" in out


def test_lower_failure_names_each_node(capsys, work):
    only_neg = work / "only_neg.qpat"
    only_neg.write_text(RULES.split("rule rep")[0])
    code, out, err = qlower(capsys, "lower", work / "tiny.json", "--rules", only_neg, "--backend", "cpu",
                            "-o", work / "out", "--report", work / "r.json")
    assert code == 1
    assert "node r (m.Rep)" in err
    assert not (work / "out").exists() or not any((work / "out").iterdir())
    report = json.loads((work / "r.json").read_text())
    assert report["ok"] is False
    assert report["coverage"]["m.Rep"]["unlowered"] == 1


def test_lower_allow_partial_exits_0(capsys, work):
    only_neg = work / "only_neg.qpat"
    only_neg.write_text(RULES.split("rule rep")[0])
    code, out, err = qlower(capsys, "lower", work / "tiny.json", "--rules", only_neg, "--backend", "cpu",
                            "-o", work / "out", "--allow-partial")
    assert code == 0
    assert "node r (m.Rep)" in err


def test_lower_unsupported_on_backend_explains_why(capsys, work):
    code, _, err = qlower(capsys, "lower", work / "tiny.json", "--rules", work / "rules.qpat", "--backend", "lpai",
                          "-o", work / "out")
    assert code == 1
    assert "node r (m.Rep)" in err and "Tile" in err and "LPAI" in err


def test_lower_with_bad_rules_reports_them(capsys, work):
    bad = work / "bad.qpat"
    bad.write_text(RULES.replace("qnn.Tile(x)", "qnn.Tyle(x)"))
    code, _, err = qlower(capsys, "lower", work / "tiny.json", "--rules", bad, "-o", work / "out")
    assert code == 1
    assert "bad.qpat:" in err and "Tyle" in err


def test_lower_unknown_dialect_without_rules(capsys, work):
    g = json.loads(json.dumps(GRAPH))
    for n in g["nodes"]:
        n["op"] = n["op"].replace("m.", "zz.")
    (work / "zz.json").write_text(json.dumps(g))
    code, _, err = qlower(capsys, "lower", work / "zz.json", "-o", work / "out")
    assert code == 1
    assert "zz" in err and "--rules" in err


@pytest.mark.parametrize("content, fragment", [
    ("{bad", "JSON"),
    ('{"format": "qlower-graph/9"}', "format"),
    ('{"format": "qlower-graph/1", "inputs": [], "outputs": [], "tensors": {}, '
     '"nodes": [{"name": "a", "op": "m.Neg", "inputs": ["nope"], "outputs": []}]}', "nope"),
    ("", "JSON"),
])
def test_lower_malformed_graph_gives_a_clean_error(capsys, work, content, fragment):
    (work / "broken.json").write_text(content)
    code, out, err = qlower(capsys, "lower", work / "broken.json", "--rules", work / "rules.qpat", "-o", work / "out")
    assert code == 1
    assert fragment in err
    assert "internal error" not in err


def test_lower_missing_files(capsys, work):
    code, _, err = qlower(capsys, "lower", work / "missing.json", "--rules", work / "rules.qpat")
    assert code == 1 and "missing.json" in err and "internal error" not in err
    code, _, err = qlower(capsys, "lower", work / "tiny.json", "--rules", work / "missing.qpat", "-o", work / "out")
    assert code == 1 and "missing.qpat" in err and "internal error" not in err


# ------------------------------------------------------- validate / run

def test_validate(capsys, lowered):
    net = lowered / "tiny_net.json"
    code, out, _ = qlower(capsys, "validate", net, "--backend", "cpu")
    assert code == 0 and "0 error(s)" in out
    code, out, err = qlower(capsys, "validate", net, "--backend", "lpai")
    assert code == 1
    assert "Tile" in err


def test_validate_malformed_file(capsys, work):
    (work / "bad_net.json").write_text("{bad")
    code, _, err = qlower(capsys, "validate", work / "bad_net.json", "--backend", "cpu")
    assert code == 1 and "bad_net.json" in err and "internal error" not in err


def test_run_computes_outputs(capsys, lowered, tmp_path):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.savez(tmp_path / "in.npz", x=x)
    code, out, _ = qlower(capsys, "run", lowered / "tiny_net.json", "--inputs", tmp_path / "in.npz",
                          "-o", tmp_path / "out.npz")
    assert code == 0
    with np.load(tmp_path / "out.npz") as z:
        assert z.files == ["z"]
        np.testing.assert_array_equal(z["z"], np.tile(-x, (2, 1)))


@pytest.mark.parametrize("make, fragment", [
    (lambda p: None, "in.npz"),  # missing
    (lambda p: p.write_text("junk"), "in.npz"),
    (lambda p: np.savez(p, q=np.zeros(3, np.float32)), "q"),  # wrong input name
    (lambda p: np.savez(p, x=np.zeros((5, 5), np.float32)), "x"),  # wrong shape
])
def test_run_bad_inputs(capsys, lowered, tmp_path, make, fragment):
    p = tmp_path / "in.npz"
    make(p)
    code, _, err = qlower(capsys, "run", lowered / "tiny_net.json", "--inputs", p, "-o", tmp_path / "o.npz")
    assert code == 1
    assert fragment in err and "internal error" not in err
    assert not (tmp_path / "o.npz").exists()


# ------------------------------------------------- opdefs / explain / plugins / test

def test_opdefs_known_op(capsys):
    code, out, _ = qlower(capsys, "opdefs", "Tile")
    assert code == 0
    assert "qnn.Tile" in out and "multiples" in out
    code, out, _ = qlower(capsys, "opdefs", "Tile", "--backend", "lpai")
    assert code == 0 and "LPAI" in out


def test_opdefs_unknown_op_suggests(capsys):
    code, _, err = qlower(capsys, "opdefs", "Tilee")
    assert code == 1
    assert "Tilee" in err and "did you mean `Tile`" in err


def test_explain(capsys, work):
    code, out, _ = qlower(capsys, "explain", work / "tiny.json", "--node", "n", "--rules", work / "rules.qpat")
    assert code == 0
    assert "rule neg" in out and "matches; would emit qnn.ElementWiseNeg" in out
    code, out, _ = qlower(capsys, "explain", work / "tiny.json", "--node", "r", "--rules", work / "rules.qpat",
                          "--backend", "lpai")
    assert code == 0
    assert "cannot emit" in out and "Tile" in out


def test_explain_unknown_node(capsys, work):
    code, _, err = qlower(capsys, "explain", work / "tiny.json", "--node", "nn", "--rules", work / "rules.qpat")
    assert code == 1
    assert "nn" in err and "did you mean `n`" in err


def test_plugins_lists_qlower_itself(capsys):
    code, out, err = qlower(capsys, "plugins")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[0] == "qlower"
    assert "mllm" in out


def test_test_command_passes_and_fails(capsys, tmp_path):
    good = tmp_path / "good"
    good.mkdir()
    (good / "neg.qpat").write_text(TESTED)
    code, out, err = qlower(capsys, "test", good / "neg.qpat", "--examples", "2")
    assert code == 0, err
    assert "1 passed, 0 failed" in out
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "neg.qpat").write_text(TESTED.replace("expect ops qnn.ElementWiseNeg", "expect ops qnn.Relu"))
    code, out, err = qlower(capsys, "test", bad / "neg.qpat", "--examples", "2")
    assert code == 1
    assert "0 passed, 1 failed" in out
    assert "my_neg" in err and "Relu" in err


def test_test_command_keyword_and_missing_path(capsys, tmp_path):
    d = tmp_path / "p"
    d.mkdir()
    (d / "neg.qpat").write_text(TESTED)
    code, out, _ = qlower(capsys, "test", d, "-k", "nothing_matches", "--examples", "1")
    assert code == 1 and "0 passed, 0 failed" in out  # no test ran
    code, _, err = qlower(capsys, "test", tmp_path / "nope.qpat")
    assert code == 1 and "nope.qpat" in err


@pytest.mark.parametrize("flag", ["--timings", "--report"])
def test_lower_json_output_into_a_missing_folder(capsys, work, flag):
    """Like `-o`, the folder of a JSON output is created."""
    code, _, err = qlower(capsys, "lower", work / "tiny.json", "--rules", work / "rules.qpat", "--backend", "cpu",
                          "-o", work / "out", "-q", flag, work / "nodir" / "x.json")
    assert code == 0, err
    assert json.loads((work / "nodir" / "x.json").read_text())
    assert "internal error" not in err


@pytest.mark.parametrize("args", [["fmt"], ["fmt", "--check"]])
def test_fmt_of_a_file_that_is_not_utf8(capsys, work, args):
    f = work / "binary.qpat"
    f.write_bytes(b"\xff\xfe\x00rule")
    code, _, err = qlower(capsys, *args, f)
    assert code == 1
    assert "binary.qpat" in err and "internal error" not in err


def test_check_of_a_file_that_is_not_utf8(capsys, work):
    f = work / "binary.qpat"
    f.write_bytes(b"\xff\xfe\x00rule")
    code, _, err = qlower(capsys, "check", f)
    assert code == 1
    assert "binary.qpat" in err and "internal error" not in err


def test_artifacts_are_named_after_the_model_file_unless_named(tmp_path, capsys):
    """Two models whose graphs share a name (torch exports are all `main_graph`) must not overwrite each other."""
    import json as _json

    from qlower.cli.main import main as cli

    doc = {"format": "qlower-graph/1", "name": "main_graph", "inputs": ["x"], "outputs": ["y"],
           "tensors": {"x": {"dtype": "float32", "shape": [2, 3]}, "y": {"dtype": "float32", "shape": [2, 3]}},
           "nodes": [{"name": "neg", "op": "mllm.Neg", "inputs": ["x"], "outputs": ["y"]}]}
    for stem in ("first-model", "second.model"):
        (tmp_path / f"{stem}.json").write_text(_json.dumps(doc))
        assert cli(["lower", str(tmp_path / f"{stem}.json"), "--backend", "cpu", "-o", str(tmp_path / "out"), "-q"]) == 0
    assert cli(["lower", str(tmp_path / "first-model.json"), "--backend", "cpu", "-o", str(tmp_path / "out"), "-q",
                "--name", "chosen"]) == 0
    names = sorted(p.name for p in (tmp_path / "out").glob("*_net.json"))
    assert names == ["chosen_net.json", "first_model_net.json", "second_net.json"]
    assert cli(["lower", str(tmp_path / "first-model.json"), "--name", "not-a-name"]) == 2
    assert "not a C identifier" in capsys.readouterr().err


def test_allow_partial_says_it_wrote_nothing_and_reports_each_op_once(tmp_path, capsys):
    import json as _json

    from qlower.cli.main import main as cli

    doc = {"format": "qlower-graph/1", "name": "ap", "inputs": ["x"], "outputs": ["z"],
           "tensors": {n: {"dtype": "float32", "shape": [2, 3]} for n in "xyz"},
           "nodes": [{"name": "n", "op": "mllm.Neg", "inputs": ["x"], "outputs": ["y"]},
                     {"name": "w", "op": "mllm.QuickGELU", "inputs": ["y"], "outputs": ["z"]}]}
    (tmp_path / "ap.json").write_text(_json.dumps(doc))
    assert cli(["lower", str(tmp_path / "ap.json"), "--backend", "lpai", "-o", str(tmp_path / "out"),
                "--allow-partial"]) == 0
    out, err = capsys.readouterr()
    assert "nothing written" in out and not (tmp_path / "out").exists()
    assert err.count("node n") == 1  # the one op LPAI cannot take, reported once


def test_rule_stats_say_what_each_rule_tried_matched_and_applied(capsys, work):
    report = work / "report.json"
    code, out, err = qlower(capsys, "lower", work / "tiny.json", "--rules", work / "rules.qpat", "--backend", "cpu",
                            "-o", work / "out", "--rule-stats", "--report", report)
    assert code == 0, err
    lines = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.startswith("    ") and
             line.split()[0] in ("neg", "rep")}
    assert lines == {"neg": ["1", "1", "1"], "rep": ["1", "1", "1"]}
    stats = json.loads(report.read_text())["rule_stats"]
    assert stats["neg"] == {"tries": 1, "matches": 1, "applied": 1} and stats["rep"]["applied"] == 1
