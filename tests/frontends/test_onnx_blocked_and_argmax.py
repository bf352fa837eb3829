"""ONNX ops qlower composes from ordinary QNN ops, checked against onnx.reference (ONNX's own
implementation, not written here) on drawn shapes and data, lowered for CPU and run with the QNN
reference interpreter:

* blocked QuantizeLinear / DequantizeLinear (opset 21 `block_size`): scale and zero point per
  block of `block_size` elements along `axis`, stretched to the input's shape (patterns/onnx/quant.qpat);
* MaxPool's second result, Indices: flat positions in the input (storage_order 0 row-major,
  1 column-major) of each window's first maximum (patterns/onnx/conv.qpat).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import qlower  # noqa: E402
from qlower.frontends.onnx_frontend import load_onnx  # noqa: E402
from qlower.reference.interpreter import run  # noqa: E402


@functools.cache
def _onnx_rules():
    return qlower.load_rules(packs=["onnx"])


@pytest.fixture(scope="module")
def rules():
    return _onnx_rules()


def _model(node, inputs, outputs, inits=(), opset=21):
    g = h.make_graph([node], "m", inputs, outputs, [numpy_helper.from_array(a, n) for n, a in inits])
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def _lower_and_run(model, rules, feeds, backend="cpu"):
    result = qlower.lower(load_onnx(model), rules, backend=backend)
    result.raise_for_errors()
    return run(result.qnn, feeds)


@st.composite
def _blocked(draw):
    rank = draw(st.integers(1, 3))
    shape = draw(st.lists(st.integers(1, 7), min_size=rank, max_size=rank))
    axis = draw(st.integers(-rank, rank - 1))
    block = draw(st.integers(1, 4))
    pshape = list(shape)
    pshape[axis] = -(-shape[axis] // block)
    seed = draw(st.integers(0, 2**31 - 1))
    return shape, axis, block, pshape, np.random.default_rng(seed)


_QTYPES = {"uint8": (np.uint8, T.UINT8), "int8": (np.int8, T.INT8)}


@settings(max_examples=25, deadline=None)
@given(_blocked(), st.sampled_from(sorted(_QTYPES)), st.booleans())
def test_blocked_dequantize_equals_onnx_reference(case, qtype, with_zero_point):
    rules = _onnx_rules()
    shape, axis, block, pshape, rng = case
    npt, onnx_t = _QTYPES[qtype]
    info = np.iinfo(npt)
    x = rng.integers(info.min, info.max, shape, endpoint=True).astype(npt)
    scale = (rng.random(pshape) * 2 + 0.01).astype(np.float32)
    inits = [("s", scale)]
    if with_zero_point:
        inits.append(("z", rng.integers(info.min, info.max, pshape, endpoint=True).astype(npt)))
    node = h.make_node("DequantizeLinear", ["x"] + [n for n, _ in inits], ["y"], axis=axis, block_size=block)
    model = _model(node, [h.make_tensor_value_info("x", onnx_t, shape)],
                   [h.make_tensor_value_info("y", T.FLOAT, shape)], inits)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = _lower_and_run(model, rules, {"x": x})["y"]
    np.testing.assert_array_equal(np.asarray(got, np.float32), want)


@settings(max_examples=25, deadline=None)
@given(_blocked(), st.sampled_from(sorted(_QTYPES)), st.booleans())
def test_blocked_quantize_equals_onnx_reference(case, qtype, with_zero_point):
    rules = _onnx_rules()
    shape, axis, block, pshape, rng = case
    npt, onnx_t = _QTYPES[qtype]
    info = np.iinfo(npt)
    scale = (rng.random(pshape) * 2 + 0.01).astype(np.float32)
    # half-way points (ties round to even) and values far past the range (saturation)
    x = (rng.integers(-600, 600, shape) / 2.0).astype(np.float32)
    inits = [("s", scale)]
    attrs = {}
    if with_zero_point:
        inits.append(("z", rng.integers(info.min, info.max, pshape, endpoint=True).astype(npt)))
    else:
        attrs["output_dtype"] = onnx_t
    node = h.make_node("QuantizeLinear", ["x"] + [n for n, _ in inits], ["y"], axis=axis, block_size=block, **attrs)
    model = _model(node, [h.make_tensor_value_info("x", T.FLOAT, shape)],
                   [h.make_tensor_value_info("y", onnx_t, shape)], inits)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = _lower_and_run(model, rules, {"x": x})["y"]
    assert np.asarray(got).dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(got), want)


def test_blocked_dequantize_of_runtime_scale_is_a_clear_error(rules):
    node = h.make_node("DequantizeLinear", ["x", "s"], ["y"], axis=1, block_size=2)
    model = _model(node, [h.make_tensor_value_info("x", T.UINT8, [2, 4]), h.make_tensor_value_info("s", T.FLOAT, [2, 2])],
                   [h.make_tensor_value_info("y", T.FLOAT, [2, 4])])
    result = qlower.lower(load_onnx(model), rules, backend="cpu")
    with pytest.raises(Exception, match="constant scales and zero points"):
        result.raise_for_errors()


@st.composite
def _pool(draw):
    kernel = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    dil = [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    # onnx.reference takes its ONNX-exact path (flat indices over all planes) only when some
    # stride or dilation is not 1; its other path drops the plane offset.
    strides = [draw(st.integers(2, 3)), draw(st.integers(1, 3))]
    pads = [draw(st.integers(0, (k - 1) * d)) for k, d in zip(kernel, dil)]
    pads = pads + [draw(st.integers(0, (k - 1) * d)) for k, d in zip(kernel, dil)]
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    hw = [draw(st.integers(max(1, s - pads[i] - pads[i + 2]), 7)) for i, s in enumerate(span)]
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    order = draw(st.sampled_from([0, 1]))
    seed = draw(st.integers(0, 2**31 - 1))
    return [n, c, *hw], kernel, dil, strides, pads, order, np.random.default_rng(seed)


def _has_tap(size, k, d, s, b, e):
    """Every window along one dim reaches at least one input element."""
    out = (size + b + e - (k - 1) * d - 1) // s + 1
    return all(any(0 <= o * s - b + t * d < size for t in range(k)) for o in range(out))


@settings(max_examples=30, deadline=None)
@given(_pool())
def test_maxpool_indices_equal_onnx_reference(case):
    rules = _onnx_rules()
    shape, kernel, dil, strides, pads, order, rng = case
    # a window wholly in the padding has no maximum (onnx.reference leaves 0 and index -1)
    assume(all(_has_tap(shape[2 + i], kernel[i], dil[i], strides[i], pads[i], pads[i + 2]) for i in range(2)))
    x = rng.integers(-3, 4, shape).astype(np.float32)  # few values: ties, first maximum wins
    node = h.make_node("MaxPool", ["x"], ["y", "z"], kernel_shape=kernel, dilations=dil, strides=strides, pads=pads,
                       storage_order=order)
    model = _model(node, [h.make_tensor_value_info("x", T.FLOAT, shape)],
                   [h.make_tensor_value_info("y", T.FLOAT, None), h.make_tensor_value_info("z", T.INT64, None)],
                   opset=12)
    want_y, want_z = ReferenceEvaluator(model).run(None, {"x": x})
    got = _lower_and_run(model, rules, {"x": x})
    np.testing.assert_array_equal(np.asarray(got["y"]), want_y)
    np.testing.assert_array_equal(np.asarray(got["z"], np.int64), want_z)


def test_maxpool_indices_of_3d_pooling_is_a_clear_error(rules):
    node = h.make_node("MaxPool", ["x"], ["y", "z"], kernel_shape=[2, 2, 2])
    model = _model(node, [h.make_tensor_value_info("x", T.FLOAT, [1, 1, 4, 4, 4])],
                   [h.make_tensor_value_info("y", T.FLOAT, None), h.make_tensor_value_info("z", T.INT64, None)],
                   opset=12)
    result = qlower.lower(load_onnx(model), rules, backend="cpu")
    with pytest.raises(Exception, match="MaxPool with its Indices result is lowered for 1-D and 2-D float inputs only"):
        result.raise_for_errors()


def test_one_result_maxpool_lowers_as_before(rules):
    node = h.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    model = _model(node, [h.make_tensor_value_info("x", T.FLOAT, [1, 2, 6, 6])],
                   [h.make_tensor_value_info("y", T.FLOAT, None)], opset=12)
    result = qlower.lower(load_onnx(model), rules, backend="cpu")
    result.raise_for_errors()
    assert [op.type for op in result.qnn.ops] == ["Transpose", "PoolMax2d", "Transpose"]


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 3), st.integers(1, 2), st.integers(2, 3), st.integers(0, 2), st.integers(0, 2), st.integers(1, 8),
       st.integers(1, 2), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_maxpool1d_indices_equal_onnx_reference(k, d, s, b, e, length, n, c, seed):
    b, e = min(b, (k - 1) * d), min(e, (k - 1) * d)
    assume(length + b + e >= (k - 1) * d + 1 and _has_tap(length, k, d, s, b, e))
    x = np.random.default_rng(seed).integers(-3, 4, [n, c, length]).astype(np.float32)
    node = h.make_node("MaxPool", ["x"], ["y", "z"], kernel_shape=[k], dilations=[d], strides=[s], pads=[b, e])
    model = _model(node, [h.make_tensor_value_info("x", T.FLOAT, [n, c, length])],
                   [h.make_tensor_value_info("y", T.FLOAT, None), h.make_tensor_value_info("z", T.INT64, None)],
                   opset=12)
    want_y, want_z = ReferenceEvaluator(model).run(None, {"x": x})
    got = _lower_and_run(model, _onnx_rules(), {"x": x})
    np.testing.assert_array_equal(np.asarray(got["y"]), want_y)
    np.testing.assert_array_equal(np.asarray(got["z"], np.int64), want_z)
