"""The Qwen2-VL example builder (examples/build_qwen2vl.py).

Graphs are built at small dims (same structure) into a temporary folder,
loaded back, run with the mllm reference kernels and compared with an
independent numpy forward written the way the HF Qwen2-VL code computes it;
the w8a16 forms are checked against the quantization conventions.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from qlower.graph.core import Graph
from qlower.reference.mllm import MLLM_KERNELS
from qlower.reference.source import run_graph

_PATH = Path(__file__).resolve().parents[1] / "examples" / "build_qwen2vl.py"


def _load_builder():
    spec = importlib.util.spec_from_file_location("build_qwen2vl", _PATH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("build_qwen2vl", mod)
    spec.loader.exec_module(mod)
    return mod


B = _load_builder()
VISION, DECODER = "qwen2vl_vision_block", "qwen2vl_decoder_layer"
NAMES = [VISION, DECODER, f"{VISION}_w8a16", f"{DECODER}_w8a16"]
KERNELS = {"mllm": MLLM_KERNELS}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("qwen2vl")
    graphs = B.build_all(out, small=True)
    return out, graphs


def _load(out: Path, name: str) -> Graph:
    from qlower.graph.io import load_graph

    return load_graph(out / f"{name}.json")


def _inputs(out: Path, name: str) -> dict[str, np.ndarray]:
    with np.load(out / f"{name}_inputs.npz") as z:
        return {k: z[k] for k in z.files}


def _params(g: Graph) -> dict[str, np.ndarray]:
    return {v.name: v.data for v in g.iter_consts()}


def _dequant(data: np.ndarray, q) -> np.ndarray:
    scale = np.asarray(q.scale, dtype=np.float64)
    zp = np.asarray(q.zero_point, dtype=np.float64)
    if q.axis is not None:
        shape = [1] * data.ndim
        shape[q.axis] = -1
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    return (scale * (data.astype(np.float64) - zp)).astype(np.float32)


# ------------------------------------------------------------ numpy references (HF formulation)
def _rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _vision_freqs(cfg):
    """Qwen2VisionTransformer.rot_pos_emb: [S, head_dim/2] angles."""
    t, h, w = cfg.grid_thw
    m = cfg.spatial_merge_size
    dim = cfg.head_dim // 2
    inv = 1.0 / cfg.theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    hpos = np.broadcast_to(np.arange(h)[:, None], (h, w))
    wpos = np.broadcast_to(np.arange(w)[None, :], (h, w))
    hpos = hpos.reshape(h // m, m, w // m, m).transpose(0, 2, 1, 3).reshape(-1)
    wpos = wpos.reshape(h // m, m, w // m, m).transpose(0, 2, 1, 3).reshape(-1)
    pos = np.tile(np.stack([hpos, wpos], -1), (t, 1))
    table = np.outer(np.arange(max(h, w)), inv)
    return table[pos].reshape(pos.shape[0], -1)


def _vision_ref(cfg, p, x):
    s, d, nh, hd = cfg.seq, cfg.hidden, cfg.heads, cfg.head_dim
    x = x[0].astype(np.float64)

    def ln(v, w, b):
        mu = v.mean(-1, keepdims=True)
        return (v - mu) / np.sqrt(((v - mu) ** 2).mean(-1, keepdims=True) + cfg.eps) * w + b

    h = ln(x, p["norm1.weight"], p["norm1.bias"])
    qkv = h @ p["attn.qkv.weight"].T.astype(np.float64) + p["attn.qkv.bias"]
    q, k, v = qkv.reshape(s, 3, nh, hd).transpose(1, 0, 2, 3)
    freqs = _vision_freqs(cfg)
    emb = np.concatenate([freqs, freqs], -1)
    cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]
    q = q * cos + _rotate_half(q) * sin
    k = k * cos + _rotate_half(k) * sin
    q, k, v = (t.transpose(1, 0, 2) for t in (q, k, v))  # [H, S, D]
    a = _softmax(q @ k.transpose(0, 2, 1) / math.sqrt(hd)) @ v
    a = a.transpose(1, 0, 2).reshape(s, d)
    x = x + a @ p["attn.proj.weight"].T + p["attn.proj.bias"]
    h = ln(x, p["norm2.weight"], p["norm2.bias"])
    f = h @ p["mlp.fc1.weight"].T + p["mlp.fc1.bias"]
    f = f * _sigmoid(1.702 * f)
    return (x + f @ p["mlp.fc2.weight"].T + p["mlp.fc2.bias"])[None]


def _decoder_ref(cfg, p, x):
    s, nh, kvh, hd = cfg.seq, cfg.heads, cfg.kv_heads, cfg.head_dim
    x = x[0].astype(np.float64)

    def rms(v, w):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + cfg.eps) * w

    h = rms(x, p["input_layernorm.weight"])
    q = (h @ p["attn.q_proj.weight"].T + p["attn.q_proj.bias"]).reshape(s, nh, hd).transpose(1, 0, 2)
    k = (h @ p["attn.k_proj.weight"].T + p["attn.k_proj.bias"]).reshape(s, kvh, hd).transpose(1, 0, 2)
    v = (h @ p["attn.v_proj.weight"].T + p["attn.v_proj.bias"]).reshape(s, kvh, hd).transpose(1, 0, 2)
    inv = 1.0 / cfg.theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    freqs = np.outer(np.arange(s), inv)
    emb = np.concatenate([freqs, freqs], -1)
    q = q * np.cos(emb) + _rotate_half(q) * np.sin(emb)
    k = k * np.cos(emb) + _rotate_half(k) * np.sin(emb)
    rep = nh // kvh  # HF repeat_kv: [kvh, S, D] -> [kvh, rep, S, D] -> [H, S, D]
    k = np.broadcast_to(k[:, None], (kvh, rep, s, hd)).reshape(nh, s, hd)
    v = np.broadcast_to(v[:, None], (kvh, rep, s, hd)).reshape(nh, s, hd)
    scores = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
    scores = np.where(np.tril(np.ones((s, s), bool)), scores, -np.inf)
    a = (_softmax(scores) @ v).transpose(1, 0, 2).reshape(s, nh * hd)
    x = x + a @ p["attn.o_proj.weight"].T
    h = rms(x, p["post_attention_layernorm.weight"])
    g, u = h @ p["mlp.gate_proj.weight"].T, h @ p["mlp.up_proj.weight"].T
    return (x + (g * _sigmoid(g) * u) @ p["mlp.down_proj.weight"].T)[None]


# ------------------------------------------------------------------ tests
def test_files_written(built):
    out, graphs = built
    assert sorted(graphs) == sorted(NAMES)
    for name in NAMES:
        for suffix in (".json", ".npz", "_inputs.npz"):
            assert (out / f"{name}{suffix}").is_file(), f"{name}{suffix}"


def test_deterministic(built, tmp_path):
    out, _ = built
    B.build_all(tmp_path, small=True)
    for f in sorted(out.iterdir()):
        assert (tmp_path / f.name).read_bytes() == f.read_bytes(), f.name


@pytest.mark.parametrize("name", NAMES)
def test_loads_as_built(built, name):
    out, graphs = built
    g, built_g = _load(out, name), graphs[name]
    assert [v.name for v in g.inputs] == [v.name for v in built_g.inputs]
    assert [v.name for v in g.outputs] == ["y"]
    assert [(o.name, o.type, o.attrs) for o in g.ops] == [(o.name, o.type, o.attrs) for o in built_g.ops]
    for v in built_g.values:
        w = g.value(v.name)
        assert (w.dtype, w.shape, w.quant) == (v.dtype, v.shape, v.quant), v.name
        if v.is_const:
            assert w.data.dtype == v.data.dtype and np.array_equal(w.data, v.data), v.name


@pytest.mark.parametrize("name, cfg, ref", [(VISION, B.VISION_SMALL, _vision_ref),
                                            (DECODER, B.DECODER_SMALL, _decoder_ref)])
def test_float_graph_matches_numpy(built, name, cfg, ref):
    out, _ = built
    g, ins = _load(out, name), _inputs(out, name)
    assert all(a.dtype == np.float32 for a in ins.values())
    y = run_graph(g, ins, KERNELS)["y"]
    assert y.shape == (1, cfg.seq, cfg.hidden) and np.all(np.isfinite(y))
    want = ref(cfg, _params(g), ins["x"])
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("base", [VISION, DECODER])
def test_quant_conventions(built, base):
    out, graphs = built
    fg, qg = graphs[base], _load(out, f"{base}_w8a16")
    assert [(o.name, o.type) for o in qg.ops] == [(o.name, o.type) for o in fg.ops]
    ranges = B.calibrate(fg, _inputs(out, base))
    linear = {}
    for op in qg.ops:
        if op.type == "mllm.Linear":
            linear[op.operands[1].name] = "weight"
            if len(op.operands) > 2:
                linear[op.operands[2].name] = "bias"
    for v in qg.values:
        q, f = v.quant, fg.value(v.name)
        assert q is not None, v.name
        if not v.is_const:
            assert v.dtype == np.uint16 and q.axis is None and len(q.scale) == 1, v.name
            assert 0 <= q.zero_point[0] <= 65535
            lo, hi = ranges[v.name]
            rep_lo, rep_hi = -q.scale[0] * q.zero_point[0], q.scale[0] * (65535 - q.zero_point[0])
            tol = q.scale[0]
            assert rep_lo <= min(lo, 0) + tol and rep_hi >= max(hi, 0) - tol, v.name
            continue
        role = linear.get(v.name, "param")
        if role == "weight":
            assert v.dtype == np.int8 and q.axis == 0 and q.symmetric, v.name
            assert len(q.scale) == v.shape[0] and set(q.zero_point) == {0}
            assert np.abs(v.data.astype(int)).max() <= 127
        elif role == "bias":
            assert v.dtype == np.int32 and q.axis is None and q.zero_point == (0,), v.name
        else:
            assert v.dtype == np.uint16 and q.axis is None, v.name
        scale = np.asarray(q.scale).reshape([-1] + [1] * (v.data.ndim - 1)) if q.axis == 0 else q.scale[0]
        assert np.all(np.abs(_dequant(v.data, q) - f.data) <= scale * 0.5 + 1e-7), v.name
    # Pure data movement keeps its operand's encoding.
    for op in qg.ops:
        if op.type in ("mllm.View", "mllm.Transpose", "mllm.Repeat", "mllm.Split"):
            assert all(r.quant == op.operands[0].quant for r in op.results), op.name


@pytest.mark.parametrize("base", [VISION, DECODER])
def test_quantized_inputs_and_accuracy(built, base):
    out, _ = built
    fg, qg = _load(out, base), _load(out, f"{base}_w8a16")
    fin, qin = _inputs(out, base), _inputs(out, f"{base}_w8a16")
    assert sorted(qin) == sorted(fin) and all(a.dtype == np.uint16 for a in qin.values())
    real = B.dequantize_inputs(qg, qin)
    for v in qg.inputs:
        assert np.abs(real[v.name] - fin[v.name]).max() <= v.quant.scale[0] * 0.5 + 1e-6, v.name
    y = run_graph(fg, fin, KERNELS)["y"]
    yq = run_graph(qg, real, KERNELS)["y"]  # constants dequantized by run_graph
    assert np.linalg.norm(yq - y) / np.linalg.norm(y) < 0.05


def test_full_size_structure():
    """The real dims, without running: shapes and attributes the brief specifies."""
    g, ins = B.vision_block()
    assert {k: a.shape for k, a in ins.items()} == {"x": (1, 64, 1280), "sin": (64, 40), "cos": (64, 40)}
    assert g.value("attn.qkv.weight").shape == (3840, 1280) and g.value("mlp.fc1.weight").shape == (5120, 1280)
    assert g.op("attn.q_rope").attrs == {"dims": 80, "theta": 10000.0, "spatial_merge_size": 2}
    assert g.op("attn.scores").attrs == {"transpose_a": False, "transpose_b": True}
    assert g.value("attn.q_transpose.out").shape == (1, 16, 64, 80)
    assert np.isclose(g.value("attn.scale_factor").data[0], 1 / math.sqrt(80))
    del g
    g, ins = B.decoder_layer()
    assert ins["mask"].shape == (1, 1, 32, 32) and ins["sin"].shape == (32, 128)
    assert g.value("attn.k_proj.weight").shape == (256, 1536) and g.value("mlp.down_proj.weight").shape == (1536, 8960)
    assert g.op("attn.k_repeat").attrs == {"dim": 2, "times": 6}
    assert g.value("attn.v_repeat.out").shape == (1, 32, 12, 128)
    assert g.op("input_layernorm").attrs == {"epsilon": 1e-6, "add_unit_offset": False}
    assert not g.has_value("attn.o_proj.bias") and g.has_value("attn.q_proj.bias")


@pytest.mark.parametrize("name", NAMES)
def test_lowers_and_validates_for_htp(built, name):
    """What `make demo` lowers: every example graph lowers for HTP and validates clean (the w8a16
    vision block's LayerNorm gamma must be 16-bit symmetric there, which the demo once missed), and
    its QNN table, and the table of that table's object view, keep the table's invariants."""
    import qlower
    from qlower.qnn.table import table_of

    out, _ = built
    res = qlower.lower(_load(out, name), qlower.load_rules(packs=["mllm"]), backend="htp")
    assert res.ok, [str(e) for e in res.errors]
    assert res.table.check() == []
    assert table_of(res.table.graph()).check() == []
