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
from qlower.quantize.correct import correctable, corrections
from qlower.quantize.options import METHODS, Overrides, QuantOptions
from qlower.quantize.rewrite import quantize_graph
from qlower.quantize.shards import ShardWriter

__all__ = ["METHODS", "Overrides", "QuantOptions", "calibrate", "quantize", "quantize_graph", "source_kernels"]


def source_kernels(graph: Graph | None = None) -> Mapping[str, Mapping[str, Any]]:
    """The reference kernels of `graph`'s dialects (every installed dialect's: qlower's and the
    plugins'); an mllm graph needs only qlower's own, without enumerating the others."""
    if graph is not None and {op.type.partition(".")[0] for op in graph.ops} <= {"mllm"}:
        from qlower.reference.mllm import MLLM_KERNELS

        return {"mllm": MLLM_KERNELS}
    from qlower.plugins import installed

    return installed().kernels


def quantize(graph: Graph, feeds: Iterable[Mapping[str, np.ndarray]], options: QuantOptions | None = None, *,
             out: str | Path | None = None, kernels: Mapping[str, Mapping[str, Any]] | None = None,
             progress: Callable[[str], None] | None = None, timings: dict[str, Any] | None = None) -> Graph:
    """Calibrate `graph` on `feeds` (one input set per chunk, keyed by input name) and quantize it.

    With `out` (a `.json` path) the quantized graph is written there as the weights are made: each
    weight goes into `<stem>-NNNNN.safetensors` shards beside it as soon as it is quantized, and the
    graph references them, so memory stays bounded by the largest tensor. `timings` (a dict) gets the
    phases' wall times in seconds: weights, calibration (one entry per input set), activations, save."""
    import time
    from qlower.graph.io import save_graph

    opts = options or QuantOptions()
    say = progress or (lambda text: None)
    out = Path(out) if out is not None else None
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
    # Weights first, streamed out as they are made; then the activations are calibrated on the graph
    # with those weights (as AIMET's QuantSim computes encodings with its parameter quantizers on):
    # 4-bit weights move the activations, and ranges from the float weights would clip them.
    t = timings if timings is not None else {}
    t0 = time.perf_counter()
    say("quantizing weights")
    # biases that can take back the mean shift the quantized weights cause stay float until calibration
    # has measured their ops' input means (qlower.quantize.correct)
    found = correctable(graph) if opts.bias_correction else []
    hold = frozenset(s.bias for s in found)
    if out is None:
        wq = quantize_graph(graph, {}, opts, activations=False, hold=hold)
    else:
        with ShardWriter(out.parent, out.stem) as shards:
            wq = quantize_graph(graph, {}, opts, sink=shards.add, name=out.stem, activations=False, hold=hold)
    t["weights"] = time.perf_counter() - t0
    t["calibration"] = per_set = []
    mark = [time.perf_counter()]

    def step(n: int) -> None:
        now = time.perf_counter()
        per_set.append(now - mark[0])
        mark[0] = now
        say(f"calibrated on input set {n}")

    say("calibrating")
    seen = calibrate(wq, feeds, kernels if kernels is not None else source_kernels(graph),
                     histogram=opts.calibration_method != "minmax", progress=step,
                     features={s.input: s.axis for s in found})
    t1 = time.perf_counter()
    shift = corrections(graph, wq, found, seen) if found else None
    q = quantize_graph(wq, seen, opts, name=out.stem if out is not None else None, shift=shift)
    t["activations"] = time.perf_counter() - t1
    if out is not None:
        t2 = time.perf_counter()
        save_graph(q, out, quant_refs=1024)
        t["save"] = time.perf_counter() - t2
    t["total"] = time.perf_counter() - t0
    return q
