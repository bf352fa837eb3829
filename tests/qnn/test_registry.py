"""The QNN op registry: coverage against a checked-in list, and shape rules agreeing with kernels."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from qlower.reference.qnn import qnn_ops
from tests.qnn.op_draws import disagreement, op_case

REGISTRY = qnn_ops()
BOTH = [n for n in REGISTRY.names() if (e := REGISTRY.get(n)) and e.definition and e.shape_fn and e.kernel]


def test_coverage_matches_the_checked_in_list() -> None:
    expected = [ln for ln in (Path(__file__).parent / "registry_gaps.txt").read_text().splitlines()
                if ln and not ln.startswith("#")]
    got = ([f"no-shape-fn {n}" for n in REGISTRY.missing_shape_fn()] + [f"no-kernel {n}" for n in REGISTRY.missing_kernel()]
           + [f"undefined {n}" for n in REGISTRY.undefined()])
    assert got == expected


@pytest.mark.parametrize("name", BOTH)
def test_shape_rule_and_kernel_agree(name: str) -> None:
    entry = REGISTRY.get(name)

    @settings(max_examples=5, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(op_case(entry.definition))
    def check(case) -> None:
        assert disagreement(entry, *case) is None

    check()
