"""The lowering report as one self-contained HTML page (no network: CSS, script, data and SVG inline).

What it shows (docs/report.md): the source graph and the lowered QNN graph as
layered SVG pictures, linked both ways (a source node lights up its QNN ops, a
QNN node its source nodes, rule and rule location); each node's diagnostics
in place; per-node MACs and bytes; the memory figures with a chart of live
activation bytes per step; and, when given, the per-op verification table.
Big graphs are paginated: each picture page holds at most `page_nodes` nodes.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from qlower._files import write_atomic
from qlower.diagnostics import Diagnostic, Severity
from qlower.qnn.macs import graph_macs
from qlower.qnn.model import QnnGraph, TensorParam, TensorType
from qlower.report.layout import PAGE_NODES, layered
from qlower.report.memory import MemoryReport, human_bytes, memory_report, tensor_bytes
from qlower.report.source import SourceGraph
from qlower.report.svg import DrawNode, graph_pages, live_chart

_ASSETS = Path(__file__).parent
# Columns the verification panel shows first, in this order; other keys follow.
VERIFY_COLUMNS = ("source_op", "rule", "local_error", "cumulative_error", "tolerance", "verdict")


def _subject_name(subject: str | None) -> tuple[str, str, str] | None:
    """("node"|"tensor", name, op type or "") from a diagnostic subject such as
    `node attn.q (qnn.MatMul, from ...)`."""
    if not subject:
        return None
    m = re.match(r"(node|tensor) (.+?)(?: \(([^,)]*).*\))?$", subject)
    return (m.group(1), m.group(2), m.group(3) or "") if m else None


def _diag_json(d: Diagnostic) -> dict[str, Any]:
    return {"severity": str(d.severity), "message": d.message, "where": str(d.span) if d.span else (d.subject or ""),
            "hint": d.hint or "", "code": d.code or "",
            "notes": [f"{n.span}: {n.message}" if n.span else n.message for n in d.notes]}


def _attach(diags: Sequence[Diagnostic], names: dict[str, int], producers: dict[str, int],
            qnn: bool) -> dict[int, list[int]]:
    """Node index -> indices of the diagnostics that name it (or a tensor it produces).

    A subject naming a `qnn.` op type belongs to the QNN graph only (source and
    QNN nodes often share names)."""
    out: dict[int, list[int]] = {}
    for k, d in enumerate(diags):
        got = _subject_name(d.subject)
        if got is None:
            continue
        kind, name, op_type = got
        if not qnn and op_type.startswith("qnn."):
            continue
        i = names.get(name) if kind == "node" else producers.get(name)
        if i is not None:
            out.setdefault(i, []).append(k)
    return out


def _qnn_view(g: QnnGraph, diags: Sequence[Diagnostic]) -> tuple[list[DrawNode], list[dict[str, Any]]]:
    inputs = list(g.inputs)
    index: dict[str, int] = {name: i for i, name in enumerate(inputs)}  # tensor -> producing draw node
    n_in = len(inputs)
    macs = graph_macs(g)
    tensors = g.tensors
    for step, op in enumerate(g.ops):
        for t in op.outputs:
            index.setdefault(t, n_in + step)
    names = {op.name: n_in + s for s, op in enumerate(g.ops)}
    by_node = _attach(diags, names, index, qnn=True)
    draw: list[DrawNode] = []
    data: list[dict[str, Any]] = []

    def dims(name: str) -> list[Any]:
        t = tensors.get(name)
        return [name, t.datatype.name, list(t.dims)] if t is not None else [name, "?", []]

    for name in inputs:
        i = len(draw)
        draw.append(DrawNode(name, "input", "input", ()))
        data.append({"name": name, "type": "input", "kind": "input", "outs": [dims(name)],
                     "out_bytes": tensor_bytes(tensors[name]) if name in tensors else 0, "diags": by_node.get(i, [])})
    for step, op in enumerate(g.ops):
        i = len(draw)
        preds = tuple(dict.fromkeys(index[t] for t in op.inputs if t in index and index[t] != i))
        ds = by_node.get(i, [])
        draw.append(DrawNode(op.name, op.type, "op", preds,
                             error=any(diags[k].severity is Severity.ERROR for k in ds),
                             warning=any(diags[k].severity is Severity.WARNING for k in ds)))
        static = sum(tensor_bytes(tensors[t]) for t in op.inputs
                     if t in tensors and tensors[t].type is TensorType.STATIC)
        static += sum(tensor_bytes(p.tensor) for p in op.params if isinstance(p, TensorParam))
        o = op.origin
        data.append({"name": op.name, "type": op.type, "kind": "op", "step": step, "package": op.package,
                     "rule": o.rule if o else None, "location": o.location if o else None,
                     "sources": list(o.sources) if o else [], "macs": macs[step],
                     "out_bytes": sum(tensor_bytes(tensors[t]) for t in op.outputs if t in tensors),
                     "static_bytes": static, "ins": [dims(t) for t in op.inputs],
                     "outs": [dims(t) for t in op.outputs], "diags": ds})
    return draw, data


def _source_view(s: SourceGraph, diags: Sequence[Diagnostic]) -> tuple[list[DrawNode], list[dict[str, Any]]]:
    inputs = [v for v in s.inputs if v not in s.constants]
    index = {name: i for i, name in enumerate(inputs)}
    for k, node in enumerate(s.nodes):
        for v in node.outputs:
            index.setdefault(v, len(inputs) + k)
    names = {node.name: len(inputs) + k for k, node in enumerate(s.nodes)}
    by_node = _attach(diags, names, index, qnn=False)
    draw: list[DrawNode] = []
    data: list[dict[str, Any]] = []
    for name in inputs:
        draw.append(DrawNode(name, "input", "input", ()))
        data.append({"name": name, "type": "input", "kind": "input", "qnn": [], "diags": by_node.get(len(data), [])})
    for node in s.nodes:
        i = len(draw)
        preds = tuple(dict.fromkeys(index[v] for v in node.inputs if v in index and index[v] != i))
        ds = by_node.get(i, [])
        draw.append(DrawNode(node.name, node.type, "op", preds,
                             error=any(diags[k].severity is Severity.ERROR for k in ds),
                             warning=any(diags[k].severity is Severity.WARNING for k in ds)))
        data.append({"name": node.name, "type": node.type, "kind": "op", "qnn": [], "diags": ds,
                     "outs": [[v, list(sh) if sh is not None else None] for v, sh in zip(node.outputs, node.shapes)]})
    return draw, data


def _link(src: list[dict[str, Any]], qnn: list[dict[str, Any]]) -> None:
    """Fill `qnn` (source -> QNN node indices) and `src` (QNN -> source node indices)."""
    by_name = {n["name"]: i for i, n in enumerate(src) if n["kind"] == "op"}
    for qi, q in enumerate(qnn):
        q["src"] = [by_name[s] for s in q.get("sources", []) if s in by_name]
        for si in q["src"]:
            src[si]["qnn"].append(qi)


def _plain(v: Any) -> Any:
    """JSON-safe values: non-finite floats become text (JSON has no NaN), numpy scalars Python ones."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "item") and callable(v.item) and getattr(v, "ndim", 1) == 0:
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v if v is None or isinstance(v, (str, int, float, bool)) else str(v)


def _json_script(obj: Any) -> str:
    """JSON safe inside a `<script>` element."""
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _pages_html(key: str, svgs: list[str]) -> str:
    pages = (f'<button data-step="-1" aria-label="previous page">◀</button>'
             f'<span class="pageno">page 1 of {len(svgs)}</span>'
             f'<button data-step="1" aria-label="next page">▶</button>') if len(svgs) > 1 else ""
    nav = (f'<div class="pager" data-g="{key}">{pages}<span class="zoom"><button data-zoom="0.8" aria-label="zoom out">−'
           f'</button><button data-zoom="0" aria-label="fit width">fit</button><button data-zoom="1.25" '
           f'aria-label="zoom in">+</button></span></div>')
    body = "".join(svg if k == 0 else svg.replace("<svg ", '<svg style="display:none" ', 1)
                   for k, svg in enumerate(svgs))
    return f'{nav}<div class="canvas">{body}</div>'


def render_html(*, title: str, backend: str, source: SourceGraph | None, qnn: QnnGraph | None,
                diagnostics: Sequence[Diagnostic] = (), verification: Sequence[Mapping[str, Any]] | None = None,
                page_nodes: int = PAGE_NODES) -> str:
    """The page's text. `verification` rows (dicts, e.g. `source_op`, `rule`, `local_error`,
    `cumulative_error`, `tolerance`, `verdict`) fill the verification panel."""
    diags = list(diagnostics)
    s_draw, s_data = _source_view(source, diags) if source is not None else ([], [])
    q_draw, q_data = _qnn_view(qnn, diags) if qnn is not None else ([], [])
    _link(s_data, q_data)
    s_layout = layered([n.preds for n in s_draw], page_nodes)
    q_layout = layered([n.preds for n in q_draw], page_nodes)
    for nodes, lay in ((s_data, s_layout), (q_data, q_layout)):
        for n, box in zip(nodes, lay.boxes):
            n["page"] = box.page
    mem: MemoryReport | None = memory_report(qnn) if qnn is not None else None
    total_macs = sum(n.get("macs", 0) for n in q_data)
    errors = sum(1 for d in diags if d.is_error)
    data = {
        "title": title, "backend": backend, "errors": errors,
        "source": {"nodes": s_data, "pages": len(s_layout.pages)},
        "qnn": {"nodes": q_data, "pages": len(q_layout.pages)},
        "diagnostics": [_diag_json(d) for d in diags],
        "memory": mem.to_json() if mem else None,
        "total_macs": total_macs,
        "verification": [_plain(dict(r)) for r in verification] if verification is not None else None,
        "verify_columns": list(VERIFY_COLUMNS),
    }
    ops = [n for n in q_data if n["kind"] == "op"]
    summary = [("source ops", str(sum(1 for n in s_data if n["kind"] == "op")) if source else "—"),
               ("QNN ops", str(len(ops)) if qnn else "not lowered"),
               ("MACs per inference", f"{total_macs:,}"),
               ("lowering for " + backend.upper(), "ok" if not errors else f"{errors} error(s)")]
    if mem is not None:
        summary += [("static bytes", f"{mem.static_bytes:,} ({human_bytes(mem.static_bytes)})"),
                    ("peak activation bytes", f"{mem.peak_activation_bytes:,} ({human_bytes(mem.peak_activation_bytes)})"),
                    ("peak at", f"{mem.peak_node} (step {mem.peak_step})" if mem.peak_node else "—")]
    chips = "".join(f'<div class="chip{" bad" if k.startswith("lowering") and errors else ""}">'
                    f'<span class="k">{escape(k)}</span><span class="v">{escape(v)}</span></div>'
                    for k, v in summary)
    memory_html = '<p class="muted">No lowered graph, so no memory figures.</p>'
    if mem is not None:
        rows = "".join(f"<tr><td>{escape(k)}</td><td class=num>{v:,}</td><td class=num>{human_bytes(v)}</td></tr>"
                       for k, v in mem.static_bytes_by_datatype.items())
        memory_html = (
            f'<div class="memfig" id="memory-figures"><div><b>static_bytes</b> {mem.static_bytes:,}</div>'
            f'<div><b>peak_activation_bytes</b> {mem.peak_activation_bytes:,}</div>'
            f'<div><b>peak node</b> <a href="#" class="goto" data-g="q" data-name="{escape(mem.peak_node or "")}">'
            f'{escape(mem.peak_node or "—")}</a> (step {mem.peak_step})</div></div>'
            f'<table class="small"><thead><tr><th>static datatype</th><th>bytes</th><th></th></tr></thead>'
            f'<tbody>{rows}</tbody></table>'
            f'<h3>Live activation bytes per step</h3>'
            f'{live_chart(mem.live_bytes, mem.peak_step, [op.name for op in qnn.ops] if qnn else [])}'
            f'<p class="muted">Liveness in <code>_net.json</code> node order; the backend allocator may reuse, '
            f'pad or split buffers differently (see docs/report.md).</p>')
    css = (_ASSETS / "page.css").read_text(encoding="utf-8")
    js = (_ASSETS / "page.js").read_text(encoding="utf-8")
    s_svgs = graph_pages("s", s_draw, s_layout) if source is not None else []
    q_svgs = graph_pages("q", q_draw, q_layout) if qnn is not None else []
    s_panel = _pages_html("s", s_svgs) if s_svgs else '<p class="muted">No source graph given.</p>'
    q_panel = _pages_html("q", q_svgs) if q_svgs else '<p class="muted">The graph was not lowered (see the diagnostics).</p>'
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>qlower report: {escape(title)}</title>
<style>{css}</style></head>
<body>
<header><h1>qlower lowering report: {escape(title)}</h1><div class="chips">{chips}</div></header>
<main>
<section class="graphs">
  <div class="panel" id="panel-s"><h2>Source graph</h2>{s_panel}</div>
  <div class="panel" id="panel-q"><h2>QNN graph ({escape(backend.upper())})</h2>{q_panel}</div>
</section>
<aside id="details"><h2>Details</h2><div id="details-body" class="muted">Click a node in either graph.</div></aside>
<section id="diagnostics"><h2>Diagnostics</h2><div id="diag-body"></div></section>
<section id="memory"><h2>Memory</h2>{memory_html}</section>
<section id="verification"><h2>Verification</h2><div id="verify-body"></div></section>
<section id="nodes"><h2>QNN nodes</h2><input id="filter" type="search" placeholder="filter by name, type, rule or source">
<div id="node-table"></div></section>
</main>
<script type="application/json" id="qlower-data">{_json_script(data)}</script>
<script>{js}</script>
</body></html>
"""


def write_html(path: str | Path, **kwargs: Any) -> Path:
    """Write `render_html(**kwargs)` to `path` atomically (complete or absent)."""
    p = Path(path)
    write_atomic(p, render_html(**kwargs).encode("utf-8"))
    return p
