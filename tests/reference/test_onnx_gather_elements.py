"""GatherElements' source semantics agree with onnxruntime where onnx.reference's do not: along
an axis of more than 64 entries (BERT's token type table, [1, 64] gathered with [1, 8])."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qlower.reference.onnx_kernels import OnnxKernels
from qlower.reference.spec import KernelError

KERNELS = OnnxKernels()


def _ort(data: np.ndarray, index: np.ndarray, axis: int) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper, numpy_helper

    from qlower.reference.onnx_types import numpy_to_onnx

    node = helper.make_node("GatherElements", ["d", "i"], ["o"], axis=axis)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("d", numpy_to_onnx(data.dtype), data.shape)],
                              [helper.make_tensor_value_info("o", numpy_to_onnx(data.dtype), None)],
                              [numpy_helper.from_array(index, "i")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"d": data})[0]


def test_bert_token_type_table():
    data = np.arange(64, dtype=np.int32).reshape(1, 64) * 3
    index = np.arange(8, dtype=np.int64).reshape(1, 8)
    got = KERNELS["GatherElements"]([data, index], {"axis": 1}, [])[0]
    np.testing.assert_array_equal(got, _ort(data, index, 1))


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_agrees_with_onnxruntime(data):
    rank = data.draw(st.integers(1, 3))
    shape = data.draw(st.lists(st.integers(1, 80), min_size=rank, max_size=rank))
    axis = data.draw(st.integers(-rank, rank - 1))
    ax = axis % rank
    ishape = [data.draw(st.integers(1, 6)) if i == ax else shape[i] for i in range(rank)]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    table = rng.standard_normal(shape).astype(np.float32)
    index = rng.integers(-shape[ax], shape[ax], size=ishape).astype(np.int64)
    got = KERNELS["GatherElements"]([table, index], {"axis": axis}, [])[0]
    np.testing.assert_array_equal(got, _ort(table, index, axis))


def test_out_of_range_index_is_a_kernel_error():
    with pytest.raises(KernelError, match="indices outside"):
        KERNELS["GatherElements"]([np.zeros((2, 3), np.float32), np.array([[3], [0]], np.int64)], {"axis": 1}, [])
