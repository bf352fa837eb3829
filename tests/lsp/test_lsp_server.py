"""The language server driven as an editor drives it: JSON-RPC over stdio."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pygls", reason="the language server needs the lsp extra (pip install 'qlower[lsp]')")

from qlower.lang.formatter import format_text  # noqa: E402

from .client import LspClient  # noqa: E402

RULES = """\
import mllm

# Repeat each slice along `dim`, at rank 4 so HTP's Tile accepts it.
rule my_repeat backends(cpu, htp) {
  match y = mllm.Repeat(x) { dim: dim, times: n }
  require n > 1
  let d = normdim(dim, rank(x))
  let s = shape(x)
  emit {
    t = qnn.Reshape(x) : shape [prod(s[:d]), s[d], 1, prod(s[d + 1:])]
    u = qnn.Tlie(t) { multiples: [1, 1, n, 1] }
    y = qnn.Reshape(u)
  }
}

test my_repeat_works for my_repeat backends(cpu) {
  input x: f32[1, 2, 3, 16]
  graph y = mllm.Repeat(x) { dim: 1, times: 4 }
  expect ops qnn.Reshape, qnn.Tile, qnn.Reshape
}
"""


def _pos(text: str, needle: str, offset: int = 0, nth: int = 0) -> dict:
    at = -1
    for _ in range(nth + 1):
        at = text.index(needle, at + 1)
    at += offset
    line = text.count("\n", 0, at)
    return {"line": line, "character": at - (text.rfind("\n", 0, at) + 1)}


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    root = tmp_path_factory.mktemp("rules")
    path = root / "mine.qpat"
    path.write_text(RULES)
    client = LspClient(cwd=root)
    caps = client.initialize(root)["capabilities"]
    uri = path.resolve().as_uri()
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "qpat", "version": 1,
                                                            "text": RULES}})
    diags = client.wait_for("textDocument/publishDiagnostics", uri)["params"]["diagnostics"]
    yield client, caps, uri, diags
    assert client.shutdown() == 0


def _doc(uri: str, pos: dict) -> dict:
    return {"textDocument": {"uri": uri}, "position": pos}


def test_advertises_its_features(session):
    _, caps, _, _ = session
    for key in ("hoverProvider", "completionProvider", "definitionProvider", "referencesProvider",
                "documentSymbolProvider", "documentFormattingProvider", "codeActionProvider"):
        assert caps.get(key), key


def test_diagnostics_at_the_misspelled_op(session):
    _, _, _, diags = session
    errors = [d for d in diags if d["severity"] == 1]
    assert len(errors) == 1, diags
    d = errors[0]
    start = _pos(RULES, "qnn.Tlie")
    assert d["range"]["start"] == start
    assert d["range"]["end"] == {"line": start["line"], "character": start["character"] + len("qnn.Tlie")}
    assert d["code"] == "unknown-target-op"
    assert "did you mean `qnn.Tile`?" in d["message"]


def test_quick_fix_applies_the_suggestion(session):
    client, _, uri, diags = session
    error = next(d for d in diags if d["severity"] == 1)
    actions = client.request("textDocument/codeAction", {"textDocument": {"uri": uri}, "range": error["range"],
                                                         "context": {"diagnostics": [error]}})
    assert [a["title"] for a in actions] == ["Change to `qnn.Tile`"]
    (edit,) = actions[0]["edit"]["changes"][uri]
    assert edit["newText"] == "qnn.Tile" and edit["range"] == error["range"]


def test_hover_on_a_qnn_op_shows_what_the_backends_accept(session):
    client, _, uri, _ = session
    text = client.request("textDocument/hover", _doc(uri, _pos(RULES, "qnn.Reshape", 5)))["contents"]["value"]
    assert "qnn.Reshape" in text and "inputs" in text and "HTP" in text


def test_hover_on_a_source_op_shows_its_declaration(session):
    client, _, uri, _ = session
    text = client.request("textDocument/hover", _doc(uri, _pos(RULES, "mllm.Repeat", 6)))["contents"]["value"]
    assert "op mllm.Repeat" in text and "times" in text


def test_hover_on_a_function_shows_its_signature(session):
    client, _, uri, _ = session
    text = client.request("textDocument/hover", _doc(uri, _pos(RULES, "normdim", 2)))["contents"]["value"]
    assert "normdim(int, int) -> int" in text


def test_completion_of_qnn_ops_and_of_missing_params(session):
    client, _, uri, _ = session
    items = client.request("textDocument/completion", _doc(uri, _pos(RULES, "qnn.Reshape", 4)))["items"]
    labels = {i["label"] for i in items}
    assert {"Tile", "Reshape", "MatMul"} <= labels
    attrs_ = client.request("textDocument/completion", _doc(uri, _pos(RULES, "dim: dim", 0)))["items"]
    assert {i["label"] for i in attrs_} == {"dim", "times"}  # a declared source op's attributes


def test_definition_of_a_tested_rule_a_let_name_and_an_import(session):
    client, _, uri, _ = session
    (rule,) = client.request("textDocument/definition", _doc(uri, _pos(RULES, "for my_repeat", 5)))
    assert rule["uri"] == uri and rule["range"]["start"] == _pos(RULES, "my_repeat")
    (let,) = client.request("textDocument/definition", _doc(uri, _pos(RULES, "s[d]", 0)))
    assert let["range"]["start"] == _pos(RULES, "s = shape", 0)
    pack = client.request("textDocument/definition", _doc(uri, _pos(RULES, "mllm", 1)))
    assert pack and all(loc["uri"].endswith(".qpat") and "/mllm/" in loc["uri"] for loc in pack)


def test_references_of_a_rule_include_its_tests(session):
    client, _, uri, _ = session
    refs = client.request("textDocument/references", {**_doc(uri, _pos(RULES, "my_repeat")),
                                                       "context": {"includeDeclaration": True}})
    starts = sorted((r["range"]["start"]["line"], r["range"]["start"]["character"]) for r in refs)
    want = [_pos(RULES, "my_repeat"), _pos(RULES, "my_repeat", nth=2)]
    assert starts == sorted((p["line"], p["character"]) for p in want)


def test_document_symbols(session):
    client, _, uri, _ = session
    symbols = client.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
    assert [s["name"] for s in symbols] == ["mllm", "my_repeat", "my_repeat_works"]


def test_formatting_is_what_qlower_fmt_writes(session):
    client, _, uri, _ = session
    messy = RULES.replace("require n > 1", "require   n>1")
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                             "contentChanges": [{"text": messy}]})
    edits = client.request("textDocument/formatting", {"textDocument": {"uri": uri},
                                                       "options": {"tabSize": 2, "insertSpaces": True}})
    assert len(edits) == 1 and edits[0]["newText"] == format_text(messy)


def test_a_change_rechecks_and_clears_the_fixed_error(session):
    client, _, uri, _ = session
    fixed = RULES.replace("qnn.Tlie", "qnn.Tile")
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 3},
                                             "contentChanges": [{"text": fixed}]})
    while True:
        note = client.wait_for("textDocument/publishDiagnostics", uri)["params"]
        if note.get("version") == 3:
            break
    assert [d for d in note["diagnostics"] if d["severity"] == 1] == []
    # With the op spelled right, its params complete: those not given yet, then enum values.
    inside = client.request("textDocument/completion", _doc(uri, _pos(fixed, "multiples", 0)))["items"]
    assert "multiples" in {i["label"] for i in inside}
    after = client.request("textDocument/completion", _doc(uri, _pos(fixed, "1, 1, n, 1]", 11)))["items"]
    assert "multiples" not in {i["label"] for i in after}
