"""Fixtures of the frontend tests."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def bench(monkeypatch):
    """`bench("bench_quant_aimet")`: a module of bench/ (the real quantizers' cells the tests reuse),
    with bench/ on sys.path for the test's length (the cells import their siblings)."""
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module
