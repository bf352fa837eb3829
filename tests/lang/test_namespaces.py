"""Rule packs as namespaces: qualified names, declaration-only imports, explicit overrides, packs by name."""

from __future__ import annotations

from pathlib import Path

import qlower
from qlower.cli.main import main
from qlower.diagnostics import QlowerError
from qlower.graph import Graph

USER_PACK = """\
import mllm

op my.Add(a, b) -> y

# The exact GELU of the pack, replaced by the tanh approximation on purpose.
rule gelu_tanh overrides mllm.gelu {
  match y = mllm.GELU(x)
  emit y = qnn.Gelu(x)
}

rule add {
  match y = my.Add(a, b)
  emit y = qnn.ElementWiseAdd(a, b)
}

test add {
  input a: f32[2, 3]
  input b: f32[2, 3]
  graph y = my.Add(a, b)
  expect ops qnn.ElementWiseAdd
}
"""


def _gelu_add_graph() -> Graph:
    g = Graph("g")
    x = g.add_value("x", "float32", [2, 3])
    h = g.add_value("h", "float32", [2, 3])
    y = g.add_value("y", "float32", [2, 3])
    g.add_op("gelu", "mllm.GELU", [x], [h], {"approximate": "none"})
    g.add_op("add", "my.Add", [h, x], [y], {})
    g.set_io([x], [y])
    return g


def test_every_shipped_pack_checks_clean_together(capsys):
    root = Path(__file__).resolve().parents[2]
    assert main(["check", str(root / "patterns")]) == 0
    assert "0 error(s), 0 warning(s)" in capsys.readouterr().out


def test_a_user_pack_imports_overrides_and_adds_its_own_rule_add(tmp_path):
    (tmp_path / "mine.qpat").write_text(USER_PACK)
    rules = qlower.load_rules([tmp_path / "mine.qpat"])
    names = {r.name for r in rules.ruleset.rules}
    assert {"add", "gelu_tanh", "mllm.add"} <= names  # the user's `add` beside the pack's
    assert "mllm.gelu" not in names  # replaced, and its tests with it
    assert not any(t.rule_name == "mllm.gelu" for t in rules.ruleset.tests)
    g = _gelu_add_graph()
    qlower.lower(g, rules, backend="cpu").raise_for_errors()
    assert {o.provenance.rule for o in g.ops} == {"gelu_tanh", "add"}
    # warnings about the pack's own files are not the user's: none is located in the pack
    assert all("patterns" not in (d.span.file if d.span else "") for d in rules.ruleset.warnings)


def test_an_override_of_a_rule_that_is_not_loaded_says_which_import_is_missing(tmp_path):
    (tmp_path / "bad.qpat").write_text(USER_PACK.replace("import mllm\n", "import mllm.ops\n"))
    try:
        qlower.load_rules([tmp_path / "bad.qpat"])
    except QlowerError as exc:
        (d,) = [d for d in exc.diagnostics if d.is_error]
        assert d.message == "rule `mllm.gelu` to override is not loaded"
        assert d.hint == "add `import mllm`" and (d.span.line, d.span.column) == (6, 26)
    else:
        raise AssertionError("an override of an absent rule loaded")


def test_importing_a_packs_declarations_brings_none_of_its_rules(tmp_path):
    text = "import mllm.ops\n\nrule my_gelu {\n  match y = mllm.GELU(x)\n  emit y = qnn.Gelu(x)\n}\n"
    (tmp_path / "decl.qpat").write_text(text)
    rules = qlower.load_rules([tmp_path / "decl.qpat"])
    assert [r.name for r in rules.ruleset.rules] == ["my_gelu"]
    assert "mllm.Repeat" in rules.ruleset.ops


def test_a_rule_cannot_override_its_own_pack(tmp_path):
    pack = tmp_path / "p.qpat"
    pack.write_text("op q.A(x) -> y\n\nrule a {\n  match y = q.A(x)\n  emit y = qnn.Relu(x)\n}\n\n"
                    "rule b overrides a {\n  match y = q.A(x)\n  emit y = qnn.Relu(x)\n}\n")
    try:
        qlower.load_rules([pack])
    except QlowerError as exc:
        assert [d.code for d in exc.diagnostics if d.is_error] == ["bad-override"]
    else:
        raise AssertionError("a rule overriding its own pack loaded")


def test_installed_packs_are_named_like_shipped_ones_on_the_command_line(capsys):
    assert main(["check", "mllm"]) == 0
    assert main(["check", "mlm"]) == 1
    err = capsys.readouterr().err
    assert "no such file, folder or rule pack: mlm" in err and "did you mean `mllm`?" in err
