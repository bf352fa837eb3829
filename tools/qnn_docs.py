"""Read the QNN SDK's OpDef HTML documentation (MasterOpDef.html, <Backend>OpDefSupplement.html).

The pages are Sphinx output: one ``div.section`` per op whose ``h2`` is the op name; the master
page lists Inputs/Parameters/Outputs as ``h4`` sections with bullet lists (Mandatory, Data type,
Shape, Default, Constraints), a supplement has Datatypes, Constraints and Support tables with a
Configuration column. This module turns them into plain data so tools can compare qlower's
definitions with the documentation; it needs only the standard library.
"""

from __future__ import annotations

import hashlib
import html
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import attrs

from qlower.qnn.backends import BACKENDS

# the SDK's page per backend: CpuOpDefSupplement.html, HtpOpDefSupplement.html, ...
BACKEND_PAGES = {b: f"{b.capitalize()}OpDefSupplement.html" for b in BACKENDS}
MASTER_PAGE = "MasterOpDef.html"
_VOID = {"br", "col", "img", "hr", "meta", "link", "input", "wbr", "source", "area", "base"}


@attrs.define
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Any] = attrs.field(factory=list)  # Node or str

    def text(self) -> str:
        parts = [c if isinstance(c, str) else c.text() for c in self.children]
        return "".join(parts)

    def find_all(self, tag: str, recursive: bool = True) -> list[Node]:
        out = []
        for c in self.children:
            if isinstance(c, Node):
                if c.tag == tag:
                    out.append(c)
                if recursive:
                    out.extend(c.find_all(tag))
        return out

    def first(self, tag: str) -> Node | None:
        found = self.find_all(tag)
        return found[0] if found else None

    def kids(self, tag: str | None = None) -> list[Node]:
        return [c for c in self.children if isinstance(c, Node) and (tag is None or c.tag == tag)]


class _Tree(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs_: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs_})
        self.stack[-1].children.append(node)
        if tag not in _VOID:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse_html(text: str) -> Node:
    tree = _Tree()
    tree.feed(text)
    tree.close()
    return tree.root


def clean(text: str) -> str:
    """Collapse whitespace, drop the Sphinx permalink mark."""
    return re.sub(r"\s+", " ", html.unescape(text).replace("\u00b6", "")).strip()


def digest(text: str) -> str:
    """A short fingerprint of a constraint's text (whitespace- and case-insensitive)."""
    norm = re.sub(r"\s+", " ", text.replace("\u2026", "...")).strip().lower()
    return hashlib.sha1(norm.encode("utf-8")).hexdigest()[:10]


def _sections(root: Node, level: str) -> list[tuple[str, Node]]:
    out = []
    for div in root.find_all("div"):
        if "section" in div.attrs.get("class", "").split():
            h = div.kids(level)
            if h:
                out.append((clean(h[0].text()), div))
    return out


def _table(table: Node) -> tuple[list[str], list[list[Node]]]:
    head = [clean(th.text()) for th in table.find_all("th")]
    rows = [tr.kids("td") for tbody in table.find_all("tbody") for tr in tbody.kids("tr")]
    return head, rows


def _bullets(cell: Node) -> list[str]:
    items = cell.find_all("li")
    if items:
        return [clean(li.text()) for li in items if not li.find_all("li")]
    text = clean(cell.text())
    return [text] if text else []


@attrs.frozen
class DocConstraint:
    """One bullet of a Constraints (or Support) table or of a master entry's Constraints list."""

    backend: str  # "master" or a backend
    op: str
    config: str
    target: str  # in[0], out[0], a param name, or "" (op-level Support bullet)
    text: str
    kind: str = "constraint"  # constraint or support
    row: int = 0  # row of the table it is in (a few tables list one configuration in two rows)

    @property
    def digest(self) -> str:
        return digest(self.text)


def read_supplement(path: Path, backend: str) -> dict[str, dict[str, Any]]:
    """Per op: datatype table (header, rows), constraint and support bullets."""
    root = parse_html(path.read_text(encoding="utf-8"))
    ops: dict[str, dict[str, Any]] = {}
    for name, div in _sections(root, "h2"):
        if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", name):
            continue
        info = ops.setdefault(name, {"datatypes": [], "constraints": [], "support": []})
        for title, sub in _sections(div, "h3"):
            for table in sub.find_all("table"):
                head, rows = _table(table)
                if title == "Datatypes":
                    for r in rows:
                        cells = [clean(c.text()) for c in r]
                        info["datatypes"].append(dict(zip(head, cells)))
                elif title in ("Constraints", "Support"):
                    for n, r in enumerate(rows):
                        if not r:
                            continue
                        config = clean(r[0].text())
                        for col, cell in zip(head[1:], r[1:]):
                            for b in _bullets(cell):
                                kind = "constraint" if title == "Constraints" else "support"
                                info[title.lower()].append(DocConstraint(backend, name, config, col, b, kind, n))
    return ops


def _entry(div: Node) -> dict[str, Any]:
    info: dict[str, Any] = {"constraints": []}
    lists = div.kids("ul")
    for ul in lists:
        for li in ul.kids("li"):
            text = clean(" ".join(clean(p.text()) for p in li.kids("p")))
            key, _, value = text.partition(":")
            key = key.strip().lower()
            if key == "constraints":
                info["constraints"] = [clean(x.text()) for x in li.find_all("li")]
            elif key == "values":
                info["values"] = [clean(x.text()) for x in li.find_all("li")]
            elif key in ("mandatory", "data type", "shape", "default"):
                nested = [clean(x.text()) for x in li.find_all("li")]
                info[key] = value.strip() or "; ".join(nested)
    return info


def read_master(path: Path) -> dict[str, dict[str, Any]]:
    """Per op: inputs, parameters and outputs (name -> mandatory, data type, shape, default, constraints)."""
    root = parse_html(path.read_text(encoding="utf-8"))
    ops: dict[str, dict[str, Any]] = {}
    for name, div in _sections(root, "h2"):
        if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", name):
            continue
        op: dict[str, Any] = {"inputs": {}, "parameters": {}, "outputs": {}}
        for title, sub in _sections(div, "h3"):
            key = title.lower()
            if key in op:
                for ename, ediv in _sections(sub, "h4"):
                    op[key][ename.split(" (")[0]] = _entry(ediv)
        ops[name] = op
    return ops


def master_constraints(master: dict[str, dict[str, Any]]) -> list[DocConstraint]:
    out = []
    for op, info in master.items():
        for group in ("inputs", "parameters", "outputs"):
            for ename, e in info[group].items():
                out.extend(DocConstraint("master", op, "All", ename, t) for t in e["constraints"])
    return out


def all_constraints(docs: Path) -> list[DocConstraint]:
    """Every documented constraint bullet: master entries, then each backend's Constraints and Support."""
    found = master_constraints(read_master(docs / MASTER_PAGE))
    for backend, page in BACKEND_PAGES.items():
        for info in read_supplement(docs / page, backend).values():
            found.extend(info["constraints"])
            found.extend(info["support"])
    return found
