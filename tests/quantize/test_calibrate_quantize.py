"""Calibration and quantization through the public interfaces: observers' laws, weight encodings,
streaming, and whole float graphs quantized and run."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from qlower.diagnostics import QlowerError
from qlower.graph.core import Graph
from qlower.graph.quantize import quantize_real
from qlower.graph.types import Quant
from qlower.quantize import QuantOptions, quantize
from qlower.quantize.encode import kv_encoding, weight_encoding
from qlower.quantize.observe import BINS, RangeObserver
from qlower.reference.quant import dequantize
from qlower.qnn.convert import encoding_of

floats = st.floats(-1e3, 1e3, allow_nan=False, width=32)


def _dq(data, q: Quant, dtype) -> np.ndarray:
    return dequantize(np.asarray(data), encoding_of(q, np.dtype(dtype), np.asarray(data).shape), np.dtype(dtype))


@settings(max_examples=40, deadline=None)
@given(st.lists(hnp.arrays(np.float32, st.integers(1, 300), elements=floats), min_size=1, max_size=5))
def test_observer_laws(batches):
    """min/max are exact; the histogram keeps every value through re-binning; ranges stay inside
    [min, max] (widened to hold 0) and the MSE range costs no more than the full range."""
    obs = RangeObserver(histogram=True)
    for b in batches:
        obs.update(b)
    allv = np.concatenate(batches)
    assert obs.lo == allv.min() and obs.hi == allv.max()
    assert obs.counts.sum() == pytest.approx(allv.size) and obs.counts.size == BINS
    lo, hi = obs.percentile_range(99.0)
    assert obs.lo <= lo <= hi <= obs.hi
    a, b = obs.mse_range(256, symmetric=False)
    assert min(obs.lo, 0) - 1e-6 <= a <= b <= max(obs.hi, 0) + 1e-6

    def cost(a, b):
        x, c = obs.centres(), obs.counts
        step = (b - a) / 255
        return float(np.sum(c * ((x - np.clip(x, a, b)) ** 2 + step * step / 12)))

    full = (min(obs.lo, 0.0), max(obs.hi, 0.0))
    if full[1] > full[0]:
        assert cost(a, b) <= cost(*full) * (1 + 1e-9)


@settings(max_examples=30, deadline=None)
@given(hnp.arrays(np.float32, st.tuples(st.integers(1, 12), st.integers(1, 70)), elements=st.floats(-4, 4, width=32)),
       st.sampled_from([(8, None), (4, None), (4, 16), (4, 32)]))
def test_weight_encodings(w, mode):
    """Symmetric weights: codes within the signed range [-2^(b-1), 2^(b-1)-1], each the nearest code of
    the element's own scale; per channel nothing clips (error at most half a step); LPBQ block scales
    are a channel scale times an integer in 1..15."""
    bits, block = mode
    q, data = weight_encoding(w, bits, 0, 1, block=block)
    top = (1 << (bits - 1)) - 1
    assert data.dtype == np.int8 and data.min(initial=0) >= -top - 1 and data.max(initial=0) <= top
    assert q.symmetric and set(q.zero_point) == {0}
    back = _dq(data, q, np.int8)
    if block is not None and (w.shape[1] % block or w.shape[1] <= block):
        assert q.block_size is None  # whole blocks only: per channel instead
    if q.block_size is None:
        step = np.asarray(q.scale)[:, None]
        assert np.all(np.abs(back - w) <= step / 2 + 1e-6 * np.abs(w).max(initial=1))
    else:
        nb = -(-w.shape[1] // block)
        s = np.asarray(q.scale).reshape(w.shape[0], nb)
        ratio = s / s.max(axis=1, keepdims=True) * 15  # (the largest block has the integer 15)
        assert np.allclose(ratio, np.round(ratio)) and ratio.min() >= 1 - 1e-9
        step = np.repeat(s, block, axis=1)[:, :w.shape[1]]
        nearest = np.clip(np.rint(w.astype(np.float64) / step), -top - 1, top) * step
        assert np.allclose(back, nearest, rtol=0, atol=1e-6 * np.abs(w).max(initial=1))


def test_weights_stream_by_rows(tmp_path, monkeypatch):
    """A weight held by reference is quantized a slice of rows at a time: it is never read whole, and
    gives what the in-memory array gives."""
    from safetensors.numpy import save_file

    from qlower.graph import lazy
    from qlower.quantize import encode

    w = np.random.default_rng(0).standard_normal((300, 64)).astype(np.float32)
    save_file({"w": w}, str(tmp_path / "w.safetensors"))
    ref = lazy.LazyArray(lazy.SafetensorsSource(tmp_path / "w.safetensors", "w"), np.float32, w.shape)
    monkeypatch.setattr(encode, "ROWS_BYTES", 64 * 4 * 50)
    monkeypatch.setattr(lazy.SafetensorsSource, "read", lambda self: pytest.fail("read whole"))
    for bits, block in ((8, None), (4, 32)):
        q1, d1 = weight_encoding(ref, bits, 0, 1, block=block)
        q2, d2 = weight_encoding(w, bits, 0, 1, block=block)
        assert q1 == q2 and np.array_equal(d1, d2)


def test_kv_cache_encoding():
    dtype, q = kv_encoding(-3.0, 2.0)
    assert dtype == np.uint8 and q.zero_point == (128,) and q.scale == (3.0 / 127,)


def _mlp(seed: int = 0) -> Graph:
    """x → Linear(+bias) → RMSNorm → SiLU → Linear → y, all float32."""
    rng = np.random.default_rng(seed)
    g = Graph("mlp")
    x = g.add_value("x", np.float32, (1, 4, 32))
    w1 = g.add_value("fc1.weight", np.float32, (64, 32), data=rng.standard_normal((64, 32)).astype(np.float32) * 0.2)
    b1 = g.add_value("fc1.bias", np.float32, (64,), data=rng.standard_normal(64).astype(np.float32) * 0.1)
    h = g.add_value("h", np.float32, (1, 4, 64))
    g.add_op("fc1", "mllm.Linear", [x, w1, b1], [h])
    nw = g.add_value("norm.weight", np.float32, (64,), data=(1 + 0.1 * rng.standard_normal(64)).astype(np.float32))
    n = g.add_value("n", np.float32, (1, 4, 64))
    g.add_op("norm", "mllm.RMSNorm", [h, nw], [n], {"epsilon": 1e-6, "add_unit_offset": False})
    a = g.add_value("a", np.float32, (1, 4, 64))
    g.add_op("act", "mllm.SiLU", [n], [a])
    w2 = g.add_value("fc2.weight", np.float32, (16, 64), data=rng.standard_normal((16, 64)).astype(np.float32) * 0.2)
    y = g.add_value("y", np.float32, (1, 4, 16))
    g.add_op("fc2", "mllm.Linear", [a, w2], [y])
    g.set_io([x], [y])
    return g


def _feeds(n: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 4, 32)).astype(np.float32)} for _ in range(n)]


def _sqnr(ref: np.ndarray, got: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(ref**2) / max(np.sum((ref - got) ** 2), 1e-30)))


def _run_quantized(q: Graph, x: np.ndarray) -> np.ndarray:
    """The quantized graph's source semantics with fake-quantized activations (the input stored first)."""
    from qlower.reference.mllm import MLLM_KERNELS
    from qlower.reference.source import run_graph

    return run_graph(q, {"x": _dq(quantize_real(x, q.inputs[0].quant, q.inputs[0].dtype), q.inputs[0].quant,
                                  q.inputs[0].dtype)}, {"mllm": MLLM_KERNELS})["y"]


@pytest.mark.parametrize("opts, floor", [(QuantOptions(), 35.0),
                                         (QuantOptions(weights_bitwidth=4, block_size=16), 14.0),
                                         (QuantOptions(act_bitwidth=8, calibration_method="mse"), 25.0),
                                         (QuantOptions(calibration_method="percentile", percentile=99.9), 30.0)],
                         ids=["w8a16", "w4a16-lpbq", "w8a8-mse", "percentile"])
def test_quantized_graph_tracks_float(opts, floor):
    """Held-out inputs: the quantized graph's output is within the SQNR a bitwidth allows of the float
    graph's; encodings are where the options put them."""
    from qlower.reference.mllm import MLLM_KERNELS
    from qlower.reference.source import run_graph

    g = _mlp()
    q = quantize(g, _feeds(32), opts)  # enough tokens that the held-out ones fall inside the ranges
    w1 = q.value("fc1.weight")
    assert w1.dtype == np.int8 and w1.quant.axis == 0 and w1.quant.symmetric
    assert (w1.quant.bitwidth or 8) == opts.weights_bitwidth and w1.quant.block_size == opts.block_size
    assert q.value("fc1.bias").dtype == np.int32
    assert q.value("h").dtype == (np.uint16 if opts.act_bitwidth == 16 else np.uint8)
    for feed in _feeds(3, seed=9):
        want = run_graph(g, feed, {"mllm": MLLM_KERNELS})["y"]
        assert _sqnr(want, _run_quantized(q, feed["x"])) > floor


def test_calibration_data_must_fit():
    g = _mlp()
    with pytest.raises(QlowerError, match="no array for graph input x"):
        quantize(g, [{"y": np.zeros((1, 4, 16), np.float32)}])
    with pytest.raises(QlowerError, match=r"x has shape \[4, 32\], the graph input is \[1, 4, 32\]") as e:
        quantize(g, [{"x": np.zeros((4, 32), np.float32)}])
    assert e.value.diagnostics[0].subject == "tensor x"
    with pytest.raises(QlowerError, match="no calibration data"):
        quantize(g, [])


@settings(max_examples=25, deadline=None)
@given(hnp.arrays(np.float32, st.tuples(st.integers(1, 40), st.sampled_from([16, 32, 48])),
                  elements=st.floats(-2, 2, width=32)),
       st.sampled_from([(8, None, True), (4, 16, True), (8, None, False)]))
def test_calibration_dequantizes_by_rows(w, mode):
    """Calibration's row-by-row dequantization of a fixed-point constant equals the reference
    interpreter's whole-tensor one (per tensor, per channel, LPBQ blocks)."""
    import importlib

    cal = importlib.import_module("qlower.quantize.calibrate")  # the module (the package exports the function)

    bits, block, per_channel = mode
    q, data = weight_encoding(w, bits, 0, 1, per_channel=per_channel, block=block)
    g = Graph("c")
    v = g.add_value("w", np.int8, w.shape, quant=q, data=data)
    old = cal.ROWS_BYTES
    cal.ROWS_BYTES = w.shape[1] * 8 * 3  # three rows a slice
    try:
        got = cal.real_constant(v)
    finally:
        cal.ROWS_BYTES = old
    np.testing.assert_array_equal(got, _dq(data, q, np.int8))


def test_encodings_round_trip_through_aimet_format(tmp_path):
    """Exported encodings (AIMET 1.0.0), imposed back as overrides, reproduce every encoding; a
    bitwidth-only entry changes one tensor's bitwidth; excluded_layers keep an op float."""
    from qlower.quantize.overrides import export_encodings, read_overrides

    g = _mlp()
    q = quantize(g, _feeds(4), QuantOptions(weights_bitwidth=4, block_size=16))
    export_encodings(q, tmp_path / "enc.json")
    doc = json.loads((tmp_path / "enc.json").read_text())
    assert doc["version"] == "1.0.0" and {e["name"] for e in doc["param_encodings"]} >= {"fc1.weight", "fc1.bias"}
    again = quantize(g, _feeds(1, seed=5), QuantOptions(weights_bitwidth=4, block_size=16,
                                                        overrides=read_overrides(tmp_path / "enc.json")))
    for v in q.values:
        if v.quant is not None:
            w = again.value(v.name)
            assert w.dtype == v.dtype and w.quant.scale == pytest.approx(v.quant.scale, rel=1e-12), v.name
            assert w.quant.zero_point == v.quant.zero_point, v.name
    (tmp_path / "o.json").write_text(json.dumps({"version": "0.6.1", "activation_encodings": {
        "h": [{"bitwidth": 8, "dtype": "int", "min": -4.0, "max": 4.0}]}, "param_encodings": {},
        "excluded_layers": ["act"]}))
    o = quantize(g, _feeds(2), QuantOptions(overrides=read_overrides(tmp_path / "o.json")))
    assert o.value("h").dtype == np.uint8 and o.value("h").quant.scale == pytest.approx((8.0 / 255,))
    assert o.value("n").dtype == np.uint16
    assert o.value("a").dtype == np.float32 and o.value("a").quant is None  # SiLU kept float
    casts = [op for op in o.ops if op.type == "mllm.CastType"]
    assert {c.results[0].dtype.name for c in casts} == {"float32", "uint16"}  # in and out of the float op


def test_kept_float_op_lowers():
    """A graph with one op kept float lowers (Dequantize/Quantize around it). Float32 kept: HTP's float16 pass
    does not yet retype a float op inside a quantized graph (its SiLU keeps a float32 output)."""
    import qlower
    from qlower.quantize import Overrides

    g = _mlp()
    q = quantize(g, _feeds(4), QuantOptions(overrides=Overrides(keep_float={"act"})))
    rules = qlower.load_rules(packs=["mllm"])
    result = qlower.lower(q, rules, backend="htp", float16=False)
    result.raise_for_errors()
    assert {"Dequantize", "Quantize"} <= set(result.qnn_op_counts())


def test_calibration_in_row_slices_sees_what_whole_tensors_give():
    """Linear on slices of its weight's rows and Embedding on the rows its ids name (how calibration
    keeps big constants out of memory) observe the ranges whole-tensor kernels give, on a whole LLM
    graph prefilled over three chunks."""
    import importlib

    from qlower.frontends.llm import LlmConfig, Prefill, build_llm

    cal = importlib.import_module("qlower.quantize.calibrate")
    cfg = LlmConfig("t", layers=2, hidden=32, intermediate=48, heads=4, kv_heads=2, vocab=100, seq=4, past=8,
                    qk_norm=True)
    rng = np.random.default_rng(0)

    def const(g, name, shape, kind):
        data = rng.standard_normal(shape).astype(np.float32) * (0.3 if kind != "norm" else 0.1)
        return g.add_value(name, np.float32, shape, data=data + (1 if kind == "norm" else 0))

    g = build_llm(cfg, const)
    q = quantize(g, Prefill(cfg, np.arange(12) * 7), QuantOptions(weights_bitwidth=4, block_size=16))
    from qlower.quantize import quantize_graph, source_kernels

    wq = quantize_graph(g, {}, QuantOptions(weights_bitwidth=4, block_size=16), activations=False)
    tokens = np.arange(12) * 7
    whole = cal.calibrate(wq, Prefill(cfg, tokens), source_kernels(wq))
    old = cal.ROWS_BYTES
    cal.ROWS_BYTES = 32 * 8 * 5  # five rows of a [*, 32] weight a slice
    try:
        sliced = cal.calibrate(wq, Prefill(cfg, tokens), source_kernels(wq))
    finally:
        cal.ROWS_BYTES = old
    assert whole.keys() == sliced.keys()
    for name in whole:
        assert sliced[name].lo == pytest.approx(whole[name].lo, rel=1e-5, abs=1e-6), name
        assert sliced[name].hi == pytest.approx(whole[name].hi, rel=1e-5, abs=1e-6), name
    assert q.value("logits").quant is not None


def test_scalar_constant_is_quantized():
    """A 0-d constant (an attention scale, say) becomes a one-code parameter that dequantizes to itself."""
    g = Graph("s")
    x = g.add_value("x", np.float32, (1, 4, 32))
    c = g.add_value("c", np.float32, (), data=np.array(0.125, np.float32))
    y = g.add_value("y", np.float32, (1, 4, 32))
    g.add_op("mul", "mllm.Mul", [x, c], [y])
    g.set_io([x], [y])
    q = quantize(g, _feeds(2))
    v = q.value("c")
    assert v.dtype == np.uint16 and np.asarray(v.data).shape == ()
    assert float(_dq(v.data, v.quant, v.dtype)) == pytest.approx(0.125, rel=1e-4)


@pytest.mark.parametrize("bits, block", [(4, None), (4, 16), (8, None)])
@pytest.mark.parametrize("out_axis", [0, 1])
def test_least_error_weights_never_err_more_than_max_abs(bits, block, out_axis):
    """`param_calibration_method="mse"` picks, per channel (block), the clip with the least squared
    error, max|w| among the candidates: never a larger error, and at 4 bits a smaller one on heavy-tailed
    weights."""
    rng = np.random.default_rng(3)
    w = rng.standard_t(3, (48, 64)).astype(np.float32)
    w = w if out_axis == 0 else np.ascontiguousarray(w.T)

    def error(method: str) -> float:
        q, data = weight_encoding(w, bits, out_axis, 1 - out_axis, block=block, method=method)
        return float(np.sum((dequantize(data, encoding_of(q, data.dtype, w.shape), data.dtype) - w) ** 2))

    assert error("mse") <= error("minmax")
    if bits == 4:
        assert error("mse") < error("minmax")


def _layer_norm_relu(seed: int = 0) -> Graph:
    """x → LayerNormalization → MatMul → Relu → y (ONNX ops, float32)."""
    rng = np.random.default_rng(seed)
    g = Graph("ln_relu")
    x = g.add_value("x", np.float32, (1, 4, 32))
    gamma = g.add_value("ln.weight", np.float32, (32,), data=(1 + 0.1 * rng.standard_normal(32)).astype(np.float32))
    beta = g.add_value("ln.bias", np.float32, (32,), data=(0.1 * rng.standard_normal(32)).astype(np.float32))
    n = g.add_value("n", np.float32, (1, 4, 32))
    g.add_op("ln", "onnx.LayerNormalization", [x, gamma, beta], [n], {"axis": -1, "epsilon": 1e-5})
    w = g.add_value("w", np.float32, (32, 16), data=(0.2 * rng.standard_normal((32, 16))).astype(np.float32))
    h = g.add_value("h", np.float32, (1, 4, 16))
    g.add_op("mm", "onnx.MatMul", [n, w], [h])
    y = g.add_value("y", np.float32, (1, 4, 16))
    g.add_op("relu", "onnx.Relu", [h], [y])
    g.set_io([x], [y])
    return g


def test_layer_norm_gamma_symmetric_and_relu_range_absorbed():
    """HTP's 16-bit LayerNorm takes a static gamma only symmetric: qlower.quantize gives it one, and the
    graph lowers and validates for HTP. A result only a ReLU reads takes the ReLU's [0, hi] encoding
    (zero point 0), which saturates exactly what the ReLU zeroes."""
    import qlower

    rng = np.random.default_rng(5)
    feeds = [{"x": rng.standard_normal((1, 4, 32)).astype(np.float32)} for _ in range(8)]
    q = quantize(_layer_norm_relu(), feeds, QuantOptions())
    gamma = q.value("ln.weight")
    assert gamma.dtype == np.uint16 and gamma.quant.symmetric and gamma.quant.zero_point == (32768,)
    assert q.value("h").quant == q.value("y").quant and q.value("h").quant.zero_point == (0,)
    held = {"x": quantize_real(rng.standard_normal((1, 4, 32)).astype(np.float32), q.inputs[0].quant, np.uint16)}
    result = qlower.lower(q, qlower.load_rules(packs=["onnx"]), backend="htp", verify=True, inputs=held)
    result.raise_for_errors()
    counts = result.qnn_op_counts()
    assert "LayerNorm" in counts and "Relu" in counts and "Dequantize" not in counts  # every op fixed-point
