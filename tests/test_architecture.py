"""The import contract: qlower's packages import downward only, and no module imports itself back.

Every import counts, including those inside functions (a function-level import hides a cycle
from Python's import machinery, not from the reader) and those by name
(`importlib.import_module("qlower.x")`, `__import__("qlower.x")`), which hide it from this scan too. The layers, bottom to top:

    diagnostics, _resources < _files < graph < qnn < lang, reference < rewrite
        < verify, frontends < plugins, report < quantize < api < qlower (the facade) < lsp < cli

`reference` (each op's numpy semantics) sits beside `lang`, below `rewrite`, whose constant-folding
functions use it. One module is an entry point rather than part of its package: pytest loads
`qlower.verify.pytest_plugin` itself, and like the CLI it builds rule sets through the API.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

import qlower

ROOT = Path(qlower.__file__).resolve().parent

LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(layer.split()) for layer in (
    "diagnostics _resources _cache _frozen _gc",
    "_files",
    "graph",
    "qnn",
    "lang reference",
    "rewrite",
    "verify frontends",
    "plugins report",
    "quantize",
    "api",
    "qlower",
    "lsp",
    "cli verify.pytest_plugin",
))
ENTRY_POINTS = ("verify.pytest_plugin",)  # units of their own, named by module


def _modules(root: Path) -> dict[str, tuple[Path, bool]]:
    out = {}
    for p in sorted(root.rglob("*.py")):
        parts = ["qlower", *p.relative_to(root).with_suffix("").parts]
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        out[".".join(parts)] = (p, is_pkg)
    return out


def imports_of(source: str, module: str, is_pkg: bool, known: set[str]) -> set[str]:
    """The qlower modules `source` imports anywhere in it (functions included).

    `from pkg import sub` names the submodule `pkg.sub` when `sub` is one; relative imports resolve
    against `module`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and _imports_by_name(node):
            found.add(node.args[0].value)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known]
            found.update(subs if len(subs) == len(node.names) else [target, *subs])
    return {m for m in found if m == "qlower" or m.startswith("qlower.")}


def _imports_by_name(call: ast.Call) -> bool:
    """`importlib.import_module("qlower.x")`, `import_module(...)` or `__import__(...)` with a literal name."""
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    return (name in ("import_module", "__import__") and bool(call.args) and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str))


def unit_of(module: str) -> str:
    rest = module.removeprefix("qlower").removeprefix(".")
    for entry in ENTRY_POINTS:
        if rest == entry:
            return entry
    return rest.split(".")[0] if rest else "qlower"


def module_graph(root: Path = ROOT) -> nx.DiGraph:
    mods = _modules(root)
    known = set(mods)
    g = nx.DiGraph()
    for name, (path, is_pkg) in mods.items():
        g.add_node(name)
        for target in imports_of(path.read_text(encoding="utf-8"), name, is_pkg, known):
            # `import qlower.x.y` also runs qlower/__init__.py; the edge that matters is to the module named
            if target != name and target in known:
                g.add_edge(name, target)
    return g


def _layer(unit: str) -> int:
    for i, layer in enumerate(LAYERS):
        if unit in layer:
            return i
    raise AssertionError(f"{unit} is in no layer: add it to LAYERS in tests/test_architecture.py")


def test_scanner_sees_function_level_and_relative_imports():
    src = ("import os\nfrom qlower.graph import core\nfrom . import sibling\n"
           "def f():\n    from qlower.rewrite.match import Matcher\n    import qlower.cli.main\n")
    known = {"qlower.graph.core", "qlower.lang.sibling", "qlower.rewrite.match", "qlower.cli.main"}
    assert imports_of(src, "qlower.lang.x", False, known) == {
        "qlower.graph.core", "qlower.lang.sibling", "qlower.rewrite.match", "qlower.cli.main"}


def test_scanner_sees_imports_by_name():
    src = ("import importlib\nfrom importlib import import_module\n"
           "def f():\n    return importlib.import_module('qlower.api')\n"
           "def g():\n    return import_module('qlower.cli.main'), __import__('qlower.verify.debug')\n"
           "def h(name):\n    return importlib.import_module(name), importlib.import_module('numpy')\n")
    assert imports_of(src, "qlower.qnn.x", False, set()) == {"qlower.api", "qlower.cli.main", "qlower.verify.debug"}


def test_an_upward_import_by_name_is_caught(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "graph").mkdir(parents=True)
    (pkg / "cli").mkdir()
    for p in (pkg / "__init__.py", pkg / "graph" / "__init__.py", pkg / "cli" / "__init__.py", pkg / "cli" / "main.py"):
        p.write_text("")
    (pkg / "graph" / "core.py").write_text("import importlib\ndef f():\n    importlib.import_module('qlower.cli.main')\n")
    assert module_graph(pkg).has_edge("qlower.graph.core", "qlower.cli.main")


def test_the_scan_covers_the_package():
    g = module_graph()
    units = {unit_of(m) for m in g}
    assert {"graph", "lang", "qnn", "rewrite", "reference", "verify", "frontends", "report", "lsp", "cli", "api",
            "plugins", "diagnostics", "_files", "_resources"} <= units
    assert g.has_edge("qlower.rewrite.match", "qlower.lang.functions")  # a known downward import is seen


def test_every_unit_has_a_layer():
    for unit in {unit_of(m) for m in module_graph()}:
        _layer(unit)


def test_packages_import_downward_only():
    g = module_graph()
    upward = sorted(f"{a} ({unit_of(a)}) imports {b} ({unit_of(b)})" for a, b in g.edges
                    if unit_of(a) != unit_of(b) and _layer(unit_of(a)) <= _layer(unit_of(b)))
    assert not upward, "imports that are not downward:\n" + "\n".join(upward)


def test_no_import_cycles():
    g = module_graph()
    cycles = [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize("where", ["module", "function"])
def test_a_cycle_is_caught(tmp_path, where):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from qlower.b import x\n")
    body = "from qlower.a import y\n" if where == "module" else "def f():\n    from qlower import a\n"
    (pkg / "b.py").write_text(body)
    g = module_graph(pkg)
    assert [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1] == [["qlower.a", "qlower.b"]]
