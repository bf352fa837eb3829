"""Calibration and quantization: a float graph (any frontend's) and calibration inputs → a quantized
`qlower-graph/1` graph that `qlower lower` takes as it is.

    q = qlower.quantize(graph, feeds, QuantOptions(weights_bitwidth=4, block_size=32), out="q.json")
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from qlower.graph.core import Graph
from qlower.quantize.calibrate import calibrate
from qlower.quantize.options import METHODS, Overrides, QuantOptions
from qlower.quantize.rewrite import quantize_graph
from qlower.quantize.shards import ShardWriter

__all__ = ["METHODS", "Overrides", "QuantOptions", "calibrate", "quantize", "quantize_graph", "source_kernels"]


def source_kernels() -> Mapping[str, Mapping[str, Any]]:
    """Every installed dialect's reference kernels (qlower's and the plugins')."""
    from qlower.plugins import installed

    return installed().kernels


def quantize(graph: Graph, feeds: Iterable[Mapping[str, np.ndarray]], options: QuantOptions | None = None, *,
             out: str | Path | None = None, kernels: Mapping[str, Mapping[str, Any]] | None = None,
             progress: Callable[[str], None] | None = None) -> Graph:
    """Calibrate `graph` on `feeds` (one input set per chunk, keyed by input name) and quantize it.

    With `out` (a `.json` path) the quantized graph is written there as the weights are made: each
    weight goes into `<stem>-NNNNN.safetensors` shards beside it as soon as it is quantized, and the
    graph references them, so memory stays bounded by the largest tensor."""
    from qlower.graph.io import save_graph

    opts = options or QuantOptions()
    say = progress or (lambda text: None)
    say("calibrating")
    seen = calibrate(graph, feeds, kernels if kernels is not None else source_kernels(),
                     histogram=opts.calibration_method != "minmax",
                     progress=lambda n: say(f"calibrated on input set {n}"))
    if out is None:
        return quantize_graph(graph, seen, opts)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with ShardWriter(out.parent, out.stem) as shards:
        say("quantizing weights")
        q = quantize_graph(graph, seen, opts, sink=shards.add, name=out.stem)
    save_graph(q, out, quant_refs=1024)
    return q
