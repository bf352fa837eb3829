"""ONNX models whose lowered graphs once computed wrong values silently, or wrote broken artifacts:
each is lowered, run with the QNN reference interpreter and compared with onnx's ReferenceEvaluator."""

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
from qlower.reference.interpreter import run  # noqa: E402


def model(nodes, inputs, outputs, inits=(), opset=18):
    vi = [h.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    vo = [h.make_tensor_value_info(n, t, s) for n, t, s in outputs]
    return h.make_model(h.make_graph(nodes, "m", vi, vo, list(inits)), opset_imports=[h.make_opsetid("", opset)])


def const(name, v, dtype=np.int64):
    return nh.from_array(np.asarray(v, dtype), name)


@pytest.fixture(scope="module")
def rules():
    return qlower.load_rules(packs=["onnx"])


def lowered_outputs(m, rules, feeds, backend="cpu", validate=True):
    result = qlower.lower(load_onnx(m), rules, backend=backend, validate=validate)
    result.raise_for_errors()
    stored = {k: v.astype(np.int32) if v.dtype == np.int64 else v for k, v in feeds.items()}
    return result, run(result.qnn, stored)


def expected(m, feeds):
    names = [o.name for o in m.graph.output]
    return dict(zip(names, ReferenceEvaluator(m).run(None, feeds)))


def assert_same(have, want):
    for name, w in want.items():
        np.testing.assert_array_equal(np.asarray(have[name]).astype(np.float64), np.asarray(w).astype(np.float64),
                                      err_msg=name)


# ------------------------------------------------------------ wrong values
def test_quantize_linear_rounds_before_adding_the_zero_point(rules):
    """x/s = k + 0.5 with an odd zero point: round(x/s) + zp, not round(x/s + zp)."""
    m = model([h.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"])], [("x", T.FLOAT, [8])],
              [("y", T.UINT8, None)], [const("s", 0.5, np.float32), const("zp", 3, np.uint8)])
    x = np.array([0.25, 0.75, 1.25, -0.25, -0.75, 2.25, 0.1, 10.0], np.float32)
    _, have = lowered_outputs(m, rules, {"x": x}, backend="htp")
    want = expected(m, {"x": x})
    assert want["y"].tolist() == [3, 5, 5, 3, 1, 7, 3, 23]
    assert_same(have, want)


@pytest.mark.parametrize("dtype", [T.INT8, T.INT16])
def test_integer_clip_without_min_keeps_negatives(rules, dtype):
    np_dtype = np.int8 if dtype == T.INT8 else np.int16
    m = model([h.make_node("Clip", ["x", "", "hi"], ["y"])], [("x", dtype, [6])], [("y", dtype, None)],
              [const("hi", 5, np_dtype)])
    x = np.array([-128, -7, -1, 0, 4, 100], np_dtype)
    # no backend's Cast reads int8/int16 (validation says so); the values must still be the source's
    _, have = lowered_outputs(m, rules, {"x": x}, validate=False)
    want = expected(m, {"x": x})
    assert want["y"].tolist() == [-128, -7, -1, 0, 4, 5]
    assert_same(have, want)


@pytest.mark.parametrize("backend", ["cpu", "htp"])
def test_float_mod_with_infinite_divisor(rules, backend):
    m = model([h.make_node("Mod", ["a", "b"], ["y"])], [("a", T.FLOAT, [6]), ("b", T.FLOAT, [6])],
              [("y", T.FLOAT, None)])
    a = np.array([3.0, -3.0, 3.0, -3.0, 5.5, -5.5], np.float32)
    b = np.array([np.inf, np.inf, -np.inf, -np.inf, 2.0, 2.0], np.float32)
    _, have = lowered_outputs(m, rules, {"a": a, "b": b}, backend=backend)
    want = expected(m, {"a": a, "b": b})
    assert want["y"].tolist() == [3.0, np.inf, -np.inf, -3.0, 1.5, 0.5]
    assert_same(have, want)


@pytest.mark.parametrize("largest", [1, 0])
def test_top_k_ties_in_onnx_order(rules, largest):
    m = model([h.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=largest)], [("x", T.FLOAT, [2, 6])],
              [("v", T.FLOAT, None), ("i", T.INT64, None)], [const("k", [4])])
    x = np.array([[1, 2, 2, 1, 2, 1], [0, 0, 0, 0, 0, 0]], np.float32)
    _, have = lowered_outputs(m, rules, {"x": x})
    assert_same(have, expected(m, {"x": x}))


# ------------------------------------------------- outputs that fold away
@pytest.mark.parametrize("backend", ["cpu", "htp"])
@pytest.mark.parametrize("node, dtype, inits", [
    (h.make_node("Shape", ["x"], ["c"]), T.INT64, []),
    (h.make_node("Size", ["x"], ["c"]), T.INT64, []),
    (h.make_node("ConstantOfShape", ["s"], ["c"], value=nh.from_array(np.array([1.5], np.float32))), T.FLOAT,
     [const("s", [2, 3])]),
    (h.make_node("Range", ["a", "b", "d"], ["c"]), T.FLOAT,
     [const("a", 1, np.float32), const("b", 4, np.float32), const("d", 0.5, np.float32)]),
    (h.make_node("HannWindow", ["n"], ["c"]), T.FLOAT, [const("n", 8)]),
], ids=["shape", "size", "constant_of_shape", "range", "hann_window"])
def test_constant_graph_outputs_are_produced_by_a_node(tmp_path, rules, backend, node, dtype, inits):
    m = model([h.make_node("Relu", ["x"], ["r"]), node], [("x", T.FLOAT, [2, 3])],
              [("r", T.FLOAT, None), ("c", dtype, None)], inits)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    result, have = lowered_outputs(m, rules, {"x": x}, backend=backend)
    producers = {t for op in result.qnn.ops for t in op.outputs}
    assert "c" in producers
    written = result.save(tmp_path)
    from qlower.qnn.reader import load

    reloaded = run(load(next(p for p in written if p.name.endswith("_net.json"))), {"x": x})
    want = expected(m, {"x": x})
    np.testing.assert_allclose(np.asarray(reloaded["c"], np.float64), np.asarray(want["c"], np.float64),
                               rtol=1e-6 if backend == "cpu" else 1e-3)
    np.testing.assert_allclose(have["c"], reloaded["c"])


def test_empty_graph_output_is_a_clear_error():
    m = model([h.make_node("Slice", ["x", "st", "en"], ["y"])], [("x", T.FLOAT, [2, 4])], [("y", T.FLOAT, None)],
              [const("st", [4]), const("en", [4])])
    with pytest.raises(QlowerError, match="graph output y is empty"):
        load_onnx(m)


# --------------------------------------------------------- empty tensors
@pytest.mark.parametrize("backend", ["cpu", "htp"])
def test_empty_slice_concatenated(rules, backend):
    m = model([h.make_node("Slice", ["x", "st", "en", "ax"], ["e"]),
               h.make_node("Concat", ["e", "x", "e"], ["y"], axis=1)],
              [("x", T.FLOAT, [2, 4])], [("y", T.FLOAT, None)], [const("st", [7]), const("en", [9]), const("ax", [1])])
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    _, have = lowered_outputs(m, rules, {"x": x}, backend=backend)
    assert_same(have, expected(m, {"x": x}))


@pytest.mark.parametrize("backend", ["cpu", "htp"])
@pytest.mark.parametrize("form", ["input", "attribute"])
def test_split_with_an_empty_part(rules, backend, form):
    """Rotary embedding over the whole head splits off an empty pass-through part and concatenates
    it back; the split loses the empty part (QNN's Split cannot make one)."""
    if form == "input":
        split = h.make_node("Split", ["x", "sz"], ["a", "e", "b"], axis=-1)
        inits, opset = [const("sz", [3, 0, 1])], 18
    else:
        split = h.make_node("Split", ["x"], ["a", "e", "b"], axis=-1, split=[3, 0, 1])
        inits, opset = [], 11
    m = model([split, h.make_node("Neg", ["a"], ["n"]), h.make_node("Concat", ["n", "e", "b"], ["y"], axis=-1)],
              [("x", T.FLOAT, [2, 4])], [("y", T.FLOAT, None)], inits, opset=opset)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    _, have = lowered_outputs(m, rules, {"x": x}, backend=backend)
    assert_same(have, expected(m, {"x": x}))


def test_split_whose_only_nonempty_part_is_the_whole_input(rules):
    m = model([h.make_node("Split", ["x", "sz"], ["a", "e"], axis=1), h.make_node("Concat", ["a", "e"], ["y"], axis=1)],
              [("x", T.FLOAT, [2, 4])], [("y", T.FLOAT, None)], [const("sz", [4, 0])])
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    _, have = lowered_outputs(m, rules, {"x": x})
    assert_same(have, expected(m, {"x": x}))


def test_castlike_of_a_constant_folds_whatever_its_type_source(rules):
    """ReduceLogSumExp's function body over an empty set: the float64 result is a constant (-inf), and
    CastLike reads only the type of its second operand (an empty graph input), so it folds too."""
    m = model([h.make_node("Cast", ["x"], ["d"], to=T.DOUBLE), h.make_node("Exp", ["d"], ["e"]),
               h.make_node("ReduceSum", ["e", "ax"], ["s"], keepdims=1), h.make_node("Log", ["s"], ["l"]),
               h.make_node("CastLike", ["l", "x"], ["r"]), h.make_node("Add", ["r", "z"], ["y"])],
              [("x", T.FLOAT, [2, 0, 4]), ("z", T.FLOAT, [2, 1, 4])], [("y", T.FLOAT, None)], [const("ax", [1])])
    feeds = {"x": np.zeros((2, 0, 4), np.float32), "z": np.ones((2, 1, 4), np.float32)}
    _, have = lowered_outputs(m, rules, feeds)
    assert_same(have, expected(m, feeds))


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceProd", "ReduceMin"])
def test_reduction_over_an_empty_axis(rules, op):
    m = model([h.make_node("Slice", ["x", "st", "en", "ax"], ["e"]),
               h.make_node(op, ["e", "rax"], ["r"], keepdims=0),
               h.make_node("Add", ["r", "z"], ["y"])],
              [("x", T.FLOAT, [3, 4]), ("z", T.FLOAT, [3])], [("y", T.FLOAT, None)],
              [const("st", [2]), const("en", [2]), const("ax", [1]), const("rax", [1])])
    feeds = {"x": np.ones((3, 4), np.float32), "z": np.array([1.0, -2.0, 0.5], np.float32)}
    _, have = lowered_outputs(m, rules, feeds)
    assert_same(have, expected(m, feeds))


# ------------------------------------------------------ real exports
def test_legacy_exported_transformer_encoder(tmp_path, rules):
    """torch.onnx.export(..., dynamo=False) of nn.TransformerEncoder: 0-d int64 constants once reached
    shape inference as numpy scalars (an internal error)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, batch_first=True, dropout=0.0)
    enc = torch.nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False).eval()
    x = torch.randn(1, 5, 16)
    with torch.no_grad():
        want = enc(x).numpy()
    path = tmp_path / "enc.onnx"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(enc, (x,), str(path), dynamo=False, input_names=["x"], output_names=["y"],
                          training=torch.onnx.TrainingMode.PRESERVE)
    for backend, rtol in (("cpu", 1e-5), ("htp", 2e-2)):
        _, have = lowered_outputs(onnx.load(str(path)), rules, {"x": x.numpy()}, backend=backend)
        assert np.max(np.abs(have["y"] - want)) <= rtol * np.max(np.abs(want))


def test_float32_minimum_mask_on_htp_stays_finite(rules):
    """An additive attention mask of float32's minimum, fully masking a row: float16 on HTP must
    saturate it to -65504 (softmax stays uniform, as in the source), not overflow to -inf (NaN)."""
    lo = float(np.finfo(np.float32).min)
    mask = np.array([[lo, lo, lo, lo], [0.0, lo, lo, lo], [0.0, 0.0, lo, lo]], np.float32)
    m = model([h.make_node("Add", ["x", "mask"], ["s"]), h.make_node("Softmax", ["s"], ["y"], axis=-1)],
              [("x", T.FLOAT, [3, 4])], [("y", T.FLOAT, None)], [const("mask", mask, np.float32)])
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    _, have = lowered_outputs(m, rules, {"x": x}, backend="htp")
    want = expected(m, {"x": x})
    assert not np.isnan(have["y"]).any()
    np.testing.assert_allclose(have["y"], want["y"], atol=2e-3)
