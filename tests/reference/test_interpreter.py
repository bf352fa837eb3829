"""The QnnGraph interpreter on small hand-built graphs: float and quantized
execution, params, and the errors a user can cause."""

from __future__ import annotations

import numpy as np
import pytest

from qlower.diagnostics import QlowerError
from qlower.qnn.datatypes import DataType
from qlower.qnn.model import OpConfig, QnnGraph, QnnTensor, QuantEncoding, ScalarParam, TensorParam, TensorType
from qlower.reference.interpreter import decode_value, encode_value, run, run_dequantized

F32, U8, I8, I32 = DataType.FLOAT_32, DataType.UFIXED_POINT_8, DataType.SFIXED_POINT_8, DataType.SFIXED_POINT_32
RNG = np.random.default_rng(5)


def tensor(g: QnnGraph, name: str, kind: TensorType, dt: DataType, dims, enc=None, data=None) -> str:
    g.add_tensor(QnnTensor(name, kind, dt, tuple(dims), enc, None if data is None else np.asarray(data)))
    if kind == TensorType.APP_WRITE:
        g.inputs.append(name)
    if kind == TensorType.APP_READ:
        g.outputs.append(name)
    return name


def static_param(name: str, values, dt=DataType.UINT_32) -> TensorParam:
    arr = np.asarray(values)
    return TensorParam(name, QnnTensor(f"p_{name}", TensorType.STATIC, dt, arr.shape, data=arr))


def test_float_graph_with_scalar_and_tensor_params():
    g = QnnGraph("g")
    tensor(g, "x", TensorType.APP_WRITE, F32, (2, 3))
    tensor(g, "b", TensorType.STATIC, F32, (3,), data=np.array([1, -2, 3], np.float32))
    tensor(g, "s", TensorType.NATIVE, F32, (2, 3))
    tensor(g, "t", TensorType.NATIVE, F32, (3, 2))
    tensor(g, "y", TensorType.APP_READ, F32, (3, 2))
    g.ops += [OpConfig("add", "ElementWiseAdd", ["x", "b"], ["s"]),
              OpConfig("tr", "Transpose", ["s"], ["t"], [static_param("perm", [1, 0])]),
              OpConfig("sm", "Softmax", ["t"], ["y"], [ScalarParam("axis", DataType.UINT_32, 0),
                                                        ScalarParam("beta", F32, 0.5)])]
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    out = run(g, {"x": x})
    t = (x + [1, -2, 3]).T
    want = np.exp(0.5 * t) / np.exp(0.5 * t).sum(axis=0)
    assert list(out) == ["y"] and out["y"].dtype == np.float32
    np.testing.assert_allclose(out["y"], want, rtol=1e-5)
    everything = run(g, {"x": x}, keep_all=True)
    assert set(everything) == {"x", "s", "t", "y"}


def _quantized_add() -> QnnGraph:
    g = QnnGraph("qadd")
    a_enc = QuantEncoding.from_zero_point(0.05, 128)
    tensor(g, "a", TensorType.APP_WRITE, U8, (4,), a_enc)
    tensor(g, "c", TensorType.STATIC, U8, (4,), a_enc, np.array([128, 148, 108, 255], np.uint8))  # 0, 1, -1, 6.35
    tensor(g, "y", TensorType.APP_READ, U8, (4,), QuantEncoding.from_zero_point(0.04, 128))
    g.ops.append(OpConfig("add", "ElementWiseAdd", ["a", "c"], ["y"]))
    return g


def test_quantized_add_offset_sign_and_saturation():
    g = _quantized_add()
    a = np.array([0.0, 1.0, -6.0, 6.0], np.float32)           # fed as float: quantized with a's encoding
    assert g.tensors["a"].encoding.offsets == (-128,)
    out = run(g, {"a": a})["y"]
    # real sums 0, 2, -7, 12.35 -> q = round(real / 0.04) + 128, saturated to [0, 255]
    assert out.dtype == np.uint8 and out.tolist() == [128, 178, 0, 255]
    np.testing.assert_allclose(run_dequantized(g, {"a": a})["y"], [0.0, 2.0, -5.12, 5.08], rtol=1e-6)
    stored = np.array([128, 148, 8, 248], np.uint8)            # the same values, given stored
    assert run(g, {"a": stored})["y"].tolist() == [128, 178, 0, 255]


def test_per_axis_conv_with_int32_bias():
    g = QnnGraph("qconv")
    x_enc = QuantEncoding.from_zero_point(0.02, 128)
    w_scales = np.array([0.01, 0.03], np.float32)
    w_enc = QuantEncoding.from_zero_point(w_scales, [0, 0], axis=3)
    b_enc = QuantEncoding.from_zero_point(0.02 * w_scales, [0, 0], axis=0)
    y_enc = QuantEncoding.from_zero_point(0.05, 100)
    w = RNG.integers(-127, 128, size=(3, 3, 2, 2)).astype(np.int8)
    bias = np.array([500, -300], np.int32)
    tensor(g, "x", TensorType.APP_WRITE, U8, (1, 5, 5, 2), x_enc)
    tensor(g, "w", TensorType.STATIC, I8, w.shape, w_enc, w)
    tensor(g, "b", TensorType.STATIC, I32, (2,), b_enc, bias)
    tensor(g, "y", TensorType.APP_READ, U8, (1, 5, 5, 2), y_enc)
    g.ops.append(OpConfig("conv", "Conv2d", ["x", "w", "b"], ["y"], [
        static_param("stride", [1, 1]), static_param("pad_amount", [[1, 1], [1, 1]])]))
    xq = RNG.integers(0, 256, size=(1, 5, 5, 2)).astype(np.uint8)
    got = run(g, {"x": xq})["y"]
    # independent computation: float conv over dequantized values, then requantize
    xr = 0.02 * (xq.astype(np.float64) - 128)
    wr = w * w_scales.astype(np.float64)
    xp = np.pad(xr, [(0, 0), (1, 1), (1, 1), (0, 0)])
    real = np.zeros((1, 5, 5, 2))
    for i in range(5):
        for j in range(5):
            real[0, i, j] = np.tensordot(xp[0, i:i + 3, j:j + 3, :], wr, axes=3)
    real += bias * 0.02 * w_scales
    want = np.clip(np.rint(real / 0.05 + 100), 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(got, want)


def test_pad_constant_value_in_quantized_domain():
    g = QnnGraph("qpad")
    enc = QuantEncoding.from_zero_point(0.5, 10)
    tensor(g, "x", TensorType.APP_WRITE, U8, (2,), enc)
    tensor(g, "y", TensorType.APP_READ, U8, (4,), enc)
    g.ops.append(OpConfig("pad", "Pad", ["x"], ["y"], [
        ScalarParam("scheme", DataType.UINT_32, 0), static_param("pad_amount", [[1, 1]]),
        ScalarParam("pad_constant_value", DataType.INT_32, 14)]))  # q 14 = real 2.0
    assert run(g, {"x": np.array([20, 30], np.uint8)})["y"].tolist() == [14, 20, 30, 14]


def test_quantize_dequantize_ops_round_trip():
    g = QnnGraph("qdq")
    enc = QuantEncoding.from_zero_point(0.125, 0)  # binary-exact scale: ties are real ties
    tensor(g, "x", TensorType.APP_WRITE, F32, (5,))
    tensor(g, "q", TensorType.NATIVE, U8, (5,), enc)
    tensor(g, "y", TensorType.APP_READ, F32, (5,))
    g.ops += [OpConfig("quant", "Quantize", ["x"], ["q"]), OpConfig("deq", "Dequantize", ["q"], ["y"])]
    x = np.array([-1.0, 0.0625, 0.1875, 0.3125, 40.0], np.float32)  # q = -8, 0.5, 1.5, 2.5, 320
    assert run(g, {"x": x}, keep_all=True)["q"].tolist() == [0, 0, 2, 2, 255]
    np.testing.assert_allclose(run(g, {"x": x})["y"], [0.0, 0.0, 0.25, 0.25, 31.875])


def test_four_bit_weights_saturate_to_their_bitwidth():
    g = QnnGraph("w4")
    tensor(g, "x", TensorType.APP_WRITE, F32, (3,))
    tensor(g, "y", TensorType.APP_READ, DataType.SFIXED_POINT_4, (3,), QuantEncoding.from_zero_point(1.0, 0))
    g.ops.append(OpConfig("relu", "Relu", ["x"], ["y"]))
    assert run(g, {"x": np.array([-3.0, 5.0, 40.0], np.float32)})["y"].tolist() == [0, 5, 7]


def test_reduce_to_scalar_is_rank_one_and_defaults_without_declared_io():
    g = QnnGraph("r")
    g.add_tensor(QnnTensor("x", TensorType.APP_WRITE, F32, (2, 2)))
    g.add_tensor(QnnTensor("y", TensorType.APP_READ, F32, (1,)))
    g.ops.append(OpConfig("sum", "ReduceSum", ["x"], ["y"], [static_param("axes", [0, 1])]))
    assert run(g, {"x": np.ones((2, 2), np.float32)})["y"].tolist() == [4.0]


def test_bfloat16_tensors_are_stored_as_bits():
    g = QnnGraph("bf")
    t_in = g.add_tensor(QnnTensor("x", TensorType.APP_WRITE, DataType.BFLOAT_16, (2,)))
    t_out = g.add_tensor(QnnTensor("y", TensorType.APP_READ, DataType.BFLOAT_16, (2,)))
    g.ops.append(OpConfig("neg", "ElementWiseNeg", ["x"], ["y"]))
    out = run(g, {"x": np.array([1.0, 2.0], np.float32)})["y"]
    assert out.dtype == np.uint16 and decode_value(t_out, out).tolist() == [-1.0, -2.0]
    assert encode_value(t_in, np.array([1.0], np.float32)).tolist() == [0x3F80]


# --- errors -------------------------------------------------------------------------------

def _relu_graph() -> QnnGraph:
    g = QnnGraph("relu")
    tensor(g, "x", TensorType.APP_WRITE, F32, (2, 2))
    tensor(g, "y", TensorType.APP_READ, F32, (2, 2))
    g.ops.append(OpConfig("r0", "Relu", ["x"], ["y"]))
    return g


def _codes(exc: pytest.ExceptionInfo) -> list[str | None]:
    return [d.code for d in exc.value.diagnostics]


def test_missing_and_unknown_inputs():
    with pytest.raises(QlowerError, match="missing value for graph input `x`") as exc:
        run(_relu_graph(), {})
    assert _codes(exc) == ["missing-input"]
    with pytest.raises(QlowerError, match="`xx` is not an input") as exc:
        run(_relu_graph(), {"xx": np.zeros((2, 2))})
    assert "did you mean `x`" in exc.value.diagnostics[0].hint


def test_wrong_input_shape_and_dtype():
    with pytest.raises(QlowerError, match=r"input `x` has shape \[3\], expected \[2, 2\]"):
        run(_relu_graph(), {"x": np.zeros(3, np.float32)})
    g = _quantized_add()
    with pytest.raises(QlowerError, match="do not fit"):
        run(g, {"a": np.array([0, 1, 2, 300])})


def test_op_without_kernel_names_node_and_type():
    g = _relu_graph()
    g.ops[0].type = "FancyCustomOp"
    with pytest.raises(QlowerError, match="no reference kernel for qti.aisw.FancyCustomOp") as exc:
        run(g, {"x": np.zeros((2, 2), np.float32)})
    assert exc.value.diagnostics[0].subject == "node r0" and _codes(exc) == ["no-kernel"]


def test_kernel_error_names_node():
    g = _relu_graph()
    g.ops[0] = OpConfig("sm", "Softmax", ["x"], ["y"], [ScalarParam("axis", DataType.UINT_32, 5)])
    with pytest.raises(QlowerError, match="Softmax: axis 5 out of range") as exc:
        run(g, {"x": np.zeros((2, 2), np.float32)})
    assert exc.value.diagnostics[0].subject == "node sm" and _codes(exc) == ["kernel-error"]


def test_declared_output_shape_is_checked():
    g = _relu_graph()
    g.tensors["y"].dims = (4,)
    with pytest.raises(QlowerError, match=r"output `y` has shape \[2, 2\], declared \[4\]") as exc:
        run(g, {"x": np.zeros((2, 2), np.float32)})
    assert exc.value.diagnostics[0].subject == "node r0"


def test_use_before_definition_and_unknown_tensor():
    g = _relu_graph()
    g.add_tensor(QnnTensor("later", TensorType.NATIVE, F32, (2, 2)))
    g.ops.insert(0, OpConfig("early", "Relu", ["later"], ["y"]))
    with pytest.raises(QlowerError, match="used before any op produces it"):
        run(g, {"x": np.zeros((2, 2), np.float32)})
    g.ops[0] = OpConfig("bad", "Relu", ["nope"], ["y"])
    with pytest.raises(QlowerError, match="`nope` .* is not a tensor of the graph"):
        run(g, {"x": np.zeros((2, 2), np.float32)})


def test_convert_requantizes_inside_a_graph():
    g = QnnGraph("conv")
    tensor(g, "x", TensorType.APP_WRITE, U8, (3,), QuantEncoding.from_zero_point(0.5, 128))
    tensor(g, "y", TensorType.APP_READ, DataType.UFIXED_POINT_16, (3,), QuantEncoding.from_zero_point(0.25, 32768))
    g.ops.append(OpConfig("cvt", "Convert", ["x"], ["y"]))
    out = run(g, {"x": np.array([0, 128, 255], np.uint8)})["y"]
    assert out.dtype == np.uint16 and out.tolist() == [32512, 32768, 33022]  # real -64, 0, 63.5


def test_one_hot_values_in_output_domain():
    g = QnnGraph("oh")
    tensor(g, "i", TensorType.APP_WRITE, DataType.INT_32, (2,))
    tensor(g, "y", TensorType.APP_READ, U8, (2, 3), QuantEncoding.from_zero_point(0.5, 4))
    g.ops.append(OpConfig("oh", "OneHot", ["i"], ["y"], [
        ScalarParam("depth", DataType.UINT_32, 3), ScalarParam("on_value", DataType.INT_32, 6),
        ScalarParam("off_value", DataType.INT_32, 4)]))
    assert run(g, {"i": np.array([2, 0], np.int32)})["y"].tolist() == [[4, 4, 6], [6, 4, 4]]


def test_stored_values_outside_a_narrow_bitwidth_are_rejected():
    g = QnnGraph("w4in")
    tensor(g, "x", TensorType.APP_WRITE, DataType.UFIXED_POINT_4, (2,), QuantEncoding.from_zero_point(1.0, 0))
    tensor(g, "y", TensorType.APP_READ, F32, (2,))
    g.ops.append(OpConfig("dq", "Dequantize", ["x"], ["y"]))
    assert run(g, {"x": np.array([3, 15], np.uint8)})["y"].tolist() == [3.0, 15.0]
    with pytest.raises(QlowerError, match=r"do not fit \[0, 15\]"):
        run(g, {"x": np.array([3, 16], np.uint8)})


def test_per_axis_encoding_of_the_wrong_length_is_reported():
    g = QnnGraph("badenc")
    tensor(g, "x", TensorType.APP_WRITE, F32, (2, 3))
    tensor(g, "w", TensorType.STATIC, I8, (2, 3), QuantEncoding.from_zero_point([0.1, 0.2], [0, 0], axis=1),
           np.ones((2, 3), np.int8))
    tensor(g, "y", TensorType.APP_READ, F32, (2, 3))
    g.ops.append(OpConfig("mul", "ElementWiseMultiply", ["x", "w"], ["y"]))
    with pytest.raises(QlowerError, match="cannot read input `w`.*needs 3 scales") as exc:
        run(g, {"x": np.ones((2, 3), np.float32)})
    assert exc.value.diagnostics[0].subject == "node mul"


def test_kernels_are_found_through_the_op_registry_it_is_given():
    """The interpreter asks the one op registry (QnnOps) for kernels, not a table of its own."""
    from qlower.qnn.opdef import OpDefRegistry
    from qlower.qnn.registry import QnnOps
    from qlower.reference.qnn import qnn_ops

    g = QnnGraph("g")
    tensor(g, "x", TensorType.APP_WRITE, F32, (3,))
    tensor(g, "y", TensorType.APP_READ, F32, (3,))
    g.ops.append(OpConfig("n", "ElementWiseNeg", ["x"], ["y"]))
    x = np.array([1, -2, 3], np.float32)
    np.testing.assert_array_equal(run(g, {"x": x})["y"], -x)
    full = qnn_ops(OpDefRegistry.load())  # the registry with the OpDefs: same kernels
    np.testing.assert_array_equal(run(g, {"x": x}, ops=full)["y"], -x)
    doubled = QnnOps.build(OpDefRegistry.from_files([]), {"ElementWiseNeg": lambda ins, params, outs: [2 * ins[0]]})
    np.testing.assert_array_equal(run_dequantized(g, {"x": x}, ops=doubled)["y"], 2 * x)
    with pytest.raises(QlowerError) as exc:
        run(g, {"x": x}, ops=QnnOps.build(OpDefRegistry.from_files([])))
    assert exc.value.diagnostics[0].code == "no-kernel"
