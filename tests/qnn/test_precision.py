"""HTP's float16 path: the Casts at the graph's edges respect Cast's rank limit from the op data."""

from __future__ import annotations

import pytest

import qlower
from qlower.graph import Graph
from qlower.qnn.opdef import OpDefRegistry
from qlower.qnn.precision import to_float16


def relu_graph(shape) -> Graph:
    g = Graph("g")
    x, y = g.add_value("x", "float32", list(shape)), g.add_value("y", "float32", list(shape))
    g.add_op("n", "onnx.Relu", [x], [y])
    g.set_io([x], [y])
    return g


@pytest.fixture(scope="module")
def rules():
    pytest.importorskip("onnx")
    return qlower.load_rules(packs=["onnx"])


@pytest.mark.parametrize("shape, reshapes", [((2, 3, 4, 5), 0), ((1, 2, 3, 4, 5), 4)])
def test_casts_above_the_backends_cast_rank_are_flattened(rules, shape, reshapes):
    res = qlower.lower(relu_graph(shape), rules, "htp")
    res.raise_for_errors()  # validated against HTP's constraints, Cast's rank limit among them
    counts = res.qnn_op_counts()
    assert counts["Cast"] == 2 and counts.get("Reshape", 0) == reshapes
    casts = [op for op in res.qnn.ops if op.type == "Cast"]
    assert all(len(res.qnn.tensors[t].dims) <= 4 for op in casts for t in (*op.inputs, *op.outputs))


def test_the_cast_rank_limit_is_the_backends():
    """GPU's Cast has no rank limit in the op data (HTP's is 4): a rank-5 graph retyped for GPU casts as is."""
    g = Graph("g")
    x, y = g.add_value("x", "float32", [1, 2, 3, 4, 5]), g.add_value("y", "float32", [1, 2, 3, 4, 5])
    g.add_op("n", "qnn.ElementWiseNeg", [x], [y])
    g.set_io([x], [y])
    registry = OpDefRegistry.load()
    assert to_float16(g, registry, "gpu") > 0
    assert sorted(op.type for op in g.ops) == ["qnn.Cast", "qnn.Cast", "qnn.ElementWiseNeg"]
