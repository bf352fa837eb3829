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


def _dequantize_graph(bits: int, also_used: bool) -> Graph:
    """x (16- or 8-bit fixed point) → Dequantize → y, a graph output (read again by a Neg when
    `also_used`)."""
    from qlower.graph.types import Quant

    g = Graph("g")
    q = Quant((2.0 ** -12,), (0,))
    x = g.add_value("x", f"uint{bits}", [1, 8], quant=q)
    y = g.add_value("y", "float32", [1, 8])
    g.add_op("dq", "qnn.Dequantize", [x], [y])
    outs = [y]
    if also_used:
        z = g.add_value("z", "float32", [1, 8])
        g.add_op("neg", "qnn.ElementWiseNeg", [y], [z])
        outs.append(z)
    g.set_io([x], outs)
    return g


@pytest.mark.parametrize("bits", [8, 16])
def test_a_final_dequantize_stays_float32_where_the_backend_allows_it(bits):
    """HTP's Dequantize may write FLOAT_32: a graph output it produces keeps every one of its steps
    (through FLOAT_16 a 16-bit value near 1.0 loses 5 of its 12 fraction bits)."""
    g = _dequantize_graph(bits, also_used=False)
    to_float16(g, OpDefRegistry.load(), "htp")
    assert [op.type for op in g.ops] == ["qnn.Dequantize"]
    assert str(g.outputs[0].dtype) == "float32"


def test_float_ops_after_a_float32_dequantize_still_compute_in_float16():
    g = _dequantize_graph(16, also_used=True)
    to_float16(g, OpDefRegistry.load(), "htp")
    types = sorted(op.type for op in g.ops)
    assert types == ["qnn.Cast", "qnn.Cast", "qnn.Dequantize", "qnn.ElementWiseNeg"]
    neg = next(op for op in g.ops if op.type == "qnn.ElementWiseNeg")
    assert str(neg.operands[0].dtype) == "float16" and str(neg.results[0].dtype) == "float16"
    assert str(g.outputs[0].dtype) == "float32" and g.outputs[0].producer.type == "qnn.Dequantize"


def test_without_op_data_a_dequantize_output_goes_through_float16():
    """No registry: nothing says FLOAT_32 is allowed, so every float32 value is retyped (as before)."""
    g = _dequantize_graph(16, also_used=False)
    to_float16(g)
    assert sorted(op.type for op in g.ops) == ["qnn.Cast", "qnn.Dequantize"]
