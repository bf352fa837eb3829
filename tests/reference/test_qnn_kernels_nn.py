"""MatMul, FullyConnected, convolutions, pooling, resizing and normalizations.

ONNX works channels-first; QNN channels-last. Inputs and results are
transposed around the ONNX reference (NHWC <-> NCHW, filters HWIO <-> OIHW).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from qlower.reference.qnn import QNN_KERNELS
from qlower.reference.spec import KernelError, OutSpec

RNG = np.random.default_rng(3)


def onnx_ref(op: str, inputs: list[np.ndarray], opset: int = 21, n_out: int = 1, **attrs) -> list[np.ndarray]:
    """Run one ONNX node through onnx's reference evaluator."""
    names = [f"i{k}" for k in range(len(inputs))]
    outs = [f"o{k}" for k in range(n_out)]
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for n, v in zip(names, inputs)]
    ovis = [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outs]
    graph = helper.make_graph([helper.make_node(op, names, outs, **attrs)], "g", vis, ovis)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))


def qnn(op: str, inputs: list, params: dict, shape, dtype=np.float32) -> np.ndarray:
    return QNN_KERNELS[op](inputs, params, [OutSpec(shape, dtype)])[0]


def rand(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def first_last(x: np.ndarray) -> np.ndarray:  # channels-last -> channels-first
    return np.moveaxis(x, -1, 1)


def last_first(x: np.ndarray) -> np.ndarray:
    return np.moveaxis(x, 1, -1)


# --- linear algebra -------------------------------------------------------------------

@pytest.mark.parametrize("t0,t1", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_matmul_transposes_and_bias(t0, t1):
    a, b, bias = rand(2, 3, 4), rand(2, 4, 5), rand(5)
    a_in = np.swapaxes(a, -1, -2) if t0 else a
    b_in = np.swapaxes(b, -1, -2) if t1 else b
    got = qnn("MatMul", [a_in, b_in, bias], {"transpose_in0": t0, "transpose_in1": t1}, (2, 3, 5))
    np.testing.assert_allclose(got, a @ b + bias, rtol=1e-5, atol=1e-6)


def test_matmul_batch_broadcast_matches_onnx():
    a, b = rand(4, 1, 3, 6), rand(5, 6, 2)
    want = onnx_ref("MatMul", [a, b])[0]
    np.testing.assert_allclose(qnn("MatMul", [a, b], {}, (4, 5, 3, 2)), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(KernelError, match="inner dimensions"):
        qnn("MatMul", [a, b], {"transpose_in1": True}, (4, 5, 3, 2))


def test_fully_connected_matches_gemm():
    x, w, b = rand(2, 3, 8), rand(6, 8), rand(6)
    want = onnx_ref("Gemm", [x.reshape(6, 8), w, b], transB=1)[0]
    np.testing.assert_allclose(qnn("FullyConnected", [x, w, b], {}, (6, 6)), want, rtol=1e-5, atol=1e-6)
    kept = qnn("FullyConnected", [x, w, b], {"keep_dims": True}, (2, 3, 6))
    np.testing.assert_allclose(kept, want.reshape(2, 3, 6), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(qnn("FullyConnected", [x[0, 0], w], {}, (6,)), w @ x[0, 0], rtol=1e-5, atol=1e-6)


# --- convolution ----------------------------------------------------------------------

CONV2D = [
    dict(stride=(1, 1), pads=((0, 0), (0, 0)), dil=(1, 1), group=1),
    dict(stride=(2, 1), pads=((1, 2), (0, 1)), dil=(1, 2), group=1),
    dict(stride=(1, 2), pads=((1, 1), (1, 1)), dil=(2, 1), group=2),
]


@pytest.mark.parametrize("cfg", CONV2D)
def test_conv2d_matches_onnx(cfg):
    cin, cout, g = 4, 6, cfg["group"]
    x, w, b = rand(2, 7, 8, cin), rand(3, 2, cin // g, cout), rand(cout)
    (pt, pb), (pl, pr) = cfg["pads"]
    want = onnx_ref("Conv", [first_last(x), np.transpose(w, (3, 2, 0, 1)), b], strides=list(cfg["stride"]),
                    pads=[pt, pl, pb, pr], dilations=list(cfg["dil"]), group=g)[0]
    params = {"stride": np.array(cfg["stride"]), "pad_amount": np.array(cfg["pads"]),
              "dilation": np.array(cfg["dil"]), "group": g}
    got = qnn("Conv2d", [x, w, b], params, last_first(want).shape)
    np.testing.assert_allclose(got, last_first(want), rtol=1e-4, atol=1e-5)


def test_depthwise_conv2d_matches_onnx():
    x, w = rand(1, 6, 6, 3), rand(3, 3, 1, 6)  # channel multiplier 2
    want = onnx_ref("Conv", [first_last(x), np.transpose(w, (3, 2, 0, 1))], pads=[1, 1, 1, 1], group=3)[0]
    got = qnn("DepthWiseConv2d", [x, w], {"stride": np.array([1, 1]), "pad_amount": np.array([[1, 1], [1, 1]])},
              (1, 6, 6, 6))
    np.testing.assert_allclose(got, last_first(want), rtol=1e-4, atol=1e-5)


def test_conv1d_and_conv3d_match_onnx():
    x, w = rand(2, 9, 4), rand(3, 4, 5)
    want = onnx_ref("Conv", [first_last(x), np.transpose(w, (2, 1, 0))], strides=[2], pads=[1, 0])[0]
    got = qnn("Conv1d", [x, w], {"stride": 2, "pad_amount": np.array([1, 0])}, (2, 4, 5))
    np.testing.assert_allclose(got, last_first(want), rtol=1e-4, atol=1e-5)
    x3, w3 = rand(1, 4, 5, 5, 2), rand(2, 2, 3, 2, 3)
    want = onnx_ref("Conv", [first_last(x3), np.transpose(w3, (4, 3, 0, 1, 2))], pads=[0, 1, 1, 1, 0, 1])[0]
    got = qnn("Conv3d", [x3, w3], {"stride": np.array([1, 1, 1]), "pad_amount": np.array([[0, 1], [1, 0], [1, 1]])},
              last_first(want).shape)
    np.testing.assert_allclose(got, last_first(want), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("group,stride,pads,out_pad", [(1, (2, 2), ((0, 0), (0, 0)), (0, 0)),
                                                      (2, (2, 3), ((1, 0), (1, 2)), (1, 2)),
                                                      (1, (1, 1), ((1, 1), (0, 0)), (0, 0))])
def test_transpose_conv2d_matches_onnx(group, stride, pads, out_pad):
    cin, cout_g = 4, 3
    x, w, b = rand(1, 3, 4, cin), rand(3, 2, cin, cout_g), rand(cout_g * group)
    (pt, pb), (pl, pr) = pads
    # onnx's reference ConvTranspose mishandles group > 1: run it per group and concatenate.
    cg = cin // group
    want = np.concatenate([
        onnx_ref("ConvTranspose", [first_last(x[..., k * cg:(k + 1) * cg]),
                                   np.transpose(w[:, :, k * cg:(k + 1) * cg], (2, 3, 0, 1)),
                                   b[k * cout_g:(k + 1) * cout_g]],
                 strides=list(stride), pads=[pt, pl, pb, pr], output_padding=list(out_pad))[0]
        for k in range(group)], axis=1)
    params = {"stride": np.array(stride), "pad_amount": np.array(pads), "output_padding": np.array(out_pad),
              "group": group}
    got = qnn("TransposeConv2d", [x, w, b], params, last_first(want).shape)
    np.testing.assert_allclose(got, last_first(want), rtol=1e-4, atol=1e-5)


def test_one_and_three_dimensional_variants_match_onnx():
    x, w = rand(2, 7, 3), rand(3, 1, 6)
    want = onnx_ref("Conv", [first_last(x), np.transpose(w, (2, 1, 0))], pads=[2, 0], dilations=[2], group=3)[0]
    got = qnn("DepthWiseConv1d", [x, w], {"stride": 1, "pad_amount": np.array([2, 0]), "dilation": 2},
              last_first(want).shape)
    np.testing.assert_allclose(got, last_first(want), rtol=1e-4, atol=1e-5)
    x, w = rand(1, 5, 3), rand(3, 3, 2)
    want = onnx_ref("ConvTranspose", [first_last(x), np.transpose(w, (1, 2, 0))], strides=[2], pads=[1, 0],
                    output_padding=[1])[0]
    got = qnn("TransposeConv1d", [x, w], {"stride": 2, "pad_amount": np.array([1, 0]), "output_padding": 1},
              last_first(want).shape)
    np.testing.assert_allclose(got, last_first(want), rtol=1e-4, atol=1e-5)
    x, w = rand(1, 2, 3, 3, 2), rand(2, 2, 1, 2, 3)
    want = onnx_ref("ConvTranspose", [first_last(x), np.transpose(w, (3, 4, 0, 1, 2))], strides=[1, 2, 1],
                    pads=[0, 1, 0, 1, 0, 0], dilations=[2, 1, 1])[0]
    got = qnn("TransposeConv3d", [x, w], {"stride": np.array([1, 2, 1]), "dilation": np.array([2, 1, 1]),
                                          "pad_amount": np.array([[0, 1], [1, 0], [0, 0]])}, last_first(want).shape)
    np.testing.assert_allclose(got, last_first(want), rtol=1e-4, atol=1e-5)


def test_conv_rejects_mismatched_groups():
    with pytest.raises(KernelError, match="group"):
        qnn("Conv2d", [rand(1, 4, 4, 4), rand(1, 1, 3, 4)], {"stride": np.array([1, 1]),
            "pad_amount": np.zeros((2, 2))}, (1, 4, 4, 4))


# --- pooling ------------------------------------------------------------------------------

@pytest.mark.parametrize("count_pad", [0, 1])
@pytest.mark.parametrize("ceil", [0, 1])
def test_avg_pool_matches_onnx(count_pad, ceil):
    x = rand(1, 7, 6, 2)
    want = onnx_ref("AveragePool", [first_last(x)], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 1, 0],
                    count_include_pad=count_pad, ceil_mode=ceil)[0]
    params = {"filter_size": np.array([3, 2]), "stride": np.array([2, 2]), "pad_amount": np.array([[1, 1], [1, 0]]),
              "count_pad_for_edges": count_pad, "rounding_mode": ceil}
    got = qnn("PoolAvg2d", [x], params, last_first(want).shape)
    np.testing.assert_allclose(got, last_first(want), rtol=1e-5, atol=1e-6)


def test_ceil_mode_follows_the_qnn_size_formula():
    # ONNX/PyTorch drop a last window that starts in the trailing padding; QNN's formula keeps it.
    x = np.arange(6, dtype=np.float32).reshape(1, 1, 6, 1)
    params = {"filter_size": np.array([1, 2]), "stride": np.array([1, 2]), "pad_amount": np.array([[0, 0], [0, 1]]),
              "rounding_mode": 1, "count_pad_for_edges": 1}
    got = qnn("PoolAvg2d", [x], params, (1, 1, 4, 1))
    assert got.ravel().tolist() == [0.5, 2.5, 4.5, 0.0]


@pytest.mark.parametrize("ceil", [0, 1])
def test_max_pool_ignores_padding(ceil):
    x = -np.abs(rand(1, 5, 5, 3)) - 1.0  # all negative: zero padding would win
    want = onnx_ref("MaxPool", [first_last(x)], kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 0, 0],
                    ceil_mode=ceil)[0]
    params = {"filter_size": np.array([2, 2]), "stride": np.array([2, 2]), "pad_amount": np.array([[1, 0], [1, 0]]),
              "rounding_mode": ceil}
    got = qnn("PoolMax2d", [x], params, last_first(want).shape)
    np.testing.assert_array_equal(got, last_first(want))


def test_pool3d_hand_worked():
    x = np.arange(8, dtype=np.float32).reshape(1, 2, 2, 2, 1)
    p = {"filter_size": np.array([2, 2, 2]), "stride": np.array([1, 1, 1]), "pad_amount": np.zeros((3, 2))}
    assert qnn("PoolAvg3d", [x], p, (1, 1, 1, 1, 1)).item() == 3.5
    assert qnn("PoolMax3d", [x], p, (1, 1, 1, 1, 1)).item() == 7.0


# --- resize -------------------------------------------------------------------------------

RESIZE = [
    (0, 1, 0, "half_pixel", "linear", "round_prefer_floor"),
    (2, 1, 0, "align_corners", "linear", "round_prefer_floor"),
    (3, 1, 0, "asymmetric", "linear", "round_prefer_floor"),
    (1, 1, 0, "pytorch_half_pixel", "linear", "round_prefer_floor"),
    (0, 0, 0, "half_pixel", "nearest", "round_prefer_floor"),
    (3, 0, 2, "asymmetric", "nearest", "floor"),
    (2, 0, 1, "align_corners", "nearest", "round_prefer_ceil"),
    (0, 2, 0, "half_pixel", "cubic", "round_prefer_floor"),
]


@pytest.mark.parametrize("tmode,imode,nmode,otmode,oimode,onmode", RESIZE)
@pytest.mark.parametrize("out_hw", [(6, 9), (2, 3)])
def test_resize_matches_onnx(tmode, imode, nmode, otmode, oimode, onmode, out_hw):
    x = rand(1, 4, 5, 2)
    sizes = np.array([1, 2, *out_hw], np.int64)
    want = onnx_ref("Resize", [first_last(x), np.array([], np.float32), np.array([], np.float32), sizes],
                    coordinate_transformation_mode=otmode, mode=oimode, nearest_mode=onmode)[0]
    params = {"transformation_mode": tmode, "interpolation_mode": imode, "nearest_mode": nmode}
    got = qnn("Resize", [x], params, (1, *out_hw, 2))
    np.testing.assert_allclose(got, last_first(want), rtol=1e-5, atol=1e-5)


def test_resize_cubic_exclude_outside_matches_onnx():
    x = rand(1, 5, 5, 1)
    sizes = np.array([1, 1, 8, 3], np.int64)
    want = onnx_ref("Resize", [first_last(x), np.array([], np.float32), np.array([], np.float32), sizes],
                    mode="cubic", exclude_outside=1, cubic_coeff_a=-0.5)[0]
    got = qnn("Resize", [x], {"interpolation_mode": 2, "exclude_outside": 1, "cubic_coeff": -0.5}, (1, 8, 3, 1))
    np.testing.assert_allclose(got, last_first(want), rtol=1e-5, atol=1e-5)


def test_resize_bilinear_tf_semantics():
    x = np.array([0.0, 10.0], np.float32).reshape(1, 1, 2, 1)
    assert qnn("ResizeBilinear", [x], {}, (1, 1, 4, 1)).ravel().tolist() == [0.0, 5.0, 10.0, 10.0]
    assert qnn("ResizeBilinear", [x], {"align_corners": True}, (1, 1, 3, 1)).ravel().tolist() == [0.0, 5.0, 10.0]
    assert qnn("ResizeBilinear", [x], {"half_pixel_centers": True}, (1, 1, 4, 1)).ravel().tolist() == [0.0, 2.5, 7.5, 10.0]
    with pytest.raises(KernelError, match="cannot both"):
        qnn("ResizeBilinear", [x], {"align_corners": 1, "half_pixel_centers": 1}, (1, 1, 4, 1))


def test_resize_nearest_tf_semantics():
    x = np.array([0.0, 1.0, 2.0], np.float32).reshape(1, 1, 3, 1)
    assert qnn("ResizeNearestNeighbor", [x], {}, (1, 1, 5, 1)).ravel().tolist() == [0, 0, 1, 1, 2]
    assert qnn("ResizeNearestNeighbor", [x], {"align_corners": 1}, (1, 1, 5, 1)).ravel().tolist() == [0, 1, 1, 2, 2]
    assert qnn("ResizeNearestNeighbor", [x], {"half_pixel_centers": 1}, (1, 1, 2, 1)).ravel().tolist() == [0, 2]


# --- normalization ------------------------------------------------------------------------

def test_layer_norm_matches_onnx():
    x, g, b = rand(2, 3, 8), rand(8), rand(8)
    want = onnx_ref("LayerNormalization", [x, g, b], axis=-1, epsilon=1e-5)[0]
    got = qnn("LayerNorm", [x, g, b], {"axes": np.array([2]), "epsilon": 1e-5}, x.shape)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    g2 = rand(3, 8)
    want = onnx_ref("LayerNormalization", [x, g2], axis=1, epsilon=1e-3)[0]
    np.testing.assert_allclose(qnn("LayerNorm", [x, g2], {"axes": np.array([1, 2])}, x.shape), want, rtol=1e-4, atol=1e-5)


def test_layer_norm_non_trailing_axes_gamma_placement():
    x, g = rand(2, 3, 4), rand(3)
    mu, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
    want = (x - mu) / np.sqrt(var + 1e-3) * g[None, :, None]
    np.testing.assert_allclose(qnn("LayerNorm", [x, g], {"axes": np.array([1])}, x.shape), want, rtol=1e-4, atol=1e-5)


def test_rms_norm():
    x, g, b = rand(2, 5, 6), rand(6), rand(6)
    want = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g + b
    np.testing.assert_allclose(qnn("RmsNorm", [x, g, b], {"axes": np.array([2])}, x.shape), want, rtol=1e-4, atol=1e-5)
    want = onnx_ref("RMSNormalization", [x, g], opset=23, axis=-1, epsilon=1e-6)[0]
    np.testing.assert_allclose(qnn("RmsNorm", [x, g], {"axes": np.array([2])}, x.shape), want, rtol=1e-4, atol=1e-5)


def test_group_norm():
    x, g, b = rand(2, 3, 3, 6), rand(6), rand(6)
    grouped = x.reshape(2, 9, 3, 2)
    mu, var = grouped.mean(axis=(1, 3), keepdims=True), grouped.var(axis=(1, 3), keepdims=True)
    want = ((grouped - mu) / np.sqrt(var + 1e-5)).reshape(x.shape) * g + b
    got = qnn("GroupNorm", [x, g, b], {"group": 3, "epsilon": 1e-5}, x.shape)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_instance_norm_matches_onnx():
    x, g, b = rand(2, 4, 5, 3), rand(3), rand(3)
    want = onnx_ref("InstanceNormalization", [first_last(x), g, b], epsilon=1e-5)[0]
    got = qnn("InstanceNorm", [x, g, b], {"epsilon": 1e-5}, x.shape)
    np.testing.assert_allclose(got, last_first(want), rtol=1e-4, atol=1e-5)
    centred = qnn("InstanceNorm", [x, g], {"normalize_variance": 0}, x.shape)
    np.testing.assert_allclose(centred, x - x.mean(axis=(1, 2), keepdims=True), rtol=1e-5, atol=1e-6)
    rms = qnn("InstanceNorm", [x, g], {"mode": 1, "region": 1, "epsilon": 1e-6}, x.shape)
    np.testing.assert_allclose(rms, x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g, rtol=1e-4)


def test_batchnorm_l2norm_lrn():
    x, w, b = rand(2, 3, 4), rand(4), rand(4)
    np.testing.assert_allclose(qnn("Batchnorm", [x, w, b], {}, x.shape), x * w + b, rtol=1e-6)
    want = x / np.maximum(np.sqrt(np.sum(x * x, axis=-1, keepdims=True)), 1e-12)
    np.testing.assert_allclose(qnn("L2Norm", [x], {"axis": 2}, x.shape), want, rtol=1e-5)
    np.testing.assert_allclose(qnn("L2Norm", [x], {"axis": 0, "axes": np.array([2])}, x.shape), want, rtol=1e-5)
    # Lrn across channels (onnx's reference LRN loops over the wrong axis, so a direct loop here).
    alpha, beta, bias = 0.3, 0.75, 2.0
    xl = rand(1, 2, 2, 5)
    want = np.empty_like(xl)
    for c in range(5):
        s = np.sum(xl[..., max(0, c - 1):c + 2] ** 2, axis=-1)
        want[..., c] = xl[..., c] / (bias + alpha * s) ** beta
    got = qnn("Lrn", [xl], {"radius": 1, "alpha": alpha, "beta": beta, "bias": bias}, xl.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    within = qnn("Lrn", [np.ones((1, 3, 3, 1), np.float32)], {"radius": 1, "region": 1, "beta": 1.0, "alpha": 1.0},
                 (1, 3, 3, 1))
    assert within[0, 1, 1, 0] == pytest.approx(1 / 10) and within[0, 0, 0, 0] == pytest.approx(1 / 5)
