"""Build a whole Qwen2-style LLM in the mllm dialect, as mllm's QNN AOT flow deploys it.

    python examples/build_qwen2.py OUTDIR [--config demo|0.5b|1.5b] [--modes float,w8a16,w4a16]

One prefill chunk of `seq` (32) tokens against a KV cache of `past` positions:

    inputs   input_ids int32 [1, S]; sin/cos [S, head_dim] (RoPE tables of the chunk's positions);
             mask [1, 1, S, P + S] (additive: 0 where a query may attend, -100 elsewhere);
             past_key.<i>, past_value.<i> [1, kv_heads, P, head_dim] for every layer i
    outputs  logits [1, S, vocab]; present_key.<i>, present_value.<i> [1, kv_heads, S, head_dim]
             (the chunk's keys and values, which the runtime appends to its cache)

    Embedding(input_ids, embed_tokens) → every decoder layer (RMSNorm, q/k/v Linear with bias,
    RoPE, k/v = Concat(past, current) along the sequence, Repeat to the query heads, attention
    with the mask, o_proj, residual; RMSNorm, SwiGLU MLP, residual) → RMSNorm → LM head
    (Linear; tied to embed_tokens in the float graph, as Qwen2.5 ties them).

Weights are random but deterministic (numpy `default_rng`, seed per config) and written as
`.safetensors` shards (the files Hugging Face checkpoints use) that the graph references
(`{"safetensors": FILE, "key": ...}`), so qlower reads them lazily.

Modes:
  float   float32 everything.
  w8a16   int8 symmetric per-output-channel Linear weights; int32 biases; uint16 activations
          (per tensor, from the calibration run); the KV cache uint8 with zero point 128
          (QNN offset -128), as mllm keeps it; the embedding table uint16 and an untied int8
          LM head.
  w4a16   as w8a16 with 4-bit LPBQ Linear weights: int8 storage, `bitwidth: 4`, per output
          channel, blocks of `block_size` (64) input elements with their own scale.

Activation ranges come from running the float graph with qlower's reference kernels on the
example inputs (written next to each graph as `<name>_inputs.npz`); `--no-calibrate`
(the full-size benchmark) uses fixed ranges instead.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_qwen2vl import MASK_VALUE, WEIGHT_STD, calibrate, save_inputs  # noqa: E402

from qlower.frontends.llm import LlmConfig, build_llm  # noqa: E402
from qlower.graph.core import Graph, Value  # noqa: E402
from qlower.graph.lazy import LazyArray, SafetensorsSource  # noqa: E402
from qlower.graph.quantize import bounds, quantize_affine, quantize_real  # noqa: E402
from qlower.graph.types import Quant  # noqa: E402

FLOAT = np.dtype(np.float32)
ACT = np.dtype(np.uint16)
KV = np.dtype(np.uint8)
KV_ZERO_POINT = 128  # QNN offset -128
_DATA_MOVEMENT = frozenset({"mllm.View", "mllm.Transpose", "mllm.Repeat"})


CONFIGS = {
    # Qwen2 architecture at reduced width, all layers present: what `make demo` lowers in seconds.
    "demo": LlmConfig("qwen2_demo", layers=4, hidden=256, intermediate=1024, heads=4, kv_heads=2, vocab=2048,
                      block_size=64),
    "0.5b": LlmConfig("qwen2_0_5b", layers=24, hidden=896, intermediate=4864, heads=14, kv_heads=2,
                      vocab=151936),
    "1.5b": LlmConfig("qwen2_1_5b", layers=28, hidden=1536, intermediate=8960, heads=12, kv_heads=2,
                      vocab=151936),
}


class Shards:
    """Writes weights into `.safetensors` shards of about `max_bytes` and points the values at them."""

    def __init__(self, outdir: Path, prefix: str, max_bytes: int = 1 << 30) -> None:
        self.outdir, self.prefix, self.max_bytes = outdir, prefix, max_bytes
        self.pending: dict[str, np.ndarray] = {}
        self.values: list[tuple[Value, str]] = []
        self.size = 0
        self.count = 0

    def add(self, v: Value, data: np.ndarray, key: str | None = None) -> None:
        key = key or v.name
        self.pending[key] = np.ascontiguousarray(data)
        self.values.append((v, key))
        self.size += data.nbytes
        if self.size >= self.max_bytes:
            self.flush()

    def flush(self) -> None:
        from safetensors.numpy import save_file

        if not self.pending:
            return
        self.count += 1
        path = self.outdir / f"{self.prefix}-{self.count:05d}.safetensors"
        save_file(self.pending, str(path))
        for v, key in self.values:
            arr = self.pending[key]
            v.data = LazyArray(SafetensorsSource(path, key), arr.dtype, arr.shape)
        self.pending, self.values, self.size = {}, [], 0


def build_float(cfg: LlmConfig, shards: Shards | None) -> Graph:
    """The float32 graph of the whole model (`qlower.frontends.llm.build_llm`, the graph the checkpoint
    frontend builds too), its weights drawn from one rng in the builder's order and written to shards."""
    rng = np.random.default_rng(cfg.seed)

    def const(g: Graph, name: str, shape: tuple[int, ...], kind: str) -> Value:
        data = rng.standard_normal(shape, dtype=np.float32)
        data *= np.float32(WEIGHT_STD)
        if kind == "norm":
            data += np.float32(1.0)
        if shards is None:
            return g.add_value(name, FLOAT, shape, data=data)
        v = g.add_value(name, FLOAT, shape, data=np.zeros((), FLOAT))  # a constant; data set on flush
        shards.add(v, data)
        return v

    g = build_llm(cfg, const)
    if shards is not None:
        shards.flush()
    return g


def example_inputs(cfg: LlmConfig) -> dict[str, np.ndarray]:
    """Deterministic inputs: token ids, RoPE tables for positions past..past+S-1, the causal mask
    over cache + chunk, and a cache of plausible keys/values."""
    s, p, hd = cfg.seq, cfg.past, cfg.head_dim
    rng = np.random.default_rng([cfg.seed, 1])
    pos = np.arange(p, p + s, dtype=np.float64)
    inv = 1.0 / cfg.theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.concatenate([np.outer(pos, inv)] * 2, axis=1)
    mask = np.zeros((1, 1, s, p + s), np.float32)
    mask[0, 0][np.arange(s)[:, None] < np.arange(p + s)[None, :] - p] = MASK_VALUE
    out = {"input_ids": rng.integers(0, cfg.vocab, size=(1, s)).astype(np.int32),
           "sin": np.sin(ang).astype(np.float32), "cos": np.cos(ang).astype(np.float32), "mask": mask}
    for i in range(cfg.layers):
        for kind in ("key", "value"):
            out[f"past_{kind}.{i}"] = (rng.standard_normal((1, cfg.kv_heads, p, hd)) * 0.05).astype(np.float32)
    return out


# ------------------------------------------------------------------ quantization
def _act(lo: float, hi: float) -> Quant:
    return Quant.for_range(lo, hi, "uint16")


def _kv(lo: float, hi: float) -> Quant:
    amax = max(abs(lo), abs(hi), 1e-6)
    return Quant([amax / 127.0], [KV_ZERO_POINT])


def _symmetric(x: np.ndarray, q: Quant, dtype: np.dtype) -> np.ndarray:
    lo, hi = bounds(dtype, q.bitwidth)
    if q.block_size is not None:
        return quantize_real(x, q, dtype)
    scale = np.asarray(q.scale, np.float64).reshape([-1] + [1] * (x.ndim - 1)) if q.axis is not None else \
        np.float64(q.scale[0])
    return quantize_affine(x, scale, np.zeros_like(scale), lo + 1, hi, dtype)  # symmetric: [-127, 127]


def _weight(w: np.ndarray, mode: str, block: int) -> tuple[Quant, np.ndarray]:
    """int8 per output channel (w8a16) or 4-bit LPBQ blocks along the input dimension (w4a16)."""
    w = np.asarray(w, np.float32)
    if mode == "w8a16":
        amax = np.abs(w).max(axis=1).astype(np.float64)
        scale = np.where(amax > 0, amax / 127.0, 1.0)
        q = Quant(scale, [0] * len(scale), axis=0, symmetric=True)
        return q, _symmetric(w, q, np.dtype(np.int8))
    out_f, in_f = w.shape
    nb = -(-in_f // block)
    pad = np.zeros((out_f, nb * block), np.float32)
    pad[:, :in_f] = np.abs(w)
    amax = pad.reshape(out_f, nb, block).max(axis=2).astype(np.float64) / 7.0  # the scale each block wants
    del pad
    # LPBQ: a float scale per channel times a 4-bit integer per block (what QNN's BLOCKWISE_EXPANSION
    # stores), so the block scales are those products, not free floats.
    channel = amax.max(axis=1) / 15.0
    channel[channel == 0] = 1.0
    ints = np.clip(np.ceil(amax / channel[:, None] - 1e-9), 1, 15)
    scale = (channel[:, None] * ints).reshape(-1)
    q = Quant(scale, [0] * len(scale), axis=0, bitwidth=4, symmetric=True, block_size=block, block_axis=1)
    return q, quantize_real(w, q, np.dtype(np.int8))


def quantize_llm(graph: Graph, mode: str, ranges: Callable[[str], tuple[float, float]], shards: Shards | None,
                 block: int = 64) -> Graph:
    """A copy of the float graph in `mode` (w8a16 / w4a16): see the module docstring. Weights are read,
    quantized and written one at a time."""
    q = Graph(f"{graph.name}_{mode}")
    kv_names = {v.name for v in graph.inputs if v.name.startswith("past_")} | \
               {v.name for v in graph.outputs if v.name.startswith("present_")}
    act: dict[str, Quant] = {}
    for v in graph.inputs:
        if v.dtype.kind == "f" and v.name not in kv_names:
            act[v.name] = _act(*ranges(v.name))
    for op in graph.topo_order():
        for r in op.results:
            if r.name in kv_names:
                layer = r.name.split(".", 1)[1]
                kind = "key" if "key" in r.name else "value"
                lo, hi = ranges(r.name)
                plo, phi = ranges(f"past_{kind}.{layer}")
                act[r.name] = act[f"past_{kind}.{layer}"] = _kv(min(lo, plo), max(hi, phi))
            elif op.type in _DATA_MOVEMENT:
                act[r.name] = act[op.operands[0].name]
            else:
                act[r.name] = _act(*ranges(r.name))
    new: dict[tuple[str, str], Value] = {}

    def const(v: Value, role: str) -> Value:
        key = (v.name, role)
        if key in new:
            return new[key]
        data = np.asarray(v.data)
        name = v.name if role != "lm_head" else "lm_head.weight"
        if role == "weight" or role == "lm_head":
            enc, qd = _weight(data, mode, block)
        elif role == "bias":
            amax = float(np.abs(data).max())
            enc = Quant([amax / (2**31 - 1) if amax > 0 else 1.0], [0], symmetric=True)
            qd = _symmetric(data, enc, np.dtype(np.int32))
        else:
            enc = _act(float(data.min()), float(data.max()))
            qd = quantize_real(data, enc, ACT)
        del data
        nv = q.add_value(name, qd.dtype, v.shape, quant=enc, data=qd)
        if shards is not None and qd.size > 4096:
            shards.add(nv, qd, name)
        new[key] = nv
        return nv

    def value(v: Value) -> Value:
        key = (v.name, "")
        if key not in new:
            dtype = KV if v.name in kv_names else ACT if v.name in act else v.dtype
            new[key] = q.add_value(v.name, dtype, v.shape, quant=act.get(v.name))
        return new[key]

    for v in graph.inputs:
        value(v)
    for op in graph.ops:
        operands = []
        for i, v in enumerate(op.operands):
            if v is None or not v.is_const:
                operands.append(None if v is None else value(v))
            elif op.type == "mllm.Linear":
                role = ("lm_head" if op.name == "lm_head" else "weight") if i == 1 else "bias"
                operands.append(const(v, role))
            else:
                operands.append(const(v, "param"))
        attrs_ = dict(op.attrs)
        if op.type == "mllm.CastType":
            attrs_["dtype"] = value(op.results[0]).dtype.name
        q.add_op(op.name, op.type, operands, [value(r) for r in op.results], attrs_)
    q.set_io([value(v) for v in graph.inputs], [value(v) for v in graph.outputs])
    if shards is not None:
        shards.flush()
    return q


def quantize_inputs(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {v.name: quantize_real(inputs[v.name], v.quant, v.dtype) if v.quant is not None else inputs[v.name]
            for v in graph.inputs}


def build(outdir: str | Path, cfg: LlmConfig, modes: tuple[str, ...] = ("float", "w8a16"), *,
          calibrated: bool = True, verbose: bool = False) -> dict[str, Path]:
    """Write the graphs (JSON + safetensors shards + example inputs); returns their paths by mode."""
    from qlower.graph.io import save_graph

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    g = build_float(cfg, Shards(outdir, f"{cfg.name}-model"))
    inputs = example_inputs(cfg)
    paths: dict[str, Path] = {}
    if "float" in modes:
        paths["float"] = outdir / f"{cfg.name}.json"
        save_graph(g, paths["float"])
        save_inputs(outdir / f"{cfg.name}_inputs.npz", inputs)
    if verbose:
        print(f"{cfg.name}: {len(g)} ops, float built in {time.perf_counter() - t0:.1f} s", flush=True)
    qmodes = [m for m in modes if m != "float"]
    if qmodes:
        if calibrated:
            seen = calibrate(g, inputs)
            ranges = seen.__getitem__
        else:
            def ranges(name: str) -> tuple[float, float]:
                return (-1.0, 1.0) if name.startswith(("past_", "present_")) else (-16.0, 16.0)
        for mode in qmodes:
            if calibrated:  # again, on the quantized weights: 4-bit weights move the activations
                first = quantize_llm(g, mode, ranges, None, cfg.block_size)
                real = {v.name: inputs[v.name] for v in first.inputs}
                again = calibrate(first, real)
                del first

                def ranges(name: str, seen=seen, again=again) -> tuple[float, float]:
                    (a, b), (c, d) = seen[name], again.get(name, seen[name])
                    return min(a, c), max(b, d)
            qg = quantize_llm(g, mode, ranges, Shards(outdir, f"{cfg.name}_{mode}-model"), cfg.block_size)
            paths[mode] = outdir / f"{qg.name}.json"
            save_graph(qg, paths[mode], quant_refs=1024)  # block scales in an npz, not JSON numbers
            save_inputs(outdir / f"{qg.name}_inputs.npz", quantize_inputs(qg, inputs))
            if verbose:
                print(f"{qg.name}: written in {time.perf_counter() - t0:.1f} s", flush=True)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("outdir")
    ap.add_argument("--config", choices=sorted(CONFIGS), default="demo")
    ap.add_argument("--modes", default="float,w8a16,w4a16")
    ap.add_argument("--no-calibrate", action="store_true", help="fixed activation ranges (no reference run)")
    args = ap.parse_args(argv)
    modes = tuple(m for m in args.modes.split(",") if m)
    bad = [m for m in modes if m not in ("float", "w8a16", "w4a16")]
    if bad:
        ap.error(f"unknown mode {bad[0]}")
    build(args.outdir, CONFIGS[args.config], modes, calibrated=not args.no_calibrate, verbose=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
