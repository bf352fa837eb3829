"""Loading a rule set: files and rule-pack folders, their imports, parsing and checking.

Every file is read once (import cycles are fine) and a file's imports come
before it in load order, so declarations tend to precede their uses. Loading
either returns a checked `RuleSet` or raises one `QlowerError` holding every
error found, so a rule author sees all mistakes in one run.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from types import MappingProxyType

import attrs

from qlower import _resources
from qlower.diagnostics import Diagnostic, QlowerError, SourceCache, Span, error, warning
from qlower.lang import ast
from qlower.lang.checker import check
from qlower.lang.checker_types import suggest
from qlower.lang.checker_sigs import Locator
from qlower.lang.fragments import inline, pack_scopes, with_inlined_rules
from qlower.lang.names import qualify, resolve_rule
from qlower.lang.parse_store import ParseStore, default_store
from qlower.lang.parser import parse, parse_pieces
from qlower.lang.registry import TargetRegistry, default_registry
from qlower.lang.functions import FunctionTable
from qlower.lang.builtins import builtin_functions

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
        short: dict[str, list[ast.Rule]] = {}
        for r in self.rules:
            out.setdefault(r.name, r)
            short.setdefault(r.name.rsplit(".", 1)[-1], []).append(r)
        for name, found in short.items():  # `add` finds `mllm.add` while no other pack has an `add`
            if len(found) == 1:
                out.setdefault(name, found[0])
        return MappingProxyType(out)

    @_files.default
    def _index_files(self) -> Mapping[str, str]:
        return MappingProxyType({qualify(m.namespace, r.name): m.file for m in self.modules for r in m.rules})

    def rule(self, name: str) -> ast.Rule | None:
        """A rule by its name: qualified (`mllm.add`), or unqualified when only one pack has it."""
        return self._by_name.get(name)

    def rule_file(self, rule: ast.Rule) -> str:
        """The file `rule` was loaded from."""
        found = self._files.get(rule.name)
        if found is None:
            raise KeyError(f"rule {rule.name} is not in this rule set")
        return found


@attrs.define
class _Load:
    """One loading run: what was read, in order, and what went wrong."""

    packs_dir: Path
    # Installed rule packs by name (plugins included); `import NAME` looks here before packs_dir.
    packs: Mapping[str, Path] = attrs.field(factory=dict)
    # Texts that stand in for files on disk (an editor's unsaved buffers), keyed by resolved path.
    overlay: Mapping[Path, str] = attrs.field(factory=dict)
    # Parsed modules by (file, text), shared between runs so an unchanged file is parsed once.
    parse_cache: MutableMapping[tuple[str, str], ast.Module | QlowerError] | None = None
    # Parsed files kept on disk between runs (qlower.lang.parse_store), when the user has one.
    store: ParseStore | None = None
    modules: list[ast.Module] = attrs.field(factory=list)
    direct: set[str] = attrs.field(factory=set)  # files the caller named (not reached through an import)
    diagnostics: list[Diagnostic] = attrs.field(factory=list)
    sources: SourceCache = attrs.field(factory=SourceCache)
    seen: set[Path] = attrs.field(factory=set)
    syntax_errors: bool = False
    groups: dict[str, str] = attrs.field(factory=dict)  # file → the folder it was loaded with (shares fragments)
    # a pack's file → the pack's folder, which its path imports must stay in (a pack from elsewhere
    # may not reach into the machine); a user's own files may import any .qpat file
    roots: dict[Path, Path] = attrs.field(factory=dict)

    _pack_roots: dict[Path, str] | None = None

    @property
    def pack_roots(self) -> dict[Path, str]:
        """Each pack's folder → its name (listed once per run: asked for every file)."""
        if self._pack_roots is None:
            roots = {p.resolve(): name for name, p in self.packs.items()}
            if self.packs_dir.is_dir():
                for p in self.packs_dir.iterdir():
                    if p.is_dir():
                        roots.setdefault(p.resolve(), p.name)
            self._pack_roots = roots
        return self._pack_roots

    def namespace_of(self, f: Path) -> str:
        """The pack a file belongs to (the nearest enclosing pack folder), or "" for a user's file."""
        roots = self.pack_roots
        return next((roots[d] for d in f.parents if d in roots), "")

    def path(self, p: Path, span: Span | None = None, direct: bool = False, root: Path | None = None) -> None:
        if p.resolve() in self.overlay:  # an editor's buffer or a string of rules: no file needed
            self.file(p, direct, root)
        elif p.is_dir():
            self.folder(p, span, direct, root)
        elif p.is_file():
            self.file(p, direct, root)
        else:
            self.diagnostics.append(error(f"no such rule file or folder: {p}", span=span, code="unknown-import"))

    def folder(self, d: Path, span: Span | None = None, direct: bool = False, root: Path | None = None) -> None:
        try:
            files = sorted(f for f in d.rglob("*.qpat") if f.is_file())
        except OSError as exc:
            self.diagnostics.append(error(f"cannot list rule folder {d}: {exc}", span=span, code="io"))
            return
        if not files:
            self.diagnostics.append(warning(f"rule folder {d} holds no .qpat files", span=span, code="empty-folder"))
        for f in files:
            self.groups.setdefault(str(f), str(d))
            self.file(f, direct, root)

    def file(self, f: Path, direct: bool = False, root: Path | None = None) -> None:
        key = f.resolve()
        if direct:
            self.direct.add(str(f))
        if key in self.seen:
            return
        self.seen.add(key)
        if root is not None:
            self.roots[key] = root
        text = self.overlay.get(key)
        if text is None:
            try:
                text = f.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                self.diagnostics.append(error(f"cannot read rule file {f}: {exc}", code="io"))
                return
        self.sources.add(str(f), text)
        module = self._parse(text, str(f), edited=key in self.overlay)
        if isinstance(module, QlowerError):
            self.diagnostics.extend(module.diagnostics)
            self.syntax_errors = True
            return
        namespace = self.namespace_of(key)
        if namespace:
            module = attrs.evolve(module, namespace=namespace)
        for imp in module.imports:
            self.import_(imp, f)
        self.modules.append(module)

    def _parse(self, text: str, file: str, edited: bool = False) -> ast.Module | QlowerError:
        cached = self.parse_cache.get((file, text)) if self.parse_cache is not None else None
        if cached is None:
            try:  # inlined once its pack is known; an editor's buffer reparses only the items that changed
                cached = (parse_pieces(text, file, self.parse_cache, whole=self._parse_whole)
                          if edited and self.parse_cache is not None else self._parse_whole(text, file))
            except QlowerError as exc:
                cached = exc
            if self.parse_cache is not None:
                self.parse_cache[(file, text)] = cached
        return cached

    def _parse_whole(self, text: str, file: str) -> ast.Module:
        """`parse(text, file, inline=False)`, read from the disk store when an earlier run parsed it."""
        found = self.store.get(file, text) if self.store is not None else None
        if found is None:
            found = parse(text, file, inline=False)
            if self.store is not None:
                self.store.put(file, text, found)
        return found

    def _at(self, imp: ast.Import) -> Span | None:
        needle = f'"{imp.target}"' if imp.is_path else imp.target
        return Locator(self.sources).find(imp.span, needle, after="import")

    def import_(self, imp: ast.Import, importer: Path) -> None:
        if imp.is_path:
            target = importer.parent / imp.target
            root = self.roots.get(importer.resolve())
            if root is None and self.namespace_of(importer.resolve()):
                root = self._pack_root(importer)
            refused = _refused_import(target, root, self.overlay)
            if refused is not None:
                self.diagnostics.append(error(f"import \"{imp.target}\" refused: {refused}", span=self._at(imp),
                                              hint=f"a pack's path imports stay inside its folder {root}"
                                              if root is not None else "imports name .qpat files or folders",
                                              code="unknown-import"))
                return
            if not target.exists():
                self.diagnostics.append(error(f"cannot find `{imp.target}`", span=self._at(imp),
                                              hint=f"imports are relative to the importing file; no {target}",
                                              code="unknown-import"))
                return
            self.path(target, imp.span, root=root)
            return
        pack = resolve_pack(imp.target, self.packs, self.packs_dir)
        if pack is None:
            known = sorted({*self.packs, *(p.name for p in self.packs_dir.glob("*/") if p.is_dir())})
            self.diagnostics.append(error(f"unknown rule pack `{imp.target}`", span=self._at(imp),
                                          hint=suggest(imp.target, known) or (
                                              f"packs are {', '.join(known)}" if known else None),
                                          code="unknown-import"))
            return
        self.path(pack, imp.span, root=self._pack_root(pack))

    def _pack_root(self, pack: Path) -> Path:
        """The folder of the installed pack `pack` (a pack folder, or one file of it) is in."""
        p = pack.resolve()
        return next((d for d in (p, *p.parents) if d in self.pack_roots), p if p.is_dir() else p.parent)


def _refused_import(target: Path, root: Path | None, overlay: Mapping[Path, str]) -> str | None:
    """Why a path import may not be followed, or None: it must stay inside `root` (a pack's folder)
    and name a folder or a regular `.qpat` file (never another file, whose text a parse error
    would show, nor a FIFO, whose read never ends)."""
    import os

    resolved = target.resolve()
    if root is not None and os.path.commonpath([root, resolved]) != str(root):
        return "it leads outside the pack's folder"
    if resolved in overlay:
        return None
    if resolved.exists() and not resolved.is_dir():
        if not resolved.is_file():
            return "it is not a regular file"
        if resolved.suffix != ".qpat":
            return "imports name .qpat files or folders"
    return None


def pack_folder(path: str | Path, packs: Mapping[str, Path], packs_dir: Path | None = None) -> Path | None:
    """The rule pack folder a file belongs to, whose files are checked together (as `qlower check FOLDER`
    and `import PACK` load them): the nearest enclosing installed or shipped pack, else the nearest
    enclosing folder holding an `ops.qpat` (every pack declares its ops there), so a pack copied
    elsewhere or edited in a checkout is its own pack; None for a file of no pack."""
    packs_dir = packs_dir if packs_dir is not None else _resources.data_dir("patterns")
    roots = {Path(p).resolve() for p in packs.values()}
    if packs_dir.is_dir():
        roots |= {p.resolve() for p in packs_dir.iterdir() if p.is_dir()}
    for parent in Path(path).resolve().parents:
        if parent in roots or (parent / "ops.qpat").is_file():
            return parent
    return None


def resolve_pack(target: str, packs: Mapping[str, Path], packs_dir: Path) -> Path | None:
    """The folder or file of pack `a.b`: `a` among the installed packs (or under packs_dir), then the
    folder `b` or the file `b.qpat` inside it."""
    head, *rest = target.split(".")
    root = packs.get(head)
    if root is None:
        root = packs_dir / head
    folder = root.joinpath(*rest)
    if folder.is_dir():
        return folder
    if rest:  # `import mllm.ops`: one file of the pack (ops.qpat holds a pack's declarations)
        file = root.joinpath(*rest[:-1], rest[-1] + ".qpat")
        return file if file.is_file() else None
    return None


def _import_hint(d: Diagnostic, load: _Load) -> Diagnostic:
    """An unknown op of a dialect some rule pack declares, when that pack was not imported: say so."""
    if d.code != "unknown-op" or not d.message.startswith("unknown op `"):
        return d
    dialect = d.message[len("unknown op `"):].split(".", 1)[0]
    loaded = {m.namespace for m in load.modules}
    if dialect in loaded or resolve_pack(dialect, load.packs, load.packs_dir) is None:
        return d
    return attrs.evolve(d, hint=f"`{dialect}.*` ops are declared by the `{dialect}` rule pack: add `import "
                                f"{dialect}` (its rules too) or `import {dialect}.ops` (its declarations only)")


def _run(paths: Sequence[str | Path], registry: TargetRegistry | None, functions: FunctionTable | None,
         packs_dir: Path | None, packs: Mapping[str, Path] | None = None,
         overlay: Mapping[Path, str] | None = None, parse_cache: MutableMapping | None = None,
         focus: Sequence[str | Path] | None = None) -> _Load:
    load = _Load(packs_dir if packs_dir is not None else _resources.data_dir("patterns"), packs=packs or {},
                 overlay=overlay or {}, parse_cache=parse_cache, store=default_store())
    for p in paths:
        load.path(Path(p), direct=True)
    load.modules = _inline_pack_scopes(load.modules, load.groups, parse_cache)
    if registry is None:
        try:
            registry = default_registry()
        except QlowerError as exc:  # broken OpDef files: say so instead of checking against nothing
            load.diagnostics.extend(exc.diagnostics)
            return load
    found = check(load.modules, registry=registry,
                  functions=functions if functions is not None else builtin_functions(), sources=load.sources,
                  focus=None if focus is None else {str(f) for f in focus}, groups=load.groups, memo=parse_cache)
    if load.syntax_errors:
        found = [d for d in found if d.code not in _NEEDS_ALL_FILES]
    found = [_import_hint(d, load) for d in found]
    # Warnings and notes about files only reached through an import (a pack's rule that a user's rule
    # shadows) are the pack's business, not the caller's; errors there still block loading.
    load.diagnostics.extend(d for d in found if d.is_error or d.span is None or d.span.file in load.direct)
    return load


def _inline_pack_scopes(modules: list[ast.Module], groups: Mapping[str, str],
                        cache: MutableMapping | None = None) -> list[ast.Module]:
    """Each module's rules inlined (once: the loader parses without) with what its pack makes visible
    (fragments and defs of the pack's other files, other packs' fragments qualified). With a `cache` (the
    parse cache of repeated runs), a rule that is the very object of an earlier run, seeing the very
    fragments and defs it saw then, keeps that run's inlined form: an edit re-inlines the rules it changed,
    and the rest of its pack only when it changed what they can call."""
    scopes = pack_scopes(modules, {d.op for m in modules for d in m.ops}, groups)
    if cache is None:
        return [with_inlined_rules(m, scopes[id(m)]) for m in modules]
    out = []
    for m in modules:
        scope = scopes[id(m)]
        uses = tuple(x for kv in (*scope.fragments.items(), *scope.defines.items()) for x in kv)
        seen = cache.get(("scope", m.file))  # the same scope as last run: its tuple, so rules compare it by identity
        if seen is not None and _same_uses(seen, uses):
            uses = seen
        else:
            cache[("scope", m.file)] = uses
        rules = []
        for item in m.items:
            if not isinstance(item, (ast.Rule, ast.MapDecl)):
                continue
            key = ("inlined", m.file, id(item))  # beside the (file, text) keys of parsed modules
            hit = cache.get(key)
            if hit is None or hit[0] is not item or (hit[1] is not uses and not _same_uses(hit[1], uses)):
                hit = cache[key] = (item, uses, inline(item.rule if isinstance(item, ast.MapDecl) else item, scope))
            rules.append(hit[2])
        out.append(attrs.evolve(m, inlined_rules=tuple(rules)))
    return out


def _same_uses(a: tuple, b: tuple) -> bool:
    """The same fragments and defs (the very objects, under the same names)."""
    return len(a) == len(b) and all(x is y or (isinstance(x, str) and x == y) for x, y in zip(a, b, strict=True))


def check_paths(paths: Sequence[str | Path], *, registry: TargetRegistry | None = None,
                functions: FunctionTable | None = None, packs_dir: Path | None = None,
                packs: Mapping[str, Path] | None = None) -> tuple[list[Diagnostic], SourceCache]:
    """Every finding for these files/folders (syntax errors of each file, then semantic ones); never raises
    for mistakes in the rules. The SourceCache renders the findings."""
    load = _run(paths, registry, functions, packs_dir, packs)
    return load.diagnostics, load.sources


@attrs.frozen
class Inspection:
    """Everything one checking run saw: the modules in load order, the findings and the texts."""

    modules: tuple[ast.Module, ...]
    diagnostics: tuple[Diagnostic, ...]
    sources: SourceCache = attrs.field(eq=False)


def inspect_paths(paths: Sequence[str | Path], *, registry: TargetRegistry | None = None,
                  functions: FunctionTable | None = None, packs_dir: Path | None = None,
                  packs: Mapping[str, Path] | None = None, overlay: Mapping[Path, str] | None = None,
                  parse_cache: MutableMapping | None = None, focus: Sequence[str | Path] | None = None) -> Inspection:
    """`check_paths` for tools that also need the syntax trees (the language server): `overlay` holds
    unsaved texts by resolved path; `parse_cache` (any dict) lets repeated runs parse each text once;
    `focus` limits the in-depth checks to those files (the others lend their names and declarations)."""
    load = _run(paths, registry, functions, packs_dir, packs, overlay, parse_cache, focus)
    return Inspection(tuple(load.modules), tuple(load.diagnostics), load.sources)


def load_rules(paths: Sequence[str | Path], *, registry: TargetRegistry | None = None,
               functions: FunctionTable | None = None, packs_dir: Path | None = None,
               packs: Mapping[str, Path] | None = None, overlay: Mapping[Path, str] | None = None) -> RuleSet:
    """Load, parse and check rule files/folders; raises QlowerError with all errors (and warnings).
    `overlay` holds texts that stand in for files (by resolved path)."""
    load = _run(paths, registry, functions, packs_dir, packs, overlay)
    if any(d.is_error for d in load.diagnostics):
        raise QlowerError(load.diagnostics)
    mods = tuple(load.modules)
    ops: dict[str, ast.OpDecl] = {}
    for m in mods:
        for d in m.ops:
            ops.setdefault(d.op, d)
    rules, tests = _qualified(mods)
    return RuleSet(modules=mods, ops=MappingProxyType(ops), rules=rules, tests=tests,
                   warnings=tuple(load.diagnostics), sources=load.sources,
                   computes=tuple(c for m in mods for c in m.computes))


def _qualified(mods: Sequence[ast.Module]) -> tuple[tuple[ast.Rule, ...], tuple[ast.Test, ...]]:
    """Rules and tests under their qualified names, tests pointing at the rules they mean; a rule
    another overrides is left out, with its tests (they test what was replaced)."""
    known = {qualify(m.namespace, r.name) for m in mods for r in m.rules}
    replaced = {r.overrides for m in mods for r in m.rules if r.overrides}
    rules = tuple(attrs.evolve(r, name=qualify(m.namespace, r.name)) for m in mods for r in m.rules
                  if qualify(m.namespace, r.name) not in replaced)
    tests = []
    for m in mods:
        for t in m.tests:
            target = resolve_rule(t.rule_name, m.namespace, known) or t.rule_name
            if target in replaced:
                continue
            body = tuple(attrs.evolve(s, text=resolve_rule(s.text, m.namespace, known) or s.text)
                         if isinstance(s, ast.Expect) and s.kind == "rule" and s.text else s for s in t.body)
            tests.append(attrs.evolve(t, name=qualify(m.namespace, t.name), rule=target, body=body))
    return rules, tuple(tests)
