"""Loading a rule set: files and rule-pack folders, their imports, parsing and checking.

Every file is read once (import cycles are fine) and a file's imports come
before it in load order, so declarations tend to precede their uses. Loading
either returns a checked `RuleSet` or raises one `QlowerError` holding every
error found, so a rule author sees all mistakes in one run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

import attrs

from qlower import _resources
from qlower.diagnostics import Diagnostic, QlowerError, SourceCache, Span, error, warning
from qlower.lang import ast
from qlower.lang.checker import check
from qlower.lang.checker_types import suggest
from qlower.lang.checker_sigs import Locator
from qlower.lang.parser import parse
from qlower.lang.registry import TargetRegistry, default_registry
from qlower.rewrite.functions import FunctionTable, builtin_functions

# Findings about names another file declares; after a syntax error that file's
# declarations are missing, so these would only be noise.
_NEEDS_ALL_FILES = frozenset({"unknown-op", "unknown-rule", "shadowed-rule"})


@attrs.frozen
class RuleSet:
    """A checked set of rules, with the declarations and tests that came with them."""

    modules: tuple[ast.Module, ...]
    ops: Mapping[str, ast.OpDecl] = attrs.field(hash=False)
    rules: tuple[ast.Rule, ...]
    tests: tuple[ast.Test, ...]
    warnings: tuple[Diagnostic, ...]  # and notes
    sources: SourceCache = attrs.field(eq=False)
    computes: tuple[ast.ComputeDecl, ...] = ()  # `compute ... as ...` declarations, in load order
    _by_name: Mapping[str, ast.Rule] = attrs.field(init=False, eq=False, repr=False)
    _files: Mapping[int, str] = attrs.field(init=False, eq=False, repr=False)

    @_by_name.default
    def _index_names(self) -> Mapping[str, ast.Rule]:
        out: dict[str, ast.Rule] = {}
        for r in self.rules:
            out.setdefault(r.name, r)
        return MappingProxyType(out)

    @_files.default
    def _index_files(self) -> Mapping[int, str]:
        return MappingProxyType({id(r): m.file for m in self.modules for r in m.rules})

    def rule(self, name: str) -> ast.Rule | None:
        return self._by_name.get(name)

    def rule_file(self, rule: ast.Rule) -> str:
        """The file `rule` was loaded from."""
        found = self._files.get(id(rule))
        if found is None:
            same = self.rule(rule.name)
            found = self._files.get(id(same)) if same is not None else None
        if found is None:
            raise KeyError(f"rule {rule.name} is not in this rule set")
        return found


@attrs.define
class _Load:
    """One loading run: what was read, in order, and what went wrong."""

    packs_dir: Path
    modules: list[ast.Module] = attrs.field(factory=list)
    diagnostics: list[Diagnostic] = attrs.field(factory=list)
    sources: SourceCache = attrs.field(factory=SourceCache)
    seen: set[Path] = attrs.field(factory=set)
    syntax_errors: bool = False

    def path(self, p: Path, span: Span | None = None) -> None:
        if p.is_dir():
            self.folder(p, span)
        elif p.is_file():
            self.file(p)
        else:
            self.diagnostics.append(error(f"no such rule file or folder: {p}", span=span, code="unknown-import"))

    def folder(self, d: Path, span: Span | None = None) -> None:
        try:
            files = sorted(f for f in d.rglob("*.qpat") if f.is_file())
        except OSError as exc:
            self.diagnostics.append(error(f"cannot list rule folder {d}: {exc}", span=span, code="io"))
            return
        if not files:
            self.diagnostics.append(warning(f"rule folder {d} holds no .qpat files", span=span, code="empty-folder"))
        for f in files:
            self.file(f)

    def file(self, f: Path) -> None:
        key = f.resolve()
        if key in self.seen:
            return
        self.seen.add(key)
        try:
            text = f.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            self.diagnostics.append(error(f"cannot read rule file {f}: {exc}", code="io"))
            return
        self.sources.add(str(f), text)
        try:
            module = parse(text, str(f))
        except QlowerError as exc:
            self.diagnostics.extend(exc.diagnostics)
            self.syntax_errors = True
            return
        for imp in module.imports:
            self.import_(imp, f)
        self.modules.append(module)

    def _at(self, imp: ast.Import) -> Span | None:
        needle = f'"{imp.target}"' if imp.is_path else imp.target
        return Locator(self.sources).find(imp.span, needle, after="import")

    def import_(self, imp: ast.Import, importer: Path) -> None:
        if imp.is_path:
            target = importer.parent / imp.target
            if not target.exists():
                self.diagnostics.append(error(f"cannot find `{imp.target}`", span=self._at(imp),
                                              hint=f"imports are relative to the importing file; no {target}",
                                              code="unknown-import"))
                return
            self.path(target, imp.span)
            return
        pack = self.packs_dir.joinpath(*imp.target.split("."))
        if not pack.is_dir():
            known = sorted(p.name for p in self.packs_dir.glob("*/") if p.is_dir())
            self.diagnostics.append(error(f"unknown rule pack `{imp.target}`", span=self._at(imp),
                                          hint=suggest(imp.target, known) or (
                                              f"packs are {', '.join(known)}" if known else None),
                                          code="unknown-import"))
            return
        self.folder(pack, imp.span)


def _run(paths: Sequence[str | Path], registry: TargetRegistry | None, functions: FunctionTable | None,
         packs_dir: Path | None) -> _Load:
    load = _Load(packs_dir if packs_dir is not None else _resources.data_dir("patterns"))
    for p in paths:
        load.path(Path(p))
    if registry is None:
        try:
            registry = default_registry()
        except QlowerError as exc:  # broken OpDef files: say so instead of checking against nothing
            load.diagnostics.extend(exc.diagnostics)
            return load
    found = check(load.modules, registry=registry,
                  functions=functions if functions is not None else builtin_functions(), sources=load.sources)
    if load.syntax_errors:
        found = [d for d in found if d.code not in _NEEDS_ALL_FILES]
    load.diagnostics.extend(found)
    return load


def check_paths(paths: Sequence[str | Path], *, registry: TargetRegistry | None = None,
                functions: FunctionTable | None = None,
                packs_dir: Path | None = None) -> tuple[list[Diagnostic], SourceCache]:
    """Every finding for these files/folders (syntax errors of each file, then semantic ones); never raises
    for mistakes in the rules. The SourceCache renders the findings."""
    load = _run(paths, registry, functions, packs_dir)
    return load.diagnostics, load.sources


def load_rules(paths: Sequence[str | Path], *, registry: TargetRegistry | None = None,
               functions: FunctionTable | None = None, packs_dir: Path | None = None) -> RuleSet:
    """Load, parse and check rule files/folders; raises QlowerError with all errors (and warnings)."""
    load = _run(paths, registry, functions, packs_dir)
    if any(d.is_error for d in load.diagnostics):
        raise QlowerError(load.diagnostics)
    mods = tuple(load.modules)
    ops: dict[str, ast.OpDecl] = {}
    for m in mods:
        for d in m.ops:
            ops.setdefault(d.op, d)
    return RuleSet(modules=mods, ops=MappingProxyType(ops), rules=tuple(r for m in mods for r in m.rules),
                   tests=tuple(t for m in mods for t in m.tests), warnings=tuple(load.diagnostics),
                   sources=load.sources, computes=tuple(c for m in mods for c in m.computes))
