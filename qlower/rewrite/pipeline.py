"""The lowering pipeline, declared once: the named stages from a source graph to a validated QNN table.

`qlower.lower` (and through it the CLI) and every `.qpat` rule test run these stages through one
runner, so what a rule test checks is what users get. The stages, in order:

    check     the source graph is well formed (declared ops, arities)   qlower.graph.check
    rewrite   the rule engine, until every op is in the qnn dialect     qlower.rewrite.driver
    reencode  quantized datatypes the backend lacks, re-encoded exactly qlower.qnn.reencode
    float16   the float path in FLOAT_16 where the backend runs so      qlower.qnn.precision
    compute   conversions around ops the backend takes in other types  qlower.qnn.retype
    convert   the qnn-dialect graph to a QnnTable                       qlower.qnn.convert
    validate  the table against the backend's op definitions            qlower.qnn.validate

A stage that finds errors stops the run (their diagnostics say why); a caller may also stop after a
named stage and go on later (`Lowering.run(until=...)`), as rule tests do to look at what the rules
emitted before the QNN passes change it. Time is measured here; garbage-collection policy is the
entry points' (`qlower.api`, the CLI), not the stages'.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from qlower.diagnostics import Diagnostic, QlowerError
from qlower.graph.core import Graph
from qlower.qnn.backends import runs_float_in_float16
from qlower.qnn.opdef import OpDefRegistry
from qlower.qnn.registry import QnnOps
from qlower.qnn.table import QnnTable

STAGES: tuple[str, ...] = ("check", "rewrite", "reencode", "float16", "compute", "convert", "validate")

# The timing each stage adds to (the names `LowerResult.timings` has always had).
TIMING: Mapping[str, str] = {"check": "check", "rewrite": "lower", "reencode": "lower", "float16": "lower",
                             "compute": "lower", "convert": "validate", "validate": "validate"}


@attrs.frozen
class Target:
    """What a graph is lowered for: the backend, QNN's op definitions and the one op registry
    (definitions, shape functions, kernels; a plugin's custom ops included)."""

    backend: str
    opdefs: OpDefRegistry
    ops: QnnOps

    @classmethod
    def of(cls, backend: str, opdefs: OpDefRegistry, ops: QnnOps | None = None) -> Target:
        return cls(backend, opdefs, ops if ops is not None else QnnOps.build(opdefs))


@attrs.define
class Lowering:
    """One graph's run through `STAGES`, in place on `graph`; `run` goes on from the last stage done."""

    graph: Graph
    target: Target
    rewrite: Callable[[Graph], Any]  # the engine's run: Graph -> qlower.rewrite.driver.Outcome
    decls: Mapping[str, Any] | None = None  # the source dialects' op declarations (the check stage)
    computes: Sequence[Any] = ()  # the rule set's compute declarations (the compute stage)
    float16: bool | None = None  # None: where the backend runs float in FLOAT_16
    validate: bool = True
    allow_partial: bool = False  # convert when every op is lowered even though a rule reported errors
    diagnostics: list[Diagnostic] = attrs.field(factory=list)
    timings: dict[str, float] = attrs.field(factory=dict)
    outcome: Any = None  # the rewrite stage's Outcome
    table: QnnTable | None = None
    float16_changed: int = 0  # values the float16 stage retyped
    done: list[str] = attrs.field(factory=list)  # the stages run, in order
    stopped: bool = False  # a stage found errors: nothing after it runs

    @property
    def ok(self) -> bool:
        return not self.stopped and not any(d.is_error for d in self.diagnostics)

    def run(self, until: str | None = None) -> Lowering:
        """Run the stages not yet run, up to and including `until` (default: all)."""
        if until is not None and until not in STAGES:
            raise ValueError(f"no stage {until!r}; the stages are {', '.join(STAGES)}")
        for name in STAGES[len(self.done):]:
            if self.stopped:
                break
            t = time.perf_counter()
            getattr(self, f"_{name}")()
            bucket = TIMING[name]
            self.timings[bucket] = self.timings.get(bucket, 0.0) + time.perf_counter() - t
            self.done.append(name)
            if name == until:
                break
        return self

    def _check(self) -> None:
        from qlower.graph.check import check_graph

        found = check_graph(self.graph, decls=self.decls, cycles=False)
        self.diagnostics.extend(found)
        if any(d.is_error for d in found):
            self.stopped = True

    def _rewrite(self) -> None:
        self.outcome = self.rewrite(self.graph)
        self.diagnostics.extend(self.outcome.diagnostics)

    def _rewritten(self) -> bool:
        return self.outcome is not None and self.outcome.ok

    def _reencode(self) -> None:
        if self._rewritten():
            from qlower.qnn.reencode import reencode_unsupported

            backend = self.target.backend
            reencode_unsupported(self.graph, self.target.opdefs, backend,
                                 float_fallback=not runs_float_in_float16(backend))

    def _float16(self) -> None:
        wanted = runs_float_in_float16(self.target.backend) if self.float16 is None else self.float16
        if wanted and self._rewritten() and any(v.dtype == np.float32 for v in self.graph.values):
            from qlower.qnn.precision import float16_range_warnings, to_float16

            self.float16_changed = to_float16(self.graph, self.target.opdefs, self.target.backend)
            self.diagnostics.extend(float16_range_warnings(self.graph))

    def _compute(self) -> None:
        if self._rewritten() and self.computes:
            from qlower.qnn.retype import compute_in_supported_types

            compute_in_supported_types(self.graph, self.computes, self.target.opdefs, self.target.backend)

    def _convert(self) -> None:
        # with allow_partial a graph converts when every op is lowered (the engine has already
        # reported each one that is not; converting would only report them again)
        if not (self._rewritten() or (self.allow_partial and all(op.type.startswith("qnn.")
                                                                  for op in self.graph.ops))):
            self.stopped = True
            return
        from qlower.qnn.convert import to_table

        try:
            self.table = to_table(self.graph, self.target.ops)
        except QlowerError as exc:
            self.diagnostics.extend(exc.diagnostics)
            self.stopped = True

    def _validate(self) -> None:
        if self.validate and self.table is not None:
            self.diagnostics.extend(validate_table(self.table, self.target))


def validate_table(table: QnnTable, target: Target) -> list[Diagnostic]:
    """The validate stage on its own (`LowerResult.validate` runs it later when `lower` did not)."""
    from qlower.qnn.validate import validate_graph

    return validate_graph(table, target.opdefs, target.backend, ops=target.ops)
