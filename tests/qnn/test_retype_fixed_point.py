"""int8/int16/uint16 on backends whose Cast reads no plain int of that width (CPU, HTP): the values
are retyped to fixed point with scale 1 and offset 0 (the same bytes) and computed in int32 behind
Dequantize/Quantize. Exact over the whole range, wrapping as ONNX (numpy) wraps.

Graphs are real ONNX models (onnx.helper) lowered with the shipped onnx pack and run through the
reference interpreter; expected values come from numpy's own wrapping narrow-integer arithmetic.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import qlower
from qlower.qnn.datatypes import DataType

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from qlower.frontends.onnx_frontend import load_onnx  # noqa: E402
from qlower.reference.interpreter import run  # noqa: E402

N = 6
_ONNX_TYPE = {np.int8: TensorProto.INT8, np.int16: TensorProto.INT16, np.uint16: TensorProto.UINT16}
_FIXED = {np.int8: DataType.SFIXED_POINT_8, np.int16: DataType.SFIXED_POINT_16, np.uint16: DataType.UFIXED_POINT_16}


def _trunc_div(a, b):
    q = np.abs(a.astype(np.int64)) // np.abs(b.astype(np.int64))
    return np.where((a < 0) != (b < 0), -q, q)


_EXPECT = {
    "Add": lambda a, b: a.astype(np.int64) + b, "Sub": lambda a, b: a.astype(np.int64) - b,
    "Mul": lambda a, b: a.astype(np.int64) * b, "Div": _trunc_div,
    "Mod": lambda a, b: np.mod(a.astype(np.int64), b), "Max": np.maximum, "Min": np.minimum,
    "Less": np.less, "Equal": np.equal,
    "BitwiseAnd": np.bitwise_and, "BitwiseXor": np.bitwise_xor,
}
_BOOL_OUT = {"Less", "Equal"}
# (backend, dtype) pairs the op definitions allow: HTP reads no SFIXED_POINT_16
_CASES = [("cpu", np.int8), ("cpu", np.int16), ("cpu", np.uint16), ("htp", np.int8), ("htp", np.uint16)]


@pytest.fixture(scope="module")
def rules():
    return qlower.load_rules(packs=["onnx"])


def _model(op: str, dtype, attrs: dict | None = None) -> "onnx.ModelProto":
    t = _ONNX_TYPE[dtype]
    out_t = TensorProto.BOOL if op in _BOOL_OUT else t
    node = helper.make_node(op, ["a", "b"], ["y"], **(attrs or {}))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", t, [N]),
                                            helper.make_tensor_value_info("b", t, [N])],
                              [helper.make_tensor_value_info("y", out_t, [N])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _lower(rules, op: str, dtype, backend: str, attrs: dict | None = None):
    result = qlower.lower(load_onnx(_model(op, dtype, attrs)), rules, backend=backend)
    assert result.ok, [str(e) for e in result.errors]
    return result


def _values(dtype, nonzero: bool = False):
    info = np.iinfo(dtype)
    edges = st.sampled_from([v for v in (info.min, info.min + 1, -1, 0, 1, info.max - 1, info.max)
                             if info.min <= v and not (nonzero and v == 0)])
    ints = st.integers(int(info.min), int(info.max)).filter(lambda v: not (nonzero and v == 0))
    return hnp.arrays(dtype, N, elements=st.one_of(edges, ints))


# HTP has no integer Mod or Divide (htp.qpat refuses integer Mod; Div lowers to float there)
@pytest.mark.parametrize("backend, dtype, op", [(b, d, op) for b, d in _CASES for op in sorted(_EXPECT)
                                                if not (b == "htp" and op in ("Div", "Mod"))])
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_narrow_integers_wrap_like_onnx(rules, op: str, backend: str, dtype, data) -> None:
    a = data.draw(_values(dtype), label="a")
    b = data.draw(_values(dtype, nonzero=op in ("Div", "Mod")), label="b")
    got = run(_lower(rules, op, dtype, backend).qnn, {"a": a, "b": b})["y"]
    expect = np.asarray(_EXPECT[op](a, b))
    expect = expect if op in _BOOL_OUT else expect.astype(dtype)  # numpy's astype wraps
    assert got.dtype == expect.dtype
    np.testing.assert_array_equal(got, expect)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.uint16])
def test_graph_io_is_identity_encoded_fixed_point_with_the_same_bytes(rules, dtype) -> None:
    result = _lower(rules, "Sub", dtype, "cpu")
    for name in ("a", "b", "y"):
        t = result.qnn.tensors[name]
        assert t.datatype == _FIXED[dtype]
        assert t.encoding.scales == (1.0,) and t.encoding.offsets == (0,)
    info = np.iinfo(dtype)
    a = np.array([info.min, info.max, -1 if info.min else 0, 0, 1, info.max], dtype)
    b = np.array([1, -1 if info.min else info.max, info.max, info.min, 0, info.max], dtype)
    got = run(result.qnn, {"a": a, "b": b})["y"]
    assert got.tobytes() == (a - b).tobytes()  # stored form: the int data itself


def test_int16_on_htp_stays_an_error_naming_the_op(rules) -> None:
    # HTP's Dequantize/Cast/Convert read no SFIXED_POINT_16 (nor INT_16)
    result = qlower.lower(load_onnx(_model("Add", np.int16)), rules, backend="htp")
    assert not result.ok
    assert "ElementWiseAdd" in str(result.errors[0]) and "INT_16" in str(result.errors[0])


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.uint16])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_narrow_bit_shifts_on_cpu(rules, dtype, direction: str, data) -> None:
    w = np.iinfo(dtype).bits
    a = data.draw(_values(dtype), label="a")
    lo = -4 if np.iinfo(dtype).min < 0 else 0
    b = data.draw(hnp.arrays(dtype, N, elements=st.integers(lo, w + 3)), label="b")
    got = run(_lower(rules, "BitShift", dtype, "cpu", {"direction": direction}).qnn, {"a": a, "b": b})["y"]
    x, s = a.astype(np.int64), b.astype(np.int64)
    inside = (s >= 0) & (s < w)
    if direction == "LEFT":
        expect = np.where(inside, x << np.clip(s, 0, w - 1), 0)
    else:
        expect = np.where(inside, x >> np.clip(s, 0, w - 1), np.where(x < 0, -1, 0))
    np.testing.assert_array_equal(got, expect.astype(dtype))
