"""Whole-graph verification: the source graph's reference run against the lowered QNN graph's.

`verify_lowering` is the gate behind `qlower lower --verify` and
`qlower.lower(..., verify=True)`: it passes when every graph output is within
tolerance (`qlower.verify.tolerance`) and, when it fails, localises the cause
with the per-op analysis of `qlower.verify.debug`.
"""

from __future__ import annotations

import math
import os
import stat
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from qlower.diagnostics import QlowerError, error
from qlower.graph.core import Graph
from qlower.qnn.model import QnnGraph
from qlower.verify.debug import DebugReport, OpCheck, TensorCheck, analyse
from qlower.verify.tolerance import TolerancePolicy


@attrs.frozen
class Verification:
    """The verdict of a verified lowering; `report` holds the per-op table when it was localised."""

    report: DebugReport
    seed: int | None = None  # the seed of random inputs (None: inputs were given)

    @property
    def passed(self) -> bool:
        return self.report.passed

    @property
    def outputs(self) -> tuple[TensorCheck, ...]:
        return self.report.outputs

    @property
    def culprit(self) -> OpCheck | None:
        return self.report.culprit

    @property
    def diagnosis(self) -> str:
        return self.report.diagnosis

    def summary(self) -> str:
        return self.report.summary()

    def to_json(self) -> dict[str, Any]:
        return {**self.report.to_json(), "seed": self.seed}


MAX_INPUT_BYTES = 1 << 30  # inputs read or made for a run, all together, unless the caller allows more


def read_inputs(path: str | Path, max_bytes: int = MAX_INPUT_BYTES) -> dict[str, np.ndarray]:
    """Inputs from an .npz keyed by graph input name.

    Each member's header is checked before its data is read (a small deflated member may claim
    any size), the total is held to `max_bytes`, and complex or object arrays are refused (the
    graphs qlower runs compute on real numbers: the imaginary part would be dropped)."""
    from qlower.graph.npz import _Npz

    p = Path(path)
    try:
        if not stat.S_ISREG(os.stat(p).st_mode):
            raise QlowerError(error(f"cannot read inputs {path}: not a regular file", code="io"))
        archive = _Npz.open(p)
    except OSError as exc:
        raise QlowerError(error(f"cannot read inputs {path}: {exc.strerror or exc}", code="io")) from None
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise QlowerError(error(f"cannot read inputs {path}: not an .npz archive ({type(exc).__name__})",
                                code="io")) from None
    out: dict[str, np.ndarray] = {}
    left = max_bytes
    for key in archive.keys():
        try:
            arr = archive.get(key, left)
        except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
            raise QlowerError(error(f"cannot read input {key!r} from {path}: {str(exc)[:300]}", code="io",
                                    hint=f"inputs are limited to {max_bytes} bytes in all (--max-input-bytes)")
                              ) from None
        if arr.dtype.kind in "cOV":
            raise QlowerError(error(f"input {key!r} in {path} is {arr.dtype}: qlower runs real-valued graphs "
                                    "(its imaginary part would be lost)", code="io"))
        left -= arr.nbytes
        if left < 0:
            raise QlowerError(error(f"inputs in {path} hold more than {max_bytes} bytes", code="io",
                                    hint="pass --max-input-bytes N to allow more"))
        out[key] = np.array(arr)  # (a copy: the archive's mapping goes with it)
    return out


def example_inputs(graph: Graph, model_path: str | Path | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Stored-form inputs: `<model>_inputs.npz` next to the model if there is one, else seeded random."""
    found = inputs_next_to(model_path) if model_path is not None else None
    return found if found is not None else random_inputs(graph, seed)


def inputs_next_to(model_path: str | Path, max_bytes: int = MAX_INPUT_BYTES) -> dict[str, np.ndarray] | None:
    """The example inputs `<model>_inputs.npz` stored next to a model, if there are any."""
    p = Path(model_path)
    cand = p.with_name(p.stem + "_inputs.npz")
    return read_inputs(cand, max_bytes) if cand.exists() else None


def random_inputs(graph: Graph, seed: int = 0, max_bytes: int = MAX_INPUT_BYTES) -> dict[str, np.ndarray]:
    """Seeded random inputs in stored form: standard normal floats, the full range of
    quantized inputs, small non-negative integers (indices), random booleans. Graph inputs
    declaring more than `max_bytes` in all are refused before anything is allocated."""
    need = sum(math.prod(v.shape or ()) * max(v.dtype.itemsize, 8) for v in graph.inputs)  # (made as 8-byte numbers)
    if need > max_bytes:
        raise QlowerError(error(f"the graph's inputs need {need} bytes of random values, more than {max_bytes}",
                                code="input-size", hint="pass --max-input-bytes N to allow more, or give "
                                "--inputs FILE.npz"))
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


def snapshot(graph: Graph) -> Graph:
    """A structural copy to keep the source semantics while `lower` rewrites the graph in
    place (constant arrays are shared: lowering replaces them, it does not write into them)."""
    copy = Graph(graph.name)
    values = {}
    for v in graph.values:
        values[id(v)] = copy.add_value(v.name, v.dtype, v.shape, quant=v.quant, data=v.data)
    for op in graph.topo_order():
        copy.add_op(op.name, op.type, [values[id(x)] if x is not None else None for x in op.operands],
                    [values[id(r)] for r in op.results], dict(op.attrs), op.provenance)
    copy.set_io([values[id(v)] for v in graph.inputs], [values[id(v)] for v in graph.outputs])
    return copy


def verify_lowering(source: Graph, lowered: Graph, qnn: QnnGraph, kernels: Mapping[str, Mapping[str, Any]],
                    inputs: Mapping[str, np.ndarray], *, backend: str = "", policy: TolerancePolicy | None = None,
                    localise: bool | None = None, seed: int | None = None, ops: Any = None) -> Verification:
    """Run both graphs on `inputs` and judge the outputs.

    `lowered` is the graph after lowering (its ops carry the provenance that maps
    QNN ops to source ops). `localise`: True always builds the per-op table, False
    never, None (default) only when an output is beyond tolerance. `ops`: the op registry whose
    kernels run `qnn` (default: the interpreter's, QNN's own ops).
    """
    prov = {op.name: op.provenance for op in lowered.ops if op.provenance is not None}
    report = analyse(source, qnn, prov, inputs, kernels, backend=backend, policy=policy,
                     localise=bool(localise), ops=ops)
    if localise is None and not report.passed:
        report = analyse(source, qnn, prov, inputs, kernels, backend=backend, policy=policy, localise=True,
                         ops=ops)
    return Verification(report, seed)
