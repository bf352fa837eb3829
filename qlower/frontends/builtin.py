"""The frontends qlower ships; each imports lazily so optional extras stay optional."""

from __future__ import annotations

from pathlib import Path

from qlower.plugins import Frontend


def _json(path: Path):
    from qlower.graph.io import load_graph

    return load_graph(path)


def builtin_frontends() -> tuple[Frontend, ...]:
    return (Frontend("json", (".json",), _json),)
