"""`qlower lsp`: the Language Server Protocol over stdio, on pygls.

The protocol glue only: every answer comes from `qlower.lsp.analysis.Workspace`,
which reuses the loader, checker, formatter and op registry. Diagnostics are
published after a short quiet period so a burst of keystrokes is checked once.

Two translations live here because they are the protocol's: columns (the workspace
counts code points; the client counts in the position encoding negotiated at
`initialize`: UTF-16 when the client offers it, else UTF-8 or UTF-32, exactly), and
URIs (the workspace keys files by resolved path; answers name a file by the URI the
client opened it under, symlinked folders included).

The workspace (the op registry, plugins, and the checker behind it) is built on first need, not
at start: a file opened with the text and inputs of an earlier session's check gets that check's
diagnostics from `qlower.lsp.diagnostics_store` at once, and the real check follows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method
from pygls.uris import from_fs_path, to_fs_path

from qlower.diagnostics import Diagnostic, Severity, Span
from qlower.lsp.diagnostics_store import DiagnosticsStore, texts_read

if TYPE_CHECKING:
    from qlower.lsp.analysis import Workspace

DEBOUNCE_SECONDS = 0.075
TRIGGER_CHARACTERS = (".", "{", ",", ":")
_SEVERITY = {Severity.ERROR: lsp.DiagnosticSeverity.Error, Severity.WARNING: lsp.DiagnosticSeverity.Warning,
             Severity.NOTE: lsp.DiagnosticSeverity.Information}
_COMPLETION_KIND = {"op": lsp.CompletionItemKind.Class, "param": lsp.CompletionItemKind.Field,
                    "enum": lsp.CompletionItemKind.EnumMember, "function": lsp.CompletionItemKind.Function,
                    "variable": lsp.CompletionItemKind.Variable, "keyword": lsp.CompletionItemKind.Keyword,
                    "rule": lsp.CompletionItemKind.Reference, "module": lsp.CompletionItemKind.Module}
_SYMBOL_KIND = {"rule": lsp.SymbolKind.Function, "test": lsp.SymbolKind.Method, "op": lsp.SymbolKind.Class,
                "import": lsp.SymbolKind.Module, "map": lsp.SymbolKind.Function,
                "fragment": lsp.SymbolKind.Function, "def": lsp.SymbolKind.Function}
_CODECS = {lsp.PositionEncodingKind.Utf8: "utf-8", lsp.PositionEncodingKind.Utf16: "utf-16-le",
           lsp.PositionEncodingKind.Utf32: "utf-32-le"}
_UNIT = {"utf-8": 1, "utf-16-le": 2, "utf-32-le": 4}


class _Protocol(LanguageServerProtocol):
    """pygls's protocol, but UTF-16 first whenever the client offers it (the encoding every client has;
    pygls takes the client's first choice), UTF-8 or UTF-32 only for a client that offers no UTF-16."""

    @lsp_method(lsp.INITIALIZE)
    def lsp_initialize(self, params: lsp.InitializeParams) -> Generator[Any, Any, lsp.InitializeResult]:
        general = params.capabilities.general
        offered = general.position_encodings if general is not None else None
        if offered and lsp.PositionEncodingKind.Utf16 in offered:
            general.position_encodings = [lsp.PositionEncodingKind.Utf16,
                                          *(e for e in offered if e != lsp.PositionEncodingKind.Utf16)]
        return (yield from super().lsp_initialize(params))


def client_units(text: str, column: int, encoding: str) -> int:
    """Code-point column `column` of `text` in the client's code units."""
    head = text[:column]
    if head.isascii() or encoding == "utf-32-le":
        return len(head) + max(0, column - len(text))
    return len(head.encode(encoding)) // _UNIT[encoding] + max(0, column - len(text))


def code_points(text: str, units: int, encoding: str) -> int:
    """The code-point column of `units` client code units into `text` (a position inside a character
    counts as that character; past the end, the end)."""
    if text.isascii() or encoding == "utf-32-le":
        return min(units, len(text))
    n = 0
    for i, ch in enumerate(text):
        if n >= units:
            return i
        n += len(ch.encode(encoding)) // _UNIT[encoding]
    return len(text)


def _to_lsp_diagnostic(d: Diagnostic, to_range: Callable[[Span], lsp.Range], uri_of: Callable[[str], str]
                       ) -> lsp.Diagnostic:
    message = d.message + (f"\n{d.hint}" if d.hint else "")
    related = [lsp.DiagnosticRelatedInformation(lsp.Location(uri_of(n.span.file), to_range(n.span)), n.message)
               for n in d.notes if n.span is not None]
    data = {"hint": d.hint} if d.hint else None
    return lsp.Diagnostic(range=to_range(d.span), message=message, severity=_SEVERITY[d.severity], code=d.code,
                          source="qlower", related_information=related or None, data=data)


def build_server(workspace: Workspace | Callable[[], Workspace],
                 store: DiagnosticsStore | None = None) -> LanguageServer:
    """A server over `workspace` (or the function that builds it, called on first need); `store` keeps each
    opened or saved file's diagnostics for the next session's first answer."""
    from qlower import __version__

    server = LanguageServer("qlower", __version__, text_document_sync_kind=lsp.TextDocumentSyncKind.Full,
                            protocol_cls=_Protocol)
    pending: dict[str, asyncio.TimerHandle] = {}
    uris: dict[Path, str] = {}  # resolved path -> the URI the client opened it under
    folders: dict[Path, Path] = {}  # resolved folder -> the folder the client named it by (a symlink)
    built: list[Workspace] = []
    early: dict[Path, tuple[str, int]] = {}  # answered from the store, not yet opened in the workspace
    unchecked: set[Path] = set()  # answered from the store, not yet checked
    keep: set[Path] = set()  # the next check of these is kept in the store (opened or saved)

    def ws() -> Workspace:
        if not built:
            built.append(workspace() if callable(workspace) else workspace)
            for key, (text, version) in early.items():
                built[0].open(key, text, version)
            early.clear()
        return built[0]

    def line_text(file: str, line: int) -> str:
        if built:
            return built[0].line_text(file, line)
        key = Path(file).resolve()
        text = early[key][0] if key in early else None
        if text is None:
            try:
                text = key.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                return ""
        lines = [x.removesuffix("\r") for x in text.split("\n")]
        return lines[line] if 0 <= line < len(lines) else ""

    def encoding() -> str:
        return _CODECS.get(server.workspace.position_encoding, "utf-16-le")

    def path_of(uri: str) -> Path:
        return Path(to_fs_path(uri) or uri)

    def remember(uri: str) -> None:
        given = path_of(uri)
        real = given.resolve()
        uris[real] = uri
        while given != real and given.name == real.name and given.parent != given:
            given, real = given.parent, real.parent
            if given != real:
                folders[real] = given

    def uri_of(file: str | Path) -> str:
        real = Path(file).resolve()
        if real in uris:
            return uris[real]
        for parent in real.parents:
            if parent in folders:
                return from_fs_path(str(folders[parent] / real.relative_to(parent)))
        return from_fs_path(str(real))

    def to_range(span: Span) -> lsp.Range:
        enc = encoding()
        start = client_units(line_text(span.file, span.line - 1), span.column - 1, enc)
        end = client_units(line_text(span.file, span.end_line - 1), span.end_column - 1, enc)
        return lsp.Range(lsp.Position(span.line - 1, start), lsp.Position(span.end_line - 1, end))

    def at(uri: str, pos: lsp.Position) -> tuple[Path, int, int]:
        """The workspace's (path, line, code-point column) of a client position."""
        path = path_of(uri)
        return path, pos.line, code_points(line_text(str(path), pos.line), pos.character, encoding())

    def send(path: Path, diags: Sequence[Diagnostic], version: int) -> None:
        server.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(
            uri=uri_of(path), diagnostics=[_to_lsp_diagnostic(d, to_range, uri_of) for d in diags],
            version=version))

    def publish(path: Path) -> None:
        w = ws()
        diags = w.check(path)
        doc = w.docs[path]
        send(path, diags, doc.version)
        if store is not None and path in keep:
            keep.discard(path)
            store.put(path, doc.text, diags, texts_read(doc.closure, {p: d.text for p, d in w.docs.items()}))

    def refresh(paths: Sequence[Path], delay: float) -> None:
        loop = asyncio.get_event_loop()
        for p in paths:
            key = str(p)
            if key in pending:
                pending.pop(key).cancel()
            if delay <= 0:
                publish(p)
            else:
                pending[key] = loop.call_later(delay, lambda p=p, key=key: (pending.pop(key, None),
                                                                            p in ws().docs and publish(p)))

    def check_early() -> None:
        """The real check of the files answered from the store (the workspace is built for it)."""
        w = ws()
        todo = [p for p in unchecked if p in w.docs]
        unchecked.clear()
        refresh(todo, 0)

    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: LanguageServer, params: lsp.DidOpenTextDocumentParams) -> None:
        doc = params.text_document
        remember(doc.uri)
        key = path_of(doc.uri).resolve()
        keep.add(key)
        kept = store.get(key, doc.text) if store is not None and not built else None
        if kept is None:
            refresh(ws().open(key, doc.text, doc.version), 0)
            return
        early[key] = (doc.text, doc.version)
        unchecked.add(key)
        send(key, kept, doc.version)
        asyncio.get_event_loop().call_soon(check_early)  # after this answer is written

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: LanguageServer, params: lsp.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        text = ls.workspace.get_text_document(uri).source
        refresh(ws().open(path_of(uri), text, params.text_document.version), DEBOUNCE_SECONDS)

    @server.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: LanguageServer, params: lsp.DidSaveTextDocumentParams) -> None:
        path = path_of(params.text_document.uri).resolve()
        if path in ws().docs:
            keep.add(path)
            refresh([path], 0)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: LanguageServer, params: lsp.DidCloseTextDocumentParams) -> None:
        path = path_of(params.text_document.uri)
        early.pop(path.resolve(), None)
        keep.discard(path.resolve())
        if built:
            built[0].close(path)
        uris.pop(path.resolve(), None)
        ls.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=params.text_document.uri,
                                                                          diagnostics=[]))

    @server.feature(lsp.TEXT_DOCUMENT_HOVER)
    def hover(ls: LanguageServer, params: lsp.HoverParams) -> lsp.Hover | None:
        found = ws().hover(*at(params.text_document.uri, params.position))
        if found is None:
            return None
        text, span = found
        return lsp.Hover(lsp.MarkupContent(lsp.MarkupKind.Markdown, text), to_range(span))

    @server.feature(lsp.TEXT_DOCUMENT_DEFINITION)
    def definition(ls: LanguageServer, params: lsp.DefinitionParams) -> list[lsp.Location]:
        found = ws().definition(*at(params.text_document.uri, params.position))
        return [lsp.Location(uri_of(loc.path), to_range(loc.span)) for loc in found]

    @server.feature(lsp.TEXT_DOCUMENT_REFERENCES)
    def references(ls: LanguageServer, params: lsp.ReferenceParams) -> list[lsp.Location]:
        found = ws().references(*at(params.text_document.uri, params.position),
                                     params.context.include_declaration)
        return [lsp.Location(uri_of(loc.path), to_range(loc.span)) for loc in found]

    @server.feature(lsp.TEXT_DOCUMENT_COMPLETION, lsp.CompletionOptions(trigger_characters=list(TRIGGER_CHARACTERS)))
    def completion(ls: LanguageServer, params: lsp.CompletionParams) -> lsp.CompletionList:
        path, line, char = at(params.text_document.uri, params.position)
        if path.resolve() not in ws().docs:  # a client that completes before didOpen reached us
            return lsp.CompletionList(is_incomplete=False, items=[])
        context = params.context
        trigger = (context.trigger_character if context is not None
                   and context.trigger_kind == lsp.CompletionTriggerKind.TriggerCharacter else None)
        items = ws().completion(path, line, char, trigger=trigger)
        return lsp.CompletionList(is_incomplete=False, items=[
            lsp.CompletionItem(label=c.label, kind=_COMPLETION_KIND.get(c.kind), detail=c.detail or None,
                               documentation=c.documentation or None) for c in items])

    @server.feature(lsp.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    def symbols(ls: LanguageServer, params: lsp.DocumentSymbolParams) -> list[lsp.DocumentSymbol]:
        return [lsp.DocumentSymbol(name=s.name, kind=_SYMBOL_KIND[s.kind], range=to_range(s.span),
                                   selection_range=to_range(s.selection), detail=s.detail or None)
                for s in ws().symbols(path_of(params.text_document.uri))]

    @server.feature(lsp.TEXT_DOCUMENT_FORMATTING)
    def formatting(ls: LanguageServer, params: lsp.DocumentFormattingParams) -> list[lsp.TextEdit] | None:
        path = path_of(params.text_document.uri)
        new = ws().format(path)
        old = ws().docs[path.resolve()].text
        if new is None or new == old:
            return [] if new is not None else None
        lines = old.split("\n")
        end = lsp.Position(len(lines) - 1, client_units(lines[-1], len(lines[-1]), encoding()))
        return [lsp.TextEdit(lsp.Range(lsp.Position(0, 0), end), new)]

    @server.feature(lsp.TEXT_DOCUMENT_CODE_ACTION,
                    lsp.CodeActionOptions(code_action_kinds=[lsp.CodeActionKind.QuickFix]))
    def code_actions(ls: LanguageServer, params: lsp.CodeActionParams) -> list[lsp.CodeAction]:
        path = path_of(params.text_document.uri)
        uri = params.text_document.uri
        wanted = params.context.diagnostics
        out = []
        ours = ws().diagnostics(path)
        for fix in ws().fixes(path, ours):
            answered = [d for d in wanted if d.range == to_range(fix.diagnostic.span)]
            if wanted and not answered:
                continue
            out.append(lsp.CodeAction(title=fix.title, kind=lsp.CodeActionKind.QuickFix, diagnostics=answered or None,
                                      is_preferred=True,
                                      edit=lsp.WorkspaceEdit(changes={uri: [lsp.TextEdit(to_range(fix.span),
                                                                                          fix.text)]})))
        return out

    return server


def default_workspace() -> Workspace:
    """A workspace over the shipped op registry, installed plugins' packs, functions and OpDef files."""
    from qlower import _resources
    from qlower.api import load_registry
    from qlower.lsp.analysis import Workspace
    from qlower.plugins import installed

    extra = installed()
    return Workspace(load_registry(list(extra.opdef_paths)), extra.functions, extra.packs,
                     _resources.data_dir("patterns"))


def serve_stdio() -> int:
    from qlower.lsp.diagnostics_store import default_store

    build_server(default_workspace, default_store()).start_io()
    return 0
