"""Diagnostics: the one way every layer reports a problem a user caused.

A diagnostic carries a severity, a message, an optional source span (for rule
files) or subject (a graph node, tensor or op), a hint, and notes pointing at
secondary places. Rendering shows ``file:line:col``, the offending line and a
caret, so the same object serves the CLI, the Python API and tests.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs


class Severity(enum.IntEnum):
    NOTE = 0
    WARNING = 1
    ERROR = 2

    def __str__(self) -> str:
        return self.name.lower()


@attrs.frozen
class Span:
    """A region of a source file; lines and columns are 1-based, end is exclusive."""

    file: str
    line: int
    column: int
    end_line: int
    end_column: int

    def __str__(self) -> str:
        return f"{display_path(self.file)}:{self.line}:{self.column}"

    @classmethod
    def point(cls, file: str, line: int, column: int) -> Span:
        return cls(file, line, column, line, column + 1)


def display_path(file: str) -> str:
    """A path as a user wants to read it: relative to the working directory when inside it."""
    import os

    if os.path.isabs(file):
        try:
            rel = os.path.relpath(file)
        except ValueError:
            return file
        if not rel.startswith(".."):
            return rel
    return file


@attrs.frozen
class Note:
    message: str
    span: Span | None = None


@attrs.frozen
class Diagnostic:
    severity: Severity
    message: str
    span: Span | None = None
    subject: str | None = None  # e.g. "node rep.tile" when there is no source span
    hint: str | None = None
    notes: tuple[Note, ...] = attrs.field(default=(), converter=tuple)
    code: str | None = None  # stable machine-readable kind, e.g. "unknown-param"

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    def render(self, sources: SourceCache | None = None) -> str:
        """Human-readable text: location, message, caret excerpt, hint, notes."""
        where = f"{self.span}: " if self.span else (f"{self.subject}: " if self.subject else "")
        lines = [f"{where}{self.severity}: {self.message}"]
        if self.span is not None:
            lines.extend(_excerpt(self.span, sources))
        if self.hint:
            lines.append(f"  = hint: {self.hint}")
        for note in self.notes:
            at = f"{note.span}: " if note.span else ""
            lines.append(f"  = note: {at}{note.message}")
            if note.span is not None:
                lines.extend(_excerpt(note.span, sources))
        return "\n".join(lines)

    def __str__(self) -> str:
        where = f"{self.span}: " if self.span else (f"{self.subject}: " if self.subject else "")
        return f"{where}{self.severity}: {self.message}"


class SourceCache:
    """Holds the text of source files so excerpts need no second read."""

    def __init__(self) -> None:
        self._texts: dict[str, list[str]] = {}

    def add(self, file: str, text: str) -> None:
        self._texts[file] = text.splitlines()

    def line(self, file: str, line: int) -> str | None:
        lines = self._texts.get(file)
        if lines is None:
            try:
                lines = Path(file).read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                return None
            self._texts[file] = lines
        if 1 <= line <= len(lines):
            return lines[line - 1]
        return None


def _excerpt(span: Span, sources: SourceCache | None) -> list[str]:
    text = (sources or SourceCache()).line(span.file, span.line)
    if text is None:
        return []
    width = len(str(span.line))
    gutter = " " * width
    end = span.end_column if span.end_line == span.line else len(text) + 1
    carets = "^" * max(1, end - span.column)
    return [
        f"{gutter} |",
        f"{span.line} | {text}",
        f"{gutter} | {' ' * (span.column - 1)}{carets}",
    ]


def render_all(diagnostics: Iterable[Diagnostic], sources: SourceCache | None = None) -> str:
    return "\n".join(d.render(sources) for d in diagnostics)


class QlowerError(Exception):
    """Raised for failures a user caused; carries structured diagnostics.

    The CLI prints them and exits 1; library callers inspect ``diagnostics``.
    """

    def __init__(self, diagnostics: Diagnostic | Sequence[Diagnostic] | str) -> None:
        if isinstance(diagnostics, str):
            diagnostics = [Diagnostic(Severity.ERROR, diagnostics)]
        elif isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics: tuple[Diagnostic, ...] = tuple(diagnostics)
        super().__init__("\n".join(str(d) for d in self.diagnostics))

    def render(self, sources: SourceCache | None = None) -> str:
        return render_all(self.diagnostics, sources)


def error(message: str, *, span: Span | None = None, subject: str | None = None,
          hint: str | None = None, code: str | None = None, notes: Iterable[Note] = ()) -> Diagnostic:
    return Diagnostic(Severity.ERROR, message, span=span, subject=subject, hint=hint, code=code, notes=tuple(notes))


def warning(message: str, *, span: Span | None = None, subject: str | None = None,
            hint: str | None = None, code: str | None = None, notes: Iterable[Note] = ()) -> Diagnostic:
    return Diagnostic(Severity.WARNING, message, span=span, subject=subject, hint=hint, code=code, notes=tuple(notes))


def _edit_distance(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def typo_of(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate `name` is most likely a misspelling of, or None.

    Stricter than `did_you_mean`: a real name that is merely similar to a declared one
    (`aten.conv2d` and `aten.clone`, `ReduceLogSum` and `ReduceLogSumExp`) is not a typo. A typo
    differs in case only, or by at most two edits (one for short names) at nearly the same length.
    """
    best = None
    for c in candidates:
        if c.lower() == name.lower():
            return c
        if abs(len(c) - len(name)) > 1:
            continue
        d = _edit_distance(name.lower(), c.lower())
        limit = 1 if len(name.split(".")[-1]) <= 8 else 2
        if d <= limit and (best is None or d < best[0]):
            best = (d, c)
    return best[1] if best else None


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    """A hint naming the closest candidate, or None when nothing is close."""
    import difflib

    pool = list(candidates)
    same = [c for c in pool if c.lower() == name.lower() and c != name]
    if same:  # only the case differs: that is the one meant, however close another spelling is
        return f"did you mean `{same[0]}`?"
    close = difflib.get_close_matches(name, pool, n=1, cutoff=0.6)
    if not close:
        lowered = {c.lower(): c for c in pool}
        close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
        close = [lowered[c] for c in close]
    return f"did you mean `{close[0]}`?" if close else None
