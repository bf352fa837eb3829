"""An installed qlower carries all its code and data (the package list in pyproject.toml is explicit)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_is_listed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "qlower").rglob("__init__.py")}
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"
    assert config["package-dir"] == {"qlower._data.grammars": "grammars", "qlower._data.patterns": "patterns"}
    packs = {f"qlower._data.patterns.{p.name}" for p in (ROOT / "patterns").iterdir() if p.is_dir()}
    assert packs <= listed, f"add the rule packs to [tool.setuptools] packages: {sorted(packs - listed)}"
    assert all(config["package-data"].get(p) == ["*.qpat"] for p in packs)
