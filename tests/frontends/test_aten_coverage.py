"""tools/aten_coverage.py over the real op lists: every core ATen op (torch's registry) and every op
ExecuTorch's Qualcomm builders name (the installed executorch package) is lowered by a tested rule
or refused with a reason; none is left without either."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import qlower  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
try:
    import aten_coverage  # noqa: E402
finally:
    sys.path.pop(0)


@pytest.fixture(scope="module")
def rows():
    core = aten_coverage.core_aten_ops()
    builders, folder = aten_coverage.qualcomm_builder_ops()
    source: dict[str, set[str]] = {}
    for o in core:
        source.setdefault(o, set()).add("core")
    for o in builders:
        source.setdefault(o, set()).add("executorch")
    cov = aten_coverage.Coverage(qlower.load_rules(packs=["aten"]))
    return aten_coverage.table(sorted(source), cov, source), folder


def test_core_aten_is_covered(rows) -> None:
    table, _ = rows
    core = [r for r in table if "core" in r["source"]]
    assert len(core) >= 150  # torch 2.13 tags 189 overloads core
    assert [r["op"] for r in core if r["kind"] == "missing"] == []
    lowered = [r for r in core if r["kind"] == "lowered"]
    assert all(r["tested"] for r in lowered), [r["op"] for r in lowered if not r["tested"]]
    for op in ("index_put.default", "div.Tensor_mode", "grid_sampler_2d.default", "sort.default", "var.correction"):
        assert "htp" in next(r for r in core if r["op"] == op)["lowered"], op
    refused = {r["op"]: r["reasons"] for r in core if r["kind"] == "refused"}
    assert "random numbers" in refused["rand.default"][0] and "gradient" in refused["avg_pool2d_backward.default"][0]


def test_qualcomm_builder_ops_are_covered(rows) -> None:
    table, folder = rows
    if folder is None:
        pytest.skip("executorch is not installed: its Qualcomm builders cannot be read")
    et = [r for r in table if "executorch" in r["source"]]
    assert len(et) >= 100
    assert [r["op"] for r in et if r["kind"] == "missing"] == []
    for op in ("index_put.default", "pixel_shuffle.default", "instance_norm.default", "upsample_nearest2d.vec"):
        assert "htp" in next(r for r in et if r["op"] == op)["lowered"], op
