"""The Python API frontends use: load rules, lower a graph, save QNN artifacts.

    rules = qlower.load_rules(packs=["mllm"])
    result = qlower.lower(graph, rules, backend="htp")
    result.raise_for_errors()
    result.save("out/")
"""

from __future__ import annotations

import collections
import gc
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

from qlower.diagnostics import Diagnostic, QlowerError, SourceCache, error
from qlower.graph.core import Graph
from qlower.qnn.model import QnnGraph
from qlower.reference.spec import Kernel
from qlower.rewrite.functions import FunctionTable

BACKENDS = ("cpu", "gpu", "htp", "dsp", "lpai")


@attrs.frozen
class Rules:
    """A checked rule set with everything needed to lower and verify with it."""

    ruleset: Any  # qlower.lang.loader.RuleSet
    registry: Any  # qlower.qnn.opdef.OpDefRegistry
    functions: FunctionTable
    kernels: Mapping[str, Mapping[str, Kernel]]
    # Engines compiled per backend; an Engine is reusable across graphs, so lowering many
    # graphs with one rule set compiles the rules once.
    _engines: dict = attrs.field(factory=dict, init=False, repr=False, eq=False)

    @property
    def sources(self) -> SourceCache:
        return self.ruleset.sources

    def engine(self, backend: str | None):
        from qlower.rewrite.driver import Engine

        got = self._engines.get(backend)
        if got is None:
            got = self._engines[backend] = Engine(self.ruleset.rules, self.ruleset.ops, registry=self.registry,
                                                  backend=backend, functions=self.functions)
        return got


def load_registry(opdefs: Sequence[str | Path] = ()):
    from qlower.qnn.opdef import OpDefRegistry

    return OpDefRegistry.load(tuple(Path(p) for p in opdefs))


def load_rules(paths: Sequence[str | Path] = (), *, packs: Sequence[str] = (), opdefs: Sequence[str | Path] = (),
               plugins: bool = True, registry: Any = None) -> Rules:
    """Load and check rule files/folders and shipped packs; raises QlowerError on errors."""
    from qlower.lang.loader import load_rules as _load
    from qlower.plugins import installed

    from qlower.plugins import builtin_contributions

    extra = installed() if plugins else builtin_contributions()
    functions = extra.functions
    all_paths = [Path(p) for p in paths]
    for name in packs:
        found = extra.pack(name)
        if found is None:
            raise QlowerError(error(f"no rule pack named {name}", hint=f"known packs: {', '.join(sorted(extra.packs))}",
                                    code="no-pack"))
        all_paths.append(found)
    opdefs = list(opdefs) + list(extra.opdef_paths)
    reg = registry if registry is not None else load_registry(opdefs)
    ruleset = _load(all_paths, registry=reg, functions=functions)
    return Rules(ruleset, reg, functions, extra.kernels)


@attrs.define
class LowerResult:
    """What `lower` produced: the lowered graph, its QNN form, and what went wrong."""

    graph: Graph
    qnn: QnnGraph | None
    backend: str
    diagnostics: list[Diagnostic]
    coverage: dict[str, Any]
    timings: dict[str, float]
    ops_in: int
    sources: SourceCache | None = None

    @property
    def ok(self) -> bool:
        return self.qnn is not None and not any(d.is_error for d in self.diagnostics)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.is_error]

    def raise_for_errors(self) -> None:
        if not self.ok:
            raise QlowerError(self.errors or [error("lowering produced no QNN graph")])

    def save(self, outdir: str | Path, *, converter_command: str = "qlower") -> list[Path]:
        """Write `<name>_net.json`, `<name>.cpp`, `<name>.bin` (each complete or absent)."""
        from qlower.qnn.artifacts import save

        if self.qnn is None:
            raise QlowerError(error("nothing to save: the graph was not lowered"))
        t = time.perf_counter()
        paths = save(self.qnn, Path(outdir), converter_command=converter_command)
        self.timings["emit"] = time.perf_counter() - t
        return paths

    def coverage_json(self) -> dict[str, Any]:
        return {k: v.to_json() for k, v in sorted(self.coverage.items())}

    def qnn_op_counts(self) -> dict[str, int]:
        c = collections.Counter(op.type for op in (self.qnn.ops if self.qnn else ()))
        return dict(sorted(c.items()))


@contextmanager
def _no_gc() -> Iterator[None]:
    """Graph building allocates millions of small objects; cyclic GC passes over
    them cost more than the work itself and free nothing (the graph lives on)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def lower(graph: Graph, rules: Rules, backend: str = "htp", *, validate: bool = True,
          float16: bool | None = None, allow_partial: bool = False) -> LowerResult:
    """Rewrite `graph` in place until it is in the qnn dialect, then convert and validate.

    `float16` (default: on for HTP) runs HTP's float path in FLOAT_16, keeping
    float32 graph inputs/outputs behind Cast ops.
    """
    from qlower.qnn.convert import to_qnn
    from qlower.qnn.precision import to_float16
    from qlower.qnn.validate import validate_graph

    if backend not in BACKENDS:
        raise QlowerError(error(f"unknown backend {backend}", hint=f"one of {', '.join(BACKENDS)}",
                                code="backend"))
    from qlower.graph.check import check_graph

    timings: dict[str, float] = {}
    ops_in = len(graph)
    with _no_gc():
        t0 = time.perf_counter()
        problems = check_graph(graph, decls=rules.ruleset.ops, cycles=False)
        timings["check"] = time.perf_counter() - t0
        if any(d.is_error for d in problems):
            return LowerResult(graph, None, backend, problems, {}, timings, ops_in, rules.sources)
        t0 = time.perf_counter()
        engine = rules.engine(backend)
        outcome = engine.run(graph)
        diags = problems + list(outcome.diagnostics)
        if float16 is None:
            float16 = backend == "htp"
        if float16 and outcome.ok:
            to_float16(graph, rules.registry)
        if outcome.ok and rules.ruleset.computes:
            from qlower.qnn.retype import compute_in_supported_types

            compute_in_supported_types(graph, rules.ruleset.computes, rules.registry, backend)
        timings["lower"] = time.perf_counter() - t0
        qg = None
        t1 = time.perf_counter()
        if outcome.ok or allow_partial:
            try:
                qg = to_qnn(graph, rules.registry)
            except QlowerError as exc:
                diags.extend(exc.diagnostics)
            if qg is not None and validate:
                diags.extend(validate_graph(qg, rules.registry, backend))
        timings["validate"] = time.perf_counter() - t1
    return LowerResult(graph, qg, backend, diags, outcome.coverage, timings, ops_in, rules.sources)
