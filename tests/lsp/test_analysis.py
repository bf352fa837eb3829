"""The language server's answers, asked of its workspace directly (no protocol)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pygls", reason="the language server needs the lsp extra (pip install 'qlower[lsp]')")

from qlower.lsp.server import default_workspace  # noqa: E402


@pytest.fixture(scope="module")
def workspace():
    return default_workspace()


def _open(ws, path: Path, text: str) -> Path:
    path.write_text(text)
    ws.open(path, text)
    return path.resolve()


def test_enum_values_complete_after_the_param_name(workspace, tmp_path):
    text = "rule r {\n  match y = mllm.Add(a, b)\n  emit y = qnn.ElementWiseBinary(a, b) { operation: }\n}\n"
    path = _open(workspace, tmp_path / "r.qpat", "import mllm\n" + text)
    col = ("import mllm\n" + text).splitlines()[3].index("operation:") + len("operation: ")
    labels = [c.label for c in workspace.completion(path, 3, col)]
    assert labels[:3] == ["ADD", "AND", "DIVIDE"]


def test_a_change_to_an_imported_file_rechecks_its_importers(workspace, tmp_path):
    base = _open(workspace, tmp_path / "base.qpat", "op my.Op(x) -> y\n")
    user = _open(workspace, tmp_path / "user.qpat",
                 'import "base.qpat"\nrule r {\n  match y = my.Op(x)\n  emit y = qnn.Relu(x)\n}\n')
    assert [d for d in workspace.check(user) if d.is_error] == []
    workspace.check(base)
    again = workspace.open(base, "op my.Other(x) -> y\n")  # the unsaved buffer wins over the file on disk
    assert again == [base, user]
    errors = [str(d) for d in workspace.check(user) if d.is_error]
    assert len(errors) == 1 and "unknown op `my.Op`" in errors[0]


def test_a_file_of_an_installed_plugin_pack_is_checked_with_its_pack(workspace):
    toy = workspace.packs.get("toy")
    if toy is None:
        pytest.skip("the example plugin (tests/example_plugin) is not installed")
    path = next(Path(toy).glob("*.qpat")).resolve()
    workspace.open(path, path.read_text())
    assert [d for d in workspace.check(path) if d.is_error] == []
    hover = workspace.hover(path, 1, 5)  # `op toy.ScaleAdd(...)`: its own declaration
    assert hover is not None and "toy.ScaleAdd" in hover[0]


def test_a_buffer_that_does_not_parse_still_completes_from_the_last_good_tree(workspace, tmp_path):
    good = "import mllm\nrule r {\n  match y = mllm.Add(a, b)\n  let k = 1\n  emit y = qnn.Relu(a)\n}\n"
    path = _open(workspace, tmp_path / "t.qpat", good)
    workspace.check(path)
    broken = good.replace("emit y = qnn.Relu(a)", "emit y = qnn.Relu(a) +")
    workspace.open(path, broken)
    diags = workspace.check(path)
    assert any(d.is_error for d in diags)
    assert workspace.format(path) is None  # nothing to format while the text does not parse
    names = {c.label for c in workspace.completion(path, 4, 2)}
    assert {"a", "b", "k", "y"} <= names


def test_checking_one_file_in_depth_finds_what_checking_its_whole_pack_finds(workspace):
    """The server re-checks only the changed file's rules and tests; that must lose no finding for it."""
    from qlower.lang.loader import inspect_paths

    pack = workspace.packs["mllm"]
    for path in sorted(Path(pack).glob("*.qpat")):
        path = path.resolve()
        text = path.read_text()
        broken = text.replace("qnn.", "qnn.X", 1).replace("require ", "require nosuch + ", 1)
        overlay = {path: broken}
        kwargs = dict(registry=workspace.registry, functions=workspace.functions, packs=workspace.packs,
                      overlay=overlay)
        full = inspect_paths([pack], **kwargs).diagnostics
        focused = inspect_paths([pack], focus=[path], **kwargs).diagnostics
        mine = [str(d) for d in full if d.span is not None and d.span.file == str(path)]
        assert mine == [str(d) for d in focused if d.span is not None and d.span.file == str(path)], path.name
        if "qnn." in text:
            assert mine, path.name  # the mutation was found at all


def test_symbols_list_maps_and_fragments(workspace, tmp_path):
    text = ("import mllm.ops\n\nmap mllm.Neg(x) -> qnn.ElementWiseNeg(x) tested f32[2]\n\n"
            "fragment nhwc(x) -> xt {\n  xt = qnn.Transpose(x) { perm: [0, 2, 3, 1] }\n}\n")
    path = _open(workspace, tmp_path / "m.qpat", text)
    got = [(s.name, s.kind, s.detail) for s in workspace.symbols(path)]
    assert ("neg", "map", "mllm.Neg -> qnn.ElementWiseNeg") in got and ("nhwc", "fragment", "xt") in got


def test_fragments_and_defs_go_to_their_definition_and_hover(workspace, tmp_path):
    text = ("import mllm.ops\n\n# the sandwich's first half\nfragment to_nhwc(x) -> xt {\n"
            "  xt = qnn.Transpose(x) { perm: [0, 2, 3, 1] }\n}\n\ndef image(x) = rank(x) == 4\n\n"
            "rule r {\n  match y = mllm.ReLU(x)\n  require image(x)\n  emit {\n    xt = to_nhwc(x)\n"
            "    if rank(x) == 4 {\n      y = qnn.Transpose(xt) { perm: [0, 3, 1, 2] }\n    } else {\n"
            "      y = qnn.Relu(x)\n    }\n  }\n}\n")
    path = _open(workspace, tmp_path / "f.qpat", text)
    assert [d for d in workspace.check(path) if d.is_error] == []
    lines = text.splitlines()
    call = lines[13].index("to_nhwc") + 1
    (loc,) = workspace.definition(path, 13, call)
    assert (loc.span.line, loc.span.column) == (4, 10)
    hover, _ = workspace.hover(path, 13, call)
    assert hover.startswith("fragment `to_nhwc`") and "the sandwich's first half" in hover
    (loc,) = workspace.definition(path, 11, lines[11].index("image") + 1)
    assert (loc.span.line, loc.span.column) == (8, 5)
    kinds = {s.name: s.kind for s in workspace.symbols(path)}
    assert kinds["to_nhwc"] == "fragment" and kinds["image"] == "def"


def test_hover_on_backend_shows_what_it_returns(workspace, tmp_path):
    text = ('import mllm.ops\n\nrule r {\n  match y = mllm.ReLU(x)\n  emit {\n    if backend() == "htp" {\n'
            '      y = qnn.Relu(x)\n    } else {\n      y = qnn.Sigmoid(x)\n    }\n  }\n}\n')
    path = _open(workspace, tmp_path / "b.qpat", text)
    assert [d for d in workspace.check(path) if d.is_error] == []
    hover, span = workspace.hover(path, 5, text.splitlines()[5].index("backend") + 2)
    assert "backend() -> str" in hover and "lowered for" in hover
    assert (span.line, span.column) == (6, 8)


def test_hover_on_an_op_type_parameter_shows_what_its_calls_give(workspace, tmp_path):
    text = ("import mllm.ops\n\nfragment wrap(x, k: op) -> y {\n  y = k(x)\n}\n\n"
            "rule a {\n  match y = mllm.ReLU | mllm.Sigmoid(x)\n"
            "  emit y = wrap(x, [\"qnn.Relu\", \"qnn.Sigmoid\"][index_of([\"mllm.ReLU\", \"mllm.Sigmoid\"], optype(y))])\n}\n\n"
            "rule b {\n  match y = mllm.Tanh(x)\n  emit y = wrap(x, qnn.Tanh)\n}\n")
    path = _open(workspace, tmp_path / "k.qpat", text)
    assert [str(d) for d in workspace.check(path) if d.is_error] == []
    hover, span = workspace.hover(path, 3, text.splitlines()[3].index("k(") + 1)
    assert hover == "op type parameter `k` of fragment `wrap`: `qnn.Relu`, `qnn.Sigmoid`, `qnn.Tanh`"
    assert (span.line, span.column) == (4, 7)


def test_an_unchanged_rule_is_checked_again_when_a_declaration_it_uses_changes(workspace, tmp_path):
    """Re-checks keep each unchanged rule's findings (qlower.lang.checker's memo) only while the
    declarations they were found against are the same: editing the op's declaration re-checks the rule."""
    rule = "\nrule r {\n  match y = my.Op(x) { k: kv }\n  emit y = qnn.Relu(x)\n}\n"
    rule2 = "\nrule other {\n  match y = my.Op2(x)\n  emit y = qnn.Relu(x)\n}\n"
    path = _open(workspace, tmp_path / "memo.qpat", "op my.Op(x) -> y\nop my.Op2(x) -> y\n" + rule + rule2)
    first = [d.message for d in workspace.check(path) if d.is_error]
    assert len(first) == 1 and "k" in first[0], first
    for _ in range(2):  # an edit elsewhere: the same finding, from the memo
        workspace.open(path, "op my.Op(x) -> y\nop my.Op2(x) -> y\n" + rule + rule2.replace("other", "other2"))
        assert [d.message for d in workspace.check(path) if d.is_error] == first
    workspace.open(path, "op my.Op(x) -> y { k: int }\nop my.Op2(x) -> y\n" + rule + rule2)
    assert [d.message for d in workspace.check(path) if d.is_error] == []
    workspace.open(path, "op my.Op(x) -> y\nop my.Op2(x) -> y\n" + rule + rule2)
    assert [d.message for d in workspace.check(path) if d.is_error] == first
