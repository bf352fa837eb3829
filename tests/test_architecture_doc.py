"""docs/architecture.md stays true: what it names exists, and what exists is named.

* Every backticked repository path (`qlower/rewrite/driver.py`, `patterns/onnx/`) exists; a path with a
  `<placeholder>` segment needs the folder before it.
* Every backticked dotted name under qlower (`qlower.rewrite.driver`, `qlower.api.lower`) is a module,
  or a module and attributes of it.
* In each table with a `module` column, every name in its `class` column is a class of that module and
  every name in its `function` column (`Engine.run` included) is callable from it; every class named in
  a stage table's `in → out` column is one a `class` column names (so it has been checked there).
* `Class.member` for a class of those tables is a member of it (`LowerResult.table`, `Engine.run`).
* Every folder under `qlower/` and every public top-level module (`qlower/api.py`, `qlower/__init__.py`;
  the private `_name.py` helpers are left out) is named itself, as a path or a dotted name: adding a
  package without documenting it fails here.
* The layer list under "## Layers" is the one `tests/test_architecture.py` enforces.

The checks are functions of the document's text, so the tests at the bottom can show each one failing.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
TOP = frozenset(p.name for p in ROOT.iterdir() if not p.name.startswith("."))

_FENCE = re.compile(r"^```.*?^```[ \t]*$", re.S | re.M)
_CODE = re.compile(r"`([^`\n]+)`")
_DOTTED = re.compile(r"qlower(\.[A-Za-z_]\w*)*")
_CLASS = re.compile(r"[A-Z][A-Za-z0-9]*")
_MEMBER = re.compile(r"([A-Z][A-Za-z0-9]*)\.([A-Za-z_]\w*)(\[[^\]]*\]|\([^)]*\))*")


def spans(text: str) -> list[str]:
    """The inline code spans of `text`, outside fenced blocks."""
    return _CODE.findall(_FENCE.sub("", text))


def is_path(tok: str) -> bool:
    if "/" not in tok or any(c.isspace() for c in tok):
        return False
    first, last = tok.split("/")[0], tok.rstrip("/").split("/")[-1]
    return first in TOP or tok.endswith("/") or re.search(r"\.[A-Za-z]\w*$", last) is not None


def path_problem(tok: str) -> str | None:
    parts = tok.rstrip("/").split("/")
    if any("<" in p for p in parts):  # `qlower/qnn/opdefs/<name>.xml`: the folder must exist
        parts = parts[:next(i for i, p in enumerate(parts) if "<" in p)]
        return None if (ROOT.joinpath(*parts)).is_dir() else f"no folder {'/'.join(parts)}/ (in `{tok}`)"
    if "*" in tok:
        return None if list(ROOT.glob(tok)) else f"nothing matches `{tok}`"
    p = ROOT.joinpath(*parts)
    if tok.endswith("/"):
        return None if p.is_dir() else f"no folder `{tok}`"
    return None if p.exists() else f"no file `{tok}`"


def _module_prefix(parts: list[str]) -> int:
    """How many leading parts of a dotted name name a module of the checkout (0: none)."""
    for i in range(len(parts), 0, -1):
        rel = ROOT.joinpath(*parts[:i])
        if rel.with_suffix(".py").is_file() or (rel / "__init__.py").is_file():
            return i
    return 0


def resolve(dotted: str) -> tuple[object | None, str | None]:
    """(the object `dotted` names, None) or (None, why not); a bare module is found without importing it."""
    parts = dotted.split(".")
    n = _module_prefix(parts)
    if n == 0:
        return None, f"no module `{dotted}`"
    mod_name, rest = ".".join(parts[:n]), parts[n:]
    if not rest:
        return mod_name, None
    obj: object = importlib.import_module(mod_name)
    for i, attr in enumerate(rest):
        if not hasattr(obj, attr):
            return None, f"`{dotted}`: {'.'.join(parts[:n + i])} has no {attr}"
        obj = getattr(obj, attr)
    return obj, None


def tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Markdown tables as (header cells, rows of cells), header names lower-cased."""
    out = []
    block: list[str] = []
    for line in [*_FENCE.sub("", text).splitlines(), ""]:
        if line.startswith("|"):
            block.append(line)
            continue
        if len(block) >= 2:
            cells = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in block]
            out.append(([c.lower() for c in cells[0]], cells[2:]))
        block = []
    return out


def table_classes(text: str) -> tuple[dict[str, object], list[str]]:
    """The classes the tables' `class` columns name, by name, and the problems with every table row."""
    classes: dict[str, object] = {}
    problems: list[str] = []
    for header, rows in tables(text):
        if "module" not in header:
            continue
        col = header.index("module")
        for row in rows:
            mods = _CODE.findall(row[col]) if col < len(row) else []
            if len(mods) != 1:
                problems.append(f"table row {row}: its module cell names {len(mods)} modules, not one")
                continue
            (mod,) = mods
            got, why = resolve(mod)
            if why is not None or not isinstance(got, str):
                problems.append(why or f"`{mod}` is not a module")
                continue
            for name, cell in zip(header, row):
                if name not in ("class", "function"):
                    continue
                for tok in _CODE.findall(cell):
                    obj, why = resolve(f"{mod}.{tok}")
                    if why is not None:
                        problems.append(why)
                    elif name == "class" and not isinstance(obj, type):
                        problems.append(f"`{tok}` of `{mod}` is not a class")
                    elif name == "function" and not callable(obj):
                        problems.append(f"`{tok}` of `{mod}` is not callable")
                    elif name == "class":
                        classes[tok] = obj
    for header, rows in tables(text):
        for name, col in ((h, i) for i, h in enumerate(header) if "→" in h):
            for row in rows:
                for tok in _CODE.findall(row[col]) if col < len(row) else []:
                    if _CLASS.fullmatch(tok) and tok not in classes:
                        problems.append(f"`{tok}` (column {name}) is in no table's class column")
    return classes, problems


def problems(text: str) -> list[str]:
    """Everything the document names that does not exist."""
    classes, found = table_classes(text)
    for tok in spans(text):
        if is_path(tok):
            why = path_problem(tok)
        elif _DOTTED.fullmatch(tok):
            why = resolve(tok)[1]
        elif (m := _MEMBER.fullmatch(tok)) and m.group(1) in classes:
            why = None if hasattr(classes[m.group(1)], m.group(2)) else f"`{tok}`: {m.group(1)} has no {m.group(2)}"
        else:
            why = None
        if why is not None:
            found.append(why)
    return sorted(set(found))


def named(text: str) -> set[str]:
    """The repository paths the document names itself (`qlower.x.y` as `qlower/x/y`), without trailing '/'."""
    out = set()
    for tok in spans(text):
        if is_path(tok):
            out.add(tok.rstrip("/"))
        elif _DOTTED.fullmatch(tok):
            parts = tok.split(".")
            n = _module_prefix(parts)
            if n:
                rel = "/".join(parts[:n])
                out.add(rel if (ROOT / rel).is_dir() else rel + ".py")
    return out


def undocumented(text: str, root: Path = ROOT / "qlower") -> list[str]:
    """Folders under qlower/ and public top-level modules the document does not name."""
    want = [p for p in root.rglob("*") if p.is_dir() and "__pycache__" not in p.parts
            and not any(part.startswith(("_", ".")) for part in p.relative_to(root).parts)]
    want += [p for p in root.glob("*.py") if p.name == "__init__.py" or not p.name.startswith("_")]
    have = named(text)
    return sorted(str(p.relative_to(ROOT)) for p in want if str(p.relative_to(ROOT)) not in have)


def contract_layers() -> list[set[str]]:
    """LAYERS of tests/test_architecture.py, read from its source (bottom first)."""
    tree = ast.parse((ROOT / "tests" / "test_architecture.py").read_text(encoding="utf-8"))
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(target, ast.Name) and target.id == "LAYERS":
            return [set(c.value.split()) for c in ast.walk(node.value)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)]
    raise AssertionError("tests/test_architecture.py has no LAYERS")


def doc_layers(text: str) -> list[set[str]]:
    """The numbered layer list in the first fenced block under '## Layers' (bottom first)."""
    section = text.split("\n## Layers", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"^```[^\n]*\n(.*?)^```", section, re.S | re.M)
    assert block is not None, "no fenced layer list under ## Layers"
    rows = {int(m.group(1)): set(m.group(2).split())
            for m in re.finditer(r"^\s*(\d+)\s+(\S.*)$", block.group(1), re.M)}
    return [rows.get(i, set()) for i in range(1, max(rows, default=0) + 1)]


# ------------------------------------------------------------------ the document

def _doc() -> str:
    return DOC.read_text(encoding="utf-8")


def test_everything_the_doc_names_exists():
    assert problems(_doc()) == []


def test_every_package_and_public_module_is_documented():
    missing = undocumented(_doc())
    assert missing == [], f"name these in docs/architecture.md (the tree table): {missing}"


def test_the_layers_are_the_import_contract():
    assert doc_layers(_doc()) == contract_layers()


def test_the_tables_are_checked():
    """The stage and data tables are found, so the checks above are not vacuous."""
    classes, _ = table_classes(_doc())
    assert {"Graph", "RuleSet", "Rules", "LowerResult", "QnnTable", "QnnGraph", "Engine", "RewriteConfig",
            "Budget", "OpDefRegistry", "QnnOps"} <= set(classes)
    headers = [h for h, _ in tables(_doc())]
    assert any("function" in h and any("→" in c for c in h) for h in headers)


# ------------------------------------------------------------------ the checks can fail

def test_a_missing_file_folder_or_module_is_caught():
    text = ("`qlower/rewrite/nonexistent.py`, `patterns/klingon/`, `qlower.rewrite.nonexistent`, "
            "`qlower.rewrite.driver.NoSuchThing`, `qlower/qnn/nowhere/<name>.xml`, `qlower/graph/*.nope`")
    assert len(problems(text)) == 6
    assert problems("`qlower/rewrite/driver.py`, `patterns/onnx/`, `qlower.rewrite.driver.Engine`, "
                    "`qlower-graph/1`, `qlower/qnn/opdefs/<name>.xml`") == []


def test_a_wrong_table_row_is_caught():
    good = ("| module | class | what |\n|---|---|---|\n| `qlower.api` | `LowerResult` | x |\n\n"
            "| stage | module | function | in → out |\n|---|---|---|---|\n"
            "| lower | `qlower.api` | `lower` | `Graph` → `LowerResult` |\n\n`LowerResult.table`\n")
    assert problems(good) == ["`Graph` (column in → out) is in no table's class column"]
    assert problems(good.replace("`LowerResult` | x", "`NoSuchClass` | x"))
    assert problems(good.replace("`lower` |", "`lower_nowhere` |"))
    assert problems(good.replace("`qlower.api` | `LowerResult`", "`qlower.apx` | `LowerResult`"))
    assert problems(good.replace("`LowerResult.table`", "`LowerResult.tabel`"))
    assert problems(good.replace("`LowerResult` | x", "`lower` | x"))  # a function in a class column


def test_an_undocumented_package_is_caught(tmp_path):
    assert "qlower/graph" in undocumented(_doc().replace("`qlower/graph/`", "the graph package"))
    assert "qlower/api.py" in undocumented(_doc().replace("`qlower/api.py`", "the API").replace("`qlower.api`", "x"))


def test_a_wrong_layer_list_is_caught():
    swapped = _doc().replace(" 4  qnn\n", " 4  lang reference\n").replace(" 5  lang reference\n", " 5  qnn\n")
    assert swapped != _doc()
    assert doc_layers(swapped) != contract_layers()
