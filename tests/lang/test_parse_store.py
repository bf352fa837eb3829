"""The disk store of parsed rule files: a warm store gives the modules a parse gives, an edited
text or another parser misses, and entries outside a private folder are never read."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

import qlower
from qlower.lang.parse_store import ParseStore, default_store, parser_fingerprint
from qlower.lang.parser import parse

pytestmark = pytest.mark.skipif(not hasattr(os, "getuid"), reason="the store checks folder owners (POSIX)")

RULES = """\
op demo.Twice(x) -> y

rule twice {
  match y = demo.Twice(x)
  emit y = qnn.ElementWiseAdd(x, x)
}
"""


def _store(tmp_path: Path) -> ParseStore:
    folder = tmp_path / "parsed"
    folder.mkdir(mode=0o700)
    return ParseStore(folder, parser_fingerprint())


def test_a_stored_module_equals_the_parse(tmp_path: Path) -> None:
    store = _store(tmp_path)
    module = parse(RULES, "demo.qpat", inline=False)
    assert store.get("demo.qpat", RULES) is None
    store.put("demo.qpat", RULES, module)
    assert store.get("demo.qpat", RULES) == module
    assert store.get("demo.qpat", RULES + "\n") is None  # an edited text misses
    assert store.get("other.qpat", RULES) is None  # spans name the file: another path misses
    assert ParseStore(store.folder, "another parser").get("demo.qpat", RULES) is None


def test_loading_twice_reads_the_store_and_gives_the_same_rules(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("QLOWER_CACHE_DIR", str(tmp_path / "cache"))
    f = tmp_path / "demo.qpat"
    f.write_text(RULES)
    first = qlower.load_rules([f])
    entries = list((tmp_path / "cache" / "parsed").glob("*.pickle"))
    assert len(entries) == 1
    second = qlower.load_rules([f])
    assert [r.name for r in second.ruleset.rules] == [r.name for r in first.ruleset.rules] == ["twice"]
    assert second.ruleset.modules[0].items == first.ruleset.modules[0].items


def test_an_entry_in_a_folder_others_can_write_is_not_read(tmp_path: Path) -> None:
    """A pickle runs code when read: one planted in a shared folder must not be."""
    store = _store(tmp_path)
    store.put("demo.qpat", RULES, parse(RULES, "demo.qpat", inline=False))
    entry = next(store.folder.glob("*.pickle"))

    class Planted:
        def __reduce__(self):
            return (Path(tmp_path / "ran").write_text, ("planted code ran",))

    entry.write_bytes(pickle.dumps(Planted()))
    entry.chmod(0o666)  # writable by anyone: not read
    assert store.get("demo.qpat", RULES) is None
    assert not (tmp_path / "ran").exists()
    store.folder.chmod(0o777)
    assert default_store_for(store.folder) is None


def default_store_for(folder: Path) -> ParseStore | None:
    old = os.environ.get("QLOWER_CACHE_DIR")
    os.environ["QLOWER_CACHE_DIR"] = str(folder)
    try:
        return default_store()
    finally:
        if old is None:
            del os.environ["QLOWER_CACHE_DIR"]
        else:
            os.environ["QLOWER_CACHE_DIR"] = old


def test_an_empty_setting_turns_the_store_off(monkeypatch) -> None:
    monkeypatch.setenv("QLOWER_CACHE_DIR", "")
    assert default_store() is None


def test_a_damaged_entry_is_a_miss(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.put("demo.qpat", RULES, parse(RULES, "demo.qpat", inline=False))
    next(store.folder.glob("*.pickle")).write_bytes(b"not a pickle")
    assert store.get("demo.qpat", RULES) is None
