"""What users' editors do that the happy path does not: UTF-8 clients, packs outside the installed ones,
symlinked folders, hovering a declaration, typing a space. Each drives `qlower lsp` over stdio."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("pygls", reason="the language server needs the lsp extra (pip install 'qlower[lsp]')")

from qlower import _resources  # noqa: E402

from .client import LspClient  # noqa: E402

MLLM = _resources.data_dir("patterns") / "mllm"
def _open(client: LspClient, uri: str, text: str) -> list[dict]:
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "qpat", "version": 1,
                                                            "text": text}})
    return client.wait_for("textDocument/publishDiagnostics", uri)["params"]["diagnostics"]


@pytest.fixture
def start(tmp_path):
    clients = []

    def go(encodings: list[str] | None) -> tuple[LspClient, str]:
        client = LspClient(cwd=tmp_path)
        caps = {"general": {"positionEncodings": encodings}} if encodings is not None else {}
        chosen = client.initialize(tmp_path, caps)["capabilities"].get("positionEncoding", "utf-16")
        clients.append(client)
        return client, chosen

    yield go
    for c in clients:
        assert c.shutdown() == 0


# Non-ASCII before the error on its line: 2-, 3- and 4-byte UTF-8 (the last a surrogate pair in UTF-16).
UNICODE = 'import mllm\nrule r {\n  match y = mllm.Repeat(x) { dim: 0, times: 2 }\n' \
          '  require "é→😀" != "" and rnak(x) == 4\n  emit y = x\n}\n'


def _units(text: str, encoding: str) -> int:
    codec = {"utf-8": "utf-8", "utf-16": "utf-16-le", "utf-32": "utf-32-le"}[encoding]
    return len(text.encode(codec)) // {"utf-8": 1, "utf-16": 2, "utf-32": 4}[encoding]


@pytest.mark.parametrize(("offered", "expected"), [
    (["utf-8", "utf-16", "utf-32"], "utf-16"),  # Neovim 0.10+'s order: UTF-16 still wins
    (["utf-8"], "utf-8"), (["utf-32", "utf-8"], "utf-32"), (None, "utf-16")])
def test_positions_count_in_the_negotiated_encoding(start, tmp_path, offered, expected):
    client, chosen = start(offered)
    assert chosen == expected
    path = tmp_path / "u.qpat"
    path.write_text(UNICODE, encoding="utf-8")
    uri = path.as_uri()
    diags = [d for d in _open(client, uri, UNICODE) if d["severity"] == 1]
    line = UNICODE.splitlines()[3]
    at = line.index("rnak(x)")
    assert [d["range"] for d in diags] == [{"start": {"line": 3, "character": _units(line[:at], chosen)},
                                            "end": {"line": 3, "character": _units(line[:at + 7], chosen)}}]
    # hover at a column in the client's units
    col = _units(UNICODE.splitlines()[2][:UNICODE.splitlines()[2].index("Repeat") + 1], chosen)
    hover = client.request("textDocument/hover", {"textDocument": {"uri": uri},
                                                  "position": {"line": 2, "character": col}})
    assert hover is not None and "mllm.Repeat" in hover["contents"]["value"]
    # the quick fix replaces `rnak` at its column in the client's units
    fixes = client.request("textDocument/codeAction", {
        "textDocument": {"uri": uri}, "range": diags[0]["range"], "context": {"diagnostics": diags}})
    (fix,) = fixes
    (edit,) = fix["edit"]["changes"][uri]
    assert edit["newText"] == "rank"
    assert edit["range"] == {"start": {"line": 3, "character": _units(line[:at], chosen)},
                             "end": {"line": 3, "character": _units(line[:at + 4], chosen)}}


def test_hover_after_non_ascii_text_at_a_utf8_column(start, tmp_path):
    client, chosen = start(["utf-8"])
    text = 'import mllm\nrule r {\n  match y = mllm.Repeat(x) { dim: 0, times: 2 }\n' \
           '  emit y = qnn.Tile(x) { multiples: [1, 1, 1, 2] }  # é→😀\n}\n# é→😀 mllm.Repeat\n'
    path = tmp_path / "h.qpat"
    path.write_text(text, encoding="utf-8")
    _open(client, path.as_uri(), text)
    last = text.splitlines()[5]
    byte_col = len(last[:last.index("Repeat")].encode("utf-8"))
    # the comment is no code: nothing there; the same word on line 2 at its byte column is the op
    assert client.request("textDocument/hover", {"textDocument": {"uri": path.as_uri()},
                                                 "position": {"line": 5, "character": byte_col}}) is None
    line = text.splitlines()[3]
    byte_col = len(line[:line.index("Tile") + 1].encode("utf-8"))
    hover = client.request("textDocument/hover", {"textDocument": {"uri": path.as_uri()},
                                                  "position": {"line": 3, "character": byte_col}})
    assert hover is not None and "Tile" in hover["contents"]["value"]


def test_a_copied_pack_is_checked_as_its_own_pack(start, tmp_path):
    copy = tmp_path / "anywhere" / "mllm"
    shutil.copytree(MLLM, copy)
    client, _ = start(None)
    path = copy / "repeat.qpat"
    diags = _open(client, path.as_uri(), path.read_text(encoding="utf-8"))
    assert [d["message"] for d in diags if d["severity"] == 1] == []


def test_answers_come_back_under_the_uri_the_client_opened(start, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "base.qpat").write_text("op my.Op(x) -> y\n")
    text = 'import "base.qpat"\nrule r {\n  match y = my.Op(x)\n  emit y = qnn.Tlie(x)\n}\n'
    (real / "user.qpat").write_text(text)
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    client, _ = start(None)
    uri = (link / "user.qpat").as_uri()
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "qpat", "version": 1,
                                                            "text": text}})
    published = client.wait_for("textDocument/publishDiagnostics")
    assert published["params"]["uri"] == uri
    assert [d["code"] for d in published["params"]["diagnostics"]] == ["unknown-target-op"]
    found = client.request("textDocument/definition", {"textDocument": {"uri": uri},
                                                       "position": {"line": 2, "character": 13}})
    assert [loc["uri"] for loc in found] == [(link / "base.qpat").as_uri()]


def test_hover_on_a_source_op_shows_its_whole_declaration(start, tmp_path):
    client, _ = start(None)
    text = 'import mllm\nrule r {\n  match y = mllm.Repeat(x) { dim: 0, times: 2 }\n  emit y = x\n}\n'
    path = tmp_path / "d.qpat"
    path.write_text(text)
    _open(client, path.as_uri(), text)
    hover = client.request("textDocument/hover", {"textDocument": {"uri": path.as_uri()},
                                                  "position": {"line": 2, "character": 16}})
    assert "op mllm.Repeat(x) -> y { dim: int, times: int }\n```" in hover["contents"]["value"]


def test_completion_answers_its_trigger_characters_only_where_they_apply(start, tmp_path):
    client, _ = start(None)
    text = 'import mllm\nrule r {\n  match y = mllm.Repeat(x) { dim: d, times: n }\n  emit y = qnn.Tile(x) { \n}\n'
    path = tmp_path / "c.qpat"
    path.write_text(text)
    uri = path.as_uri()
    _open(client, uri, text)

    def complete(line: int, char: int, trigger: str | None) -> list[str]:
        context = ({"triggerKind": 2, "triggerCharacter": trigger} if trigger else {"triggerKind": 1})
        found = client.request("textDocument/completion", {"textDocument": {"uri": uri},
                                                           "position": {"line": line, "character": char},
                                                           "context": context})
        return [i["label"] for i in found["items"]]

    assert "multiples" in complete(3, len("  emit y = qnn.Tile(x) {"), "{")
    assert complete(3, len("  emit y = "), None)  # asked for: everything in scope
    assert complete(2, len("  match y = mllm.Repeat(x) { dim:"), ":") == []  # an attribute of no enum
    assert complete(1, len("rule r {"), "{") == []  # a rule's brace: nothing to offer
    labels = complete(3, len("  emit y = qnn."), ".")
    assert "Tile" in labels and "rule" not in labels


def test_the_server_does_not_ask_for_completion_on_a_space(tmp_path):
    client = LspClient(cwd=tmp_path)
    caps = client.initialize(tmp_path)["capabilities"]
    assert client.shutdown() == 0
    assert sorted(caps["completionProvider"]["triggerCharacters"]) == sorted([".", "{", ",", ":"])


def test_keyword_completion_is_the_grammars_words():
    from qlower.lang.grammar import keywords

    words = set(keywords())
    assert {"map", "fragment", "def", "compute", "overrides", "fold", "tested", "shared", "commutative",
            "wrapping"} <= words


def test_qlower_check_resolves_a_copied_packs_file_as_the_server_does(tmp_path, capsys):
    from qlower.cli.main import main
    from qlower.lang.loader import pack_folder

    copy = tmp_path / "checkout" / "patterns" / "mllm"
    shutil.copytree(MLLM, copy)
    assert pack_folder(copy / "repeat.qpat", {}) == copy.resolve()
    assert main(["check", str(copy / "repeat.qpat")]) == 0, capsys.readouterr().err
    (copy / "repeat.qpat").write_text("rule r {\n  match y = mllm.Repeat(x) { times: 1 }\n  emit y = z\n}\n")
    assert main(["check", str(copy / "repeat.qpat")]) == 1  # its own errors still count
    assert "repeat.qpat:3:" in capsys.readouterr().err
