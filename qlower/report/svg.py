"""SVG for the report: graph pages from a layout, and the live-bytes chart."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from html import escape

import attrs

from qlower.report.layout import NODE_H, NODE_W, Layout


@attrs.frozen
class DrawNode:
    name: str
    type: str
    kind: str  # "op" or "input"
    preds: tuple[int, ...]
    error: bool = False
    warning: bool = False


def _hue(op_type: str) -> int:
    return zlib.crc32(op_type.encode("utf-8")) % 360


def _clip(text: str, n: int = 24) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def graph_pages(graph_key: str, nodes: Sequence[DrawNode], layout: Layout) -> list[str]:
    """One `<svg>` per layout page; node `i` is `<g id="{graph_key}{i}">`, edges are `<path>`s.

    An edge whose ends are on different pages is drawn as a stub on each page
    (titled with the other end and its page), so every page stands alone.
    """
    pages: list[list[str]] = [[] for _ in layout.pages]
    edges: list[list[str]] = [[] for _ in layout.pages]
    boxes = layout.boxes
    for i, node in enumerate(nodes):
        b = boxes[i]
        for p in node.preds:
            if p >= i:
                continue
            a = boxes[p]
            if a.page == b.page:
                x1, y1, x2, y2 = a.x, a.y + NODE_H / 2, b.x, b.y - NODE_H / 2
                dy = max((y2 - y1) / 2, 20)
                edges[b.page].append(
                    f'<path class="edge" data-from="{p}" data-to="{i}" '
                    f'd="M{x1:.0f},{y1:.0f} C{x1:.0f},{y1 + dy:.0f} {x2:.0f},{y2 - dy:.0f} {x2:.0f},{y2:.0f}"/>')
            else:
                edges[b.page].append(
                    f'<path class="edge stub" data-from="{p}" data-to="{i}" d="M{b.x:.0f},{b.y - NODE_H / 2 - 14:.0f} '
                    f'v14"><title>from {escape(nodes[p].name)} (page {a.page + 1})</title></path>')
                edges[a.page].append(
                    f'<path class="edge stub" data-from="{p}" data-to="{i}" d="M{a.x:.0f},{a.y + NODE_H / 2:.0f} '
                    f'v14"><title>to {escape(node.name)} (page {b.page + 1})</title></path>')
    for i, node in enumerate(nodes):
        b = boxes[i]
        cls = f"node {node.kind}" + (" error" if node.error else "") + (" warning" if node.warning else "")
        label = "input" if node.kind == "input" else node.type
        pages[b.page].append(
            f'<g class="{cls}" id="{graph_key}{i}" data-i="{i}" data-g="{graph_key}" '
            f'transform="translate({b.x:.0f},{b.y:.0f})" style="--hue:{_hue(node.type)}">'
            f'<title>{escape(node.name)}</title>'
            f'<rect x="{-NODE_W / 2:.0f}" y="{-NODE_H / 2:.0f}" width="{NODE_W}" height="{NODE_H}" rx="7"/>'
            f'<text class="t" y="-4">{escape(_clip(label))}</text>'
            f'<text class="n" y="12">{escape(_clip(node.name, 28))}</text></g>')
    out = []
    for k, page in enumerate(layout.pages):
        out.append(f'<svg class="graph" data-page="{k}" width="{page.width:.0f}" height="{page.height:.0f}" '
                   f'viewBox="0 0 {page.width:.0f} {page.height:.0f}" xmlns="http://www.w3.org/2000/svg">'
                   f'<g class="edges">{"".join(edges[k])}</g><g class="nodes">{"".join(pages[k])}</g></svg>')
    return out


def live_chart(live: Sequence[int], peak_step: int | None, names: Sequence[str], width: int = 900,
               height: int = 220) -> str:
    """Live activation bytes over the execution steps, the peak marked; one `<rect>` hit zone per step."""
    from qlower.report.memory import human_bytes

    left, right, top, bottom = 70, 12, 14, 30
    n = len(live)
    if n == 0:
        return '<svg class="chart" width="300" height="40"><text x="8" y="24">no steps</text></svg>'
    top_v = max(max(live), 1)
    w, h = width - left - right, height - top - bottom

    def x(i: float) -> float:
        return left + (i + 0.5) * w / n

    def y(v: float) -> float:
        return top + h - v * h / top_v

    pts = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(live))
    area = f"{x(0):.1f},{y(0):.1f} {pts} {x(n - 1):.1f},{y(0):.1f}"
    ticks = []
    for frac in (0, 0.5, 1):
        v = top_v * frac
        ticks.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y(v):.1f}" y2="{y(v):.1f}"/>'
                     f'<text class="axis" x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{human_bytes(int(v))}</text>')
    hits = "".join(f'<rect class="hit" data-step="{i}" x="{x(i) - w / n / 2:.1f}" y="{top}" width="{w / n:.2f}" '
                   f'height="{h}"><title>step {i}: {escape(names[i])}, {human_bytes(live[i])} live</title></rect>'
                   for i in range(n)) if n <= 5000 else ""
    peak = ""
    if peak_step is not None:
        px, py = x(peak_step), y(live[peak_step])
        peak = (f'<circle class="peak" cx="{px:.1f}" cy="{py:.1f}" r="4"/>'
                f'<text class="peak-label" x="{min(px + 6, width - 150):.1f}" y="{max(py - 6, 12):.1f}">'
                f'peak {human_bytes(live[peak_step])} at {escape(_clip(names[peak_step], 40))}</text>')
    return (f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'xmlns="http://www.w3.org/2000/svg">{"".join(ticks)}'
            f'<polygon class="area" points="{area}"/><polyline class="line" points="{pts}"/>{peak}'
            f'<text class="axis" x="{left}" y="{height - 8}">step 0</text>'
            f'<text class="axis" x="{width - right}" y="{height - 8}" text-anchor="end">step {n - 1}</text>'
            f'{hits}</svg>')
