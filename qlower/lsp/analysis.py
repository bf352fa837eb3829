"""What the language server knows about `.qpat` files, with no protocol in sight.

A `Workspace` holds the editor's open buffers and answers questions about a
position in one of them (hover, definition, completion, ...). It reuses the
rule loader, parser, checker and formatter; the only text scanning of its own
is finding the word under the cursor and the op whose `{ }` the cursor is in,
which a half-typed buffer needs because it may not parse.

Positions are 0-based (line, character) as in LSP; spans are the loader's
1-based, end-exclusive `Span`s.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import attrs

from qlower.diagnostics import Diagnostic, QlowerError, Span
from qlower.lang import ast
from qlower.lang.checker_scope import binding_spans
from qlower.lang.checker_sigs import Locator
from qlower.lang.formatter import format_text
from qlower.lang.grammar import keywords
from qlower.lang.loader import Inspection, inspect_paths, pack_folder, resolve_pack
from qlower.lang.registry import TargetRegistry
from qlower.lang.functions import FunctionTable

_WORD = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_HINT = re.compile(r"did you mean `([^`]+)`\?")


@attrs.frozen
class Location:
    path: Path
    span: Span


@attrs.frozen
class Completion:
    label: str
    kind: str  # "op" | "param" | "enum" | "function" | "variable" | "keyword" | "rule"
    detail: str = ""
    documentation: str = ""


@attrs.frozen
class Symbol:
    name: str
    kind: str  # "rule" | "test" | "op" | "import"
    span: Span
    selection: Span
    detail: str = ""


@attrs.frozen
class Fix:
    """A quick fix: replace `span` with `text`, for the diagnostic it answers."""

    title: str
    span: Span
    text: str
    diagnostic: Diagnostic


@attrs.define
class DocState:
    """One open document and what the last check of it found."""

    path: Path
    text: str
    version: int = 0
    inspection: Inspection | None = None
    module: ast.Module | None = None  # this text's tree; None while it does not parse
    last_good: ast.Module | None = None  # the latest tree that parsed, for completion while typing
    closure: frozenset[Path] = frozenset()  # files this document's check read (itself and its imports)
    _lines: tuple[str, list[str]] | None = None

    def lines(self) -> list[str]:
        """The text's lines as the loader's spans and the client count them (split at line ends only), once per text."""
        if self._lines is None or self._lines[0] is not self.text:
            self._lines = (self.text, [x.removesuffix("\r") for x in self.text.split("\n")])
        return self._lines[1]


@attrs.define
class Workspace:
    """Open documents, a parse cache shared by every check, and the op registry and functions."""

    registry: TargetRegistry
    functions: FunctionTable
    packs: Mapping[str, Path] = attrs.field(factory=dict)
    packs_dir: Path | None = None
    docs: dict[Path, DocState] = attrs.field(factory=dict)
    _parse_cache: dict = attrs.field(factory=dict)

    # ------------------------------------------------------------ documents

    def open(self, path: Path, text: str, version: int = 0) -> list[Path]:
        """Open or replace a buffer; returns the open documents to re-check (it and its dependents)."""
        key = _key(path)
        doc = self.docs.get(key)
        if doc is None:
            doc = self.docs[key] = DocState(key, text, version)
        else:
            doc.text, doc.version = text, version
        if len(self._parse_cache) > 64 * len(self.docs) + 4096:  # old versions of edited buffers (and their pieces)
            self._parse_cache.clear()
        return [key, *[p for p, d in self.docs.items() if p != key and key in d.closure]]

    def close(self, path: Path) -> None:
        self.docs.pop(_key(path), None)

    def check(self, path: Path) -> list[Diagnostic]:
        """Re-check one open document (with its imports, unsaved buffers taking precedence over disk)."""
        doc = self.docs[_key(path)]
        overlay = {p: d.text for p, d in self.docs.items()}
        found = inspect_paths([self.pack_of(doc.path) or doc.path], registry=self.registry,
                              functions=self.functions, packs=self.packs, packs_dir=self.packs_dir, overlay=overlay,
                              parse_cache=self._parse_cache, focus=[doc.path])
        doc.inspection = found
        doc.module = next((m for m in found.modules if _key(Path(m.file)) == doc.path), None)
        if doc.module is not None:
            doc.last_good = doc.module
        doc.closure = frozenset(_key(Path(m.file)) for m in found.modules) | {doc.path}
        return self.diagnostics(doc.path)

    def pack_of(self, path: Path) -> Path | None:
        """The rule pack folder `path` belongs to, resolved as `qlower check` resolves it."""
        return pack_folder(path, self.packs, self.packs_dir)

    def diagnostics(self, path: Path) -> list[Diagnostic]:
        doc = self._doc(path)
        if doc.inspection is None:
            return []
        return [d for d in doc.inspection.diagnostics if d.span is not None and _key(Path(d.span.file)) == doc.path]

    def line_text(self, path: str | Path, line: int) -> str:
        """Line `line` (0-based) of a file as the server sees it: the open buffer, else the text its last check
        read, else the file on disk; "" past the end. Positions in other encodings are counted on it."""
        key = _key(Path(path))
        doc = self.docs.get(key)
        if doc is not None:
            lines = doc.lines()
            return lines[line] if 0 <= line < len(lines) else ""
        for d in self.docs.values():
            text = d.inspection.sources.line(str(key), line + 1) if d.inspection is not None else None
            if text is not None:
                return text
        try:
            lines = [x.removesuffix("\r") for x in key.read_text(encoding="utf-8").split("\n")]
        except (OSError, UnicodeDecodeError):
            return ""
        return lines[line] if 0 <= line < len(lines) else ""

    def _doc(self, path: Path) -> DocState:
        doc = self.docs.get(_key(path))
        if doc is None:
            raise KeyError(f"{path} is not open")
        if doc.inspection is None:
            self.check(path)
        return doc

    def _modules(self, doc: DocState) -> tuple[ast.Module, ...]:
        mods = doc.inspection.modules if doc.inspection is not None else ()
        if doc.module is None and doc.last_good is not None:
            mods = (*mods, doc.last_good)
        return mods

    # ------------------------------------------------------------- features

    def format(self, path: Path) -> str | None:
        """The exact text `qlower fmt` writes, or None when the buffer does not parse."""
        doc = self._doc(path)
        try:
            return format_text(doc.text, str(doc.path))
        except QlowerError:
            return None

    def symbols(self, path: Path) -> list[Symbol]:
        doc = self._doc(path)
        module = doc.module or doc.last_good
        if module is None:
            return []
        locate = self._locator(doc)
        out = []
        for item in module.items:
            if item.span is None:
                continue
            if isinstance(item, ast.Rule):
                detail = f"backends({', '.join(item.backends)})" if item.backends else ""
                out.append(Symbol(item.name, "rule", item.span, locate.find(item.span, item.name, after="rule"),
                                  detail))
            elif isinstance(item, ast.MapDecl):
                out.append(Symbol(item.rule_name, "map", item.span, item.span,
                                  f"{item.pattern.op_types[0]} -> {item.op}"))
            elif isinstance(item, ast.Fragment):
                out.append(Symbol(item.name, "fragment", item.span,
                                  locate.find(item.span, item.name, after="fragment"), ", ".join(item.results)))
            elif isinstance(item, ast.Define):
                out.append(Symbol(item.name, "def", item.span, locate.find(item.span, item.name, after="def"),
                                  ", ".join(item.params)))
            elif isinstance(item, ast.Test):
                out.append(Symbol(item.name, "test", item.span, locate.find(item.span, item.name, after="test"),
                                  f"for {item.rule_name}"))
            elif isinstance(item, ast.OpDecl):
                out.append(Symbol(item.op, "op", item.span, locate.find(item.span, item.op, after="op")))
            elif isinstance(item, ast.Import):
                out.append(Symbol(item.target, "import", item.span, item.span))
        return out

    def hover(self, path: Path, line: int, char: int) -> tuple[str, Span] | None:
        """Markdown for the name under the cursor, with the span it covers."""
        doc = self._doc(path)
        found = _word_at(doc.text, line, char)
        if found is None:
            return None
        word, span = found
        span = attrs.evolve(span, file=str(doc.path))
        mods = self._modules(doc)
        if word.startswith("qnn."):
            text = self._describe_qnn(word[4:], self._rule_at(doc, line))
            return (text, span) if text else None
        decl = _decls(mods).get(word)
        if decl is not None:
            return f"```qpat\n{_source(doc, decl.span)}\n```" + (f"\n\n{decl.doc}" if decl.doc else ""), span
        shared = _shared(mods, doc).get(word)
        if shared is not None:  # a fragment or def of this file, its pack, or (qualified) another pack
            head = f"{'fragment' if isinstance(shared, ast.Fragment) else 'def'} `{word}` at {shared.span}"
            return head + (f"\n\n{shared.doc}" if shared.doc else ""), span
        op_param = self._op_param_at(doc, word, line)
        if op_param is not None:
            return op_param, span
        fn = self.functions.get(word)
        if fn is not None and _followed_by_paren(doc.text, line, span.end_column - 1):
            sig = f"{fn.name}({', '.join(fn.params)}) -> {fn.returns}"
            return f"```\n{sig}\n```" + (f"\n\n{fn.doc}" if fn.doc else ""), span
        rules = _rules(mods)
        if word in rules:
            r = rules[word]
            tested = [t.name for t in _tests(mods) if t.rule_name == word]
            extra = f"\n\ntested by {', '.join(tested)}" if tested else "\n\nno test"
            return f"rule `{word}` at {r.span}" + (f"\n\n{r.doc}" if r.doc else "") + extra, span
        tests = _tests_by_name(mods)
        if word in tests:
            t = tests[word]
            return f"test `{word}` of rule `{t.rule_name}` at {t.span}", span
        return None

    def _cursor(self, path: Path, line: int, char: int):
        """The document, the word under the cursor, the modules in view and a locator; None off a word."""
        doc = self._doc(path)
        found = _word_at(doc.text, line, char)
        if found is None:
            return None
        return doc, found[0], self._modules(doc), self._locator(doc)

    def definition(self, path: Path, line: int, char: int) -> list[Location]:
        at = self._cursor(path, line, char)
        if at is None:
            return []
        doc, word, mods, locate = at
        imp = self._import_at(doc, line)
        if imp is not None:
            return self._import_targets(doc, imp)
        rule = self._rule_at(doc, line)
        if rule is not None:
            spans = binding_spans(rule)
            if word in spans and spans[word][0] is not None:
                where, after = spans[word]
                return [_loc(locate.find(where, word, after=after))]
        decl = _decls(mods).get(word)
        if decl is not None and decl.span is not None:
            return [_loc(locate.find(decl.span, decl.op, after="op"))]
        shared = _shared(mods, doc).get(word)
        if shared is not None and shared.span is not None:
            keyword = "fragment" if isinstance(shared, ast.Fragment) else "def"
            return [_loc(locate.find(shared.span, shared.name, after=keyword))]
        rules = _rules(mods)
        if word in rules:
            r = rules[word]
            return [_loc(locate.find(r.span, r.name, after="rule"))]
        tests = _tests_by_name(mods)
        if word in tests:
            t = tests[word]
            target = rules.get(t.rule_name)
            if target is not None and t.rule is None:  # `test x` tests rule x: the name stands for both
                return [_loc(locate.find(target.span, target.name, after="rule"))]
            return [_loc(locate.find(t.span, t.name, after="test"))]
        return []

    def references(self, path: Path, line: int, char: int, include_declaration: bool = True) -> list[Location]:
        at = self._cursor(path, line, char)
        if at is None:
            return []
        doc, word, mods, locate = at
        out: list[Location] = []
        rules = _rules(mods)
        if word in rules:
            if include_declaration:
                out.append(_loc(locate.find(rules[word].span, word, after="rule")))
            for t in _tests(mods):
                if t.rule_name == word:
                    out.append(_loc(locate.find(t.span, word, after="for" if t.rule else "test")))
            return out
        if "." in word:
            decl = _decls(mods).get(word)
            if decl is not None and include_declaration:
                out.append(_loc(locate.find(decl.span, word, after="op")))
            for m in mods:
                for span in _op_uses(m, word):
                    out.append(_loc(locate.find(span, word)))
            return out
        rule = self._rule_at(doc, line)
        if rule is not None:
            return [_loc(s) for s in _name_uses(doc, rule, word)]
        return out

    def completion(self, path: Path, line: int, char: int, trigger: str | None = None) -> list[Completion]:
        """What may be typed at the cursor. `trigger`: the character that made the client ask (`.`, `{`, `,`
        or `:`), which asks only for what follows it (nothing when it follows none of those contexts)."""
        doc = self.docs[_key(path)]
        if doc.inspection is None:
            self.check(path)
        lines = doc.lines() or [""]
        before = lines[line][:char] if line < len(lines) else ""
        mods = self._modules(doc)
        dotted = re.search(r"([A-Za-z_]\w*)\.(\w*)$", before)
        if dotted:
            return self._op_completions(dotted.group(1), mods)
        if trigger == ".":
            return []
        brace = _open_brace_op(doc.text, line, char)
        if brace is not None:
            op, given, pending_param = brace
            return self._param_completions(op, given, pending_param, mods)
        if trigger is not None:
            return []
        out = [Completion(f.name, "function", f"({', '.join(f.params)}) -> {f.returns}", f.doc)
               for f in self.functions.functions.values()]
        rule = self._rule_at(doc, line)
        if rule is not None:
            out += [Completion(n, "variable") for n in binding_spans(rule)]
        if re.search(r"\bfor\s+\w*$", before):
            out = [Completion(n, "rule") for n in _rules(mods)]
        out += [Completion(k, "keyword") for k in keywords()]
        dialects = sorted({"qnn", *(d.dialect for d in _decls(mods).values())})
        out += [Completion(d, "module", "dialect") for d in dialects]
        return out

    def fixes(self, path: Path, diagnostics: Iterable[Diagnostic]) -> list[Fix]:
        """Quick fixes that apply a diagnostic's did-you-mean suggestion."""
        doc = self._doc(path)
        out = []
        for d in diagnostics:
            m = _HINT.search(d.hint or "")
            if m is None or d.span is None:
                continue
            target = _replaceable(doc.text, d.span, m.group(1))
            if target is not None:
                out.append(Fix(f"Change to `{m.group(1)}`", target, m.group(1), d))
        return out

    # -------------------------------------------------------------- helpers

    def _locator(self, doc: DocState) -> Locator:
        return Locator(doc.inspection.sources if doc.inspection is not None else None)

    def _op_param_at(self, doc: DocState, word: str, line: int) -> str | None:
        """A fragment's `k: op` parameter under the cursor: the op types its calls give it."""
        from qlower.lang.optypes import fragment_op_types  # noqa: PLC0415

        module = doc.module or doc.last_good
        for f in module.fragments if module is not None else ():
            if f.span is None or not f.span.line - 1 <= line <= f.span.end_line - 1:
                continue
            if not any(p.op and p.name == word for p in f.params):
                return None
            types = fragment_op_types(f, word, (r for m in self._modules(doc) for r in m.rules))
            given = ("an op type known only per match at some call" if types is None else
                     "not called here" if not types else ", ".join(f"`{t}`" for t in types))
            return f"op type parameter `{word}` of fragment `{f.name}`: {given}"
        return None

    def _rule_at(self, doc: DocState, line: int) -> ast.Rule | None:
        module = doc.module or doc.last_good
        for r in module.rules if module is not None else ():
            if r.span is not None and r.span.line - 1 <= line <= r.span.end_line - 1:
                return r
        return None

    def _import_at(self, doc: DocState, line: int) -> ast.Import | None:
        module = doc.module or doc.last_good
        for imp in module.imports if module is not None else ():
            if imp.span is not None and imp.span.line - 1 <= line <= imp.span.end_line - 1:
                return imp
        return None

    def _import_targets(self, doc: DocState, imp: ast.Import) -> list[Location]:
        if imp.is_path:
            target = doc.path.parent / imp.target
        else:
            target = resolve_pack(imp.target, self.packs, self.packs_dir or Path("."))
            if target is None:
                return []
        files = sorted(target.rglob("*.qpat")) if target.is_dir() else [target] if target.is_file() else []
        return [Location(_key(f), Span(str(_key(f)), 1, 1, 1, 1)) for f in files]

    def _describe_qnn(self, name: str, rule: ast.Rule | None) -> str | None:
        from qlower.qnn.describe import describe_op

        registry = self.registry
        op = registry.op(name)
        if op is None:
            return None
        backends = getattr(registry, "backends", ())
        if not hasattr(registry, "supported") or not backends:
            return f"qnn.{name}"
        wanted = [b for b in (rule.backends if rule is not None and rule.backends else backends) if b in backends]
        parts = [describe_op(registry, op, None)]
        for b in wanted:
            if registry.supported(name, b, op.package):
                parts.append("\n".join(describe_op(registry, op, b).splitlines()[len(parts[0].splitlines()):]))
        return "```\n" + "\n".join(p for p in parts if p) + "\n```"

    def _op_completions(self, dialect: str, mods: tuple[ast.Module, ...]) -> list[Completion]:
        if dialect == "qnn":
            return [Completion(n, "op", "QNN op") for n in self.registry.names()]
        out = []
        for op, d in _decls(mods).items():
            if d.dialect == dialect:
                out.append(Completion(op.split(".", 1)[1], "op", f"{dialect} op", d.doc or ""))
        return out

    def _param_completions(self, op: str, given: set[str], pending: str | None,
                           mods: tuple[ast.Module, ...]) -> list[Completion]:
        if op.startswith("qnn."):
            target = self.registry.op(op[4:])
            if target is None:
                return []
            params = {p.name: p for p in target.params}
            if pending is not None:
                p = params.get(pending)
                return [Completion(e, "enum", f"{pending} = {i}") for i, e in enumerate(p.enum or ())] if p else []
            return [Completion(n, "param", _param_detail(p)) for n, p in params.items() if n not in given]
        decl = _decls(mods).get(op)
        if decl is None or pending is not None:
            return []
        return [Completion(a.name, "param", str(a.type)) for a in decl.attrs if a.name not in given]


def _param_detail(p) -> str:
    dt = p.datatype.name if p.datatype is not None else "backend specific"
    bits = ["mandatory" if p.mandatory else "optional", dt]
    if p.default is not None:
        bits.append(f"default {p.default}")
    return "; ".join(bits)


def _key(path: Path) -> Path:
    return Path(path).resolve()


def _loc(span: Span) -> Location:
    return Location(_key(Path(span.file)), span)


def _source(doc: DocState, span: Span | None) -> str:
    if span is None:
        return ""
    sources = doc.inspection.sources if doc.inspection is not None else None
    lines = [sources.line(span.file, n) or "" for n in range(span.line, span.end_line + 1)] if sources else []
    if not lines:
        return ""
    if span.end_line == span.line:
        return lines[0][span.column - 1:span.end_column - 1]
    lines[0] = lines[0][span.column - 1:]
    lines[-1] = lines[-1][:span.end_column - 1]
    return "\n".join(lines)


def _decls(mods: Iterable[ast.Module]) -> dict[str, ast.OpDecl]:
    out: dict[str, ast.OpDecl] = {}
    for m in mods:
        for d in m.ops:
            out.setdefault(d.op, d)
    return out


def _shared(mods: Iterable[ast.Module], doc: DocState) -> dict[str, ast.Fragment | ast.Define]:
    """Fragments and defs the document can call: its own, its pack's, other packs' as `pack.name`."""
    from qlower.lang.fragments import pack_scopes  # noqa: PLC0415

    mods = tuple(mods)
    me = next((m for m in mods if Path(m.file).resolve() == doc.path.resolve()), None)
    if me is None:
        return {}
    scope = pack_scopes(mods).get(id(me))
    return {} if scope is None else {**scope.defines, **scope.fragments}


def _rules(mods: Iterable[ast.Module]) -> dict[str, ast.Rule]:
    out: dict[str, ast.Rule] = {}
    for m in mods:
        for r in m.rules:
            out.setdefault(r.name, r)
    return out


def _tests(mods: Iterable[ast.Module]) -> Iterator[ast.Test]:
    seen: set[int] = set()
    for m in mods:
        for t in m.tests:
            if id(t) not in seen:
                seen.add(id(t))
                yield t


def _tests_by_name(mods: Iterable[ast.Module]) -> dict[str, ast.Test]:
    out: dict[str, ast.Test] = {}
    for t in _tests(mods):
        out.setdefault(t.name, t)
    return out


def _op_uses(module: ast.Module, op: str) -> Iterator[Span]:
    """Spans of patterns, emits and test graph nodes that name `op`."""

    def pattern(p: ast.OpPattern) -> Iterator[Span]:
        if op in p.op_types and p.span is not None:
            yield p.span
        for o in p.operands:
            yield from operand(o)

    def operand(o) -> Iterator[Span]:
        if isinstance(o, ast.OpPattern):
            yield from pattern(o)
        elif isinstance(o, ast.NamedNested):
            yield from pattern(o.pattern)
        elif isinstance(o, ast.Alternatives):
            for x in o.options:
                yield from operand(x)

    for r in module.rules:
        for s in r.body:
            if isinstance(s, ast.Match):
                yield from pattern(s.pattern)
            elif isinstance(s, ast.Emit):
                for item in ast.flat_items(s.items):
                    if isinstance(item, ast.EmitOp) and item.op == op and item.span is not None:
                        yield item.span
    for t in module.tests:
        for s in t.body:
            if isinstance(s, ast.TestGraph):
                for n in s.nodes:
                    if n.op == op and n.span is not None:
                        yield n.span


def _name_uses(doc: DocState, rule: ast.Rule, name: str) -> list[Span]:
    """Every token `name` inside the rule's text (bindings and uses; strings excluded)."""
    out = []
    lines = doc.text.splitlines()
    for ln in range(rule.span.line, rule.span.end_line + 1):
        text = lines[ln - 1] if ln - 1 < len(lines) else ""
        code = _strip_strings_and_comment(text)
        for m in re.finditer(r"(?<![\w.])" + re.escape(name) + r"(?![\w])", code):
            out.append(Span(str(doc.path), ln, m.start() + 1, ln, m.end() + 1))
    return out


def _strip_strings_and_comment(text: str) -> str:
    """Blank out string literals and the trailing comment, keeping columns."""
    out, quote, i = [], False, 0
    while i < len(text):
        ch = text[i]
        if quote:
            out.append(" ")
            if ch == "\\" and i + 1 < len(text):
                out.append(" ")
                i += 1
            elif ch == '"':
                quote = False
        elif ch == '"':
            quote = True
            out.append(" ")
        elif ch == "#":
            break
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _word_at(text: str, line: int, char: int) -> tuple[str, Span] | None:
    lines = text.splitlines()
    if line >= len(lines):
        return None
    code = _strip_strings_and_comment(lines[line])
    for m in _WORD.finditer(code):
        if m.start() <= char <= m.end():
            return m.group(0), Span("", line + 1, m.start() + 1, line + 1, m.end() + 1)
    return None


def _followed_by_paren(text: str, line: int, end: int) -> bool:
    lines = text.splitlines()
    return lines[line][end:].lstrip().startswith("(") if line < len(lines) else False


def _open_brace_op(text: str, line: int, char: int) -> tuple[str, set[str], str | None] | None:
    """If the cursor is inside an op's `{ ... }`: the op, the params already given, and the param whose
    value is being typed (after `name:`), else None. Looks back at most 40 lines."""
    lines = text.splitlines()
    start = max(0, line - 40)
    chunk = "\n".join(lines[start:line] + [lines[line][:char] if line < len(lines) else ""])
    code = "\n".join(_strip_strings_and_comment(x) for x in chunk.split("\n"))
    depth, i = 0, len(code) - 1
    while i >= 0:
        ch = code[i]
        if ch == "}":
            depth += 1
        elif ch == "{":
            if depth == 0:
                break
            depth -= 1
        i -= 1
    if i < 0:
        return None
    head = code[:i].rstrip()
    inside = code[i + 1:]
    m = re.search(r"([A-Za-z_]\w*\.[A-Za-z_]\w*)\s*\((?:[^()]|\([^()]*\))*\)\s*$", head)
    if m is None:
        return None
    given = set(re.findall(r"([A-Za-z_]\w*)\s*:", inside))
    pending = re.search(r"([A-Za-z_]\w*)\s*:\s*\w*$", inside)
    return m.group(1), given, pending.group(1) if pending else None


def _replaceable(text: str, span: Span, suggestion: str) -> Span | None:
    """The part of `span` a suggestion replaces: the whole span when it is one word, else the word inside
    it most like the suggestion."""
    import difflib

    lines = text.splitlines()
    if span.line - 1 >= len(lines):
        return None
    line = lines[span.line - 1]
    end = span.end_column - 1 if span.end_line == span.line else len(line)
    words = [(m.group(0), m.start()) for m in _WORD.finditer(line[:end]) if m.start() >= span.column - 1]
    if not words:
        return None
    best = max(words, key=lambda w: difflib.SequenceMatcher(None, w[0], suggestion).ratio())
    if best[0] == suggestion:
        return None
    return Span(span.file, span.line, best[1] + 1, span.line, best[1] + 1 + len(best[0]))
