"""HTP's float16 path says when it cannot hold a dequantized tensor's values (they would become zeros)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import qlower  # noqa: E402
from qlower.api import load_model  # noqa: E402


@functools.cache
def _rules():
    return qlower.load_rules(packs=["onnx"])


def _qdq_mean(tmp_path, scale: float):
    """x → QuantizeLinear → DequantizeLinear → ReduceMean (left in float, as ORT's plain config does)."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("ReduceMean", ["xd", "axes"], ["y"], keepdims=1)]
    inits = [numpy_helper.from_array(np.array(scale, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.uint8), "z"),
             numpy_helper.from_array(np.array([2, 3], np.int64), "axes")]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])], inits)
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)
    return load_model(path)


def _warnings(result):
    return [d for d in result.diagnostics if d.code == "float16-range"]


def test_values_below_float16s_smallest_are_reported(tmp_path):
    res = qlower.lower(_qdq_mean(tmp_path, 1e-28), _rules(), "htp")
    found = _warnings(res)
    assert len(found) == 1 and "every value becomes zero" in found[0].message and "`x" in found[0].message


def test_an_ordinary_encoding_and_a_float32_backend_are_quiet(tmp_path):
    assert _warnings(qlower.lower(_qdq_mean(tmp_path, 0.02), _rules(), "htp")) == []
    assert _warnings(qlower.lower(_qdq_mean(tmp_path, 1e-28), _rules(), "cpu")) == []
