"""The first answer of a new editor session comes from the last session's check when nothing it read changed
(qlower.lsp.diagnostics_store), and never when something did: a kept answer equals the check it stands in for."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("pygls", reason="the language server needs the lsp extra (pip install 'qlower[lsp]')")

from qlower import _resources  # noqa: E402
from qlower.diagnostics import Diagnostic, Note, Severity, Span  # noqa: E402
from qlower.lsp.diagnostics_store import DiagnosticsStore  # noqa: E402

from .client import LspClient  # noqa: E402

BROKEN = "\n# a rule with two mistakes, found only by checking it against the pack\n" \
         "rule broken_for_the_store {\n  match y = mllm.Repeat(x) { dim: 0, times: 2 }\n" \
         "  require rnak(x) == 4\n  emit y = qnn.Tile(x) { multiples: [1, 2] }\n}\n"


@pytest.fixture
def pack(tmp_path: Path) -> Path:
    """A copy of the mllm pack with an error in repeat.qpat."""
    folder = tmp_path / "mllm"
    shutil.copytree(_resources.data_dir("patterns") / "mllm", folder)
    f = folder / "repeat.qpat"
    f.write_text(f.read_text() + BROKEN)
    return folder


def _session(tmp_path: Path, path: Path, publishes: int) -> list[list[dict]]:
    """Open `path` in a new server with the store in tmp_path/cache; the first `publishes` diagnostics of it."""
    client = LspClient(cwd=tmp_path, env={"QLOWER_CACHE_DIR": str(tmp_path / "cache")})
    try:
        client.initialize(tmp_path)
        client.notify("textDocument/didOpen", {"textDocument": {"uri": path.as_uri(), "languageId": "qpat",
                                                                "version": 1, "text": path.read_text()}})
        return [client.wait_for("textDocument/publishDiagnostics", path.as_uri())["params"]["diagnostics"]
                for _ in range(publishes)]
    finally:
        assert client.shutdown() == 0


def _entries(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "diagnostics").glob("*.json"))


def test_a_reopened_file_is_answered_from_the_store_with_what_its_check_finds(tmp_path, pack):
    path = pack / "repeat.qpat"
    (first,) = _session(tmp_path, path, 1)
    assert any(d["severity"] == 1 for d in first), first
    assert len(_entries(tmp_path)) == 1
    kept, checked = _session(tmp_path, path, 2)  # the kept answer, then the real check's
    assert kept == checked == first


def test_a_changed_or_added_pack_file_is_not_answered_from_the_store(tmp_path, pack):
    path = pack / "repeat.qpat"
    (first,) = _session(tmp_path, path, 1)
    # another file of the pack changes what checking repeat.qpat finds: its rule's name now clashes
    other = next(p for p in sorted(pack.glob("*.qpat")) if p != path)
    original = other.read_text()
    clash = BROKEN.replace("require rnak(x) == 4\n", "")
    other.write_text(original + clash)
    (second,) = _session(tmp_path, path, 1)
    assert second != first
    assert any("broken_for_the_store" in d["message"] for d in second), second
    # back as it was (the entry is the second session's now, and misses): the check finds what it first did
    other.write_text(original)
    (back,) = _session(tmp_path, path, 1)
    assert back == first
    # a file added to the pack folder is read by the next check: a miss
    (pack / "aa_added.qpat").write_text(clash)  # sorts first: the clash is reported in repeat.qpat
    (third,) = _session(tmp_path, path, 1)
    assert third != first
    assert any("broken_for_the_store" in d["message"] for d in third), third


def test_an_edited_file_misses(tmp_path, pack):
    path = pack / "repeat.qpat"
    _session(tmp_path, path, 1)
    store = DiagnosticsStore(tmp_path / "cache" / "diagnostics", "any")
    entry = json.loads(_entries(tmp_path)[0].read_text())
    assert entry["file"] == str(path.resolve())
    path.write_text(path.read_text().replace("rnak", "rank"))
    (fixed,) = _session(tmp_path, path, 1)
    assert not any("rnak" in d["message"] for d in fixed)
    assert store.get(path.resolve(), path.read_text()) is None  # another fingerprint: never this one's entries


def test_a_damaged_or_shared_entry_is_a_miss(tmp_path):
    folder = tmp_path / "store"
    folder.mkdir(mode=0o700)
    store = DiagnosticsStore(folder, "fp")
    f = tmp_path / "a.qpat"
    f.write_text("x")
    d = Diagnostic(Severity.ERROR, "boom", Span(str(f), 1, 1, 1, 2), code="c")
    store.put(f, "x", [d], {f: "x"})
    assert store.get(f, "x") == [d]
    (entry,) = folder.glob("*.json")
    entry.chmod(0o666)  # writable by others: not read
    assert store.get(f, "x") is None
    entry.chmod(0o600)
    entry.write_text("{not json")
    assert store.get(f, "x") is None


_text = st.text(max_size=30)
_spans = st.none() | st.builds(Span, _text, st.integers(1, 10**6), st.integers(1, 10**4), st.integers(1, 10**6),
                               st.integers(1, 10**4))
_diagnostics = st.builds(Diagnostic, st.sampled_from(list(Severity)), _text, _spans, st.none() | _text,
                         st.none() | _text, st.lists(st.builds(Note, _text, _spans), max_size=3), st.none() | _text)


@given(st.lists(_diagnostics, max_size=5))
def test_kept_diagnostics_read_back_equal(tmp_path_factory, diags):
    folder = tmp_path_factory.mktemp("store")
    folder.chmod(0o700)
    store = DiagnosticsStore(folder, "fp")
    f = folder / "f.qpat"
    store.put(f, "text", diags, {})
    assert store.get(f, "text") == diags
    assert store.get(f, "other text") is None


def test_the_server_starts_without_the_checker_and_its_libraries():
    """The first answer waits on nothing the store makes unnecessary: numpy, lark, the op registry and the
    checker are imported when the workspace is built, not when the server starts."""
    import subprocess
    import sys

    code = ("import sys; import qlower.cli.main, qlower.lsp.server; "
            "print(sorted(m for m in ('numpy', 'lark', 'networkx', 'qlower.api', 'qlower.lsp.analysis', "
            "'qlower.lang.checker') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

