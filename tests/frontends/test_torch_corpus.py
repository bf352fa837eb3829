"""A sample of bench/aten_corpus.py's modules (the whole corpus runs outside the default run): each
exported as users do, imported as exported and after run_decompositions(), lowered for CPU and HTP,
run with the QNN reference kernels and compared with torch — state updates, promotion, the integer
division modes and the ops ExecuTorch's Qualcomm backend lowers most."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore")

import qlower  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
try:
    import aten_corpus  # noqa: E402
finally:
    sys.path.pop(0)

SAMPLE = ("kv_index_put[n=2,two=True]", "inplace_leaky_relu_", "promote_ne[bool,int]", "div_floor[int32]",
          "grid_sample[bilinear,zeros]", "batch_norm2d_noaffine")


@pytest.fixture(scope="module")
def rules():
    return qlower.load_rules(packs=["aten"])


def test_corpus_is_broad() -> None:
    names = [c[0] for c in aten_corpus.cases()]
    assert len(names) >= 300 and len(set(names)) == len(names)
    assert set(SAMPLE) <= set(names)


@pytest.mark.parametrize("name", SAMPLE)
def test_sample_lowers_and_matches(rules, name: str) -> None:
    case = next(c for c in aten_corpus.cases() if c[0] == name)
    got = aten_corpus.run_case(case, ("cpu", "htp"), rules)
    assert got == {b: {"exported": "ok", "core": "ok"} for b in ("cpu", "htp")}, got
