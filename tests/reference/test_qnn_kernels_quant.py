"""Fixed-point helpers (qlower.reference.quant) and the Quantize, Dequantize,
Convert and Cast kernels."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from qlower.qnn.datatypes import DataType
from qlower.qnn.model import EncodingKind, QuantEncoding
from qlower.reference.qnn import QNN_KERNELS, RAW_IO_OPS
from qlower.reference.quant import (
    bfloat16_bits_to_float, bit_range, dequantize, float_to_bfloat16_bits, quantize, scale_offset,
)
from qlower.reference.spec import KernelError, OutSpec


def onnx_ref(op: str, inputs: list[np.ndarray], opset: int = 21, **attrs) -> np.ndarray:
    names = [f"i{k}" for k in range(len(inputs))]
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for n, v in zip(names, inputs)]
    out = helper.make_tensor_value_info("o", onnx.TensorProto.UNDEFINED, None)
    graph = helper.make_graph([helper.make_node(op, names, ["o"], **attrs)], "g", vis, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))[0]


U8 = QuantEncoding.from_zero_point(0.05, 128)


def test_uint8_zero_point_128_is_offset_minus_128():
    assert U8.offsets == (-128,)
    assert quantize(np.array([0.0]), U8, np.uint8).tolist() == [128]
    assert dequantize(np.array([128, 0, 255], np.uint8), U8).tolist() == pytest.approx([0.0, -6.4, 6.35])


def test_quantize_matches_onnx_quantize_linear():
    x = np.linspace(-7.0, 7.0, 57).astype(np.float32)
    want = onnx_ref("QuantizeLinear", [x, np.array(0.05, np.float32), np.array(128, np.uint8)])
    np.testing.assert_array_equal(quantize(x, U8, np.uint8), want)
    q = np.arange(256, dtype=np.uint8)
    want = onnx_ref("DequantizeLinear", [q, np.array(0.05, np.float32), np.array(128, np.uint8)])
    np.testing.assert_allclose(dequantize(q, U8), want, rtol=1e-6)


def test_rounding_is_half_to_even():
    enc = QuantEncoding(EncodingKind.SCALE_OFFSET, 1.0, 0)
    assert quantize(np.array([0.5, 1.5, 2.5, -0.5, -1.5]), enc, np.int8).tolist() == [0, 2, 2, 0, -2]


@pytest.mark.parametrize("dtype,lo,hi", [(np.uint8, 0, 255), (np.int8, -128, 127), (np.uint16, 0, 65535),
                                         (np.int16, -32768, 32767)])
def test_saturation(dtype, lo, hi):
    enc = QuantEncoding(EncodingKind.SCALE_OFFSET, 1.0, 0)
    assert quantize(np.array([-1e9, 1e9, np.inf, -np.inf]), enc, dtype).tolist() == [lo, hi, hi, lo]


def test_four_bit_ranges():
    enc = QuantEncoding(EncodingKind.SCALE_OFFSET, 1.0, 0)
    assert bit_range(DataType.UFIXED_POINT_4) == (0, 15)
    assert bit_range(DataType.SFIXED_POINT_4) == (-8, 7)
    assert quantize(np.array([-20.0, 3.0, 20.0]), enc, DataType.SFIXED_POINT_4).tolist() == [-8, 3, 7]
    assert quantize(np.array([-20.0, 3.0, 20.0]), enc, DataType.UFIXED_POINT_4).tolist() == [0, 3, 15]
    bw = QuantEncoding(EncodingKind.BW_SCALE_OFFSET, 1.0, 0, bitwidth=4)
    assert quantize(np.array([100.0]), bw, np.int8).tolist() == [7]
    # A signed 4-bit value may be stored with garbage upper bits: only the low 4 count.
    assert dequantize(np.array([0x0D, -3, 7], np.int8), bw).tolist() == [-3.0, -3.0, 7.0]


def test_per_axis_matches_onnx():
    x = np.random.default_rng(4).standard_normal((2, 3, 4)).astype(np.float32)
    scales, zps = np.array([0.01, 0.02, 0.05], np.float32), np.array([0, 10, -5], np.int8)
    enc = QuantEncoding.from_zero_point(scales, zps, axis=1)
    assert enc.offsets == (0, -10, 5) and enc.per_axis
    np.testing.assert_array_equal(quantize(x, enc, np.int8), onnx_ref("QuantizeLinear", [x, scales, zps], axis=1))
    q = quantize(x, enc, np.int8)
    np.testing.assert_allclose(dequantize(q, enc), onnx_ref("DequantizeLinear", [q, scales, zps], axis=1), rtol=1e-6)
    with pytest.raises(ValueError, match="needs 4 scales"):
        quantize(np.zeros((2, 4)), enc, np.int8)


def test_blockwise_expansion_scales():
    # FullyConnected weights [out=2, in=4], channels on axis 0, 2 blocks along the input axis.
    enc = QuantEncoding(EncodingKind.BLOCKWISE_EXPANSION, [0.1, 0.2], [0, 0], axis=0, bitwidth=4,
                        num_blocks_per_axis=2, block_scale_bitwidth=4, block_scales=((1, 2), (3, 4)))
    scale, _ = scale_offset(enc, (2, 4))
    np.testing.assert_allclose(scale, [[0.1, 0.1, 0.2, 0.2], [0.6, 0.6, 0.8, 0.8]])
    q = np.array([[1, -1, 2, 7], [-8, 0, 1, 1]], np.int8)
    np.testing.assert_allclose(dequantize(q, enc), q * scale, rtol=1e-6)
    # Conv weights [kh, kw, cin=4, cout=2]: channels on the last axis, blocks along cin.
    conv = QuantEncoding(EncodingKind.BLOCKWISE_EXPANSION, [0.1, 0.2], [0, 0], axis=3,
                         num_blocks_per_axis=2, block_scales=((1, 2), (3, 4)))
    cs, _ = scale_offset(conv, (1, 1, 4, 2))
    np.testing.assert_allclose(cs[0, 0], [[0.1, 0.6], [0.1, 0.6], [0.2, 0.8], [0.2, 0.8]])


def test_bfloat16_round_trip():
    x = np.array([1.0, -2.5, 3.14159, 1e-3], np.float32)
    bits = float_to_bfloat16_bits(x)
    assert bits.dtype == np.uint16 and bits[0] == 0x3F80
    np.testing.assert_allclose(bfloat16_bits_to_float(bits), x, rtol=2 ** -8)


def raw(op: str, x: np.ndarray, in_spec: OutSpec | None, out: OutSpec) -> np.ndarray:
    assert op in RAW_IO_OPS
    return QNN_KERNELS[op]([x], {}, [out], in_specs=[in_spec])[0]


def test_quantize_and_dequantize_kernels():
    x = np.array([-1.0, 0.0, 0.26], np.float32)
    q = raw("Quantize", x, None, OutSpec((3,), np.uint8, U8))
    assert q.dtype == np.uint8 and q.tolist() == [108, 128, 133]
    back = raw("Dequantize", q, OutSpec((3,), np.uint8, U8), OutSpec((3,), np.float32))
    assert back.dtype == np.float32 and back.tolist() == pytest.approx([-1.0, 0.0, 0.25])
    with pytest.raises(KernelError, match="no quantization encoding"):
        raw("Quantize", x, None, OutSpec((3,), np.uint8))


def test_convert_requantizes_between_encodings():
    u16 = QuantEncoding.from_zero_point(0.001, 32768)
    q = np.array([0, 128, 200, 255], np.uint8)
    got = raw("Convert", q, OutSpec((4,), np.uint8, U8), OutSpec((4,), np.uint16, u16))
    assert got.dtype == np.uint16 and got.tolist() == [26368, 32768, 36368, 39118]
    to_int = raw("Convert", q, OutSpec((4,), np.uint8, U8), OutSpec((4,), np.int32))
    assert to_int.tolist() == [-6, 0, 4, 6]  # -6.4, 0, 3.6, 6.35 rounded half to even


def test_cast_ignores_encodings():
    q = np.array([0, 128, 255], np.uint8)
    got = raw("Cast", q, OutSpec((3,), np.uint8, U8), OutSpec((3,), np.int32))
    assert got.dtype == np.int32 and got.tolist() == [0, 128, 255]
    f = raw("Cast", np.array([-1.7, 2.9, 1e10]), None, OutSpec((3,), np.int8))
    assert f.tolist() == [-1, 2, 127]  # truncation, then saturation
    assert raw("Cast", np.array([0.0, 2.0]), None, OutSpec((2,), np.bool_)).tolist() == [False, True]
