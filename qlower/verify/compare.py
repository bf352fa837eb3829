"""Whole-graph check: the source graph's reference run against the lowered QNN graph's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import numpy as np


@attrs.frozen
class Difference:
    output: str
    max_abs: float
    max_ref: float

    @property
    def relative(self) -> float:
        return self.max_abs / self.max_ref if self.max_ref > 0 else self.max_abs


def example_inputs(graph, model_path: str | Path | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Stored-form inputs: `<model>_inputs.npz` next to the model if there is one, else seeded random."""
    if model_path is not None:
        p = Path(model_path)
        cand = p.with_name(p.stem + "_inputs.npz")
        if cand.exists():
            with np.load(cand, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
    rng = np.random.default_rng(seed)
    out = {}
    for v in graph.inputs:
        shape = v.shape or ()
        if v.quant is not None or v.dtype.kind in "iu":
            info = np.iinfo(v.dtype)
            hi = int(info.max) if v.quant is not None else 2
            out[v.name] = rng.integers(0 if v.quant is None else info.min, hi + 1, size=shape).astype(v.dtype)
        elif v.dtype.kind == "b":
            out[v.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            out[v.name] = rng.standard_normal(shape).astype(v.dtype)
    return out


def differences(source_graph, qnn_graph, inputs: dict[str, np.ndarray], kernels) -> list[Difference]:
    from qlower.qnn.convert import encoding_of
    from qlower.reference.interpreter import run_dequantized
    from qlower.reference.quant import dequantize
    from qlower.reference.source import run_graph

    real = {}
    for v in source_graph.inputs:
        arr = inputs[v.name]
        real[v.name] = (dequantize(arr, encoding_of(v.quant, v.dtype, v.shape), v.dtype)
                        if v.quant is not None else arr)
    want = run_graph(source_graph, real, kernels)
    have = run_dequantized(qnn_graph, inputs)
    out = []
    for name, w in want.items():
        w = np.asarray(w, np.float64)
        h = np.asarray(have[name], np.float64).reshape(w.shape)
        out.append(Difference(name, float(np.max(np.abs(h - w), initial=0)), float(np.max(np.abs(w), initial=0))))
    return out


def compare_lowering(model: str, frontend: str, result: Any, rules: Any) -> str:
    """The `--verify` line of `qlower lower`: reload the source, run both, report the max difference."""
    from qlower.cli.commands import load_model

    source = load_model(model, frontend)
    inputs = example_inputs(source, model)
    diffs = differences(source, result.qnn, inputs, rules.kernels)
    worst = max(diffs, key=lambda d: d.relative)
    return (f"reference check: max |lowered − source| = {worst.max_abs:.3g} on {worst.output} "
            f"({worst.relative:.2%} of its max |value| {worst.max_ref:.3g})")
