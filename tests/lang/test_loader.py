"""Loading rule sets: files, folders, imports (paths, packs, cycles) and the RuleSet."""

from __future__ import annotations

from pathlib import Path

import pytest

from qlower.diagnostics import QlowerError
from qlower.lang import ast
from qlower.lang.loader import RuleSet, check_paths, load_rules
from qlower.lang.parser import parse
from qlower.lang.registry import MinimalRegistry

OPS = "op mllm.Sigmoid(x) -> y\nop mllm.Mul(a, b) -> y\n"
SIGMOID = "rule sigmoid {\n  match y = mllm.Sigmoid(x)\n  emit y = qnn.Sigmoid(x)\n}\n"
MUL = "rule mul {\n  match y = mllm.Mul(a, b)\n  emit y = qnn.ElementWiseMultiply(a, b)\n}\n"


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")


def _load(paths, packs: Path | None = None) -> RuleSet:
    return load_rules(paths, registry=MinimalRegistry(), packs_dir=packs)


def _errors(exc: pytest.ExceptionInfo[QlowerError]) -> list[tuple[str, str, int, int]]:
    return [(d.code, Path(d.span.file).name if d.span else "", d.span.line if d.span else 0,
             d.span.column if d.span else 0) for d in exc.value.diagnostics if d.is_error]


def test_path_import_comes_before_the_importer(tmp_path: Path) -> None:
    _write(tmp_path, {"ops.qpat": OPS, "rules/main.qpat": 'import "../ops.qpat"\n' + SIGMOID})
    rs = _load([tmp_path / "rules" / "main.qpat"])
    assert [Path(m.file).name for m in rs.modules] == ["ops.qpat", "main.qpat"]
    assert set(rs.ops) == {"mllm.Sigmoid", "mllm.Mul"}
    assert rs.ops["mllm.Mul"].operands[1].name == "b"
    assert [r.name for r in rs.rules] == ["sigmoid"]
    assert rs.rule("sigmoid") is rs.rules[0] and rs.rule("nope") is None
    assert Path(rs.rule_file(rs.rules[0])).name == "main.qpat"
    assert rs.sources.line(rs.modules[1].file, 1) == 'import "../ops.qpat"'
    assert rs.warnings == ()


def test_pack_import_loads_the_pack_folder_recursively(tmp_path: Path) -> None:
    packs = tmp_path / "packs"
    _write(packs, {"mllm/ops.qpat": OPS, "mllm/act/sigmoid.qpat": SIGMOID, "mllm/b/mul.qpat": MUL})
    _write(tmp_path, {"main.qpat": "import mllm\n"})
    rs = _load([tmp_path / "main.qpat"], packs)
    # sorted by path: act/sigmoid.qpat, b/mul.qpat, ops.qpat, then the importer
    assert [Path(m.file).name for m in rs.modules] == ["sigmoid.qpat", "mul.qpat", "ops.qpat", "main.qpat"]
    assert [r.name for r in rs.rules] == ["mllm.sigmoid", "mllm.mul"]  # named by their pack


def test_import_cycles_load_each_file_once(tmp_path: Path) -> None:
    _write(tmp_path, {"a.qpat": 'import "b.qpat"\n' + OPS, "b.qpat": 'import "a.qpat"\n' + SIGMOID})
    rs = _load([tmp_path / "a.qpat", tmp_path / "b.qpat", tmp_path])
    assert [Path(m.file).name for m in rs.modules] == ["b.qpat", "a.qpat"]
    assert len(rs.rules) == 1


def test_missing_imports_are_errors_at_the_import(tmp_path: Path) -> None:
    _write(tmp_path, {"main.qpat": OPS + 'import "gone.qpat"\nimport mlm\n' + SIGMOID})
    _write(tmp_path / "packs", {"mllm/ops.qpat": "op mllm.X(x) -> y\n"})
    with pytest.raises(QlowerError) as exc:
        _load([tmp_path / "main.qpat"], tmp_path / "packs")
    assert _errors(exc) == [("unknown-import", "main.qpat", 3, 8), ("unknown-import", "main.qpat", 4, 8)]
    assert exc.value.diagnostics[1].hint == "did you mean `mllm`?"


def test_folders_load_sorted_and_all_errors_are_raised_together(tmp_path: Path) -> None:
    _write(tmp_path, {"b.qpat": SIGMOID.replace("qnn.Sigmoid", "qnn.Sigmod"), "a.qpat": OPS,
                      "c.qpat": MUL.replace("mllm.Mul(a, b)", "mllm.Mul(a, b, c)"), "notes.txt": "not rules"})
    with pytest.raises(QlowerError) as exc:
        _load([tmp_path])
    assert _errors(exc) == [("unknown-target-op", "b.qpat", 3, 12), ("arity", "c.qpat", 2, 13)]


def test_warnings_are_kept_on_success_and_raised_with_errors(tmp_path: Path) -> None:
    unused = "rule spare {\n  match y = mllm.Mul(a, b)\n  emit y = qnn.Sigmoid(a)\n}\n"
    _write(tmp_path, {"ok.qpat": OPS + unused})
    rs = _load([tmp_path / "ok.qpat"])
    assert [d.code for d in rs.warnings] == ["unused-capture"]
    _write(tmp_path, {"bad.qpat": "rule broken {\n  match y = mllm.Nope(x)\n  emit y = x\n}\n"})
    with pytest.raises(QlowerError) as exc:
        _load([tmp_path / "ok.qpat", tmp_path / "bad.qpat"])
    assert [d.code for d in exc.value.diagnostics] == ["unused-capture", "unknown-op"]


def test_check_paths_reports_syntax_errors_of_every_file(tmp_path: Path) -> None:
    bad_op = "rule b {\n  match y = mllm.Sigmoid(x)\n  emit y = qnn.Sigmod(x)\n}\n"
    _write(tmp_path, {"a.qpat": OPS + "rule a {\n", "b.qpat": bad_op, "c.qpat": "rul c {}\n"})
    diags, sources = check_paths([tmp_path], registry=MinimalRegistry())
    found = [(d.code, Path(d.span.file).name) for d in diags]
    # a.qpat's ops are missing after its syntax error: "unknown op" findings would be noise
    assert found == [("syntax", "a.qpat"), ("syntax", "c.qpat"), ("unknown-target-op", "b.qpat")]
    assert "qnn.Sigmod" in diags[2].render(sources)


def test_check_paths_never_raises_for_missing_or_empty_paths(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.qpat").write_bytes(b"\xff\xfe rule")
    diags, _ = check_paths([tmp_path / "nope.qpat", tmp_path / "empty", tmp_path / "bad.qpat"],
                           registry=MinimalRegistry())
    assert [(d.code, str(d.severity)) for d in diags] == [
        ("unknown-import", "error"), ("empty-folder", "warning"), ("io", "error")]


def test_default_registry_and_packs_dir(tmp_path: Path) -> None:
    _write(tmp_path, {"main.qpat": OPS + SIGMOID})
    rs = load_rules([tmp_path / "main.qpat"])  # shipped OpDef registry (or MinimalRegistry without it)
    assert [r.name for r in rs.rules] == ["sigmoid"]
    _write(tmp_path, {"pack.qpat": "import no_such_pack_anywhere\n"})
    diags, _ = check_paths([tmp_path / "pack.qpat"], registry=MinimalRegistry())
    assert [d.code for d in diags] == ["unknown-import"]


def test_the_parser_inlines_a_files_own_fragments_unless_asked_not_to() -> None:
    """The loader parses without inlining and inlines once, with the pack's fragments; `parse` alone
    inlines the file's own."""
    text = ("fragment f(x) -> y {\n  y = qnn.Relu(x)\n}\n\n"
            "rule r {\n  match y = mllm.ReLU(x)\n  emit y = f(x)\n}\n")
    (inlined,) = parse(text).rules
    (raw,) = parse(text, inline=False).rules
    assert [i.op for i in inlined.emits] == ["qnn.Relu"]
    assert [type(i) for i in raw.emits] == [ast.FragmentCall]
