"""ONNX math ops with no QNN op of their own (patterns/onnx/math.qpat), lowered for CPU and run with
the QNN reference interpreter over dense grids of their whole domain (tails and edges included),
against numpy / math: the compositions must hold the float32 accuracy the ONNX conformance cases
check (rtol 1e-4, atol 1e-5)."""

from __future__ import annotations

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402

import qlower  # noqa: E402
from qlower.frontends.onnx_frontend import load_onnx  # noqa: E402
from qlower.reference.interpreter import run  # noqa: E402

_GRIDS = {
    "Erf": (np.linspace(-6, 6, 4001), np.vectorize(math.erf)),
    "Sinh": (np.linspace(-10, 10, 2001), np.sinh),
    "Cosh": (np.linspace(-10, 10, 2001), np.cosh),
    "Asinh": (np.concatenate([np.linspace(-1e4, 1e4, 2001), np.linspace(-1, 1, 2001)]), np.arcsinh),
    "Acosh": (np.concatenate([np.linspace(1, 2, 1001), np.geomspace(2, 1e4, 1001)]), np.arccosh),
    "Atanh": (np.linspace(-0.999, 0.999, 2001), np.arctanh),
    "Acos": (np.linspace(-1, 1, 2001), np.arccos),
}


@pytest.fixture(scope="module")
def rules():
    return qlower.load_rules(packs=["onnx"])


@pytest.mark.parametrize("op", sorted(_GRIDS))
def test_composition_is_float32_accurate_over_the_domain(op, rules):
    grid, exact = _GRIDS[op]
    x = grid.astype(np.float32)
    n = x.size
    m = h.make_model(h.make_graph([h.make_node(op, ["x"], ["y"])], "m",
                                  [h.make_tensor_value_info("x", T.FLOAT, [n])],
                                  [h.make_tensor_value_info("y", T.FLOAT, [n])]),
                     opset_imports=[h.make_opsetid("", 18)])
    result = qlower.lower(load_onnx(m), rules, backend="cpu")
    result.raise_for_errors()
    got = np.asarray(run(result.qnn, {"x": x})["y"], np.float64)
    want = exact(x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
