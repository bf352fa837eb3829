"""Shared by the torch.export tests: export a module as users do, lower, validate, run with the QNN
reference kernels and compare with torch."""

from __future__ import annotations

import numpy as np
import torch

import qlower
from qlower.frontends.torch_frontend import load_exported
from qlower.reference.interpreter import run_dequantized

TOL = {"cpu": 1e-4, "htp": 2e-2}  # relative to the output's largest magnitude (HTP runs float16)


def lower_and_compare(model: torch.nn.Module, args: tuple, rules, backend: str, core: bool) -> dict[str, int]:
    """Lower the exported program (core-ATen when `core`), validate, run, compare; the QNN op counts.
    int64 inputs (indices) are fed as int32, the type QNN holds them in."""
    model.eval()
    with torch.no_grad():
        want = model(*args).numpy().astype(np.float64)
    ep = torch.export.export(model, args, strict=False)
    if core:
        ep = ep.run_decompositions()
    graph = load_exported(ep)
    result = qlower.lower(graph, rules, backend=backend)
    result.raise_for_errors()  # lowered and validated against the backend's op definitions
    feeds = {v.name: (a.numpy().astype(np.int32) if a.dtype == torch.int64 else a.numpy())
             for v, a in zip(graph.inputs, args)}
    got = run_dequantized(result.qnn, feeds)[result.qnn.outputs[0]]
    assert got.shape == want.shape
    rel = np.max(np.abs(got - want)) / np.max(np.abs(want))
    assert rel <= TOL[backend], rel
    return result.qnn_op_counts()
