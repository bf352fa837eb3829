"""ONNX's own backend node test cases, run through qlower: import, lower for CPU, run, compare.

Every case whose ops the onnx pack lowers (some rule that does not just `fail` has the op as
its root) is attempted; cases with big tensors or types qlower does not import are skipped.
A case is *lowered* when import, lowering and QNN validation succeed, and *matched* when the
lowered QNN graph's outputs agree with the expected outputs ONNX ships with the case.

Run as a script to list every attempted case with its outcome:
    PYTHONPATH=. python tests/frontends/test_onnx_backend_cases.py
"""

from __future__ import annotations

import gc
import time
import warnings
from collections.abc import Iterable

import attrs
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

MAX_ELEMENTS = 20_000  # per tensor; keeps the run well under a minute
MIN_MATCHED = 684  # what the pack achieves today (attempted 926, lowered 696); tools/onnx_conformance.py runs them all


@attrs.define
class Outcome:
    name: str
    status: str  # "matched" | "mismatch" | "not lowered" | "import error" | "run error"
    detail: str = ""


@attrs.define
class Tally:
    outcomes: list[Outcome] = attrs.Factory(list)
    seconds: float = 0.0

    def count(self, *statuses: str) -> int:
        return sum(o.status in statuses for o in self.outcomes)

    @property
    def attempted(self) -> int:
        return len(self.outcomes)

    @property
    def lowered(self) -> int:
        return self.count("matched", "mismatch", "run error")

    @property
    def matched(self) -> int:
        return self.count("matched")

    def summary(self) -> str:
        return (f"ONNX backend node cases: attempted {self.attempted}, lowered {self.lowered}, "
                f"matched {self.matched} ({self.seconds:.1f}s)")


def lowered_ops(rules) -> set[str]:
    """ONNX op names that some non-`fail` rule of the pack has as its root."""
    from qlower.lang import ast

    ops: set[str] = set()
    for rule in rules.ruleset.rules:
        if any(isinstance(s, ast.Fail) for s in rule.body):
            continue
        for t in rule.matches[0].pattern.op_types:
            if t.startswith("onnx."):
                ops.add(t[5:])
    return ops


# Inputs QNN needs static (weights, normalisation statistics, quantization parameters), beyond the
# parameter inputs the frontend turns into attributes. Cases feed them as graph inputs; here they
# become initializers holding the case's data, as a deployed model has them.
STATIC_INPUTS = {"Conv": (1, 2), "ConvTranspose": (1, 2), "BatchNormalization": (1, 2, 3, 4),
                 "QuantizeLinear": (1, 2), "DequantizeLinear": (1, 2)}


def _small(case) -> bool:
    arrays = [a for inputs, outputs in case.data_sets[:1] for a in list(inputs) + list(outputs)]
    return all(isinstance(a, np.ndarray) and a.dtype.kind in "biuf" and a.size <= MAX_ELEMENTS for a in arrays)


def run_case(case, rules, ops: set[str]) -> Outcome | None:
    """One case's outcome, or None when it is not attempted."""
    import qlower
    from qlower.diagnostics import QlowerError
    from qlower.frontends.onnx_cases import case_data, case_feeds, compare, freeze_params
    from qlower.frontends.onnx_frontend import load_onnx
    from qlower.reference.interpreter import run_dequantized

    model = case.model
    if any(n.domain not in ("", "ai.onnx") or n.op_type not in ops for n in model.graph.node) or not _small(case):
        return None
    inputs, expected = case_data(case)
    model, inputs = freeze_params(model, list(inputs), STATIC_INPUTS)
    try:
        graph = load_onnx(model)
    except QlowerError as exc:
        return Outcome(case.name, "import error", str(exc).splitlines()[0])
    outputs = {o.name: graph.value(o.name) if graph.has_value(o.name) else None for o in model.graph.output}
    result = qlower.lower(graph, rules, backend="cpu")
    if not result.ok:
        return Outcome(case.name, "not lowered", str(result.errors[0]).splitlines()[0] if result.errors else "")
    try:
        got = run_dequantized(result.qnn, case_feeds(result.qnn, model, inputs))
    except (QlowerError, ValueError, KeyError) as exc:
        return Outcome(case.name, "run error", f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
    problem = compare(case, outputs, got, expected)
    return Outcome(case.name, "matched") if problem is None else Outcome(case.name, "mismatch", problem)


def run_all(cases: Iterable | None = None) -> Tally:
    import qlower

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if cases is None:
            from onnx.backend.test.case.node import collect_testcases

            cases = [c for c in collect_testcases() if c.kind == "node"]
        rules = qlower.load_rules(packs=["onnx"])
        ops = lowered_ops(rules)
        tally = Tally()
        gc.collect()
        gc.freeze()  # the cases and rules live throughout: keep the collector from rescanning them
        try:
            with np.errstate(all="ignore"):
                for case in cases:
                    outcome = run_case(case, rules, ops)
                    if outcome is not None:
                        tally.outcomes.append(outcome)
        finally:
            gc.unfreeze()
    tally.seconds = time.perf_counter() - t0
    return tally


def test_onnx_backend_node_cases(record_property):
    tally = run_all()
    print("\n" + tally.summary())
    record_property("attempted", tally.attempted)
    record_property("lowered", tally.lowered)
    record_property("matched", tally.matched)
    assert tally.matched >= MIN_MATCHED, tally.summary()


if __name__ == "__main__":
    t = run_all()
    for o in sorted(t.outcomes, key=lambda o: (o.status, o.name)):
        print(f"{o.status:12} {o.name}  {o.detail}")
    print(t.summary())
