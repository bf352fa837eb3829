"""Diagnostics a newcomer tripped on: each names the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from qlower.cli.main import main
from qlower.lang.loader import check_paths
from qlower.plugins import builtin_contributions


def _findings(tmp_path: Path, text: str) -> list:
    (tmp_path / "r.qpat").write_text(text)
    found, _ = check_paths([tmp_path / "r.qpat"], functions=builtin_contributions().functions,
                           packs=builtin_contributions().packs)
    return [d for d in found if d.is_error]


def test_a_case_changed_op_name_suggests_the_op_meant(tmp_path):
    (d,) = _findings(tmp_path, "import mllm.ops\nrule r {\n  match y = mllm.Gelu(x)\n  emit y = qnn.Gelu(x)\n}\n")
    assert d.hint == "did you mean `mllm.GELU`?"


def test_an_op_of_a_pack_that_was_not_imported_says_which_import(tmp_path):
    (d,) = _findings(tmp_path, "rule r {\n  match y = mllm.GELU(x)\n  emit y = qnn.Gelu(x)\n}\n")
    assert d.message == "unknown op `mllm.GELU`" and "add `import mllm`" in d.hint


def test_a_rule_that_rewrites_its_own_output_forever_is_refused_where_it_emits(tmp_path):
    (d,) = _findings(tmp_path, "op m.N(x) -> y\nrule r {\n  match y = m.N(x)\n  emit y = m.N(x)\n}\n")
    assert d.code == "self-feeding" and (d.span.line, d.span.column) == (4, 12)


@pytest.mark.parametrize("literal", ["9" * 400, str(1 << 64), "0x1" + "0" * 16])
def test_an_integer_literal_too_large_is_a_syntax_error_not_a_crash(tmp_path, capsys, literal):
    path = tmp_path / "big.qpat"
    path.write_text(f"op m.A(x) -> y {{ k: float = {literal} }}\n")
    assert main(["fmt", "--check", str(path)]) == 1
    assert main(["check", str(path)]) == 1
    err = capsys.readouterr().err
    assert "integer literal is too large" in err and "internal error" not in err


def test_value_props_on_an_op_with_several_new_results_are_refused(tmp_path):
    """They would type every new result alike: the ONNX TopK rule once typed its values as int32."""
    text = ("op m.T(x) -> y { k: int }\nrule r {\n  match y = m.T(x) { k: k }\n  emit {\n"
            "    v, i = qnn.TopK(x) { k: k } : dtype i32\n    y = qnn.Cast(i)\n  }\n}\n")
    (d,) = _findings(tmp_path, text)
    assert d.code == "props-on-many-results" and (d.span.line, d.span.column) == (5, 35)
