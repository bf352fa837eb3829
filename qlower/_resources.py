"""Where shipped data lives, both in a source checkout and in an installed wheel."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def data_dir(kind: str) -> Path:
    """`grammars` or `patterns`: inside the package when installed, at the repo top otherwise."""
    installed = _PKG / "_data" / kind
    if installed.is_dir():
        return installed
    return _PKG.parent / kind
