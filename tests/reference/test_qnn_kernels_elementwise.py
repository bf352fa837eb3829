"""ElementWise*, activation and softmax kernels against ONNX's reference
evaluator, numpy formulas and hand-worked values."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import helper
from onnx.reference import ReferenceEvaluator

from qlower.reference.qnn import QNN_KERNELS
from qlower.reference.qnn.activation import NEURON_ENUM
from qlower.reference.qnn.elementwise import BINARY_ENUM, UNARY_ENUM
from qlower.reference.spec import KernelError, OutSpec

RNG = np.random.default_rng(0)


def onnx_ref(op: str, inputs: list[np.ndarray], opset: int = 21, n_out: int = 1, **attrs) -> list[np.ndarray]:
    """Run one ONNX node through onnx's reference evaluator."""
    names = [f"i{k}" for k in range(len(inputs))]
    outs = [f"o{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outs, **attrs)
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in zip(names, inputs)]
    ovis = [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outs]
    model = helper.make_model(helper.make_graph([node], "g", vis, ovis),
                              opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))


def qnn(op: str, inputs: list, params: dict | None = None, shape=None, dtype=np.float32) -> np.ndarray:
    shape = np.broadcast_shapes(*(np.shape(a) for a in inputs if a is not None)) if shape is None else shape
    return QNN_KERNELS[op](inputs, params or {}, [OutSpec(shape, dtype)])[0]


a = RNG.standard_normal((2, 3, 4)).astype(np.float32)
b = RNG.standard_normal((3, 1)).astype(np.float32) + 2.0
pos = (np.abs(a) + 0.1).astype(np.float32)

BINARY_ONNX = [
    ("ElementWiseAdd", "Add", {}), ("ElementWiseSubtract", "Sub", {}), ("ElementWiseMultiply", "Mul", {}),
    ("ElementWiseDivide", "Div", {}), ("ElementWiseMaximum", "Max", {}), ("ElementWiseMinimum", "Min", {}),
    ("ElementWiseFmod", "Mod", {"fmod": 1}),
]


@pytest.mark.parametrize("qop,oop,attrs", BINARY_ONNX)
def test_binary_matches_onnx(qop, oop, attrs):
    np.testing.assert_allclose(qnn(qop, [a, b]), onnx_ref(oop, [a, b], **attrs)[0], rtol=1e-6, atol=1e-6)


def test_power_matches_onnx():
    np.testing.assert_allclose(qnn("ElementWisePower", [pos, b]), onnx_ref("Pow", [pos, b])[0], rtol=1e-5)


@pytest.mark.parametrize("qop,oop", [("ElementWiseEqual", "Equal"), ("ElementWiseGreater", "Greater"),
                                     ("ElementWiseGreaterEqual", "GreaterOrEqual"), ("ElementWiseLess", "Less"),
                                     ("ElementWiseLessEqual", "LessOrEqual")])
def test_comparisons_match_onnx(qop, oop):
    x = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    y = np.array([3, 2, 7], np.float32)
    np.testing.assert_array_equal(qnn(qop, [x, y], dtype=np.bool_), onnx_ref(oop, [x, y])[0])


def test_not_equal_and_logic():
    x = np.array([True, True, False, False])
    y = np.array([True, False, True, False])
    assert qnn("ElementWiseNotEqual", [x, y], dtype=np.bool_).tolist() == [False, True, True, False]
    for qop, oop in [("ElementWiseAnd", "And"), ("ElementWiseOr", "Or"), ("ElementWiseXor", "Xor")]:
        np.testing.assert_array_equal(qnn(qop, [x, y], dtype=np.bool_), onnx_ref(oop, [x, y])[0])
    np.testing.assert_array_equal(qnn("ElementWiseNot", [x], dtype=np.bool_), ~x)


def test_hand_worked_binary():
    x, y = np.array([-7.0, 7.0, -7.0, 7.5]), np.array([2.0, -2.0, -2.0, 2.0])
    assert qnn("ElementWiseMod", [x, y]).tolist() == [1.0, -1.0, -1.0, 1.5]      # sign of divisor
    assert qnn("ElementWiseFmod", [x, y]).tolist() == [-1.0, 1.0, -1.0, 1.5]     # sign of dividend
    assert qnn("ElementWiseFloorDiv", [x, y]).tolist() == [-4.0, -4.0, 3.0, 3.0]
    assert qnn("ElementWiseSquaredDifference", [x, y]).tolist() == [81.0, 81.0, 25.0, 30.25]
    xi, yi = np.array([7, -7], np.int32), np.array([2, 2], np.int32)
    assert qnn("ElementWiseDivide", [xi, yi], dtype=np.int32).tolist() == [3, -3]  # truncation
    assert qnn("ElementWiseFloorDiv", [xi, yi], dtype=np.int32).tolist() == [3, -4]


UNARY_ONNX = [
    ("ElementWiseAbs", "Abs", a), ("ElementWiseNeg", "Neg", a), ("ElementWiseExp", "Exp", a),
    ("ElementWiseLog", "Log", pos), ("ElementWiseSquareRoot", "Sqrt", pos), ("ElementWiseSin", "Sin", a),
    ("ElementWiseCos", "Cos", a), ("ElementWiseAsin", "Asin", np.tanh(a)), ("ElementWiseAtan", "Atan", a),
    ("ElementWiseCeil", "Ceil", a * 3), ("ElementWiseFloor", "Floor", a * 3), ("ElementWiseRound", "Round", a * 3),
    ("ElementWiseSign", "Sign", np.round(a)),
]


@pytest.mark.parametrize("qop,oop,x", UNARY_ONNX, ids=[u[0] for u in UNARY_ONNX])
def test_unary_matches_onnx(qop, oop, x):
    np.testing.assert_allclose(qnn(qop, [x]), onnx_ref(oop, [x])[0], rtol=1e-6, atol=1e-7)


def test_round_halves_to_even_and_rsqrt():
    assert qnn("ElementWiseRound", [np.array([2.5, -3.5, 1.5, -4.5])]).tolist() == [2.0, -4.0, 2.0, -4.0]
    np.testing.assert_allclose(qnn("ElementWiseRsqrt", [np.array([4.0, 0.25])]), [0.5, 2.0])


@pytest.mark.parametrize("name", BINARY_ENUM)
def test_generic_binary_equals_named(name):
    x, y = np.array([3.0, -2.0, 0.0, 5.0]), np.array([2.0, 2.0, 1.0, -3.0])
    value = BINARY_ENUM.index(name)
    got = qnn("ElementWiseBinary", [x, y], {"operation": value})
    named = {"FLOOR_DIV": "FloorDiv", "GREATER_EQUAL": "GreaterEqual", "LESS_EQUAL": "LessEqual",
             "NOT_EQUAL": "NotEqual", "SQUARED_DIFFERENCE": "SquaredDifference"}.get(name, name.title())
    np.testing.assert_array_equal(got, qnn("ElementWise" + named, [x, y]))


@pytest.mark.parametrize("name", UNARY_ENUM)
def test_generic_unary_equals_formula(name):
    x = np.array([0.25, 0.5, 0.75])
    expect = {"ABS": np.abs, "ASIN": np.arcsin, "ATAN": np.arctan, "CEIL": np.ceil, "COS": np.cos,
              "EXP": np.exp, "FLOOR": np.floor, "LOG": np.log, "NEG": np.negative, "NOT": lambda v: v == 0,
              "RECIPROCAL": lambda v: 1 / v, "ROUND": np.rint, "RSQRT": lambda v: v ** -0.5,
              "SIGN": np.sign, "SIN": np.sin, "SQRT": np.sqrt}[name](x)
    got = qnn("ElementWiseUnary", [x], {"operation": UNARY_ENUM.index(name)})
    np.testing.assert_allclose(got, np.asarray(expect, np.float32), rtol=1e-6)


def test_unknown_operation_value_is_an_error():
    with pytest.raises(KernelError, match="unknown operation"):
        qnn("ElementWiseBinary", [a, a], {"operation": 99})
    with pytest.raises(KernelError, match="missing mandatory param `operation`"):
        qnn("ElementWiseUnary", [a], {})


def test_select_is_inf_is_nan_logit():
    c = np.array([[True], [False]])
    np.testing.assert_array_equal(qnn("ElementWiseSelect", [c, np.ones((2, 3)), np.zeros(3)]),
                                  onnx_ref("Where", [c, np.ones((2, 3)), np.zeros(3)])[0])
    v = np.array([np.inf, -np.inf, np.nan, 1.0], np.float32)
    np.testing.assert_array_equal(qnn("IsInf", [v], dtype=np.bool_), onnx_ref("IsInf", [v])[0])
    np.testing.assert_array_equal(qnn("IsInf", [v], {"detect_negative": False}, dtype=np.bool_),
                                  onnx_ref("IsInf", [v], detect_negative=0)[0])
    np.testing.assert_array_equal(qnn("IsNan", [v], dtype=np.bool_), onnx_ref("IsNaN", [v])[0])
    np.testing.assert_allclose(qnn("Logit", [np.array([0.5, 0.75])]), [0.0, np.log(3.0)], rtol=1e-6)


@settings(max_examples=40, deadline=None)
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=4, max_side=4),
       op=st.sampled_from(["ElementWiseAdd", "ElementWiseMultiply", "ElementWiseMaximum", "ElementWiseSubtract"]))
def test_binary_broadcasting(shapes, op):
    x = RNG.standard_normal(shapes.input_shapes[0]).astype(np.float32)
    y = RNG.standard_normal(shapes.input_shapes[1]).astype(np.float32)
    fn = {"ElementWiseAdd": np.add, "ElementWiseMultiply": np.multiply,
          "ElementWiseMaximum": np.maximum, "ElementWiseSubtract": np.subtract}[op]
    got = qnn(op, [x, y], shape=shapes.result_shape)
    assert got.shape == shapes.result_shape and got.dtype == np.float32
    np.testing.assert_allclose(got, fn(x, y), rtol=1e-6)


NEURON_ONNX = [
    ("ELU", {"alpha": 0.7}, "Elu", {"alpha": 0.7}),
    ("GELU", {}, "Gelu", {}),
    ("HARD_SIGMOID", {"alpha": 0.3, "beta": 0.4}, "HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("HARD_SIGMOID", {}, "HardSigmoid", {}),
    ("HARD_SWISH", {}, "HardSwish", {}),
    ("RELU", {}, "Relu", {}),
    ("SIGMOID", {}, "Sigmoid", {}),
    ("SOFTPLUS", {}, "Softplus", {}),
    ("TANH", {}, "Tanh", {}),
]


@pytest.mark.parametrize("name,params,oop,attrs", NEURON_ONNX)
def test_neuron_matches_onnx(name, params, oop, attrs):
    x = a * 4
    got = qnn("ElementWiseNeuron", [x], {"operation": NEURON_ENUM.index(name), **params})
    np.testing.assert_allclose(got, onnx_ref(oop, [x], **attrs)[0], rtol=1e-5, atol=1e-6)


def test_neuron_relu_min_max_and_softplus_threshold():
    x = np.array([-3.0, 0.5, 9.0])
    op = NEURON_ENUM.index("RELU_MIN_MAX")
    assert qnn("ElementWiseNeuron", [x], {"operation": op, "min_value": -1.0, "max_value": 2.0}).tolist() == [-1, 0.5, 2]
    with pytest.raises(KernelError, match="min_value"):
        qnn("ElementWiseNeuron", [x], {"operation": op, "max_value": 2.0})
    y = qnn("ElementWiseSoftplus", [np.array([0.0, 30.0])], {"beta": 2.0, "threshold": 20.0})
    np.testing.assert_allclose(y, [np.log(2.0) / 2.0, 30.0], rtol=1e-6)


@pytest.mark.parametrize("qop,oop,attrs", [("Relu", "Relu", {}), ("Sigmoid", "Sigmoid", {}), ("Tanh", "Tanh", {}),
                                           ("Gelu", "Gelu", {}), ("HardSwish", "HardSwish", {}),
                                           ("Elu", "Elu", {})])
def test_activation_ops_match_onnx(qop, oop, attrs):
    x = a * 4
    np.testing.assert_allclose(qnn(qop, [x]), onnx_ref(oop, [x], **attrs)[0], rtol=1e-5, atol=1e-6)


def test_clipping_relus():
    x = np.array([-7.0, -0.5, 0.5, 7.0])
    assert qnn("Relu1", [x]).tolist() == [-1.0, -0.5, 0.5, 1.0]
    assert qnn("Relu6", [x]).tolist() == [0.0, 0.0, 0.5, 6.0]
    assert qnn("ReluMinMax", [x], {"min_value": -2.0, "max_value": 0.25}).tolist() == [-2.0, -0.5, 0.25, 0.25]


def test_prelu_matches_onnx_and_rejects_bidirectional():
    slope = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    np.testing.assert_allclose(qnn("Prelu", [a, slope]), onnx_ref("PRelu", [a, slope])[0], rtol=1e-6)
    with pytest.raises(KernelError, match="broadcast"):
        qnn("Prelu", [np.ones(4), np.ones((2, 4))], shape=(4,))


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_softmax_and_log_softmax(axis):
    np.testing.assert_allclose(qnn("Softmax", [a], {"axis": axis}), onnx_ref("Softmax", [a], axis=axis)[0], rtol=1e-5)
    np.testing.assert_allclose(qnn("LogSoftmax", [a], {"axis": axis}),
                               onnx_ref("LogSoftmax", [a], axis=axis)[0], rtol=1e-5, atol=1e-6)


def test_softmax_beta_default_axis_and_masked():
    got = qnn("Softmax", [a], {"beta": 2.0})
    np.testing.assert_allclose(got, onnx_ref("Softmax", [2 * a], axis=-1)[0], rtol=1e-5)
    x = RNG.standard_normal((1, 2, 2, 5)).astype(np.float32)
    mask = np.array([[0, 0, -1e4, 0, -1e4]], np.float32)
    got = qnn("MaskedSoftmax", [x, mask])
    np.testing.assert_allclose(got, onnx_ref("Softmax", [x + mask[:, None, None, :]], axis=-1)[0], rtol=1e-5)
    assert np.all(got[..., 2] < 1e-6)
