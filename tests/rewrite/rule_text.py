"""Shared by the rewrite tests: load rule text through the checker, as a user's file would be."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

from qlower.api import Rules, load_registry, load_rules

_names = itertools.count()


@functools.cache
def registry():
    """The shipped op definitions, loaded once per test session."""
    return load_registry()


def load_text(tmp_path: Path, text: str) -> Rules:
    """Write `text` to a fresh .qpat file and load it (semantic checks included)."""
    p = tmp_path / f"r{next(_names)}.qpat"
    p.write_text(text, encoding="utf-8")
    return load_rules([p], registry=registry(), plugins=False)
