"""The TextMate grammar under editors/: it covers the language's keywords and tokenises the samples right."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VSCODE = ROOT / "editors" / "vscode"
GRAMMAR = VSCODE / "syntaxes" / "qpat.tmLanguage.json"
TOOL = "vscode-tmgrammar-test@0.1.3"


def _patterns(node) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k in ("match", "begin", "end")] + [
            p for v in node.values() for p in _patterns(v)]
    if isinstance(node, list):
        return [p for v in node for p in _patterns(v)]
    return []


def test_every_keyword_of_the_lark_grammar_is_coloured():
    lark = (ROOT / "grammars" / "qpat.lark").read_text()
    keywords = set(re.findall(r'"([a-z][a-z_]*)"', lark))
    text = " ".join(_patterns(json.loads(GRAMMAR.read_text())))
    missing = sorted(k for k in keywords if not re.search(rf"[(|]{k}[|)]", text))
    assert missing == []


def test_manifest_wires_the_grammar_and_the_server():
    manifest = json.loads((VSCODE / "package.json").read_text())
    (grammar,) = manifest["contributes"]["grammars"]
    assert (VSCODE / grammar["path"]).is_file() and grammar["scopeName"] == "source.qpat"
    assert manifest["contributes"]["configuration"]["properties"]["qlower.command"]["default"] == ["qlower", "lsp"]


@pytest.fixture(scope="session")
def tmgrammar_test(tmp_path_factory) -> str:
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: the grammar tokeniser test needs vscode-tmgrammar-test from npm")
    where = tmp_path_factory.mktemp("tmgrammar")
    done = subprocess.run([npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(where), TOOL],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        pytest.skip(f"could not install {TOOL} from the npm registry: {done.stderr.strip()[-300:]}")
    return str(where / "node_modules" / ".bin" / "vscode-tmgrammar-test")


def test_samples_tokenise_as_annotated(tmgrammar_test):
    done = subprocess.run([tmgrammar_test, "-g", str(GRAMMAR), str(ROOT / "editors" / "tests" / "*.qpat")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
