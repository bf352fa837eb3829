"""Gather/scatter, one-hot, top-k, arg-reductions, cumulative sum and reductions."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from qlower.reference.qnn import QNN_KERNELS
from qlower.reference.spec import KernelError, OutSpec

RNG = np.random.default_rng(2)
X = RNG.standard_normal((3, 4, 5)).astype(np.float32)


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


def qnn(op: str, inputs: list, params: dict, shapes, dtypes=np.float32) -> list[np.ndarray]:
    shapes = shapes if isinstance(shapes, list) else [shapes]
    dtypes = dtypes if isinstance(dtypes, list) else [dtypes] * len(shapes)
    return QNN_KERNELS[op](inputs, params, [OutSpec(s, d) for s, d in zip(shapes, dtypes)])


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_gather_matches_onnx(axis):
    idx = np.array([[0, -1], [1, 2]], np.int32)
    want = onnx_ref("Gather", [X, idx.astype(np.int64)], axis=axis)[0]
    np.testing.assert_array_equal(qnn("Gather", [X, idx], {"axis": axis}, want.shape)[0], want)


def test_gather_out_of_range():
    with pytest.raises(KernelError, match="outside"):
        qnn("Gather", [X, np.array([3])], {"axis": 0}, (1, 4, 5))


def test_gather_elements_and_nd_match_onnx():
    idx = RNG.integers(0, 4, size=(3, 2, 5)).astype(np.int32)
    want = onnx_ref("GatherElements", [X, idx.astype(np.int64)], axis=1)[0]
    np.testing.assert_array_equal(qnn("GatherElements", [X, idx], {"axis": 1}, want.shape)[0], want)
    nd = np.array([[[1, 2], [0, 0]], [[3, 4], [2, 1]], [[0, 1], [1, 1]]], np.int32)
    for batch_dims in (0, 1):
        ind = nd if batch_dims else nd[0]
        want = onnx_ref("GatherND", [X, ind.astype(np.int64)], batch_dims=batch_dims)[0]
        got = qnn("GatherNd", [X, ind], {"batch_dims": batch_dims}, want.shape)[0]
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("reduction,name", [(0, "none"), (1, "add"), (2, "mul"), (3, "max")])
def test_scatter_elements_matches_onnx(reduction, name):
    data = RNG.standard_normal((3, 4)).astype(np.float32)
    idx = np.array([[1, 0, 2, 0], [0, 2, 1, 1]], np.int32) if reduction else np.array([[1, 0, 2, 0]], np.int32)
    upd = RNG.standard_normal(idx.shape).astype(np.float32)
    want = onnx_ref("ScatterElements", [data, idx.astype(np.int64), upd], axis=0, reduction=name)[0]
    got = qnn("ScatterElements", [data, idx, upd], {"axis": 0, "reduction": reduction}, (3, 4))[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("reduction,name", [(0, "none"), (1, "add"), (2, "mul")])
def test_scatter_nd_matches_onnx(reduction, name):
    data = RNG.standard_normal((4, 3)).astype(np.float32)
    idx = np.array([[1], [3]], np.int32) if reduction == 0 else np.array([[1], [3], [1]], np.int32)
    upd = RNG.standard_normal((idx.shape[0], 3)).astype(np.float32)
    want = onnx_ref("ScatterND", [data, idx.astype(np.int64), upd], reduction=name)[0]
    got = qnn("ScatterNd", [data, idx, upd], {"reduction": reduction}, (4, 3))[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_one_hot_matches_onnx(axis):
    idx = np.array([[0, 2], [3, 1]], np.int32)
    want = onnx_ref("OneHot", [idx.astype(np.int64), np.array(4, np.int64), np.array([-1.0, 5.0], np.float32)],
                    axis=axis)[0]
    got = qnn("OneHot", [idx], {"depth": 4, "axis": axis, "on_value": 5.0, "off_value": -1.0}, want.shape)[0]
    np.testing.assert_array_equal(got, want)


def test_non_zero_matches_onnx_transposed():
    x = np.array([[0, 1, 0], [2, 0, 3]], np.float32)
    want = onnx_ref("NonZero", [x])[0].T
    np.testing.assert_array_equal(qnn("NonZero", [x], {}, want.shape, np.int32)[0], want)


def test_top_k_matches_onnx_without_ties():
    vals, idx = qnn("TopK", [X], {"k": 3}, [(3, 4, 3), (3, 4, 3)], [np.float32, np.int32])
    wv, wi = onnx_ref("TopK", [X, np.array([3], np.int64)], n_out=2)
    np.testing.assert_array_equal(vals, wv)
    np.testing.assert_array_equal(idx, wi)
    vals, idx = qnn("TopK", [X], {"k": 2, "largest": False}, [(3, 4, 2), (3, 4, 2)], [np.float32, np.int32])
    wv, wi = onnx_ref("TopK", [X, np.array([2], np.int64)], n_out=2, largest=0)
    np.testing.assert_array_equal(vals, wv)
    np.testing.assert_array_equal(idx, wi)


def test_top_k_ties_put_the_larger_index_first():
    x = np.array([[1.0, 3.0, 3.0, 2.0]])
    vals, idx = qnn("TopK", [x], {"k": 3}, [(1, 3), (1, 3)], [np.float32, np.int32])
    assert vals.tolist() == [[3.0, 3.0, 2.0]] and idx.tolist() == [[2, 1, 3]]


@pytest.mark.parametrize("keep", [0, 1])
def test_argmax_argmin_match_onnx(keep):
    for qop, oop in [("Argmax", "ArgMax"), ("Argmin", "ArgMin")]:
        want = onnx_ref(oop, [X], axis=1, keepdims=keep)[0]
        got = qnn(qop, [X], {"axis": 1, "keep_dims": keep}, want.shape, np.int32)[0]
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumulative_sum(exclusive, reverse):
    x = np.array([1.0, 2.0, 3.0], np.float32)
    hand = {(0, 0): [1, 3, 6], (1, 0): [0, 1, 3], (0, 1): [6, 5, 3], (1, 1): [5, 3, 0]}[(exclusive, reverse)]
    params = {"axis": 0, "exclusive": exclusive, "reverse": reverse}
    assert qnn("CumulativeSum", [x], params, (3,))[0].tolist() == hand
    want = onnx_ref("CumSum", [X, np.array(1, np.int64)], exclusive=exclusive, reverse=reverse)[0]
    np.testing.assert_allclose(qnn("CumulativeSum", [X], {**params, "axis": 1}, X.shape)[0], want, rtol=1e-5, atol=1e-6)


REDUCE = [("ReduceMax", "ReduceMax"), ("ReduceMin", "ReduceMin"), ("ReduceMean", "ReduceMean"),
          ("ReduceSum", "ReduceSum"), ("ReduceProd", "ReduceProd"), ("ReduceSumSquare", "ReduceSumSquare")]


@pytest.mark.parametrize("qop,oop", REDUCE)
@pytest.mark.parametrize("axes,keep", [((1,), 0), ((0, 2), 1), ((2, 0), 0)])
def test_reductions_match_onnx(qop, oop, axes, keep):
    want = onnx_ref(oop, [X, np.array(axes, np.int64)], opset=18, keepdims=keep)[0]
    got = qnn(qop, [X], {"axes": np.array(axes, np.uint32), "keep_dims": keep}, want.shape)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_reduce_all_axes_gives_rank_one():
    got = qnn("ReduceSum", [X], {"axes": np.array([0, 1, 2])}, (1,))[0]
    assert got.shape == (1,)
    np.testing.assert_allclose(got, [X.sum()], rtol=1e-5)
    with pytest.raises(KernelError, match="unique"):
        qnn("ReduceSum", [X], {"axes": np.array([1, 1])}, (3, 5))


def test_moments():
    mean, var = qnn("Moments", [X], {"axes": np.array([0, 1], np.int32), "keep_dims": False}, [(5,), (5,)])
    np.testing.assert_allclose(mean, X.mean(axis=(0, 1)), rtol=1e-5)
    np.testing.assert_allclose(var, X.var(axis=(0, 1)), rtol=1e-5)
    mean, var = qnn("Moments", [X], {"axes": np.array([2], np.int32), "keep_dims": True}, [(3, 4, 1), (3, 4, 1)])
    np.testing.assert_allclose(var, X.var(axis=2, keepdims=True), rtol=1e-5)
