"""Data-movement kernels: reshape, transpose, slicing, padding, space/depth/batch."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper
from onnx.reference import ReferenceEvaluator

from qlower.reference.qnn import QNN_KERNELS
from qlower.reference.spec import KernelError, OutSpec

RNG = np.random.default_rng(1)
X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


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


def qnn(op: str, inputs: list, params: dict, shapes, dtype=np.float32) -> list[np.ndarray]:
    shapes = shapes if isinstance(shapes, list) else [shapes]
    return QNN_KERNELS[op](inputs, params, [OutSpec(s, dtype) for s in shapes])


def test_reshape_to_declared_shape():
    y = qnn("Reshape", [X], {}, (4, 6))[0]
    np.testing.assert_array_equal(y, X.reshape(4, 6))
    with pytest.raises(KernelError, match="cannot reshape"):
        qnn("Reshape", [X], {}, (5, 5))


def test_transpose_and_tile_match_onnx():
    perm = np.array([2, 0, 1], np.uint32)
    np.testing.assert_array_equal(qnn("Transpose", [X], {"perm": perm}, (4, 2, 3))[0],
                                  onnx_ref("Transpose", [X], perm=[2, 0, 1])[0])
    reps = np.array([1, 2, 3], np.uint32)
    np.testing.assert_array_equal(qnn("Tile", [X], {"multiples": reps}, (2, 6, 12))[0],
                                  onnx_ref("Tile", [X, reps.astype(np.int64)])[0])
    with pytest.raises(KernelError, match="permutation"):
        qnn("Transpose", [X], {"perm": np.array([0, 0, 1])}, (2, 2, 3))


def test_concat_split_pack_unpack():
    y = RNG.standard_normal((2, 2, 4)).astype(np.float32)
    np.testing.assert_array_equal(qnn("Concat", [X, y], {"axis": 1}, (2, 5, 4))[0], np.concatenate([X, y], 1))
    np.testing.assert_array_equal(qnn("Concat", [X, X], {}, (2, 3, 8))[0], np.concatenate([X, X], -1))
    parts = qnn("Split", [X], {"axis": 2, "split_index": np.array([1, 3], np.uint32)}, [(2, 3, 1), (2, 3, 2), (2, 3, 1)])
    for got, exp in zip(parts, onnx_ref("Split", [X, np.array([1, 2, 1])], n_out=3, axis=2)):
        np.testing.assert_array_equal(got, exp)
    packed = qnn("Pack", [X, X + 1], {"axis": 1}, (2, 2, 3, 4))[0]
    np.testing.assert_array_equal(packed, np.stack([X, X + 1], 1))
    un = qnn("UnPack", [X], {"axis": 1}, [(2, 4)] * 3)
    for i in range(3):
        np.testing.assert_array_equal(un[i], X[:, i, :])
    with pytest.raises(KernelError, match="split_index"):
        qnn("Split", [X], {"axis": 2, "split_index": np.array([3, 1])}, [(2, 3, 1)] * 3)


def test_expand_dims_and_squeeze():
    np.testing.assert_array_equal(qnn("ExpandDims", [X], {"axis": 1}, (2, 1, 3, 4))[0], X[:, None])
    np.testing.assert_array_equal(qnn("ExpandDims", [X], {"axes": np.array([0, 4])}, (1, 2, 3, 4, 1))[0],
                                  X[None, ..., None])
    s = X.reshape(1, 2, 1, 3, 4)
    np.testing.assert_array_equal(qnn("Squeeze", [s], {}, (2, 3, 4))[0], X)
    np.testing.assert_array_equal(qnn("Squeeze", [s], {"axes": np.array([2])}, (1, 2, 3, 4))[0], X[None])
    with pytest.raises(KernelError, match="size-1"):
        qnn("Squeeze", [s], {}, (6, 4))


def _ranges(*rows) -> np.ndarray:
    return np.array(rows, np.int32)


def test_strided_slice_hand_worked():
    x = np.arange(10, dtype=np.float32)
    assert qnn("StridedSlice", [x], {"ranges": _ranges([1, 8, 3])}, (3,))[0].tolist() == [1, 4, 7]
    # negative stride down to index 0 needs end = -1
    assert qnn("StridedSlice", [x], {"ranges": _ranges([9, -1, -4])}, (3,))[0].tolist() == [9, 5, 1]
    assert qnn("StridedSlice", [x], {"ranges": _ranges([0, 0, -1]), "begin_mask": 1, "end_mask": 1},
               (10,))[0].tolist() == list(range(9, -1, -1))
    y = qnn("StridedSlice", [X], {"ranges": _ranges([1, 2, 1], [0, 3, 2], [0, 4, 1]), "shrink_axes": 1}, (2, 4))[0]
    np.testing.assert_array_equal(y, X[1, 0:3:2, :])
    z = qnn("StridedSlice", [X], {"ranges": _ranges([0, 2, 1], [0, 1, 1], [0, 3, 1], [1, 3, 1]),
                                  "new_axes_mask": 2}, (2, 1, 3, 2))[0]
    np.testing.assert_array_equal(z, X[:, None, :, 1:3])


def test_strided_slice_rejects_what_qnn_does_not_define():
    with pytest.raises(KernelError, match="do not wrap"):
        qnn("StridedSlice", [X], {"ranges": _ranges([-1, 2, 1], [0, 3, 1], [0, 4, 1])}, (1, 3, 4))
    with pytest.raises(KernelError, match="end 99"):
        qnn("StridedSlice", [X], {"ranges": _ranges([0, 99, 1], [0, 3, 1], [0, 4, 1])}, (2, 3, 4))
    with pytest.raises(KernelError, match="selects nothing"):
        qnn("StridedSlice", [X], {"ranges": _ranges([1, 1, 1], [0, 3, 1], [0, 4, 1])}, (1, 3, 4))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_strided_slice_matches_python_slicing(data):
    shape = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    rows, expect = [], []
    for d in shape:
        step = data.draw(st.sampled_from([-2, -1, 1, 2, 3]))
        b = data.draw(st.integers(0, d - 1))
        e = data.draw(st.integers(b + 1, d)) if step > 0 else data.draw(st.integers(-1, b - 1))
        rows.append([b, e, step])
        expect.append(slice(b, None if e == -1 else e, step))
    want = x[tuple(expect)]
    got = qnn("StridedSlice", [x], {"ranges": np.array(rows, np.int32)}, want.shape)[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("scheme,mode", [(0, "constant"), (2, "reflect"), (3, "edge")])
def test_pad_matches_onnx(scheme, mode):
    amounts = np.array([[0, 1], [2, 1], [1, 2]], np.uint32)
    got = qnn("Pad", [X], {"scheme": scheme, "pad_amount": amounts, "pad_constant_value": 1.5}, (3, 6, 7))[0]
    pads = np.concatenate([amounts[:, 0], amounts[:, 1]]).astype(np.int64)
    extra = [np.array(1.5, np.float32)] if mode == "constant" else []
    np.testing.assert_array_equal(got, onnx_ref("Pad", [X, pads, *extra], mode=mode)[0])


def test_pad_symmetric_and_limits():
    x = np.array([1.0, 2.0, 3.0])
    got = qnn("Pad", [x], {"scheme": 1, "pad_amount": np.array([[2, 3]])}, (8,))[0]
    assert got.tolist() == [2, 1, 1, 2, 3, 3, 2, 1]
    with pytest.raises(KernelError, match="exceeds"):
        qnn("Pad", [x], {"scheme": 2, "pad_amount": np.array([[3, 0]])}, (6,))


def _nchw(x: np.ndarray) -> np.ndarray:
    return np.transpose(x, (0, 3, 1, 2))


def _nhwc(x: np.ndarray) -> np.ndarray:
    return np.transpose(x, (0, 2, 3, 1))


@pytest.mark.parametrize("mode,name", [(0, "DCR"), (1, "CRD")])
def test_depth_to_space_matches_onnx(mode, name):
    x = RNG.standard_normal((2, 3, 2, 8)).astype(np.float32)
    got = qnn("DepthToSpace", [x], {"block_size": np.array([2, 2]), "mode": mode}, (2, 6, 4, 2))[0]
    np.testing.assert_array_equal(got, _nhwc(onnx_ref("DepthToSpace", [_nchw(x)], blocksize=2, mode=name)[0]))
    back = qnn("SpaceToDepth", [got], {"block_size": np.array([2, 2]), "mode": mode}, (2, 3, 2, 8))[0]
    np.testing.assert_array_equal(back, x)


def test_space_to_depth_dcr_matches_onnx():
    x = RNG.standard_normal((1, 4, 6, 3)).astype(np.float32)
    got = qnn("SpaceToDepth", [x], {"block_size": np.array([2, 2])}, (1, 2, 3, 12))[0]
    np.testing.assert_array_equal(got, _nhwc(onnx_ref("SpaceToDepth", [_nchw(x)], blocksize=2)[0]))


def test_space_to_batch_and_back():
    x = np.arange(1 * 2 * 4 * 1, dtype=np.float32).reshape(1, 2, 4, 1)
    sb = qnn("SpaceToBatch", [x], {"block_size": np.array([2, 2]), "pad_amount": np.array([[0, 0], [0, 0]])},
             (4, 1, 2, 1))[0]
    # batch index = (row_in_block * 2 + col_in_block) * batch + b
    assert sb[:, 0, :, 0].tolist() == [[0, 2], [1, 3], [4, 6], [5, 7]]
    back = qnn("BatchToSpace", [sb], {"block_size": np.array([2, 2])}, (1, 2, 4, 1))[0]
    np.testing.assert_array_equal(back, x)
    cropped = qnn("BatchToSpace", [sb], {"block_size": np.array([2, 2]), "crops": np.array([[0, 1], [1, 0]])},
                  (1, 1, 3, 1))[0]
    np.testing.assert_array_equal(cropped, x[:, :1, 1:, :])


def test_channel_shuffle_and_batch_permutation():
    x = np.arange(6, dtype=np.float32).reshape(1, 6)
    # out[i*G + g] = in[g*(C/G) + i], G = 2
    assert qnn("ChannelShuffle", [x], {"num_groups": 2}, (1, 6))[0].tolist() == [[0, 3, 1, 4, 2, 5]]
    y = qnn("BatchPermutation", [X, np.array([1, 0, 1], np.int32)], {}, (3, 3, 4))[0]
    np.testing.assert_array_equal(y, X[[1, 0, 1]])


def test_shape_and_constant_of_shape():
    assert qnn("Shape", [X], {}, (3,), np.int32)[0].tolist() == [2, 3, 4]
    assert qnn("Shape", [X], {"start": 1, "end": 2}, (1,), np.int32)[0].tolist() == [3]
    y = qnn("ConstantOfShape", [np.array([2, 3], np.uint32)], {"value": 7.0}, (2, 3))[0]
    np.testing.assert_array_equal(y, np.full((2, 3), 7.0, np.float32))


def test_kernels_infer_shapes_when_none_is_declared():
    none = [OutSpec(None, np.float32)]
    assert QNN_KERNELS["ElementWiseAdd"]([X, X[0]], {}, none)[0].shape == (2, 3, 4)
    assert QNN_KERNELS["ReduceMax"]([X], {"axes": np.array([0, 1, 2])}, none)[0].shape == (1,)
    assert QNN_KERNELS["Squeeze"]([X.reshape(1, 2, 1, 12)], {}, none)[0].shape == (2, 12)
    with pytest.raises(KernelError, match="needs its output shape declared"):
        QNN_KERNELS["Reshape"]([X], {}, none)
    with pytest.raises(KernelError, match="needs its output shape declared"):
        QNN_KERNELS["ResizeBilinear"]([X.reshape(1, 2, 3, 4)], {}, none)
