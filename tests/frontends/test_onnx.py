"""The ONNX frontend: import behaviour, QDQ folding, errors, and lowering end to end."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import qlower  # noqa: E402
from qlower.diagnostics import QlowerError  # noqa: E402
from qlower.frontends.onnx_frontend import load_onnx  # noqa: E402
from qlower.reference.interpreter import run_dequantized  # noqa: E402
from qlower.reference.onnx_kernels import OnnxKernels  # noqa: E402
from qlower.reference.spec import OutSpec  # noqa: E402


def model(nodes, inputs, outputs, inits=(), opset=17):
    vi = [h.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    vo = [h.make_tensor_value_info(n, t, s) for n, t, s in outputs]
    return h.make_model(h.make_graph(nodes, "m", vi, vo, list(inits)), opset_imports=[h.make_opsetid("", opset)])


def arr(name, v, dtype=np.float32):
    return nh.from_array(np.asarray(v, dtype), name)


def op_of(graph, type_):
    found = [op for op in graph.ops if op.type == type_]
    assert found, f"no {type_} in {[op.type for op in graph.ops]}"
    return found[0]


@pytest.fixture(scope="module")
def onnx_rules():
    return qlower.load_rules(packs=["onnx"])


# ------------------------------------------------------------------ tensors
def test_shapes_dtypes_and_initializers():
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    m = model([h.make_node("MatMul", ["x", "w"], ["h"]), h.make_node("Relu", ["h"], ["y"])],
              [("x", T.FLOAT, [2, 4])], [("y", T.FLOAT, None)], [arr("w", w)])
    g = load_onnx(m)
    assert [v.name for v in g.inputs] == ["x"] and [v.name for v in g.outputs] == ["y"]
    assert g.value("h").shape == (2, 3) and g.value("h").dtype == np.float32
    assert g.value("y").shape == (2, 3)
    np.testing.assert_array_equal(g.value("w").data, w)
    assert [op.type for op in g.topo_order()] == ["onnx.MatMul", "onnx.Relu"]
    assert g.onnx_opset == 17


def test_int64_becomes_int32():
    m = model([h.make_node("Gather", ["x", "idx"], ["g"], axis=0),
               h.make_node("ArgMax", ["g"], ["y"], axis=1)],
              [("x", T.FLOAT, [5, 3])], [("y", T.INT64, None)], [arr("idx", [4, -1], np.int64)])
    g = load_onnx(m)
    assert g.value("idx").dtype == np.int32 and g.value("idx").data.tolist() == [4, -1]
    assert g.value("y").dtype == np.int32


def test_int64_input_and_saturating_constants():
    m = model([h.make_node("Add", ["i", "big"], ["y"])], [("i", T.INT64, [2])], [("y", T.INT64, None)],
              [arr("big", [2 ** 40, -(2 ** 40)], np.int64)])
    g = load_onnx(m)
    assert g.value("i").dtype == np.int32
    assert g.value("big").data.tolist() == [2 ** 31 - 1, -(2 ** 31)]


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_reduce_axes_attribute_or_input(opset):
    if opset >= 13:
        node = h.make_node("ReduceSum", ["x", "ax"], ["y"], keepdims=0)
        inits = [arr("ax", [-1], np.int64)]
    else:
        node, inits = h.make_node("ReduceSum", ["x"], ["y"], axes=[-1], keepdims=0), []
    g = load_onnx(model([node], [("x", T.FLOAT, [2, 3])], [("y", T.FLOAT, None)], inits, opset))
    op = op_of(g, "onnx.ReduceSum")
    assert op.attrs["axes"] == [-1] and op.attrs["keepdims"] == 0
    assert all(v is None for v in op.operands[1:])
    assert g.value("y").shape == (2,)


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_split_clip_pad_slice_normalised(opset):
    new = opset >= 13
    nodes = [
        h.make_node("Squeeze", ["x", "sq"] if new else ["x"], ["s"], **({} if new else {"axes": [0]})),
        h.make_node("Split", ["s", "sp"] if new else ["s"], ["a", "b"], axis=1, **({} if new else {"split": [1, 3]})),
        h.make_node("Clip", ["a", "", "hi"], ["c"]),
        h.make_node("Pad", ["b", "pads", "cv"], ["p"], mode="constant"),
        h.make_node("Slice", ["p", "st", "en", "axs"], ["y"]),
    ]
    inits = [arr("hi", 0.5), arr("pads", [0, 1, 0, 0], np.int64), arr("cv", 2.0),
             arr("st", [1], np.int64), arr("en", [2 ** 62], np.int64), arr("axs", [1], np.int64)]
    if new:
        inits += [arr("sq", [0], np.int64), arr("sp", [1, 3], np.int64)]
    g = load_onnx(model(nodes, [("x", T.FLOAT, [1, 2, 4])], [("y", T.FLOAT, None), ("c", T.FLOAT, None)],
                        inits, opset))
    assert op_of(g, "onnx.Squeeze").attrs["axes"] == [0]
    assert op_of(g, "onnx.Split").attrs["split"] == [1, 3]
    clip = op_of(g, "onnx.Clip")
    assert clip.attrs == {"max": 0.5} and all(v is None for v in clip.operands[1:])
    assert op_of(g, "onnx.Pad").attrs["pads"] == [0, 1, 0, 0] and op_of(g, "onnx.Pad").attrs["constant_value"] == 2.0
    sl = op_of(g, "onnx.Slice")
    assert sl.attrs["starts"] == [1] and sl.attrs["ends"] == [2 ** 31 - 1] and sl.attrs["axes"] == [1]
    assert g.value("y").shape == (2, 3)


def test_pad_v2_attribute_names():
    m = model([h.make_node("Pad", ["x"], ["y"], pads=[1, 0, 1, 0], value=3.0)], [("x", T.FLOAT, [2, 2])],
              [("y", T.FLOAT, None)], opset=2)
    op = op_of(load_onnx(m), "onnx.Pad")
    assert op.attrs["pads"] == [1, 0, 1, 0] and op.attrs["constant_value"] == 3.0


def test_legacy_softmax_flattens():
    """Softmax-11 on axis 1 of a rank-3 tensor normalises over dims 1 and 2 together."""
    m = model([h.make_node("Softmax", ["x"], ["y"], axis=1)], [("x", T.FLOAT, [2, 3, 4])],
              [("y", T.FLOAT, None)], opset=11)
    g = load_onnx(m)
    assert [op.type for op in g.topo_order()] == ["onnx.Reshape", "onnx.Softmax", "onnx.Reshape"]
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    e = np.exp(x - x.max(axis=(1, 2), keepdims=True))
    want = e / e.sum(axis=(1, 2), keepdims=True)  # the opset-1..12 definition (onnx.reference applies opset 13's)
    from qlower.reference.source import run_graph

    got = run_graph(g, {"x": x}, {"onnx": OnnxKernels()})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_upsample_becomes_resize():
    m = model([h.make_node("Upsample", ["x", "sc"], ["y"], mode="nearest")], [("x", T.FLOAT, [1, 1, 2, 2])],
              [("y", T.FLOAT, None)], [arr("sc", [1, 1, 2, 3])], opset=9)
    op = op_of(load_onnx(m), "onnx.Resize")
    assert op.attrs["scales"] == [1.0, 1.0, 2.0, 3.0] and op.attrs["coordinate_transformation_mode"] == "asymmetric"


def test_group_norm_18_scales_become_per_channel():
    x = np.random.default_rng(0).standard_normal((1, 4, 2, 2)).astype(np.float32)
    m = model([h.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)], [("x", T.FLOAT, [1, 4, 2, 2])],
              [("y", T.FLOAT, None)], [arr("s", [2.0, 3.0]), arr("b", [0.5, -0.5])], opset=18)
    g = load_onnx(m)
    op = op_of(g, "onnx.GroupNormalization")
    assert op.operands[1].data.tolist() == [2.0, 2.0, 3.0, 3.0] and op.operands[2].data.tolist() == [0.5, 0.5, -0.5, -0.5]
    xg = x.reshape(1, 2, -1)
    want = ((xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    want = want * np.repeat([2.0, 3.0], 2).reshape(1, 4, 1, 1) + np.repeat([0.5, -0.5], 2).reshape(1, 4, 1, 1)
    from qlower.reference.source import run_graph

    np.testing.assert_allclose(run_graph(g, {"x": x}, {"onnx": OnnxKernels()})["y"], want, rtol=1e-4, atol=1e-5)


def test_cast_to_names_a_dtype():
    m = model([h.make_node("Cast", ["x"], ["y"], to=T.INT64)], [("x", T.FLOAT, [3])], [("y", T.INT64, None)])
    g = load_onnx(m)
    assert op_of(g, "onnx.Cast").attrs["to"] == "int32" and g.value("y").dtype == np.int32


def test_constant_nodes_and_folding():
    """Constant nodes are constants; Shape of a static tensor and what is computed from it fold away."""
    nodes = [h.make_node("Constant", [], ["two"], value=nh.from_array(np.array(2.0, np.float32))),
             h.make_node("Constant", [], ["k"], value_ints=[-1]),
             h.make_node("Shape", ["x"], ["s"]),
             h.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             h.make_node("Concat", ["n", "k"], ["target"], axis=0),
             h.make_node("Mul", ["x", "two"], ["m"]),
             h.make_node("Reshape", ["m", "target"], ["y"])]
    m = model(nodes, [("x", T.FLOAT, [2, 3, 4])], [("y", T.FLOAT, None)], [arr("zero", [0], np.int64)])
    g = load_onnx(m)
    assert [op.type for op in g.topo_order()] == ["onnx.Mul", "onnx.Reshape"]
    assert op_of(g, "onnx.Reshape").attrs["shape"] == [2, -1]
    assert g.value("two").data.tolist() == 2.0 and g.value("y").shape == (2, 12)


def test_empty_optional_inputs_are_absent():
    m = model([h.make_node("Resize", ["x", "", "", "sz"], ["y"], mode="nearest")], [("x", T.FLOAT, [1, 1, 2, 2])],
              [("y", T.FLOAT, None)], [arr("sz", [1, 1, 4, 4], np.int64)])
    op = op_of(load_onnx(m), "onnx.Resize")
    assert op.operands[1] is None and op.operands[2] is None and op.attrs["sizes"] == [1, 1, 4, 4]


def test_non_constant_parameter_input_stays_an_operand():
    m = model([h.make_node("Slice", ["x", "b", "e"], ["y"])], [("x", T.FLOAT, [5]), ("b", T.INT64, [1])],
              [("y", T.FLOAT, [3])], [arr("e", [4], np.int64)])
    op = op_of(load_onnx(m, input_shapes=None), "onnx.Slice")
    assert op.operands[1] is not None and op.attrs["ends"] == [4]


def test_unused_optional_outputs_are_dropped():
    m = model([h.make_node("MaxPool", ["x"], ["y", "idx"], kernel_shape=[2, 2]),
               h.make_node("Dropout", ["y"], ["z", "mask"])],
              [("x", T.FLOAT, [1, 1, 4, 4])], [("z", T.FLOAT, None)])
    g = load_onnx(m)
    assert len(op_of(g, "onnx.MaxPool").results) == 1 and len(op_of(g, "onnx.Dropout").results) == 1


# ------------------------------------------------------------------ QDQ
def qdq_model(opset: int = 21):
    rng = np.random.default_rng(0)
    w = rng.integers(-100, 100, (4, 3, 3, 3)).astype(np.int8)
    ws = (rng.random(4) * 0.01 + 0.002).astype(np.float32)
    inits = [nh.from_array(w, "w_q"), arr("w_s", ws), nh.from_array(np.zeros(4, np.int8), "w_z"),
             nh.from_array(rng.integers(-500, 500, 4).astype(np.int32), "b_q"), arr("b_s", ws * 0.02),
             arr("xs", 0.02), nh.from_array(np.array(128, np.uint8), "xz"),
             arr("cs", 0.05), nh.from_array(np.array(120, np.uint8), "cz"),
             arr("rs", 0.03), nh.from_array(np.array(0, np.uint8), "rz")]
    nodes = [h.make_node("QuantizeLinear", ["x", "xs", "xz"], ["x_q"]),
             h.make_node("DequantizeLinear", ["x_q", "xs", "xz"], ["x_dq"]),
             h.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w_dq"], axis=0),
             h.make_node("DequantizeLinear", ["b_q", "b_s"], ["b_dq"], axis=0),
             h.make_node("Conv", ["x_dq", "w_dq", "b_dq"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("QuantizeLinear", ["c", "cs", "cz"], ["c_q"]),
             h.make_node("DequantizeLinear", ["c_q", "cs", "cz"], ["c_dq"]),
             h.make_node("Relu", ["c_dq"], ["r"]),
             h.make_node("QuantizeLinear", ["r", "rs", "rz"], ["r_q"]),
             h.make_node("DequantizeLinear", ["r_q", "rs", "rz"], ["y"])]
    return model(nodes, [("x", T.FLOAT, [1, 3, 6, 6])], [("y", T.FLOAT, [1, 4, 6, 6])], inits, opset)


def test_qdq_pairs_fold_into_encodings():
    g = load_onnx(qdq_model())
    assert [op.type for op in g.topo_order()] == [
        "onnx.QuantizeLinear", "onnx.Conv", "onnx.Relu", "onnx.DequantizeLinear"]
    x, y = g.value("x"), g.value("y")
    assert x.dtype == np.float32 and x.quant is None and y.dtype == np.float32 and y.quant is None
    conv = op_of(g, "onnx.Conv")
    xq, w, b = conv.operands
    assert xq.dtype == np.uint8 and xq.quant.zero_point == (128,) and xq.quant.scale == pytest.approx((0.02,))
    assert w.dtype == np.int8 and w.data is not None and w.quant.axis == 0 and len(w.quant.scale) == 4
    assert b.dtype == np.int32 and b.quant.axis == 0
    c = conv.results[0]
    assert c.name == "c" and c.dtype == np.uint8 and c.quant.zero_point == (120,)
    r = op_of(g, "onnx.Relu").results[0]
    assert r.dtype == np.uint8 and r.quant.scale == pytest.approx((0.03,)) and r.quant.zero_point == (0,)


def test_qdq_model_lowers_and_matches(onnx_rules):
    m = qdq_model()
    x = np.random.default_rng(1).standard_normal((1, 3, 6, 6)).astype(np.float32)
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    result = qlower.lower(load_onnx(m), onnx_rules, backend="htp")
    result.raise_for_errors()
    assert {"Quantize", "Conv2d", "Relu", "Dequantize"} <= set(result.qnn_op_counts())
    got = run_dequantized(result.qnn, {"x": x})["y"]
    assert np.max(np.abs(got - want)) <= 2 * 0.03  # within two output quantization steps


def test_quantized_graph_input_through_dequantize():
    m = model([h.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]), h.make_node("Relu", ["d"], ["y"])],
              [("q", T.UINT8, [4])], [("y", T.FLOAT, None)],
              [arr("s", 0.1), nh.from_array(np.array(3, np.uint8), "z")], opset=21)
    g = load_onnx(m)
    q = g.value("q")
    assert q.is_input and q.dtype == np.uint8 and q.quant.zero_point == (3,)
    # the Relu writes a float graph output, so it is no node unit: it runs in float after a Dequantize
    assert [op.type for op in g.topo_order()] == ["onnx.DequantizeLinear", "onnx.Relu"]
    assert op_of(g, "onnx.DequantizeLinear").operands[0] is q and op_of(g, "onnx.Relu").operands[0].quant is None


# ------------------------------------------------------------------ errors
def test_unsupported_domain_names_the_node():
    node = h.make_node("FusedMatMul", ["a", "b"], ["y"], domain="com.microsoft", name="fm")
    m = h.make_model(h.make_graph([node], "m", [h.make_tensor_value_info("a", T.FLOAT, [2, 2]),
                                                h.make_tensor_value_info("b", T.FLOAT, [2, 2])],
                                  [h.make_tensor_value_info("y", T.FLOAT, None)]),
                     opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
    with pytest.raises(QlowerError, match=r"node fm \(com\.microsoft\.FusedMatMul\).*default ONNX domain"):
        load_onnx(m)


def test_missing_static_shape_names_the_tensor():
    m = model([h.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, ["batch", 4])], [("y", T.FLOAT, None)])
    with pytest.raises(QlowerError, match="no static shape for tensor .*x") as info:
        load_onnx(m)
    assert "input_shapes" in info.value.diagnostics[0].hint
    g = load_onnx(m, input_shapes={"x": [3, 4]})
    assert g.value("y").shape == (3, 4)


def test_bad_and_missing_files(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not a protobuf \x00\xff\x13")
    with pytest.raises(QlowerError, match="cannot read .*bad.onnx as an ONNX model"):
        load_onnx(bad)
    with pytest.raises(QlowerError, match="no such file"):
        load_onnx(tmp_path / "missing.onnx")


def test_control_flow_is_refused():
    body = h.make_graph([h.make_node("Identity", ["x"], ["o"])], "b", [], [h.make_tensor_value_info("o", T.FLOAT, [1])])
    m = model([h.make_node("If", ["c"], ["y"], then_branch=body, else_branch=body, name="branch")],
              [("c", T.BOOL, []), ("x", T.FLOAT, [1])], [("y", T.FLOAT, None)])
    with pytest.raises(QlowerError, match="node branch \\(If\\) has a subgraph"):
        load_onnx(m)


def test_frontend_is_registered_for_onnx_files(tmp_path):
    from qlower.cli.commands import load_model

    path = tmp_path / "relu.onnx"
    onnx.save(model([h.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, [2])], [("y", T.FLOAT, None)]), str(path))
    g = load_model(str(path))
    assert [op.type for op in g.ops] == ["onnx.Relu"]


# ------------------------------------------------------------------ kernels
def test_kernel_cache_is_bounded_and_per_object():
    k = OnnxKernels(cache_size=2)
    x = np.ones((2, 3), np.float32)
    for axis in (0, 1, -1):
        k["Softmax"]([x], {"axis": axis}, [OutSpec(None, "float32")])
    assert len(k._cache) == 2 and len(OnnxKernels()._cache) == 0
    assert "Softmax" in k and "NotAnOp" not in k


# ------------------------------------------------------------------ end to end
def block_model(s: int = 4, d: int = 8, heads: int = 2, ffn: int = 16):
    """A pre-norm attention block and a GELU MLP, as exporters write them."""
    rng = np.random.default_rng(0)

    def w(name, *shape):
        return arr(name, rng.standard_normal(shape) * 0.3)

    nodes = [
        h.make_node("LayerNormalization", ["x", "ln_g", "ln_b"], ["xn"], axis=-1, epsilon=1e-5),
        h.make_node("MatMul", ["xn", "wq"], ["q"]), h.make_node("MatMul", ["xn", "wk"], ["k"]),
        h.make_node("MatMul", ["xn", "wv"], ["v"]),
        h.make_node("Reshape", ["q", "hs"], ["q4"]), h.make_node("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
        h.make_node("Reshape", ["k", "hs"], ["k4"]), h.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        h.make_node("Reshape", ["v", "hs"], ["v4"]), h.make_node("Transpose", ["v4"], ["vt"], perm=[0, 2, 1, 3]),
        h.make_node("MatMul", ["qt", "kt"], ["sc"]), h.make_node("Div", ["sc", "scale"], ["ss"]),
        h.make_node("Add", ["ss", "mask"], ["sm"]),
        h.make_node("Softmax", ["sm"], ["p"], axis=-1), h.make_node("MatMul", ["p", "vt"], ["o"]),
        h.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]), h.make_node("Shape", ["x"], ["xs"]),
        h.make_node("Reshape", ["ot", "xs"], ["o3"]), h.make_node("Add", ["x", "o3"], ["r1"]),
        h.make_node("Flatten", ["r1"], ["r1f"], axis=2),
        h.make_node("Gemm", ["r1f", "w1", "b1"], ["f1"], transB=1),
        h.make_node("Div", ["f1", "sqrt2"], ["gd"]), h.make_node("Erf", ["gd"], ["ge"]),
        h.make_node("Add", ["ge", "one"], ["ga"]), h.make_node("Mul", ["f1", "ga"], ["gm"]),
        h.make_node("Mul", ["gm", "half"], ["g"]),
        h.make_node("MatMul", ["g", "w2"], ["f2"]), h.make_node("Reshape", ["f2", "xs"], ["f3"]),
        h.make_node("Add", ["r1", "f3"], ["y"]),
    ]
    causal = np.triu(np.full((s, s), -1e4, np.float32), 1)
    inits = [w("ln_g", d), w("ln_b", d), w("wq", d, d), w("wk", d, d), w("wv", d, d),
             arr("hs", [1, s, heads, d // heads], np.int64), arr("scale", np.sqrt(d // heads)), arr("mask", causal),
             w("w1", ffn, d), w("b1", ffn), w("w2", ffn, d),
             arr("sqrt2", 1.4142135), arr("one", 1.0), arr("half", 0.5)]
    return model(nodes, [("x", T.FLOAT, [1, s, d])], [("y", T.FLOAT, [1, s, d])], inits)


def test_attention_block_end_to_end(onnx_rules):
    m = block_model()
    onnx.checker.check_model(m)
    x = np.random.default_rng(2).standard_normal((1, 4, 8)).astype(np.float32)
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    result = qlower.lower(load_onnx(m), onnx_rules, backend="cpu")
    result.raise_for_errors()
    counts = result.qnn_op_counts()
    assert counts.get("Gelu") == 1 and counts.get("Softmax") == 1 and counts.get("LayerNorm") == 1
    assert not any(op.type.startswith("onnx.") for op in result.graph.ops)
    got = run_dequantized(result.qnn, {"x": x})["y"]
    assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want))


def test_mlp_end_to_end_via_file(tmp_path, onnx_rules):
    rng = np.random.default_rng(3)
    m = model([h.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1), h.make_node("Relu", ["h"], ["r"]),
               h.make_node("MatMul", ["r", "w2"], ["o"]), h.make_node("Add", ["o", "b2"], ["l"]),
               h.make_node("Softmax", ["l"], ["y"], axis=1)],
              [("x", T.FLOAT, [3, 6])], [("y", T.FLOAT, [3, 4])],
              [arr("w1", rng.standard_normal((10, 6))), arr("b1", rng.standard_normal(10)),
               arr("w2", rng.standard_normal((10, 4))), arr("b2", rng.standard_normal(4))])
    path = tmp_path / "mlp.onnx"
    onnx.save(m, str(path))
    x = rng.standard_normal((3, 6)).astype(np.float32)
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    result = qlower.lower(load_onnx(path), onnx_rules, backend="cpu")
    result.raise_for_errors()
    got = run_dequantized(result.qnn, {"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
