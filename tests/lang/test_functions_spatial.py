"""The spatial built-ins agree with ONNX's own reference implementation (onnx.reference): resizing one
axis is M·x + b, and average pooling is a window sum times the reciprocal tap counts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from qlower.lang.functions import EvalError
from qlower.lang.functions_spatial import _affine_base_grid, _pool_divisors, _resize_weights

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

_CTMS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric",
         "tf_crop_and_resize"]


def _onnx_resize(x: np.ndarray, scale: float, roi: list[float], **attrs) -> np.ndarray:
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], **attrs)
    ins = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in ("x", "roi", "scales")]
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    feeds = {"x": x.reshape(1, 1, -1), "roi": np.array([0, 0, roi[0], 1, 1, roi[1]], np.float32),
             "scales": np.array([1, 1, scale], np.float32)}
    return ReferenceEvaluator(model).run(None, feeds)[0].reshape(-1)


def test_resize_weights_cubic_symmetric_exclude_outside():
    """Found by the law below: the first output's source coordinate falls on a tap (2e-16), so the weights left
    after exclude_outside drops the taps outside are rounding noise; normalising them gave [-0.2, 1.2]."""
    x = np.random.default_rng(0).standard_normal(7).astype(np.float32)
    scale = float(np.float32(1.5))
    want = _onnx_resize(x, scale, [0.0, 1.0], mode="cubic", coordinate_transformation_mode="half_pixel_symmetric",
                        antialias=0, exclude_outside=1, nearest_mode="round_prefer_floor", extrapolation_value=7.0)
    m, b = _resize_weights(7, len(want), scale, [0.0, 1.0], "cubic", "half_pixel_symmetric", -0.75, True, False,
                           "round_prefer_floor", 7.0)
    np.testing.assert_allclose(m @ x + b, want, rtol=1e-5, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 7), scale=st.sampled_from([0.34, 0.6, 0.8, 1.0, 1.5, 2.0, 2.94]),
       mode=st.sampled_from(["nearest", "linear", "cubic"]), ctm=st.sampled_from(_CTMS),
       antialias=st.booleans(), exclude=st.booleans(),
       nearest=st.sampled_from(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]),
       seed=st.integers(0, 2**16))
def test_resize_weights_match_onnx(size, scale, mode, ctm, antialias, exclude, nearest, seed):
    scale = float(np.float32(scale))  # ONNX holds scales as float32
    antialias = antialias and mode != "nearest"
    if int(np.floor(size * scale)) < 1:
        return
    x = np.random.default_rng(seed).standard_normal(size).astype(np.float32)
    # roi as float32, as ONNX holds it (0.2 and 1.3 as float64 put ties of nearest rounding elsewhere)
    roi = [float(np.float32(v)) for v in ([0.2, 1.3] if ctm == "tf_crop_and_resize" else [0.0, 1.0])]
    want = _onnx_resize(x, scale, roi, mode=mode, coordinate_transformation_mode=ctm, antialias=int(antialias),
                        exclude_outside=int(exclude), nearest_mode=nearest, extrapolation_value=7.0)
    m, b = _resize_weights(size, len(want), scale, roi, mode, ctm, -0.75, exclude, antialias, nearest, 7.0)
    np.testing.assert_allclose(m @ x + b, want, rtol=1e-5, atol=1e-5)


def _onnx_avg_pool(x: np.ndarray, **attrs) -> np.ndarray:
    node = helper.make_node("AveragePool", ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


@settings(max_examples=40, deadline=None)
@given(size=st.integers(3, 9), k=st.integers(1, 3), s=st.integers(1, 3), d=st.integers(1, 2),
       pads=st.tuples(st.integers(0, 1), st.integers(0, 1)), ceil=st.booleans(), count_pad=st.booleans())
@example(size=4, k=2, s=3, d=2, pads=(0, 0), ceil=True, count_pad=True)  # the reference shifts this window
def test_pool_divisors_are_onnx_counts(size, k, s, d, pads, ceil, count_pad):
    """Averaging ones over the padding-as-zeros windows gives count / divisor, so the divisor
    times the window sum of ones must equal ONNX's average of ones times that count."""
    if (k - 1) * d + 1 > size + sum(pads) or max(pads) >= k:
        return
    ones = np.ones((1, 1, size), np.float32)
    want = _onnx_avg_pool(ones, kernel_shape=[k], strides=[s], dilations=[d], pads=list(pads),
                          ceil_mode=int(ceil), count_include_pad=int(count_pad))
    out = want.shape[-1]
    if (out - 1) * s + (k - 1) * d + 1 - (size + sum(pads)) >= 2:
        with pytest.raises(EvalError, match="ceil-mode"):
            _pool_divisors([size], [k], [s], [d], [list(pads)], [out], count_pad)
        return
    div = _pool_divisors([size], [k], [s], [d], [list(pads)], [out], count_pad)
    taps = np.arange(out)[:, None] * s - pads[0] + np.arange(k)[None, :] * d
    inside = ((taps >= 0) & (taps < size)).sum(axis=1)  # window sum of ones (zeros in the padding)
    np.testing.assert_allclose(div.reshape(-1) * inside, want.reshape(-1), rtol=1e-6)


def test_affine_base_grid_rows_run_x_fastest():
    g = _affine_base_grid([2, 3], True)
    assert g.shape == (6, 3)
    np.testing.assert_allclose(g[:3, 0], [-1, 0, 1])
    np.testing.assert_allclose(g[:, 1], [-1, -1, -1, 1, 1, 1])
    np.testing.assert_allclose(g[:, 2], 1)


def test_empty_window_is_an_error():
    with pytest.raises(EvalError, match="covers no input element"):
        _pool_divisors([2], [1], [1], [1], [[2, 0]], [4], False)
