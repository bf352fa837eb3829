"""GridSample against ONNX's reference evaluator, CropAndResize against a
direct per-pixel loop of TensorFlow's definition, ArgbToRgb by hand."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from qlower.reference.qnn import QNN_KERNELS
from qlower.reference.spec import KernelError, OutSpec

RNG = np.random.default_rng(6)


def onnx_grid_sample(x_nchw: np.ndarray, grid: np.ndarray, **attrs) -> np.ndarray:
    vis = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, a.shape) for n, a in (("x", x_nchw), ("g", grid))]
    out = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("GridSample", ["x", "g"], ["y"], **attrs)], "g", vis, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    return ReferenceEvaluator(model).run(None, {"x": x_nchw, "g": grid})[0]


def qnn(op: str, inputs: list, params: dict, shape) -> np.ndarray:
    return QNN_KERNELS[op](inputs, params, [OutSpec(shape, np.float32)])[0]


@pytest.mark.parametrize("mode,omode", [(0, "linear"), (1, "nearest")])
@pytest.mark.parametrize("padding,opadding", [(0, "zeros"), (1, "border"), (2, "reflection")])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_matches_onnx(mode, omode, padding, opadding, align):
    x = RNG.standard_normal((2, 4, 5, 3)).astype(np.float32)
    grid = RNG.uniform(-1.6, 1.6, size=(2, 3, 6, 2)).astype(np.float32)
    want = onnx_grid_sample(np.transpose(x, (0, 3, 1, 2)), grid, mode=omode, padding_mode=opadding,
                            align_corners=align)
    got = qnn("GridSample", [x, grid], {"mode": mode, "padding_mode": padding, "align_corners": align}, (2, 3, 6, 3))
    np.testing.assert_allclose(got, np.transpose(want, (0, 2, 3, 1)), rtol=1e-5, atol=1e-5)


def tf_crop_and_resize(img, boxes, idx, size, nearest, fill):
    """A literal per-pixel transcription of TensorFlow's crop_and_resize definition."""
    _, h, w, c = img.shape
    out = np.full((len(boxes), *size, c), fill, np.float64)
    for b, (y1, x1, y2, x2) in enumerate(boxes):
        for i in range(size[0]):
            yy = y1 * (h - 1) + i * (y2 - y1) * (h - 1) / (size[0] - 1) if size[0] > 1 else 0.5 * (y1 + y2) * (h - 1)
            for j in range(size[1]):
                xx = x1 * (w - 1) + j * (x2 - x1) * (w - 1) / (size[1] - 1) if size[1] > 1 else 0.5 * (x1 + x2) * (w - 1)
                if not (0 <= yy <= h - 1 and 0 <= xx <= w - 1):
                    continue
                src = img[idx[b]]
                if nearest:
                    out[b, i, j] = src[int(math.floor(yy + 0.5)), int(math.floor(xx + 0.5))]
                    continue
                t, l = math.floor(yy), math.floor(xx)
                bt, r = math.ceil(yy), math.ceil(xx)
                fy, fx = yy - t, xx - l
                top = src[t, l] + (src[t, r] - src[t, l]) * fx
                bot = src[bt, l] + (src[bt, r] - src[bt, l]) * fx
                out[b, i, j] = top + (bot - top) * fy
    return out


@pytest.mark.parametrize("nearest", [0, 1])
@pytest.mark.parametrize("size", [(3, 4), (1, 2)])
def test_crop_and_resize_matches_tf_definition(nearest, size):
    img = RNG.standard_normal((2, 5, 6, 2)).astype(np.float32)
    # dyadic coordinates, so float32 and float64 agree on which side of a .5 a sample falls
    boxes = np.array([[0.125, 0.25, 0.875, 0.75], [0.8125, 0.0, 0.1875, 1.0], [-0.25, 0.3125, 0.5, 1.375]], np.float32)
    idx = np.array([1, 0, 1], np.int32)
    params = {"resize_dims": np.array(size), "interpolation_mode": nearest, "extrapolation_value": -9.0}
    got = qnn("CropAndResize", [img, boxes, idx], params, (3, *size, 2))
    np.testing.assert_allclose(got, tf_crop_and_resize(img, boxes, idx, size, nearest, -9.0), rtol=1e-5, atol=1e-6)


def test_argb_to_rgb():
    x = np.arange(8, dtype=np.float32).reshape(1, 1, 2, 4)
    assert qnn("ArgbToRgb", [x], {"reverse_output": 0}, (1, 1, 2, 3))[0, 0].tolist() == [[1, 2, 3], [5, 6, 7]]
    assert qnn("ArgbToRgb", [x], {"input_order": 1, "reverse_output": 1}, (1, 1, 2, 3))[0, 0].tolist() == \
        [[2, 1, 0], [6, 5, 4]]
    with pytest.raises(KernelError, match="reverse_output"):
        qnn("ArgbToRgb", [x], {}, (1, 1, 2, 3))


def onnx_roi_align(x_nchw: np.ndarray, rois: np.ndarray, idx: np.ndarray, **attrs) -> np.ndarray:
    vis = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None),
           helper.make_tensor_value_info("r", onnx.TensorProto.FLOAT, None),
           helper.make_tensor_value_info("b", onnx.TensorProto.INT64, None)]
    out = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("RoiAlign", ["x", "r", "b"], ["y"], **attrs)], "g", vis, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    return ReferenceEvaluator(model).run(None, {"x": x_nchw, "r": rois, "b": idx.astype(np.int64)})[0]


@pytest.mark.parametrize("ct", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio", [0, 2])
@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_roi_align_matches_onnx(ct, ratio, scale):
    """ONNX's RoiAlign (avg) is QNN's with img_size_ratio = 1 / spatial_scale, aligned for half_pixel."""
    x = RNG.standard_normal((2, 6, 7, 3)).astype(np.float32)
    corners = RNG.uniform(-2.0, 9.0, size=(5, 2, 2))
    rois = np.concatenate([corners.min(axis=1), corners.max(axis=1)], axis=1).astype(np.float32) / scale
    rois[0] = [1.0, 1.0, 1.4, 1.2]  # smaller than a pixel: clamped to one unless aligned
    idx = RNG.integers(0, 2, size=5)
    want = onnx_roi_align(np.transpose(x, (0, 3, 1, 2)), rois, idx, output_height=3, output_width=2,
                          sampling_ratio=ratio, spatial_scale=scale, coordinate_transformation_mode=ct)
    params = {"img_size_ratio": np.array([1 / scale, 1 / scale], np.float32), "num_samples_y": ratio or -1,
              "num_samples_x": ratio or -1, "aligned": ct == "half_pixel"}
    got = qnn("RoiAlign", [x, rois, idx.astype(np.int32)], params, (5, 3, 2, 3))
    np.testing.assert_allclose(np.transpose(got, (0, 3, 1, 2)), want, rtol=1e-5, atol=1e-5)


def test_roi_align_invalid_roi():
    x = RNG.standard_normal((1, 4, 4, 2)).astype(np.float32)
    rois = np.array([[1.0, 1.0, 1.0, 1.0]], np.float32)
    params = {"img_size_ratio": np.array([1.0, 1.0], np.float32)}
    with pytest.raises(KernelError, match="zero size"):
        qnn("RoiAlign", [x, rois, np.zeros(1, np.int32)], params, (1, 2, 2, 2))
    got = qnn("RoiAlign", [x, rois, np.zeros(1, np.int32)], {**params, "allow_invalid_roi": True}, (1, 2, 2, 2))
    assert not got.any()
