"""The VS Code extension packages with vsce, as its README says, without a warning, holding what it should."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

EXTENSION = Path(__file__).resolve().parents[2] / "editors" / "vscode"


def test_the_extension_packages_without_warnings(tmp_path):
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("node/npm are not installed: packaging the extension needs vsce from the npm registry")
    work = tmp_path / "vscode"
    shutil.copytree(EXTENSION, work, ignore=shutil.ignore_patterns("node_modules", "dist", "*.vsix"))  # links followed
    done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--silent"], cwd=work, capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        pytest.skip(f"could not install the extension's packages from the npm registry: {done.stderr.strip()[-300:]}")
    done = subprocess.run([npm, "run", "--silent", "package", "--", "-o", str(tmp_path / "qpat.vsix")], cwd=work,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "WARNING" not in out and "ERROR" not in out, out
    names = set(zipfile.ZipFile(tmp_path / "qpat.vsix").namelist())
    assert {"extension/package.json", "extension/dist/extension.js", "extension/syntaxes/qpat.tmLanguage.json",
            "extension/language-configuration.json", "extension/readme.md"} <= {n.lower() if n.endswith(".md") else n
                                                                               for n in names}, names
    assert any(n.lower().startswith("extension/license") for n in names), names
    assert not any("node_modules" in n or n.endswith(".vsix") for n in names), names
