"""Parsed rule files kept on disk between runs.

Parsing is most of loading a pack (the onnx pack's 23 files take seconds; reading them back parsed
takes a fifth of that), and every CLI command and every editor session loads the packs again. An
entry is keyed by the file's path and text and by the parser itself (a digest of the grammar and of
the modules that build the syntax tree), so an edited file or another qlower misses and is parsed.

Entries are pickles, and a pickle can run code when read: they are read only from a folder the
current user owns and no one else can write to (as Python trusts its own `__pycache__`), and only
entry files that user owns. The folder is the `parsed` cache folder of `qlower._cache` (`QLOWER_CACHE_DIR=`,
empty, turns the store off). An entry is written
under a temporary name and renamed into place, so it is complete or absent; a store that cannot be
read or written is skipped silently (it only saves time).
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
from pathlib import Path

import attrs

from qlower import _resources
from qlower._cache import open_store, private, write_entry
from qlower.lang import ast

_MAX_ENTRIES = 4000  # about 100 KB each; past this the older half is removed
_PARSER_MODULES = ("ast.py", "builder.py", "parser.py", "grammar.py", "parse_store.py")


@functools.cache
def parser_fingerprint() -> str:
    """A digest of everything that decides what a text parses to (the grammar, the tree builder)."""
    h = hashlib.sha256(_resources.data_dir("grammars").joinpath("qpat.lark").read_bytes())
    here = Path(__file__).parent
    for name in _PARSER_MODULES:
        h.update(here.joinpath(name).read_bytes())
    return h.hexdigest()


@attrs.frozen
class ParseStore:
    """Parsed modules (`parse(text, file, inline=False)`) by file, text and parser."""

    folder: Path
    fingerprint: str

    def _entry(self, file: str, text: str) -> Path:
        h = hashlib.sha256(self.fingerprint.encode())
        for part in (file, text):
            h.update(b"\0" + part.encode("utf-8", "surrogatepass"))
        return self.folder / f"{h.hexdigest()}.pickle"

    def get(self, file: str, text: str) -> ast.Module | None:
        entry = self._entry(file, text)
        if not private(entry):
            return None
        try:
            found = pickle.loads(entry.read_bytes())  # noqa: S301 - our own entry in a private folder
        except Exception:  # noqa: BLE001 - a damaged entry is a miss
            return None
        return found if isinstance(found, ast.Module) and found.file == file else None

    def put(self, file: str, text: str, module: ast.Module) -> None:
        try:
            data = pickle.dumps(module, protocol=pickle.HIGHEST_PROTOCOL)
            write_entry(self.folder, self._entry(file, text).name, data, keep=_MAX_ENTRIES, pattern="*.pickle")
        except (OSError, pickle.PicklingError, RecursionError, TypeError):
            return


def default_store() -> ParseStore | None:
    """The user's store, created private if absent; None when turned off or not private."""
    return open_store("parsed", lambda folder: ParseStore(folder, parser_fingerprint()))
