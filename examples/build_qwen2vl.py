"""Build Qwen2-VL example graphs in the mllm dialect: float and w8a16 forms.

    python examples/build_qwen2vl.py OUTDIR [--small]

writes, into OUTDIR, four `qlower-graph/1` files (constant data in an npz
archive next to each) and the example inputs each graph was calibrated with:

    qwen2vl_vision_block.json         one vision transformer block (hidden 1280, 16 heads x 80,
                                      QuickGELU MLP 5120, LayerNorm, VisionRoPE) on a
                                      t=1, h=8, w=8 patch grid (S = 64)
    qwen2vl_decoder_layer.json        one Qwen2 language-model decoder layer of Qwen2-VL 2B
                                      (hidden 1536, 12 query / 2 KV heads x 128, SwiGLU 8960,
                                      RMSNorm, RoPE, GQA via Repeat) on S = 32 tokens
    qwen2vl_vision_block_w8a16.json   the same graphs quantized (see below)
    qwen2vl_decoder_layer_w8a16.json
    <name>.npz                        constant data of <name>.json
    <name>_inputs.npz                 the example inputs (float32 for the float graphs, the
                                      quantized uint16 storage for the w8a16 graphs)

Weights are random but deterministic (numpy `default_rng` with fixed seeds,
Linear weights and biases normal x 0.02, norm weights 1 + normal x 0.02, norm
biases normal x 0.02): the same command writes the same bytes every run.

Layouts. Activations are [1, S, hidden]. Attention reshapes q/k/v with View to
BSHD [1, S, heads, head_dim], applies the rotary embedding there, then
Transposes (dims 1, 2) to BHSD for `MatMul(q, k){transpose_b: true}`, scales by
a constant [1] tensor 1/sqrt(head_dim) with Mul, applies Softmax over the last
dim, multiplies by v, and Transposes + Views back. The vision block's fused
qkv Linear (1280 -> 3840) is split along the last dim into q, k, v (the HF
checkpoint's [3, heads, head_dim] row order). The decoder layer expands the 2
KV heads to 12 with `Repeat{dim: 2, times: 6}` on BSHD (repeat_interleave, as
HF `repeat_kv`), after RoPE and before the transpose.

Graph inputs. Vision: `x` [1, S, 1280], `sin`/`cos` [S, 40] (VisionRoPE
half-width tables of the 8 x 8 grid, spatial_merge_size 2, theta 1e4).
Decoder: `x` [1, S, 1536], `sin`/`cos` [S, 128] (text RoPE tables for positions
0..S-1 with Qwen2-VL's rope_theta 1e6; for text-only positions Qwen2-VL's
M-RoPE reduces to this), and `mask` [1, 1, S, S], additive causal mask: 0 where
a query may attend, MASK_VALUE (-100) above the diagonal. -100 rather than
-inf/-1e9 keeps the mask finite for calibration and keeps the uint16 encoding of
the masked scores fine-grained (exp(-100) is 0 for every practical purpose).

Quantization (w8a16). The quantized graphs have the same nodes, tensors and
names; only dtypes, encodings and constant data change. Encodings are
framework-style (real = scale * (q - zero_point)).
  * Linear weights: int8, symmetric, per output channel (axis 0), scale =
    max|w_row| / 127, zero_point 0, `symmetric: true`.
  * Linear biases: int32, symmetric, per tensor, scale = max|b| / (2^31 - 1),
    zero_point 0, from the bias's own range. (HTP's "bias scale = input scale x
    weight scale" convention is left to the lowering: it needs the activation
    encoding and is a per-channel requantization the lowering can do exactly.)
  * LayerNorm gamma: uint16, symmetric (zero point 32768), per tensor, scale =
    max|gamma| / 32767 (HTP takes a 16-bit LayerNorm weight only symmetric).
  * Other norm parameters (LayerNorm beta, RMSNorm gamma) and the 1/sqrt(d)
    scalar: uint16, asymmetric, per tensor, from their own range.
  * Every non-constant tensor (graph inputs and outputs included): uint16,
    asymmetric, per tensor, from the min/max seen when running the float graph
    with qlower's reference kernels on the example inputs: scale =
    (max - min) / 65535, zero_point = round(-min / scale). The range is first
    widened to contain 0 (so 0 is exact and the zero point lies in [0, 65535]).
    Results of pure data-movement ops (View, Transpose, Repeat, Split) take their
    operand's encoding instead: for View/Transpose/Repeat that is the same range
    anyway, and for the qkv Split it means q, k and v share the fused qkv
    encoding, so the split needs no requantization.
The quantized graphs' inputs are uint16: `<name>_inputs.npz` holds the
calibration inputs quantized with the inputs' encodings.
"""

from __future__ import annotations

import argparse
import io
import math
import sys
import time
import zipfile
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import attrs
import numpy as np

from qlower.graph.core import Graph, Value
from qlower.graph.quantize import bounds, quantize_affine
from qlower.graph.types import Quant

FLOAT = np.dtype(np.float32)
ACT_DTYPE = np.dtype(np.uint16)
MASK_VALUE = -100.0
WEIGHT_STD = 0.02
VISION_SEED = 1280
DECODER_SEED = 1536

# Ops whose result is the operand's data rearranged: the result inherits the operand's encoding.
_DATA_MOVEMENT = frozenset({"mllm.View", "mllm.Transpose", "mllm.Repeat", "mllm.Split"})


# ------------------------------------------------------------------ configs
@attrs.frozen
class VisionConfig:
    """One Qwen2-VL vision transformer block on one image grid."""

    hidden: int = 1280
    heads: int = 16
    head_dim: int = 80
    mlp_hidden: int = 5120
    eps: float = 1e-6
    grid_thw: tuple[int, int, int] = (1, 8, 8)
    spatial_merge_size: int = 2
    theta: float = 10000.0

    @property
    def seq(self) -> int:
        t, h, w = self.grid_thw
        return t * h * w


@attrs.frozen
class DecoderConfig:
    """One Qwen2 decoder layer (the Qwen2-VL 2B language model)."""

    hidden: int = 1536
    heads: int = 12
    kv_heads: int = 2
    head_dim: int = 128
    intermediate: int = 8960
    eps: float = 1e-6
    seq: int = 32
    theta: float = 1000000.0


VISION = VisionConfig()
DECODER = DecoderConfig()
# Same structure, small dims: for tests.
VISION_SMALL = VisionConfig(hidden=64, heads=4, head_dim=16, mlp_hidden=256, grid_thw=(1, 4, 4))
DECODER_SMALL = DecoderConfig(hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=128, seq=8)


# ------------------------------------------------------------------ building
class _Builder:
    """Adds float32 values and mllm ops to a graph, drawing weights from one rng."""

    def __init__(self, name: str, seed: int) -> None:
        self.g = Graph(name)
        self.rng = np.random.default_rng(seed)

    def input(self, name: str, shape: tuple[int, ...]) -> Value:
        return self.g.add_value(name, FLOAT, shape)

    def const(self, name: str, data: np.ndarray) -> Value:
        data = np.ascontiguousarray(data, dtype=FLOAT)
        return self.g.add_value(name, FLOAT, data.shape, data=data)

    def normal(self, shape: tuple[int, ...], std: float = WEIGHT_STD, mean: float = 0.0) -> np.ndarray:
        x = self.rng.standard_normal(shape, dtype=np.float32)
        x *= np.float32(std)
        if mean:
            x += np.float32(mean)
        return x

    def op(self, name: str, type: str, operands: list[Value], shape: tuple[int, ...],
           attrs: dict | None = None, result: str | None = None) -> Value:
        """One single-result op; the result is named `result` or `<name>.out`."""
        y = self.g.add_value(result or f"{name}.out", FLOAT, shape)
        self.g.add_op(name, f"mllm.{type}", operands, [y], attrs)
        return y

    def linear(self, name: str, x: Value, out_features: int, bias: bool) -> Value:
        in_features = x.shape[-1]
        operands = [x, self.const(f"{name}.weight", self.normal((out_features, in_features)))]
        if bias:
            operands.append(self.const(f"{name}.bias", self.normal((out_features,))))
        return self.op(name, "Linear", operands, (*x.shape[:-1], out_features))

    def layer_norm(self, name: str, x: Value, eps: float) -> Value:
        d = x.shape[-1]
        w = self.const(f"{name}.weight", self.normal((d,), mean=1.0))
        b = self.const(f"{name}.bias", self.normal((d,)))
        return self.op(name, "LayerNorm", [x, w, b], x.shape, {"epsilon": eps})

    def rms_norm(self, name: str, x: Value, eps: float) -> Value:
        w = self.const(f"{name}.weight", self.normal((x.shape[-1],), mean=1.0))
        return self.op(name, "RMSNorm", [x, w], x.shape, {"epsilon": eps, "add_unit_offset": False})

    def to_heads(self, name: str, x: Value, heads: int, head_dim: int) -> Value:
        """[1, S, heads*head_dim] -> BSHD [1, S, heads, head_dim]."""
        b, s, _ = x.shape
        shape = (b, s, heads, head_dim)
        return self.op(name, "View", [x], shape, {"shape": list(shape)})

    def swap_sh(self, name: str, x: Value) -> Value:
        """BSHD <-> BHSD."""
        b, a, c, d = x.shape
        return self.op(name, "Transpose", [x], (b, c, a, d), {"dim0": 1, "dim1": 2})

    def attention(self, prefix: str, q: Value, k: Value, v: Value, mask: Value | None) -> Value:
        """softmax(q kᵀ / sqrt(d) [+ mask]) v on BSHD q/k/v (same head count); result [1, S, H*D]."""
        b, s, h, d = q.shape
        qt = self.swap_sh(f"{prefix}.q_transpose", q)
        kt = self.swap_sh(f"{prefix}.k_transpose", k)
        vt = self.swap_sh(f"{prefix}.v_transpose", v)
        scores = self.op(f"{prefix}.scores", "MatMul", [qt, kt], (b, h, s, s),
                         {"transpose_a": False, "transpose_b": True})
        factor = self.const(f"{prefix}.scale_factor", np.array([1.0 / math.sqrt(d)]))
        scores = self.op(f"{prefix}.scale", "Mul", [scores, factor], scores.shape)
        if mask is not None:
            scores = self.op(f"{prefix}.mask_add", "Add", [scores, mask], scores.shape)
        probs = self.op(f"{prefix}.softmax", "Softmax", [scores], scores.shape, {"dim": -1})
        ctx = self.op(f"{prefix}.context", "MatMul", [probs, vt], (b, h, s, d),
                      {"transpose_a": False, "transpose_b": False})
        ctx = self.swap_sh(f"{prefix}.context_transpose", ctx)
        return self.op(f"{prefix}.context_view", "View", [ctx], (b, s, h * d), {"shape": [b, s, h * d]})


def vision_block(cfg: VisionConfig = VISION, *, name: str = "qwen2vl_vision_block",
                 seed: int = VISION_SEED) -> tuple[Graph, dict[str, np.ndarray]]:
    """The float graph of one vision block and its deterministic example inputs."""
    from qlower.reference.rope import vision_rope_tables

    s, d, h, hd = cfg.seq, cfg.hidden, cfg.heads, cfg.head_dim
    if h * hd != d:
        raise ValueError(f"heads x head_dim = {h * hd} must equal hidden {d}")
    bld = _Builder(name, seed)
    x = bld.input("x", (1, s, d))
    sin = bld.input("sin", (s, hd // 2))
    cos = bld.input("cos", (s, hd // 2))

    n1 = bld.layer_norm("norm1", x, cfg.eps)
    qkv = bld.linear("attn.qkv", n1, 3 * d, bias=True)
    parts = [bld.g.add_value(f"attn.{p}", FLOAT, (1, s, d)) for p in "qkv"]
    bld.g.add_op("attn.qkv_split", "mllm.Split", [qkv], parts, {"dim": 2, "sizes": [d, d, d]})
    rope = {"dims": hd, "theta": cfg.theta, "spatial_merge_size": cfg.spatial_merge_size}
    q, k, v = (bld.to_heads(f"attn.{p}_view", t, h, hd) for p, t in zip("qkv", parts))
    q = bld.op("attn.q_rope", "VisionRoPE", [q, sin, cos], q.shape, rope)
    k = bld.op("attn.k_rope", "VisionRoPE", [k, sin, cos], k.shape, rope)
    ctx = bld.attention("attn", q, k, v, None)
    attn = bld.linear("attn.proj", ctx, d, bias=True)
    h1 = bld.op("residual1", "Add", [x, attn], x.shape)

    n2 = bld.layer_norm("norm2", h1, cfg.eps)
    f1 = bld.linear("mlp.fc1", n2, cfg.mlp_hidden, bias=True)
    act = bld.op("mlp.act", "QuickGELU", [f1], f1.shape)
    f2 = bld.linear("mlp.fc2", act, d, bias=True)
    y = bld.op("residual2", "Add", [h1, f2], x.shape, result="y")
    bld.g.set_io([x, sin, cos], [y])

    rng = np.random.default_rng([seed, 1])
    sin_t, cos_t = vision_rope_tables(cfg.grid_thw, hd, cfg.theta, cfg.spatial_merge_size)
    inputs = {"x": rng.standard_normal((1, s, d), dtype=np.float32), "sin": sin_t, "cos": cos_t}
    return bld.g, inputs


def decoder_layer(cfg: DecoderConfig = DECODER, *, name: str = "qwen2vl_decoder_layer",
                  seed: int = DECODER_SEED) -> tuple[Graph, dict[str, np.ndarray]]:
    """The float graph of one Qwen2 decoder layer and its deterministic example inputs."""
    from qlower.reference.rope import text_rope_tables

    s, d, h, kvh, hd = cfg.seq, cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim
    if h * hd != d or h % kvh:
        raise ValueError(f"need heads x head_dim == hidden and heads divisible by kv_heads, got {cfg}")
    bld = _Builder(name, seed)
    x = bld.input("x", (1, s, d))
    sin = bld.input("sin", (s, hd))
    cos = bld.input("cos", (s, hd))
    mask = bld.input("mask", (1, 1, s, s))

    n1 = bld.rms_norm("input_layernorm", x, cfg.eps)
    q = bld.linear("attn.q_proj", n1, h * hd, bias=True)
    k = bld.linear("attn.k_proj", n1, kvh * hd, bias=True)
    v = bld.linear("attn.v_proj", n1, kvh * hd, bias=True)
    q = bld.to_heads("attn.q_view", q, h, hd)
    k = bld.to_heads("attn.k_view", k, kvh, hd)
    v = bld.to_heads("attn.v_view", v, kvh, hd)
    q = bld.op("attn.q_rope", "RoPE", [q, sin, cos], q.shape)
    k = bld.op("attn.k_rope", "RoPE", [k, sin, cos], k.shape)
    rep = {"dim": 2, "times": h // kvh}
    k = bld.op("attn.k_repeat", "Repeat", [k], (1, s, h, hd), rep)
    v = bld.op("attn.v_repeat", "Repeat", [v], (1, s, h, hd), rep)
    ctx = bld.attention("attn", q, k, v, mask)
    attn = bld.linear("attn.o_proj", ctx, d, bias=False)
    h1 = bld.op("residual1", "Add", [x, attn], x.shape)

    n2 = bld.rms_norm("post_attention_layernorm", h1, cfg.eps)
    gate = bld.linear("mlp.gate_proj", n2, cfg.intermediate, bias=False)
    up = bld.linear("mlp.up_proj", n2, cfg.intermediate, bias=False)
    act = bld.op("mlp.act", "SiLU", [gate], gate.shape)
    prod = bld.op("mlp.mul", "Mul", [act, up], gate.shape)
    down = bld.linear("mlp.down_proj", prod, d, bias=False)
    y = bld.op("residual2", "Add", [h1, down], x.shape, result="y")
    bld.g.set_io([x, sin, cos, mask], [y])

    rng = np.random.default_rng([seed, 1])
    sin_t, cos_t = text_rope_tables(s, hd, cfg.theta)
    causal = np.triu(np.full((s, s), MASK_VALUE, dtype=np.float32), k=1)[None, None]
    inputs = {"x": rng.standard_normal((1, s, d), dtype=np.float32), "sin": sin_t, "cos": cos_t,
              "mask": np.ascontiguousarray(causal)}
    return bld.g, inputs


# ------------------------------------------------------------ quantization
def calibrate(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, tuple[float, float]]:
    """(min, max) of every non-constant tensor when the float graph runs on `inputs`."""
    from qlower.reference.mllm import MLLM_KERNELS
    from qlower.reference.source import run_graph

    ins, outs = list(graph.inputs), list(graph.outputs)
    watched = [v for v in graph.values if not v.is_const]
    graph.set_io(ins, watched)
    try:
        env = run_graph(graph, inputs, {"mllm": MLLM_KERNELS})
    finally:
        graph.set_io(ins, outs)
    return {n: (float(np.min(a)), float(np.max(a))) for n, a in env.items()}


def _uint16_for(lo: float, hi: float) -> Quant:
    return Quant.for_range(lo, hi, "uint16")


def _quantize_array(data: np.ndarray, q: Quant, dtype: np.dtype) -> np.ndarray:
    """real -> storage with qlower's quantizer; symmetric signed encodings use [-127, 127]."""
    scale = np.asarray(q.scale, dtype=np.float64)
    zp = np.asarray(q.zero_point, dtype=np.float64)
    x = np.asarray(data)
    if q.axis is not None:
        shape = [1] * x.ndim
        shape[q.axis] = -1
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    else:
        scale, zp = scale.reshape(()), zp.reshape(())
    lo, hi = bounds(dtype, q.bitwidth)
    lo = lo + 1 if q.symmetric and lo < 0 else lo  # symmetric signed: [-127, 127]
    return quantize_affine(x, scale, zp, lo, hi, dtype)


def _weight_quant(w: np.ndarray) -> tuple[Quant, np.ndarray]:
    """int8 symmetric per output channel (axis 0)."""
    amax = np.max(np.abs(w.astype(np.float64)), axis=tuple(range(1, w.ndim)))
    scale = np.where(amax > 0, amax / 127.0, 1.0)
    q = Quant(scale, [0] * len(scale), axis=0, symmetric=True)
    return q, _quantize_array(w, q, np.dtype(np.int8))


def _norm_weight_quant(w: np.ndarray) -> tuple[Quant, np.ndarray]:
    """uint16 symmetric per tensor (zero point 32768): HTP's LayerNorm takes a 16-bit gamma only
    symmetric (its supplement's "16bit Weight must be symmetric")."""
    amax = float(np.max(np.abs(w)))
    q = Quant([amax / 32767 if amax > 0 else 1.0], [32768], symmetric=True)
    return q, _quantize_array(w, q, ACT_DTYPE)


def _bias_quant(b: np.ndarray) -> tuple[Quant, np.ndarray]:
    """int32 symmetric per tensor, from the bias's own range."""
    amax = float(np.max(np.abs(b.astype(np.float64))))
    q = Quant([amax / (2**31 - 1) if amax > 0 else 1.0], [0], symmetric=True)
    return q, _quantize_array(b, q, np.dtype(np.int32))


def quantize_w8a16(graph: Graph, ranges: Mapping[str, tuple[float, float]], name: str | None = None) -> Graph:
    """A copy of the float `graph` with w8a16 dtypes, encodings and data (see the module docstring)."""
    roles: dict[str, str] = {}
    for op in graph.ops:
        for i, v in enumerate(op.operands):
            if v is not None and v.is_const:
                if op.type == "mllm.Linear":
                    roles[v.name] = "weight" if i == 1 else "bias"
                elif op.type == "mllm.LayerNorm" and i == 1:
                    roles[v.name] = "norm_weight"
                else:
                    roles[v.name] = "param"

    # Activation encodings, in execution order so data-movement results can inherit.
    act: dict[str, Quant] = {v.name: _uint16_for(*ranges[v.name]) for v in graph.inputs}
    for op in graph.topo_order():
        for r in op.results:
            if op.type in _DATA_MOVEMENT:
                act[r.name] = act[op.operands[0].name]
            else:
                act[r.name] = _uint16_for(*ranges[r.name])

    q = Graph(name or f"{graph.name}_w8a16")
    new: dict[str, Value] = {}
    for v in graph.values:
        if v.is_const:
            role = roles.get(v.name, "param")
            if role == "weight":
                enc, data = _weight_quant(v.data)
            elif role == "bias":
                enc, data = _bias_quant(v.data)
            elif role == "norm_weight":
                enc, data = _norm_weight_quant(v.data)
            else:
                enc = _uint16_for(float(np.min(v.data)), float(np.max(v.data)))
                data = _quantize_array(v.data, enc, ACT_DTYPE)
            new[v.name] = q.add_value(v.name, data.dtype, v.shape, quant=enc, data=data)
        else:
            new[v.name] = q.add_value(v.name, ACT_DTYPE, v.shape, quant=act[v.name])
    for op in graph.ops:
        q.add_op(op.name, op.type, [None if v is None else new[v.name] for v in op.operands],
                 [new[r.name] for r in op.results], dict(op.attrs))
    q.set_io([new[v.name] for v in graph.inputs], [new[v.name] for v in graph.outputs])
    return q


def quantize_inputs(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Real-valued inputs in the storage dtype of a quantized graph's inputs."""
    return {v.name: _quantize_array(inputs[v.name], v.quant, v.dtype) for v in graph.inputs}


def dequantize_inputs(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Stored inputs of a quantized graph back to real float32 values (what `run_graph` takes)."""
    out = {}
    for v in graph.inputs:
        s = np.float64(v.quant.scale[0])
        out[v.name] = (s * (inputs[v.name].astype(np.float64) - v.quant.zero_point[0])).astype(np.float32)
    return out


# ------------------------------------------------------------------ output
def _npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """An uncompressed npz with fixed timestamps: equal arrays give equal bytes."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for key, arr in arrays.items():
            info = zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            with z.open(info, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.ascontiguousarray(arr), allow_pickle=False)
    return out.getvalue()


def save_inputs(path: Path, inputs: Mapping[str, np.ndarray]) -> None:
    path.write_bytes(_npz_bytes(inputs))


def summary(graph: Graph) -> str:
    """One line: op count by type and parameter count."""
    counts = Counter(op.type.split(".", 1)[1] for op in graph.ops)
    params = sum(v.data.size for v in graph.iter_consts())
    types = ", ".join(f"{t} {n}" for t, n in sorted(counts.items()))
    acts = {v.dtype.name for v in graph.values if not v.is_const}
    return (f"{graph.name}: {len(graph)} ops ({types}); {params:,} params; "
            f"activations {'/'.join(sorted(acts))}")


def build_all(outdir: str | Path, *, small: bool = False, verbose: bool = False) -> dict[str, Graph]:
    """Build, calibrate, quantize and write all four graphs; returns them by name."""
    from qlower.graph.io import save_graph

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    builders = [(vision_block, VISION_SMALL if small else VISION),
                (decoder_layer, DECODER_SMALL if small else DECODER)]
    graphs: dict[str, Graph] = {}
    for build, cfg in builders:
        g, inputs = build(cfg)
        qg = quantize_w8a16(g, calibrate(g, inputs))
        for graph, ins in ((g, inputs), (qg, quantize_inputs(qg, inputs))):
            save_graph(graph, outdir / f"{graph.name}.json", npz=True)
            save_inputs(outdir / f"{graph.name}_inputs.npz", ins)
            graphs[graph.name] = graph
            if verbose:
                print(summary(graph))
    return graphs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("outdir", help="folder for the graph files (created if missing)")
    ap.add_argument("--small", action="store_true", help="small dims, same structure (for tests)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    build_all(args.outdir, small=args.small, verbose=True)
    print(f"wrote 4 graphs to {args.outdir} in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
