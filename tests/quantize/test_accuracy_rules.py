"""The quantizer's accuracy rules (bench/bench_accuracy.py's models are where they show): float-to-float
Casts as identities, a softmax operand's range cut below what weighs nothing, weights on the whole
signed grid, LPBQ block integers by least error, and bias correction."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qlower
from qlower.graph.core import Graph
from qlower.graph.quantize import quantize_real
from qlower.qnn.convert import encoding_of
from qlower.quantize import Overrides, QuantOptions, quantize
from qlower.quantize.encode import LPBQ_LEVELS, weight_encoding
from qlower.quantize.observe import RangeObserver
from qlower.reference.quant import dequantize

MIN = float(np.finfo(np.float32).min)


def _dq(data, q, dtype) -> np.ndarray:
    data = np.asarray(data)
    return dequantize(data, encoding_of(q, np.dtype(dtype), data.shape), np.dtype(dtype))


def _sqnr(ref: np.ndarray, got: np.ndarray) -> float:
    ref = ref.astype(np.float64)
    return float(10 * np.log10(np.sum(ref**2) / max(np.sum((ref - got) ** 2), 1e-30)))


def _run_source(g: Graph, feed: dict) -> np.ndarray:
    from qlower.quantize import source_kernels
    from qlower.reference.source import run_graph

    return run_graph(g, feed, source_kernels(g))[g.outputs[0].name]


@functools.cache
def _rules():
    import qlower

    return qlower.load_rules(packs=["onnx"])


def _lowered(q: Graph):
    """The quantized graph lowered for HTP: a function of one feed running it on qlower's QNN
    interpreter, its output dequantized."""
    import qlower
    from qlower.reference.interpreter import run

    result = qlower.lower(q, _rules(), backend="htp")
    result.raise_for_errors()
    y = q.outputs[0]

    def go(feed: dict) -> np.ndarray:
        ins = {v.name: quantize_real(feed[v.name], v.quant, v.dtype) for v in q.inputs}
        return _dq(run(result.qnn, ins)[y.name], y.quant, y.dtype)
    return go


def _run_lowered(q: Graph, feed: dict) -> np.ndarray:
    return _lowered(q)(feed)


# ---- float -> float Cast


def _rms_cast_graph() -> Graph:
    """x → Cast(float32) → Mul(x, x) → Cast(float32) → y: the .to(float32) pair of an exported RMSNorm."""
    g = Graph("casts")
    x = g.add_value("x", np.float32, (1, 4, 8))
    a = g.add_value("a", np.float32, (1, 4, 8))
    g.add_op("up", "onnx.Cast", [x], [a], {"to": "float32"})
    m = g.add_value("m", np.float32, (1, 4, 8))
    g.add_op("sq", "onnx.Mul", [a, a], [m])
    y = g.add_value("y", np.float32, (1, 4, 8))
    g.add_op("down", "onnx.Cast", [m], [y], {"to": "float32"})
    g.set_io([x], [y])
    return g


def test_float_to_float_cast_is_an_identity_that_lowers():
    """A Cast between float dtypes is, on quantized storage, the identity on real values: its result
    keeps the operand's encoding and it becomes onnx.Identity (HTP has no rule for a quantized Cast
    to float32, which the graph would otherwise ask for)."""
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((1, 4, 8)).astype(np.float32)} for _ in range(4)]
    g = _rms_cast_graph()
    q = quantize(g, feeds, QuantOptions())
    ops = {op.name: op for op in q.ops}
    assert ops["up"].type == "onnx.Identity" and ops["down"].type == "onnx.Identity"
    assert q.value("a").quant == q.value("x").quant and q.value("y").quant == q.value("m").quant
    assert _sqnr(_run_source(g, feeds[0]), _run_lowered(q, feeds[0])) > 60  # (inside the calibrated ranges)


# ---- the softmax operand's lower bound


def test_row_floor_is_the_least_informative_row_maximum():
    obs = RangeObserver(histogram=False)
    x = np.array([[[0.5, -1.0, MIN], [2.0, 1.0, 0.0]], [[MIN, MIN, MIN], [-3.0, -4.0, MIN]]], np.float32)
    obs.update_rows(x, axis=2)
    assert obs.row_floor == -3.0  # the all-masked row (one value) bounds nothing


def _masked_attention(seq: int = 8) -> tuple[Graph, np.ndarray]:
    """scores → + causal mask (0 / float32 min, as transformers' eager attention adds it) → Softmax → y."""
    g = Graph("attn")
    s = g.add_value("s", np.float32, (1, 2, seq, seq))
    mask = np.triu(np.full((seq, seq), MIN, np.float32), 1)[None, None]
    m = g.add_value("mask", np.float32, mask.shape, data=mask)
    a = g.add_value("a", np.float32, (1, 2, seq, seq))
    g.add_op("add", "onnx.Add", [s, m], [a])
    y = g.add_value("y", np.float32, (1, 2, seq, seq))
    g.add_op("softmax", "onnx.Softmax", [a], [y], {"axis": -1})
    g.set_io([s], [y])
    return g, mask


def test_additive_mask_does_not_cost_the_scores_their_precision():
    """The masked scores' range ends at the least row maximum less ln(2n / step of the result): below it
    an entry weighs under half a result step. The mask's float32-min entries then saturate and the
    unmasked scores keep a fine step; with the range reaching float32 min every score would quantize to
    one code (all three quantizers of bench_accuracy did so for Qwen3: 8 dB)."""
    rng = np.random.default_rng(1)
    feeds = [{"s": (2 * rng.standard_normal((1, 2, 8, 8))).astype(np.float32)} for _ in range(8)]
    g, _ = _masked_attention()
    q = quantize(g, feeds, QuantOptions())
    a = q.value("a").quant
    lo = -float(a.zero_point[0]) * float(a.scale[0])
    assert -60 < lo < -10  # near the row floor minus K, far above float32 min
    held = {"s": (2 * rng.standard_normal((1, 2, 8, 8))).astype(np.float32)}
    assert _sqnr(_run_source(g, held), _run_lowered(q, held)) > 50


def test_softmax_operand_read_elsewhere_keeps_its_range():
    """The cut applies only where every reader is a softmax: another reader sees the whole range."""
    rng = np.random.default_rng(2)
    g, _ = _masked_attention()
    a = g.value("a")
    z = g.add_value("z", np.float32, a.shape)
    g.add_op("neg", "onnx.Neg", [a], [z])
    g.set_io(list(g.inputs), [g.value("y"), z])
    q = quantize(g, [{"s": rng.standard_normal((1, 2, 8, 8)).astype(np.float32)} for _ in range(2)])
    enc = q.value("a").quant
    assert -float(enc.zero_point[0]) * float(enc.scale[0]) < -1e37


# ---- weights


@pytest.mark.parametrize("bits", [8, 4])
def test_negative_extreme_takes_the_extra_code(bits):
    """A channel whose largest magnitude is negative is scaled by -min / 2^(b-1): the code -2^(b-1) holds
    it exactly and the step is finer than max|w| / (2^(b-1) - 1); nothing clips."""
    top = (1 << (bits - 1)) - 1
    w = np.array([[-1.0, 0.3, 0.5, -0.2], [0.8, -0.4, 0.1, 0.0]], np.float32)
    q, data = weight_encoding(w, bits, 0, 1)
    assert q.scale[0] == pytest.approx(1.0 / (top + 1)) and q.scale[1] == pytest.approx(0.8 / top)
    assert data[0, 0] == -top - 1
    back = _dq(data, q, np.int8)
    assert np.all(np.abs(back - w) <= np.asarray(q.scale)[:, None] / 2 + 1e-7)


def test_lpbq_integers_err_no_more_than_rounding_up():
    """Each LPBQ block's integer is the floor or ceiling of the ratio its scale wants, whichever errs
    less: never a larger squared error than rounding every one up (which clips nothing), and smaller on
    Gaussian weights."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((64, 256)).astype(np.float32)
    q, data = weight_encoding(w, 4, 0, 1, block=32)
    s = np.asarray(q.scale).reshape(64, 8)
    blocks = w.reshape(64, 8, 32)
    want = np.maximum(blocks.max(axis=2) / 7, -blocks.min(axis=2) / 8)
    channel = want.max(axis=1, keepdims=True) / LPBQ_LEVELS
    up = np.clip(np.ceil(want / channel - 1e-9), 1, LPBQ_LEVELS) * channel

    def err(scale):
        step = np.repeat(scale, 32, axis=1)
        return float(np.sum((np.clip(np.rint(w / step), -8, 7) * step - w) ** 2))

    ints = s / channel
    assert np.allclose(ints, np.round(ints)) and np.all((np.round(ints) == np.ceil(want / channel - 1e-9))
                                                        | (np.round(ints) == np.floor(want / channel + 1e-9)))
    got = float(np.sum((_dq(data, q, np.int8) - w) ** 2))
    assert got == pytest.approx(err(s), rel=1e-6)
    assert got < err(up)


# ---- bias correction


def _relu_linear(form: str) -> Graph:
    """x → Relu → Linear (Gemm with a bias, or MatMul + Add of a constant) → y: inputs of non-zero mean."""
    rng = np.random.default_rng(0)
    g = Graph("lin")
    x = g.add_value("x", np.float32, (16, 64))
    r = g.add_value("r", np.float32, (16, 64))
    g.add_op("relu", "onnx.Relu", [x], [r])
    w = rng.standard_normal((64, 32)).astype(np.float32) * 0.2
    b = rng.standard_normal(32).astype(np.float32) * 0.1
    y = g.add_value("y", np.float32, (16, 32))
    if form == "gemm":
        wv = g.add_value("w", np.float32, (64, 32), data=w)
        bv = g.add_value("b", np.float32, (32,), data=b)
        g.add_op("fc", "onnx.Gemm", [r, wv, bv], [y])
    else:
        wv = g.add_value("w", np.float32, (64, 32), data=w)
        h = g.add_value("h", np.float32, (16, 32))
        g.add_op("fc", "onnx.MatMul", [r, wv], [h])
        bv = g.add_value("b", np.float32, (32,), data=b)
        g.add_op("fc_bias", "onnx.Add", [h, bv], [y])
    g.set_io([x], [y])
    return g


@pytest.mark.parametrize("form", ["gemm", "matmul_add"])
def test_bias_correction_takes_back_the_mean_shift(form):
    """With 4-bit weights on ReLU outputs (mean > 0) the quantized weights shift every output channel's
    mean; the corrected bias takes the shift back (the mean error over the calibration data is nearly
    0), and the held-out SQNR is higher than without the correction."""
    rng = np.random.default_rng(3)
    feeds = [{"x": (rng.standard_normal((16, 64)) + 0.5).astype(np.float32)} for _ in range(8)]
    held = [{"x": (rng.standard_normal((16, 64)) + 0.5).astype(np.float32)} for _ in range(4)]
    g = _relu_linear(form)
    opts = dict(weights_bitwidth=4, block_size=32)
    on = quantize(g, feeds, QuantOptions(**opts))
    off = quantize(g, feeds, QuantOptions(**opts, bias_correction=False))
    assert not np.array_equal(np.asarray(on.value("b").data), np.asarray(off.value("b").data))

    run_on, run_off = _lowered(on), _lowered(off)
    ref = {id(f): _run_source(g, f) for f in feeds + held}

    def errors(run):
        return [run(f) - ref[id(f)] for f in feeds]

    mean_on = np.abs(np.mean(errors(run_on), axis=(0, 1))).max()
    mean_off = np.abs(np.mean(errors(run_off), axis=(0, 1))).max()
    assert mean_on < 0.1 * mean_off

    def sqnr(run):
        return _sqnr(np.concatenate([ref[id(f)] for f in held]), np.concatenate([run(f) for f in held]))

    assert sqnr(run_on) > sqnr(run_off) + 1.0


# ---- results of a known range: Sigmoid and Softmax


def _silu_softmax_graph() -> Graph:
    """x → Sigmoid → Mul(x, ·) (SiLU as ONNX exports it) → Softmax → y."""
    g = Graph("silu_softmax")
    x = g.add_value("x", np.float32, (2, 16))
    s = g.add_value("s", np.float32, (2, 16))
    g.add_op("sigmoid", "onnx.Sigmoid", [x], [s])
    h = g.add_value("h", np.float32, (2, 16))
    g.add_op("mul", "onnx.Mul", [x, s], [h])
    y = g.add_value("y", np.float32, (2, 16))
    g.add_op("softmax", "onnx.Softmax", [h], [y], {"axis": -1})
    g.set_io([x], [y])
    return g


@settings(max_examples=10, deadline=None)
@given(st.floats(0.01, 20.0), st.sampled_from([16, 8]))
def test_sigmoid_and_softmax_results_take_the_fixed_encoding(spread, bits):
    """Whatever range calibration sees, a Sigmoid's and a Softmax's result get scale 1/2^bits, offset 0
    (HTP's required output encodings: 1/65536 at 16 bits, 1/256 at 8), not the calibrated max / 65535."""
    rng = np.random.default_rng(0)
    feeds = [{"x": (spread * rng.standard_normal((2, 16))).astype(np.float32)} for _ in range(2)]
    q = quantize(_silu_softmax_graph(), feeds, QuantOptions(act_bitwidth=bits))
    for name in ("s", "y"):
        enc = q.value(name).quant
        assert q.value(name).dtype == (np.uint16 if bits == 16 else np.uint8)
        assert float(enc.scale[0]) == 1.0 / (1 << bits) and int(enc.zero_point[0]) == 0
    h = q.value("h").quant  # (calibrated, as any other result)
    assert float(h.scale[0]) != 1.0 / (1 << bits)


def test_fixed_encoding_lowers_and_an_imposed_encoding_wins():
    rng = np.random.default_rng(5)
    feeds = [{"x": (3 * rng.standard_normal((2, 16))).astype(np.float32)} for _ in range(4)]
    g = _silu_softmax_graph()
    q = quantize(g, feeds, QuantOptions())
    assert _sqnr(_run_source(g, feeds[0]), _run_lowered(q, feeds[0])) > 50
    from qlower.graph.encodings import TensorEncoding

    imposed = TensorEncoding("s", "PER_TENSOR", 16, scale=(1.0 / 65535,), offset=(0,), role="activation")
    q2 = quantize(g, feeds, QuantOptions(overrides=Overrides(encodings={"s": imposed})))
    assert float(q2.value("s").quant.scale[0]) == pytest.approx(1.0 / 65535)


# ---- a table's rows keep the table's encoding


@pytest.mark.parametrize("bits", [8, 4])
def test_gathered_rows_keep_the_tables_encoding(bits):
    """An ONNX Gather of a constant table (an embedding) yields the table's own values: its result
    takes the table's encoding exactly (HTP requires it), however few rows calibration picked. The
    table's extreme is in a row the calibration ids never name."""
    rng = np.random.default_rng(6)
    table = rng.standard_normal((32, 8)).astype(np.float32)
    table[31, 0] = 9.0
    g = Graph("embed")
    ids = g.add_value("ids", np.int32, (1, 6))
    t = g.add_value("table", np.float32, table.shape, data=table)
    e = g.add_value("e", np.float32, (1, 6, 8))
    g.add_op("embed", "onnx.Gather", [t, ids], [e], {"axis": 0})
    y = g.add_value("y", np.float32, (1, 6, 8))
    g.add_op("act", "onnx.Relu", [e], [y])
    g.set_io([ids], [y])
    feeds = [{"ids": rng.integers(0, 31, (1, 6)).astype(np.int32)} for _ in range(3)]
    q = quantize(g, feeds, QuantOptions(weights_bitwidth=bits))
    assert q.value("e").quant == q.value("table").quant and q.value("e").dtype == q.value("table").dtype
    result = qlower.lower(q, _rules(), backend="htp")
    result.raise_for_errors()


# ---- headroom of 16-bit min-max ranges


def _neg_relu_graph() -> Graph:
    """x (an input of either sign) → Neg → n, and x → Relu → r (a result at 0 and above)."""
    g = Graph("neg_relu")
    x = g.add_value("x", np.float32, (4, 8))
    n = g.add_value("n", np.float32, (4, 8))
    r = g.add_value("r", np.float32, (4, 8))
    g.add_op("neg", "onnx.Neg", [x], [n])
    g.add_op("relu", "onnx.Relu", [x], [r])
    g.set_io([x], [n, r])
    return g


def _span(v) -> tuple[float, float]:
    """The real range of an unsigned per-tensor encoding's codes."""
    s, z = float(v.quant.scale[0]), int(v.quant.zero_point[0])
    return -z * s, (int(np.iinfo(v.dtype).max) - z) * s


@settings(max_examples=15, deadline=None)
@given(st.floats(0.1, 100.0), st.floats(-3.0, 3.0))
def test_16_bit_ranges_reach_past_the_calibrated_extremes(spread, shift):
    """At 16 bits a min-max range reaches 1/16 of its width past each calibrated extreme away from 0,
    so the next input's slightly larger values do not clip; a side at 0 (a ReLU's) stays at 0 and 0
    stays exact. At 8 bits, and with the mse method, the calibrated range is as it is."""
    rng = np.random.default_rng(7)
    feeds = [{"x": (spread * (rng.standard_normal((4, 8)) + shift)).astype(np.float32)} for _ in range(3)]
    xs = np.concatenate([f["x"].ravel() for f in feeds])
    g = _neg_relu_graph()
    q16 = quantize(g, feeds, QuantOptions())
    for name, vals in (("x", xs), ("r", np.maximum(xs, 0))):
        if not vals.max() > vals.min():
            continue  # (a ReLU that saw nothing but zeros: no range to widen)
        width = (float(vals.max()) - float(vals.min())) / 16  # (of the calibrated range itself)
        lo = float(vals.min()) - width if vals.min() < 0 else 0.0
        hi = float(vals.max()) + width if vals.max() > 0 else 0.0
        qlo, qhi = _span(q16.value(name))
        step = float(q16.value(name).quant.scale[0])
        assert abs(qlo - lo) <= 2 * step and abs(qhi - hi) <= 2 * step
        if vals.min() >= 0:
            assert int(q16.value(name).quant.zero_point[0]) == 0
    q8 = quantize(g, feeds, QuantOptions(act_bitwidth=8))
    lo, hi = min(float(xs.min()), 0.0), max(float(xs.max()), 0.0)
    qlo, qhi = _span(q8.value("x"))
    step = float(q8.value("x").quant.scale[0])
    assert abs(qlo - lo) <= step and abs(qhi - hi) <= step


def test_no_headroom_is_the_converters_exact_min_max():
    rng = np.random.default_rng(3)
    feeds = [{"x": (2.0 * rng.standard_normal((4, 8)) - 0.5).astype(np.float32)} for _ in range(3)]
    xs = np.concatenate([f["x"].ravel() for f in feeds])
    q = quantize(_neg_relu_graph(), feeds, QuantOptions(range_headroom=0.0))
    qlo, qhi = _span(q.value("x"))
    step = float(q.value("x").quant.scale[0])
    assert abs(qlo - float(xs.min())) <= step and abs(qhi - float(xs.max())) <= step
    with pytest.raises(ValueError, match="range_headroom"):
        QuantOptions(range_headroom=-0.1)
