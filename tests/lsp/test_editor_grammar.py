"""The TextMate grammar under editors/: it covers the language's keywords and tokenises the samples and every
shipped pack right, in VS Code's own engine (vscode-textmate on vscode-oniguruma, from the npm registry)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VSCODE = ROOT / "editors" / "vscode"
GRAMMAR = VSCODE / "syntaxes" / "qpat.tmLanguage.json"
TOOLS = ("vscode-tmgrammar-test@0.1.3", "vscode-textmate@7.0.4", "vscode-oniguruma@1.7.0")


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
def node_modules(tmp_path_factory) -> Path:
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        pytest.skip("node/npm are not installed: the tokeniser tests need vscode-textmate from the npm registry")
    where = tmp_path_factory.mktemp("tmgrammar")
    done = subprocess.run([npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(where), *TOOLS],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        pytest.skip(f"could not install {', '.join(TOOLS)} from the npm registry: {done.stderr.strip()[-300:]}")
    return where / "node_modules"


@pytest.fixture(scope="session")
def tmgrammar_test(node_modules) -> str:
    return str(node_modules / ".bin" / "vscode-tmgrammar-test")


def _tokenise(node_modules: Path, files: list[Path]) -> dict[str, list[dict]]:
    done = subprocess.run(["node", str(ROOT / "editors" / "tests" / "tokenize.js"), str(GRAMMAR), *map(str, files)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "NODE_PATH": str(node_modules)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _scopes_at(line: dict, column: int) -> list[str]:
    return next(t[2] for t in line["tokens"] if t[0] <= column < t[1])


def _words(text: str, pattern: str):
    return ((m.start(1), m.group(1)) for m in re.finditer(pattern, text))


def test_samples_tokenise_as_annotated(tmgrammar_test):
    done = subprocess.run([tmgrammar_test, "-g", str(GRAMMAR), str(ROOT / "editors" / "tests" / "*.qpat")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def _alternatives(scope: str) -> set[str]:
    """The words of the grammar rule naming `scope`: its `\\b(a|b|c)\\b`."""
    found = [p for p in _rules(json.loads(GRAMMAR.read_text())) if p.get("name") == scope]
    (rule,) = found
    return set(re.fullmatch(r"\\b\((.*)\)\\b", rule["match"]).group(1).split("|"))


def _rules(node) -> list[dict]:
    if isinstance(node, dict):
        return [node] + [r for v in node.values() for r in _rules(v)]
    if isinstance(node, list):
        return [r for v in node for r in _rules(v)]
    return []


def test_the_grammars_datatypes_and_backends_are_qlowers():
    from qlower.graph.types import DTYPE_ALIASES, DTYPE_NAMES
    from qlower.qnn.backends import BACKENDS

    assert _alternatives("support.type.primitive.qpat") == set(DTYPE_ALIASES) | set(DTYPE_NAMES)
    assert _alternatives("support.constant.backend.qpat") == set(BACKENDS)


def test_every_shipped_file_tokenises_without_running_away(node_modules):
    """Each line of every shipped pack ends back at the top level (no string, bracket or block left open),
    datatypes and backends get their scopes, and attribute names that are keywords are scoped as attributes."""
    files = sorted((ROOT / "patterns").rglob("*.qpat"))
    found = _tokenise(node_modules, files)
    counts = {"dtype": 0, "attr": 0, "backend": 0}
    for f in files:
        lines = f.read_text(encoding="utf-8").split("\n")
        for n, (text, line) in enumerate(zip(lines, found[str(f)], strict=True), 1):
            where = f"{f.relative_to(ROOT)}:{n}"
            assert line["depth"] == 1, where
            for col, word in _words(text, r"\b(" + "|".join(sorted(_alternatives("support.type.primitive.qpat"),
                                                                     key=len, reverse=True)) + r")\b(?!\s*:)"):
                scopes = _scopes_at(line, col)
                if not any(s.startswith(("comment", "string")) for s in scopes):
                    assert "support.type.primitive.qpat" in scopes, (where, word, scopes)
                    counts["dtype"] += 1
            for col, word in _words(text, r"[{,]\s*(dtype|shape|steps|encoding)\s*:(?!:)"):
                scopes = _scopes_at(line, col)
                if not any(s.startswith(("comment", "string")) for s in scopes):
                    assert "variable.parameter.qpat" in scopes, (where, word, scopes)
                    counts["attr"] += 1
            for m in re.finditer(r"\bbackends\(([^)]*)\)", text):
                for b in re.finditer(r"\w+", m.group(1)):
                    assert "support.constant.backend.qpat" in _scopes_at(line, m.start(1) + b.start()), where
                    counts["backend"] += 1
    assert min(counts.values()) > 0, counts


def test_an_unclosed_string_ends_at_its_line(node_modules, tmp_path):
    text = 'rule r {\n  require name == "half typed\n  let s = shape(x)\n  emit y = x\n}\n'
    f = tmp_path / "broken.qpat"
    f.write_text(text)
    lines = _tokenise(node_modules, [f])[str(f)]
    assert "string.quoted.double.qpat" in _scopes_at(lines[1], text.split("\n")[1].index('"'))
    assert all(line["depth"] == 1 for line in lines)
    assert _scopes_at(lines[2], 2)[-1] == "keyword.control.qpat"  # `let`: code again, not string
    assert _scopes_at(lines[4], 0) == ["source.qpat"]
