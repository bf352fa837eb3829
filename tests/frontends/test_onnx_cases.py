"""The shared ONNX backend-case loader: freezing parameter inputs and judging outputs."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402

from qlower.frontends.onnx_cases import compare, freeze_params, param_names  # noqa: E402


def _model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 3, 3])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [1, 1, 2, 2])
    shape = helper.make_tensor_value_info("s", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Reshape", ["c", "s"], ["y"])]
    return helper.make_model(helper.make_graph(nodes, "g", [x, w, shape], [y]))


def test_parameter_and_static_inputs_become_initializers():
    m = _model()
    assert param_names(m) == {"s"}  # Reshape's shape: a parameter input of the frontend
    assert param_names(m, {"Conv": (1,)}) == {"s", "w"}
    x, w, s = np.ones((1, 1, 3, 3), np.float32), np.ones((1, 1, 2, 2), np.float32), np.array([1, 4])
    frozen, rest = freeze_params(m, [x, w, s], {"Conv": (1,)})
    assert [i.name for i in frozen.graph.input] == ["x"] and len(rest) == 1 and rest[0] is x
    assert sorted(i.name for i in frozen.graph.initializer) == ["s", "w"]
    assert [i.name for i in m.graph.input] == ["x", "w", "s"]  # the case's model is left alone
    frozen, _ = freeze_params(m, [x, w, s], also={"x"})
    assert sorted(i.name for i in frozen.graph.initializer) == ["s", "x"]


@attrs.frozen
class _Case:
    rtol: float = 1e-3
    atol: float = 1e-7


@attrs.frozen
class _V:
    quant: object = None


def test_compare_uses_the_case_tolerance_and_names_the_output():
    want = np.array([1.0, 2.0, 3.0], np.float32)
    assert compare(_Case(), {"y": _V()}, {"y": want * (1 + 1e-4)}, [want]) is None
    problem = compare(_Case(), {"y": _V()}, {"y": want + 0.1}, [want])
    assert problem is not None and "output y" in problem and "0.1" in problem
    assert "missing" in compare(_Case(), {"y": _V()}, {}, [want])
    assert compare(_Case(), {"y": _V()}, {"y": want + 0.01}, [want], f16=True) is None  # 2e-2 of max |y|
