"""Integer datatypes a backend lacks, computed in int32 (`compute ... as i32 [wrapping]`): exact over
the whole range of the source type, as ONNX computes it (wrapping arithmetic, unsigned order).

Graphs are real ONNX models (onnx.helper) lowered with the shipped onnx pack and run through the
reference interpreter; expected values come from numpy's own wrapping uint8/uint32 arithmetic.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import qlower
from qlower._resources import data_dir
from qlower.lang.formatter import format_text
from qlower.lang.loader import load_rules as load_rule_files

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from qlower.frontends.onnx_frontend import load_onnx  # noqa: E402
from qlower.reference.interpreter import run  # noqa: E402

N = 6
_ONNX_TYPE = {np.uint8: TensorProto.UINT8, np.uint32: TensorProto.UINT32}
_EXPECT = {
    "Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
    "Less": np.less, "Greater": np.greater, "Equal": np.equal, "LessOrEqual": np.less_equal,
    "Max": np.maximum, "Min": np.minimum,
}
_BOOL_OUT = {"Less", "Greater", "Equal", "LessOrEqual"}


@pytest.fixture(scope="module")
def rules():
    return qlower.load_rules(packs=["onnx"])


def _model(op: str, dtype) -> "onnx.ModelProto":
    t = _ONNX_TYPE[dtype]
    out_t = TensorProto.BOOL if op in _BOOL_OUT else t
    node = helper.make_node(op, ["a", "b"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", t, [N]),
                                            helper.make_tensor_value_info("b", t, [N])],
                              [helper.make_tensor_value_info("y", out_t, [N])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _lower_and_run(rules, op: str, dtype, backend: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    result = qlower.lower(load_onnx(_model(op, dtype)), rules, backend=backend)
    assert result.ok, [str(e) for e in result.errors]
    return run(result.qnn, {"a": a, "b": b})["y"]


def _u32():
    # the edges that a saturating or sign-misreading conversion would get wrong, and everything else
    edges = st.sampled_from([0, 1, 2 ** 16 - 1, 2 ** 16, 2 ** 31 - 1, 2 ** 31, 2 ** 31 + 1, 2 ** 32 - 1])
    return hnp.arrays(np.uint32, N, elements=st.one_of(edges, st.integers(0, 2 ** 32 - 1)))


@pytest.mark.parametrize("op", sorted(_EXPECT))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_uint32_on_cpu_is_exact_over_the_whole_range(rules, op: str, data) -> None:
    a, b = data.draw(_u32(), label="a"), data.draw(_u32(), label="b")
    got = _lower_and_run(rules, op, np.uint32, "cpu", a, b)
    np.testing.assert_array_equal(got, _EXPECT[op](a, b))


@pytest.mark.parametrize("backend", ["cpu", "htp"])
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Mod", "Max", "Min"])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_uint8_arithmetic_wraps_like_onnx(rules, op: str, backend: str, data) -> None:
    elements = st.integers(0, 255) if op not in ("Div", "Mod") else st.integers(1, 255)
    a = data.draw(hnp.arrays(np.uint8, N, elements=st.integers(0, 255)), label="a")
    b = data.draw(hnp.arrays(np.uint8, N, elements=elements), label="b")
    expect = {"Div": lambda x, y: x // y, "Mod": np.mod, **_EXPECT}[op](a, b)
    np.testing.assert_array_equal(_lower_and_run(rules, op, np.uint8, backend, a, b), expect)


def test_uint32_is_not_computed_on_htp_where_float32_may_run_as_float16(rules) -> None:
    result = qlower.lower(load_onnx(_model("Less", np.uint32)), rules, backend="htp")
    assert not result.ok
    assert "UINT_32" in str(result.errors[0])


def test_wrapping_flag_parses_and_formats(tmp_path: Path) -> None:
    text = "compute u8 as i32 wrapping for qnn.ElementWiseAdd backends(cpu)\n\ncompute u8 as i32\n"
    (tmp_path / "c.qpat").write_text(text)
    first, second = load_rule_files([tmp_path / "c.qpat"]).computes
    assert first.wrapping and not second.wrapping
    assert format_text(text) == text


def _unary_or_shift_model(op: str, attrs: dict) -> "onnx.ModelProto":
    ins = ["a"] if op == "BitwiseNot" else ["a", "b"]
    node = helper.make_node(op, ins, ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.UINT32, [N]) for n in ins],
                              [helper.make_tensor_value_info("y", TensorProto.UINT32, [N])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_uint32_bitwise_not_and_left_shift_on_cpu(rules, data) -> None:
    a = data.draw(_u32(), label="a")
    shifts = data.draw(hnp.arrays(np.uint32, N, elements=st.one_of(st.integers(0, 40), st.integers(0, 2 ** 32 - 1))))
    r = qlower.lower(load_onnx(_unary_or_shift_model("BitwiseNot", {})), rules, backend="cpu")
    assert r.ok
    np.testing.assert_array_equal(run(r.qnn, {"a": a})["y"], ~a)
    r = qlower.lower(load_onnx(_unary_or_shift_model("BitShift", {"direction": "LEFT"})), rules, backend="cpu")
    assert r.ok
    expect = np.where(shifts < 32, a.astype(np.uint64) << np.minimum(shifts, 31).astype(np.uint64), 0).astype(np.uint32)
    np.testing.assert_array_equal(run(r.qnn, {"a": a, "b": shifts})["y"], expect)


@pytest.mark.parametrize("op, fn", [("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or),
                                    ("BitwiseXor", np.bitwise_xor)])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_int32_bitwise_ops_over_the_whole_range(rules, op: str, fn, data) -> None:
    ints = hnp.arrays(np.int32, N, elements=st.one_of(
        st.sampled_from([0, -1, 2 ** 31 - 1, -2 ** 31, 15, -16]), st.integers(-2 ** 31, 2 ** 31 - 1)))
    a, b = data.draw(ints, label="a"), data.draw(ints, label="b")
    node = helper.make_node(op, ["a", "b"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.INT32, [N]) for n in "ab"],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [N])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    r = qlower.lower(load_onnx(model), rules, backend="cpu")
    assert r.ok
    np.testing.assert_array_equal(run(r.qnn, {"a": a, "b": b})["y"], fn(a, b))


def _cast_model() -> "onnx.ModelProto":
    # the Cast reads a computed tensor (float16 on HTP): a cast of a float32 graph input keeps float32
    nodes = [helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Cast", ["r"], ["y"], to=TensorProto.UINT8)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [N])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [N])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_a_cast_is_converted_only_where_a_declaration_names_it(rules, tmp_path: Path) -> None:
    # HTP runs float as float16, and its Cast takes no float16 -> uint8: casts.qpat routes it via float32
    result = qlower.lower(load_onnx(_cast_model()), rules, backend="htp")
    assert result.ok, [str(e) for e in result.errors]
    x = np.array([-3.0, 0.0, 1.5, 254.9, 255.0, 300.0], dtype=np.float32)
    np.testing.assert_array_equal(run(result.qnn, {"a": x})["y"], [0, 0, 1, 254, 255, 255])
    # without that declaration the unrestricted `compute f16 as f32` leaves the Cast alone
    pack = data_dir("patterns") / "onnx"
    copy = tmp_path / "onnx"
    copy.mkdir()
    for f in pack.glob("*.qpat"):
        text = f.read_text(encoding="utf-8")
        (copy / f.name).write_text(text.replace("compute f16 as f32 for qnn.Cast backends(htp)\n", ""), encoding="utf-8")
    bare = qlower.load_rules([copy])
    result = qlower.lower(load_onnx(_cast_model()), bare, backend="htp")
    assert not result.ok and "FLOAT_16" in str(result.errors[0])
