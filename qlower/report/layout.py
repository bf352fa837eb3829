"""A layered (Sugiyama-style) layout, split into pages so big graphs stay usable.

Nodes come in topological order with their predecessors. Each node's layer
is its longest path from a source; a few barycenter sweeps order each layer
to cut crossings; layers wider than `ROW` nodes wrap onto extra rows. Pages
hold whole rows, at most `page_nodes` nodes each (one over-wide layer may
exceed it), so the browser draws a few hundred nodes at a time.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

NODE_W, NODE_H = 176, 40
GAP_X, ROW_H, MARGIN = 20, 78, 24
ROW = 8  # nodes per row before a layer wraps
PAGE_NODES = 240


@attrs.frozen
class Box:
    x: float  # centre
    y: float
    page: int


@attrs.frozen
class Page:
    width: float
    height: float
    nodes: tuple[int, ...]


@attrs.frozen
class Layout:
    boxes: tuple[Box, ...]
    pages: tuple[Page, ...]


def _layers(preds: Sequence[Sequence[int]]) -> list[int]:
    layer = [0] * len(preds)
    for i, ps in enumerate(preds):
        earlier = [layer[p] for p in ps if p < i]
        layer[i] = max(earlier) + 1 if earlier else 0
    return layer


def _order(preds: Sequence[Sequence[int]], groups: list[list[int]], sweeps: int = 4) -> None:
    """Barycenter heuristic in place: sort each layer by the mean relative position of its neighbours."""
    succs: list[list[int]] = [[] for _ in preds]
    for i, ps in enumerate(preds):
        for p in ps:
            if p < i:
                succs[p].append(i)
    pos = [0.0] * len(preds)

    def place(group: list[int]) -> None:
        span = max(len(group) - 1, 1)
        for k, n in enumerate(group):
            pos[n] = k / span

    for g in groups:
        place(g)
    for sweep in range(sweeps):
        down = sweep % 2 == 0
        seq = groups[1:] if down else groups[-2::-1]
        for g in seq:
            def key(n: int) -> tuple[float, int]:
                nb = [p for p in preds[n] if p < n] if down else succs[n]
                return (sum(pos[m] for m in nb) / len(nb) if nb else pos[n], n)
            g.sort(key=key)
            place(g)


def layered(preds: Sequence[Sequence[int]], page_nodes: int = PAGE_NODES) -> Layout:
    """Positions for nodes `0..n-1` given each node's predecessors (indices; later ones are ignored)."""
    n = len(preds)
    if n == 0:
        return Layout((), (Page(2 * MARGIN, 2 * MARGIN, ()),))
    layer = _layers(preds)
    groups: list[list[int]] = [[] for _ in range(max(layer) + 1)]
    for i, l in enumerate(layer):
        groups[l].append(i)
    if n <= 20000:  # the sweeps are O(edges) each; skip them on huge graphs
        _order(preds, groups)
    rows = [g[k:k + ROW] for g in groups for k in range(0, len(g), ROW)]
    pages: list[list[list[int]]] = [[]]
    count = 0
    for row in rows:
        if pages[-1] and count + len(row) > page_nodes:
            pages.append([])
            count = 0
        pages[-1].append(row)
        count += len(row)
    boxes: list[Box | None] = [None] * n
    out_pages = []
    for p, page_rows in enumerate(pages):
        xs = _columns(preds, page_rows)
        left = min(xs.values()) - NODE_W / 2 - MARGIN
        width = max(xs.values()) + NODE_W / 2 + MARGIN - left
        for r, row in enumerate(page_rows):
            y = MARGIN + NODE_H / 2 + r * ROW_H
            for node in row:
                boxes[node] = Box(xs[node] - left, y, p)
        height = 2 * MARGIN + NODE_H + (len(page_rows) - 1) * ROW_H
        out_pages.append(Page(width, height, tuple(m for row in page_rows for m in row)))
    return Layout(tuple(b for b in boxes if b is not None), tuple(out_pages))


def _columns(preds: Sequence[Sequence[int]], rows: list[list[int]]) -> dict[int, float]:
    """x of each node on a page: under the mean x of its predecessors on the page (so chains run
    straight down), kept in row order at least one node width apart, each row shifted to sit
    where its nodes want to be on average."""
    step = NODE_W + GAP_X
    xs: dict[int, float] = {}
    for row in rows:
        want: list[float | None] = []
        for node in row:
            ps = [xs[q] for q in preds[node] if q in xs]
            want.append(sum(ps) / len(ps) if ps else None)
        known = [w for w in want if w is not None]
        centre = sum(known) / len(known) if known else 0.0
        filled = [w if w is not None else centre + (k - (len(row) - 1) / 2) * step for k, w in enumerate(want)]
        placed: list[float] = []
        for w in filled:
            placed.append(w if not placed else max(w, placed[-1] + step))
        shift = sum(f - x for f, x in zip(filled, placed)) / len(row)
        for node, x in zip(row, placed):
            xs[node] = x + shift
    return xs
