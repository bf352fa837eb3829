"""QDQ models by node units (qlower.frontends.onnx_qdq): fixtures made by onnxruntime's own quantizer
on tiny models, compared with onnxruntime running the QDQ model unoptimised, and hand-written
QDQ graphs for the edge cases (float ops between quantized ones, com.microsoft Q/DQ, int4, blocks)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

import qlower  # noqa: E402
from qlower.diagnostics import QlowerError  # noqa: E402
from qlower.frontends.onnx_frontend import load_onnx  # noqa: E402
from qlower.graph.core import Graph  # noqa: E402
from qlower.graph.types import Quant  # noqa: E402
from qlower.qnn.reencode import flipped  # noqa: E402
from qlower.reference.interpreter import run_dequantized  # noqa: E402


@pytest.fixture(scope="module")
def onnx_rules():
    return qlower.load_rules(packs=["onnx"])


def _arr(name, a):
    return nh.from_array(np.asarray(a, np.float32), name)


def _model(nodes, inputs, outputs, inits=(), opset=21, extra_opsets=()):
    g = h.make_graph(nodes, "m", [h.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                     [h.make_tensor_value_info(n, t, s) for n, t, s in outputs], list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset), *extra_opsets])
    m.ir_version = 10
    return m


def _float_block(seed=0):
    """MatMul → Add → LayerNorm; IsNaN guard → Where with a float constant branch (which the
    quantizer leaves in float) → Relu → Sqrt → MatMul."""
    rng = np.random.default_rng(seed)
    nodes = [h.make_node("MatMul", ["x", "w1"], ["m1"]), h.make_node("Add", ["m1", "b1"], ["a1"]),
             h.make_node("LayerNormalization", ["a1", "g", "beta"], ["n"], axis=-1),
             h.make_node("IsNaN", ["a1"], ["nan"]), h.make_node("Where", ["nan", "big", "n"], ["wh"]),
             h.make_node("Relu", ["wh"], ["rl"]), h.make_node("Sqrt", ["rl"], ["r"]),
             h.make_node("MatMul", ["r", "w2"], ["y"])]
    inits = [_arr("w1", rng.standard_normal((16, 16)) * 0.3), _arr("b1", rng.standard_normal(16) * 0.1),
             _arr("g", rng.uniform(0.5, 1.5, 16)), _arr("beta", rng.standard_normal(16) * 0.1), _arr("big", -2.0),
             _arr("w2", rng.standard_normal((16, 8)) * 0.3)]
    return _model(nodes, [("x", T.FLOAT, [1, 4, 16])], [("y", T.FLOAT, [1, 4, 8])], inits, opset=20)


class _Reader:
    def __init__(self, rng, n=4):
        self.it = iter([{"x": rng.standard_normal((1, 4, 16)).astype(np.float32)} for _ in range(n)])

    def get_next(self):
        return next(self.it, None)


def _ort_quantized(tmp_path, activation, weight, per_channel):
    pytest.importorskip("onnxruntime")
    from onnxruntime.quantization import QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    src, dst = tmp_path / "float.onnx", tmp_path / f"q_{activation}_{weight}.onnx"
    onnx.save(_float_block(), str(src))
    cfg = get_qnn_qdq_config(str(src), _Reader(np.random.default_rng(1)), per_channel=per_channel,
                             activation_type=getattr(QuantType, activation), weight_type=getattr(QuantType, weight))
    quantize(str(src), str(dst), cfg)
    return onnx.load(str(dst))


def _ort_run(m, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _output_scale(m):
    inits = {t.name: nh.to_array(t) for t in m.graph.initializer}
    (dq,) = [n for n in m.graph.node if m.graph.output[0].name in n.output]
    assert dq.op_type == "DequantizeLinear"
    return float(inits[dq.input[1]])


@pytest.mark.parametrize("backend", ["htp", "cpu"])
@pytest.mark.parametrize("activation, weight, per_channel", [("QUInt8", "QInt8", True), ("QUInt16", "QUInt8", False)])
def test_ort_qnn_quantized_block_matches_onnxruntime(tmp_path, onnx_rules, backend, activation, weight, per_channel):
    m = _ort_quantized(tmp_path, activation, weight, per_channel)
    if activation == "QUInt16":  # 16-bit Q/DQ below opset 21: ORT writes com.microsoft ones
        assert {n.domain for n in m.graph.node if n.op_type.endswith("QuantizeLinear")} == {"com.microsoft"}
    g = load_onnx(m)
    where, = [op for op in g.ops if op.type == "onnx.Where"]
    assert all(v.quant is None for v in where.operands[1:]) and where.results[0].quant is None  # left float
    relu, = [op for op in g.ops if op.type == "onnx.Relu"]
    assert relu.operands[0].quant is None and relu.results[0].quant is None  # reads the float Where
    for t in ("onnx.MatMul", "onnx.LayerNormalization", "onnx.Sqrt", "onnx.Add"):
        for op in (o for o in g.ops if o.type == t):
            assert op.results[0].quant is not None, t  # node units: quantized ops
    sixteen = activation == "QUInt16"
    gamma = next(op for op in g.ops if op.type == "onnx.LayerNormalization").operands[1]
    # (HTP's float16 pass still routes a 16-bit output's Dequantize through FLOAT_16, losing steps:
    # issue 27 item 4, another change; here HTP computes its float ops in float32.)
    result = qlower.lower(g, onnx_rules, backend=backend, float16=False if sixteen else None)
    result.raise_for_errors()
    counts = result.qnn_op_counts()
    assert counts.get("Dequantize", 0) >= 1 and counts.get("Quantize", 0) >= 1  # the float Where's boundary
    floats = [op.type for op in result.qnn.ops if op.type not in ("Dequantize", "Quantize", "Cast")
              and any(result.qnn.tensors[o].datatype.name.startswith("FLOAT") for o in op.outputs)]
    if weight == "QInt8" and not (backend == "cpu" and sixteen):  # int8 gamma: HTP and CPU read it as uint8
        assert gamma.dtype == np.int8
        ln, = [op for op in result.qnn.ops if op.type == "LayerNorm"]
        assert result.qnn.tensors[ln.inputs[1]].datatype.name == "UFIXED_POINT_8"
    if backend == "cpu" and sixteen:  # CPU has no 16-bit fixed point: every op in float32 between Q/DQ
        assert "FullyConnected" in floats and "LayerNorm" in floats
        assert counts["Quantize"] >= 8
    else:
        assert sorted(floats) == ["ElementWiseSelect", "Relu"]  # only the ops the quantizer left in float
    rng = np.random.default_rng(5)
    worst = 0.0
    for _ in range(3):
        x = rng.standard_normal((1, 4, 16)).astype(np.float32)
        want = _ort_run(m, {"x": x})
        got = run_dequantized(result.qnn, {"x": x})["y"]
        worst = max(worst, float(np.max(np.abs(got - want))) / _output_scale(m))
    assert worst <= 2.0


def test_float_op_between_units_gets_dequantize_and_quantize():
    """A Sqrt whose input is dequantized but whose result is not quantized is no node unit."""
    inits = [_arr("s", 0.05), nh.from_array(np.array(10, np.uint8), "z"), _arr("s2", 0.01),
             nh.from_array(np.array(0, np.uint8), "z2")]
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]), h.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             h.make_node("Relu", ["xd"], ["r"]), h.make_node("QuantizeLinear", ["r", "s", "z"], ["rq"]),
             h.make_node("DequantizeLinear", ["rq", "s", "z"], ["rd"]),
             h.make_node("Sqrt", ["rd"], ["sq"]),  # float result read by a float Add: stays float
             h.make_node("Add", ["sq", "rd"], ["a"]), h.make_node("QuantizeLinear", ["a", "s2", "z2"], ["aq"]),
             h.make_node("DequantizeLinear", ["aq", "s2", "z2"], ["y"])]
    g = load_onnx(_model(nodes, [("x", T.FLOAT, [2, 3])], [("y", T.FLOAT, [2, 3])], inits))
    kinds = [op.type for op in g.topo_order()]
    assert kinds == ["onnx.QuantizeLinear", "onnx.Relu", "onnx.DequantizeLinear", "onnx.Sqrt", "onnx.Add",
                     "onnx.QuantizeLinear", "onnx.DequantizeLinear"]
    relu = next(op for op in g.ops if op.type == "onnx.Relu")
    add = next(op for op in g.ops if op.type == "onnx.Add")
    assert relu.results[0].quant is not None and relu.results[0].dtype == np.uint8
    assert all(v.quant is None for v in add.operands) and add.results[0].quant is None


def test_dequantize_read_only_by_a_quantize_is_a_requantization(onnx_rules):
    """DQ → Q of another encoding (uint8 → uint16), no op between: two Q/DQ node units the fold keeps,
    which the rules lower together to a QNN Convert (onnxruntime's QNN EP fuses the pair alike)."""
    inits = [_arr("s", 0.05), nh.from_array(np.array(10, np.uint8), "z"), _arr("s2", 0.001),
             nh.from_array(np.array(30000, np.uint16), "z2")]
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             h.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             h.make_node("QuantizeLinear", ["xd", "s2", "z2"], ["x16"]),
             h.make_node("DequantizeLinear", ["x16", "s2", "z2"], ["x16d"]),
             h.make_node("Relu", ["x16d"], ["r16"]), h.make_node("QuantizeLinear", ["r16", "s2", "z2"], ["rq"]),
             h.make_node("DequantizeLinear", ["rq", "s2", "z2"], ["y"])]
    m = _model(nodes, [("x", T.FLOAT, [2, 3])], [("y", T.FLOAT, [2, 3])], inits)
    g = load_onnx(m)
    kinds = [op.type for op in g.topo_order()]
    assert kinds == ["onnx.QuantizeLinear", "onnx.DequantizeLinear", "onnx.QuantizeLinear", "onnx.Relu",
                     "onnx.DequantizeLinear"]
    dq = next(op for op in g.topo_order() if op.type == "onnx.DequantizeLinear")
    assert dq.operands[0].dtype == np.uint8 and dq.results[0].quant is None
    result = qlower.lower(g, onnx_rules, backend="htp", float16=False)
    result.raise_for_errors()
    counts = result.qnn_op_counts()
    assert counts.get("Convert") == 1 and counts.get("Dequantize") == 1 and counts.get("Quantize") == 1
    x = np.random.default_rng(2).uniform(-0.6, 5, (2, 3)).astype(np.float32)
    got = run_dequantized(result.qnn, {"x": x})["y"]
    assert np.max(np.abs(got - _ort_run(m, {"x": x}))) <= 1.0001 * 0.001


def _int4_model(domain_opset):
    """int4 weights (packed two per byte in the model) behind a DequantizeLinear, per axis."""
    import ml_dtypes

    w = np.array([[-8, 7, 3], [1, -2, 0]], ml_dtypes.int4)
    ws = np.array([0.1, 0.2, 0.3], np.float32)
    wz = np.zeros(3, ml_dtypes.int4)
    inits = [nh.from_array(w, "w"), _arr("ws", ws), nh.from_array(wz, "wz"), _arr("s", 0.02),
             nh.from_array(np.array(32768, np.uint16), "z"), _arr("s2", 0.001), nh.from_array(np.array(30000, np.uint16), "z2")]
    dom = "com.microsoft" if domain_opset < 21 else ""
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], domain=dom),
             h.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], domain=dom),
             h.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=1, domain=dom),
             h.make_node("MatMul", ["xd", "wd"], ["mm"]), h.make_node("QuantizeLinear", ["mm", "s2", "z2"], ["mq"], domain=dom),
             h.make_node("DequantizeLinear", ["mq", "s2", "z2"], ["y"], domain=dom)]
    extra = [h.make_opsetid("com.microsoft", 1)] if dom else []
    return _model(nodes, [("x", T.FLOAT, [4, 2])], [("y", T.FLOAT, [4, 3])], inits, opset=domain_opset,
                  extra_opsets=extra)


@pytest.mark.parametrize("opset", [20, 21])
def test_int4_weights_and_com_microsoft_qdq(onnx_rules, opset):
    m = _int4_model(opset)
    g = load_onnx(m)
    mm = next(op for op in g.ops if op.type == "onnx.MatMul")
    w = mm.operands[1]
    assert w.dtype == np.int8 and w.quant.bitwidth == 4 and w.quant.axis == 1
    assert np.array_equal(np.asarray(w.data), [[-8, 7, 3], [1, -2, 0]])
    assert mm.operands[0].dtype == np.uint16 and mm.results[0].dtype == np.uint16
    x = np.random.default_rng(0).uniform(-1, 1, (4, 2)).astype(np.float32)
    want = _ort_run(m, {"x": x}) if opset >= 21 or _ort_has_contrib() else None
    for backend in ("htp", "cpu"):
        result = qlower.lower(load_onnx(m), onnx_rules, backend=backend)
        result.raise_for_errors()
        got = run_dequantized(result.qnn, {"x": x})["y"]
        if want is not None:
            assert np.max(np.abs(got - want)) <= 2 * 0.001


def _ort_has_contrib():
    return pytest.importorskip("onnxruntime") is not None


def test_int4_constant_without_dequantize_is_refused():
    import ml_dtypes

    m = _model([h.make_node("Cast", ["w"], ["y"], to=T.FLOAT)], [], [("y", T.FLOAT, [2])],
               [nh.from_array(np.array([1, 2], ml_dtypes.int4), "w")])
    with pytest.raises(QlowerError, match="w has dtype int4"):
        load_onnx(m)


def test_matmul_nbits_is_refused_with_the_way_out():
    node = h.make_node("MatMulNBits", ["a", "b", "s"], ["y"], domain="com.microsoft", name="mnb", K=32, N=4, bits=4,
                       block_size=32)
    m = _model([node], [("a", T.FLOAT, [1, 32])], [("y", T.FLOAT, [1, 4])],
               [nh.from_array(np.zeros((4, 1, 16), np.uint8), "b"), _arr("s", np.ones(4))],
               extra_opsets=[h.make_opsetid("com.microsoft", 1)])
    with pytest.raises(QlowerError, match=r"node mnb \(com\.microsoft\.MatMulNBits\).*QDQ") as info:
        load_onnx(m)
    assert "QuantFormat.QDQ" in info.value.diagnostics[0].hint


def _blocked_model(scales):
    w = np.arange(-8, 8, dtype=np.int8).reshape(4, 4) % 7
    nodes = [h.make_node("DequantizeLinear", ["w", "ws"], ["wd"], axis=0, block_size=2),
             h.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]), h.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             h.make_node("MatMul", ["xd", "wd"], ["mm"]), h.make_node("QuantizeLinear", ["mm", "s", "z"], ["mq"]),
             h.make_node("DequantizeLinear", ["mq", "s", "z"], ["y"])]
    inits = [nh.from_array(w, "w"), _arr("ws", scales), _arr("s", 0.05), nh.from_array(np.array(128, np.uint8), "z")]
    return _model(nodes, [("x", T.FLOAT, [3, 4])], [("y", T.FLOAT, [3, 4])], inits)


def test_blocked_weights_exact_in_block_expansion_keep_their_blocks():
    per_channel = np.array([0.01, 0.02, 0.03, 0.04])
    g = load_onnx(_blocked_model(np.array([[3, 15, 1, 15], [15, 7, 15, 2]]) * per_channel))
    w = next(op for op in g.ops if op.type == "onnx.MatMul").operands[1]
    assert w.quant.block_size == 2 and w.quant.block_axis == 0 and w.quant.axis == 1 and w.dtype == np.int8


@pytest.mark.parametrize("backend", ["htp", "cpu"])
def test_blocked_weights_lower_to_block_expansion_and_match_onnxruntime(onnx_rules, backend):
    per_channel = np.array([0.01, 0.02, 0.03, 0.04])
    m = _blocked_model(np.array([[3, 15, 1, 15], [15, 7, 15, 2]]) * per_channel)
    result = qlower.lower(load_onnx(m), onnx_rules, backend=backend)
    result.raise_for_errors()
    fc, = [op for op in result.qnn.ops if op.type == "FullyConnected"]
    assert result.qnn.tensors[fc.inputs[1]].encoding.kind.name == "BLOCKWISE_EXPANSION"
    x = np.random.default_rng(0).uniform(-2, 2, (3, 4)).astype(np.float32)
    got = run_dequantized(result.qnn, {"x": x})["y"]
    assert np.max(np.abs(got - _ort_run(m, {"x": x}))) <= 0.05 * 1.001  # one output step (rounding ties)


def test_blocked_weights_not_exact_become_float_and_the_op_stays_float():
    g = load_onnx(_blocked_model(np.array([[0.013, 0.02, 0.5, 0.017], [0.1, 0.0031, 0.07, 0.2]])))
    mm = next(op for op in g.ops if op.type == "onnx.MatMul")
    w = mm.operands[1]
    assert w.quant is None and w.dtype == np.float32 and w.data is not None  # dequantized exactly in float32
    assert mm.results[0].quant is None and mm.operands[0].quant is None  # float MatMul between Dequantize/Quantize
    assert sorted(op.type for op in g.ops) == ["onnx.DequantizeLinear", "onnx.DequantizeLinear", "onnx.MatMul",
                                               "onnx.QuantizeLinear", "onnx.QuantizeLinear"]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["int8", "uint8", "int16", "uint16"]), st.data())
def test_reencoding_keeps_every_real_value(dtype, data):
    info = np.iinfo(dtype)
    bits = data.draw(st.sampled_from([None, 4])) if info.bits == 8 else None
    lo, hi = (info.min, info.max) if bits is None else ((0, 15) if info.min == 0 else (-8, 7))
    q = np.array(data.draw(st.lists(st.integers(lo, hi), min_size=1, max_size=6)), dtype)
    zp = data.draw(st.integers(lo, hi))
    scale = data.draw(st.floats(1e-4, 10))
    g = Graph("g")
    v = g.add_value("w", np.dtype(dtype), q.shape, quant=Quant((scale,), (zp,), bitwidth=bits), data=q)
    got = flipped(v)
    assert got is not None
    new, new_dtype, quant = got
    assert new_dtype.kind != np.dtype(dtype).kind
    before = (q.astype(np.float64) - zp) * scale
    after = (new.astype(np.float64) - quant.zero_point[0]) * quant.scale[0]
    assert np.array_equal(before, after)
    nlo, nhi = (0, 2 ** (bits or info.bits) - 1) if new_dtype.kind == "u" else (-(2 ** ((bits or info.bits) - 1)), 2 ** ((bits or info.bits) - 1) - 1)
    assert new.min() >= nlo and new.max() <= nhi and nlo <= quant.zero_point[0] <= nhi


def test_layernorm_int8_gamma_uint8_beta_reencodes_only_gamma_on_htp(onnx_rules):
    """BERT as get_qnn_qdq_config quantizes it: the gamma is int8, the beta uint8; HTP's LayerNorm
    takes neither int8 gamma nor a re-encoded beta, so only the gamma is re-encoded."""
    rng = np.random.default_rng(3)
    inits = [_arr("s", 0.03), nh.from_array(np.array(128, np.uint8), "z"),
             nh.from_array(rng.integers(-127, 128, 8).astype(np.int8), "g"), _arr("gs", 0.01),
             nh.from_array(np.array(0, np.int8), "gz"),
             nh.from_array(rng.integers(0, 256, 8).astype(np.uint8), "b"), _arr("bs", 0.002),
             nh.from_array(np.array(120, np.uint8), "bz"), _arr("so", 0.02), nh.from_array(np.array(127, np.uint8), "zo")]
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]), h.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             h.make_node("DequantizeLinear", ["g", "gs", "gz"], ["gd"]), h.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bd"]),
             h.make_node("LayerNormalization", ["xd", "gd", "bd"], ["n"], axis=-1),
             h.make_node("QuantizeLinear", ["n", "so", "zo"], ["nq"]), h.make_node("DequantizeLinear", ["nq", "so", "zo"], ["y"])]
    m = _model(nodes, [("x", T.FLOAT, [2, 8])], [("y", T.FLOAT, [2, 8])], inits)
    result = qlower.lower(load_onnx(m), onnx_rules, backend="htp")
    result.raise_for_errors()
    ln, = [op for op in result.qnn.ops if op.type == "LayerNorm"]
    assert [result.qnn.tensors[i].datatype.name for i in ln.inputs] == ["UFIXED_POINT_8"] * 3
    x = rng.standard_normal((2, 8)).astype(np.float32)
    got = run_dequantized(result.qnn, {"x": x})["y"]
    assert np.max(np.abs(got - _ort_run(m, {"x": x}))) <= 2 * 0.02
