"""The diagnostics of each file the language server checked, kept between editor sessions.

An editor shows nothing until the server's first check: starting Python, the op registry, and
parsing and checking every file of the pack take seconds. What a check finds depends only on the
texts it read, on the folders it listed and on qlower itself (its code and data, the installed
plugins), so after checking a file it opened or saved, the server keeps that file's diagnostics here
with a digest of each of those inputs. When a later session opens the file with the same text and
every input is unchanged, the kept diagnostics are published at once; the real check follows and its
answer replaces them. An input that changed, a plugin installed or removed, another qlower: the
entry misses and the file waits for its check, so a kept answer never stands in for a different one.

Entries are JSON, not code, in the `diagnostics` cache folder of `qlower._cache` (private to the
user; `QLOWER_CACHE_DIR=`, empty, turns it off). An entry is complete or absent (written under a
temporary name and renamed); a damaged one is a miss.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from qlower import __version__
from qlower._cache import open_store, private, write_entry
from qlower.diagnostics import Diagnostic, Note, Severity, Span

_FORMAT = "qlower-lsp-diagnostics/1"
_MAX_ENTRIES = 2000


@functools.cache
def environment_fingerprint() -> str:
    """A digest of everything besides rule files that decides a check's findings: the Python and qlower
    running (every file of the package and its grammar, by size and modification time) and the installed
    plugins (by entry point and distribution version)."""
    from importlib import metadata

    from qlower import _resources

    h = hashlib.sha256(f"{_FORMAT}\0{sys.version}\0{__version__}".encode())
    for root in (Path(__file__).resolve().parents[1], _resources.data_dir("grammars")):
        for folder, dirs, files in sorted(os.walk(root)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                st = os.stat(os.path.join(folder, name))
                h.update(f"\0{os.path.relpath(os.path.join(folder, name), root)}:{st.st_size}:{st.st_mtime_ns}".encode())
    for ep in sorted(metadata.entry_points(group="qlower.plugins"), key=lambda e: (e.name, e.value)):
        dist = ep.dist
        h.update(f"\0plugin {ep.name}={ep.value} {dist.name if dist else ''} {dist.version if dist else ''}".encode())
    return h.hexdigest()


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _listing(folder: Path) -> str:
    """The rule files a folder holds (a file added to a pack changes what checking the pack finds)."""
    try:
        return "\n".join(sorted(e.name for e in os.scandir(folder) if e.name.endswith(".qpat")))
    except OSError:
        return "\0unreadable"


def _disk_digest(path: Path) -> str | None:
    try:
        return _digest(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None


class DiagnosticsStore:
    """Kept diagnostics by file, text and environment."""

    def __init__(self, folder: Path, fingerprint: str) -> None:
        self.folder = folder
        self.fingerprint = fingerprint

    def _entry(self, path: Path, text: str) -> Path:
        h = hashlib.sha256(self.fingerprint.encode())
        h.update(b"\0" + str(path).encode("utf-8", "surrogatepass") + b"\0" + _digest(text).encode())
        return self.folder / f"{h.hexdigest()}.json"

    def get(self, path: Path, text: str) -> list[Diagnostic] | None:
        """The kept diagnostics of `path` with this text, if every input of that check is unchanged."""
        entry = self._entry(path, text)
        if not private(entry):
            return None
        try:
            data = json.loads(entry.read_text(encoding="utf-8"))
            if data.get("format") != _FORMAT or data.get("file") != str(path):
                return None
            for dep, digest in data["files"].items():
                if _disk_digest(Path(dep)) != digest:
                    return None
            for folder, listing in data["folders"].items():
                if _listing(Path(folder)) != listing:
                    return None
            return [_diagnostic(d) for d in data["diagnostics"]]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None  # damaged or from another layout: a miss

    def put(self, path: Path, text: str, diagnostics: Sequence[Diagnostic], read: Mapping[Path, str]) -> None:
        """Keep `path`'s diagnostics; `read` is every other file its check read, with the text it read."""
        files = {str(p): _digest(t) for p, t in read.items() if p != path}
        folders = {str(f): _listing(f) for f in sorted({p.parent for p in (path, *read)})}
        data = {"format": _FORMAT, "file": str(path), "files": files, "folders": folders,
                "diagnostics": [_record(d) for d in diagnostics]}
        try:
            write_entry(self.folder, self._entry(path, text).name, json.dumps(data).encode("utf-8"),
                        keep=_MAX_ENTRIES, pattern="*.json")
        except (OSError, TypeError, ValueError):
            return  # the store only saves time


def default_store() -> DiagnosticsStore | None:
    """The user's store, created private if absent; None when turned off or not private."""
    return open_store("diagnostics", lambda folder: DiagnosticsStore(folder, environment_fingerprint()))


def texts_read(paths: Iterable[Path], buffers: Mapping[Path, str]) -> dict[Path, str]:
    """The text a check read of each file: the open buffer, else the file on disk (unreadable files left out,
    so an entry that depends on them never matches)."""
    out = {}
    for p in paths:
        if p in buffers:
            out[p] = buffers[p]
        else:
            try:
                out[p] = p.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                out[p] = "\0unreadable"
    return out


def _span(s: Span | None) -> list | None:
    return None if s is None else [s.file, s.line, s.column, s.end_line, s.end_column]


def _unspan(s: list | None) -> Span | None:
    return None if s is None else Span(str(s[0]), int(s[1]), int(s[2]), int(s[3]), int(s[4]))


def _record(d: Diagnostic) -> dict:
    return {"severity": d.severity.name, "message": d.message, "span": _span(d.span), "subject": d.subject,
            "hint": d.hint, "code": d.code, "notes": [[n.message, _span(n.span)] for n in d.notes]}


def _diagnostic(r: dict) -> Diagnostic:
    return Diagnostic(Severity[r["severity"]], str(r["message"]), _unspan(r["span"]), r["subject"], r["hint"],
                      tuple(Note(str(m), _unspan(s)) for m, s in r["notes"]), r["code"])
