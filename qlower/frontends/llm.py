"""The decoder-only LLM graph in the mllm dialect, as mllm's QNN AOT flow deploys it.

One builder for every source of weights: the Hugging Face checkpoint frontend
(`qlower.frontends.hf_checkpoint`, weights by reference to the checkpoint's shards) and
`examples/build_qwen2.py` (random weights) both call `build_llm`.

One prefill chunk of `seq` tokens against a KV cache of `past` positions:

    inputs   input_ids int32 [1, S]; sin/cos [S, head_dim] (RoPE tables of the chunk's positions);
             mask [1, 1, S, P + S] (additive: 0 where a query may attend, MASK_VALUE elsewhere);
             past_key.<i>, past_value.<i> [1, kv_heads, P, head_dim] for every layer i
    outputs  logits [1, S, vocab]; present_key.<i>, present_value.<i> [1, kv_heads, S, head_dim]
             (the chunk's keys, after RoPE, and values, which the runtime appends to its cache)

The RoPE tables are inputs (the runtime computes them for the chunk's positions, with whatever
scaling the model uses: `rope_tables`), so one graph serves every position.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import numpy as np

from qlower.graph.core import Graph, Value

FLOAT = np.dtype(np.float32)
MASK_VALUE = -100.0  # additive mask: exp(-100) is 0 in float32, and it quantizes on a 16-bit grid


@attrs.frozen
class LlmConfig:
    """The fields of a Hugging Face decoder config that shape the graph (Qwen2/2.5, Qwen3, Llama 3)."""

    name: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    head_dim: int = 0  # 0: hidden // heads
    seq: int = 32  # the prefill chunk
    past: int = 32  # KV cache positions before the chunk (context length - chunk)
    eps: float = 1e-6
    theta: float = 1000000.0
    qkv_bias: bool = True  # Qwen2: q/k/v projections have biases
    qk_norm: bool = False  # Qwen3: RMSNorm of each head's q and k before RoPE
    tied: bool = True  # the LM head is the embedding table
    # Llama 3's frequency rescaling ({"factor", "low_freq_factor", "high_freq_factor",
    # "original_max_position_embeddings"}); None: plain RoPE
    rope_scaling: Mapping[str, float] | None = attrs.field(default=None, eq=False)
    seed: int = 2
    block_size: int = 64

    def __attrs_post_init__(self) -> None:
        if not self.head_dim:
            object.__setattr__(self, "head_dim", self.hidden // self.heads)


# (graph, tensor name, shape, kind: "embedding" | "linear" | "bias" | "norm") -> the constant's Value
ConstFn = Callable[[Graph, str, tuple[int, ...], str], Value]


class _Builder:
    def __init__(self, cfg: LlmConfig, const: ConstFn) -> None:
        self.cfg, self.g, self._const = cfg, Graph(cfg.name), const

    def input(self, name: str, shape: tuple[int, ...], dtype: np.dtype = FLOAT) -> Value:
        return self.g.add_value(name, dtype, shape)

    def const(self, name: str, shape: tuple[int, ...], kind: str) -> Value:
        return self._const(self.g, name, shape, kind)

    def op(self, name: str, type: str, operands: list[Value], shape: tuple[int, ...], attrs: dict | None = None,
           result: str | None = None) -> Value:
        y = self.g.add_value(result or f"{name}.out", FLOAT, shape)
        self.g.add_op(name, f"mllm.{type}", operands, [y], attrs)
        return y

    def linear(self, name: str, x: Value, out_features: int, bias: bool, weight: Value | None = None) -> Value:
        w = weight or self.const(f"{name}.weight", (out_features, x.shape[-1]), "linear")
        operands = [x, w] + ([self.const(f"{name}.bias", (out_features,), "bias")] if bias else [])
        return self.op(name, "Linear", operands, (*x.shape[:-1], out_features))

    def rms_norm(self, name: str, x: Value) -> Value:
        w = self.const(f"{name}.weight", (x.shape[-1],), "norm")
        return self.op(name, "RMSNorm", [x, w], x.shape, {"epsilon": self.cfg.eps, "add_unit_offset": False})


def build_llm(cfg: LlmConfig, const: ConstFn) -> Graph:
    """The float32 graph of the whole model (see the module docstring); `const` makes each weight,
    named as Hugging Face names it, in a fixed order."""
    s, d, h, kvh, hd, p = cfg.seq, cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.past
    b = _Builder(cfg, const)
    ids = b.input("input_ids", (1, s), np.dtype(np.int32))
    sin, cos = b.input("sin", (s, hd)), b.input("cos", (s, hd))
    mask = b.input("mask", (1, 1, s, p + s))
    table = b.const("model.embed_tokens.weight", (cfg.vocab, d), "embedding")
    x = b.op("model.embed_tokens", "Embedding", [ids, table], (1, s, d))
    ins, outs = [ids, sin, cos, mask], []
    for i in range(cfg.layers):
        pre = f"model.layers.{i}"
        past_k = b.input(f"past_key.{i}", (1, kvh, p, hd))
        past_v = b.input(f"past_value.{i}", (1, kvh, p, hd))
        ins += [past_k, past_v]
        n1 = b.rms_norm(f"{pre}.input_layernorm", x)
        heads = {}
        for name, count in (("q", h), ("k", kvh), ("v", kvh)):
            t = b.linear(f"{pre}.self_attn.{name}_proj", n1, count * hd, bias=cfg.qkv_bias)
            t = b.op(f"{pre}.self_attn.{name}_view", "View", [t], (1, s, count, hd), {"shape": [1, s, count, hd]})
            if name != "v":
                if cfg.qk_norm:
                    t = b.rms_norm(f"{pre}.self_attn.{name}_norm", t)
                t = b.op(f"{pre}.self_attn.{name}_rope", "RoPE", [t, sin, cos], t.shape)
            heads[name] = b.op(f"{pre}.self_attn.{name}_transpose", "Transpose", [t], (1, count, s, hd),
                               {"dim0": 1, "dim1": 2})
        kv = {}
        for name, past in (("k", past_k), ("v", past_v)):
            full = "key" if name == "k" else "value"
            outs.append(b.op(f"{pre}.self_attn.{name}_cache_out", "CastType", [heads[name]], (1, kvh, s, hd),
                             {"dtype": "float32"}, result=f"present_{full}.{i}"))
            cached = b.op(f"{pre}.self_attn.{name}_cache_in", "CastType", [past], past.shape, {"dtype": "float32"})
            cat = b.op(f"{pre}.self_attn.{name}_concat", "Concat", [cached, heads[name]], (1, kvh, p + s, hd),
                       {"dim": 2})
            kv[name] = b.op(f"{pre}.self_attn.{name}_repeat", "Repeat", [cat], (1, h, p + s, hd),
                            {"dim": 1, "times": h // kvh}) if h != kvh else cat
        scores = b.op(f"{pre}.self_attn.scores", "MatMul", [heads["q"], kv["k"]], (1, h, s, p + s),
                      {"transpose_a": False, "transpose_b": True})
        factor = b.g.add_value(f"{pre}.self_attn.scale_factor", FLOAT, (1,),
                               data=np.array([1.0 / math.sqrt(hd)], FLOAT))
        scores = b.op(f"{pre}.self_attn.scale", "Mul", [scores, factor], scores.shape)
        scores = b.op(f"{pre}.self_attn.mask_add", "Add", [scores, mask], scores.shape)
        probs = b.op(f"{pre}.self_attn.softmax", "Softmax", [scores], scores.shape, {"dim": -1})
        ctx = b.op(f"{pre}.self_attn.context", "MatMul", [probs, kv["v"]], (1, h, s, hd),
                   {"transpose_a": False, "transpose_b": False})
        ctx = b.op(f"{pre}.self_attn.context_transpose", "Transpose", [ctx], (1, s, h, hd), {"dim0": 1, "dim1": 2})
        ctx = b.op(f"{pre}.self_attn.context_view", "View", [ctx], (1, s, h * hd), {"shape": [1, s, h * hd]})
        attn = b.linear(f"{pre}.self_attn.o_proj", ctx, d, bias=False)
        h1 = b.op(f"{pre}.residual1", "Add", [x, attn], x.shape)
        n2 = b.rms_norm(f"{pre}.post_attention_layernorm", h1)
        gate = b.linear(f"{pre}.mlp.gate_proj", n2, cfg.intermediate, bias=False)
        up = b.linear(f"{pre}.mlp.up_proj", n2, cfg.intermediate, bias=False)
        act = b.op(f"{pre}.mlp.act", "SiLU", [gate], gate.shape)
        prod = b.op(f"{pre}.mlp.mul", "Mul", [act, up], gate.shape)
        down = b.linear(f"{pre}.mlp.down_proj", prod, d, bias=False)
        x = b.op(f"{pre}.residual2", "Add", [h1, down], x.shape)
    x = b.rms_norm("model.norm", x)
    head = table if cfg.tied else b.const("lm_head.weight", (cfg.vocab, d), "linear")
    logits = b.linear("lm_head", x, cfg.vocab, bias=False, weight=head)
    b.g.rename_value(logits, "logits")
    b.g.set_io(ins, [logits, *outs])
    return b.g


# ------------------------------------------------------------------ the runtime's side: inputs of a chunk
def inv_freq(cfg: LlmConfig) -> np.ndarray:
    """RoPE's inverse frequencies (float64), with Llama 3's rescaling when the config has it."""
    hd = cfg.head_dim
    inv = 1.0 / cfg.theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    sc = cfg.rope_scaling
    if not sc:
        return inv
    factor, low, high = float(sc["factor"]), float(sc["low_freq_factor"]), float(sc["high_freq_factor"])
    old = float(sc["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv
    smooth = (old / wavelen - low) / (high - low)
    mid = (1 - smooth) * inv / factor + smooth * inv
    return np.where(wavelen > old / low, inv / factor, np.where(wavelen < old / high, inv, mid))


def rope_tables(cfg: LlmConfig, start: int) -> tuple[np.ndarray, np.ndarray]:
    """sin, cos [S, head_dim] for positions start .. start+S-1 (rotate-half layout)."""
    pos = np.arange(start, start + cfg.seq, dtype=np.float64)
    ang = np.outer(pos, inv_freq(cfg))
    ang = np.concatenate([ang, ang], axis=1)
    return np.sin(ang).astype(np.float32), np.cos(ang).astype(np.float32)


def chunk_mask(cfg: LlmConfig, cached: int) -> np.ndarray:
    """The additive mask of a chunk whose first `cached` cache slots hold earlier positions (the rest
    empty): query i attends to those slots and to chunk positions ≤ i."""
    s, p = cfg.seq, cfg.past
    mask = np.full((1, 1, s, p + s), MASK_VALUE, np.float32)
    mask[0, 0, :, :cached] = 0.0
    mask[0, 0, :, p:][np.tril(np.ones((s, s), bool))] = 0.0
    return mask


class Prefill:
    """The inputs of each chunk when `tokens` ([T] or [1, T]) are prefilled chunk by chunk, the way the
    runtime does it: chunk k sees the keys and values of chunks 0..k-1 in its cache.

    Iterating yields one chunk's inputs at a time; before the next, `observe` must be given that
    chunk's outputs (the float graph's `present_*`), which fill the cache — so calibration runs each
    chunk once. T must be a multiple of the chunk and fit the cache plus one chunk."""

    def __init__(self, cfg: LlmConfig, tokens: np.ndarray) -> None:
        tokens = np.asarray(tokens).reshape(-1)
        s, p = cfg.seq, cfg.past
        if tokens.size == 0 or tokens.size % s or tokens.size > p + s:
            raise ValueError(f"{tokens.size} tokens: needs a positive multiple of the chunk ({s}), at most "
                             f"{p + s} (cache {p} + chunk {s})")
        if tokens.min() < 0 or tokens.max() >= cfg.vocab:
            raise ValueError(f"token ids must be in [0, {cfg.vocab}), got [{tokens.min()}, {tokens.max()}]")
        self.cfg, self.tokens = cfg, tokens
        self._seen = -1

    def __len__(self) -> int:
        return self.tokens.size // self.cfg.seq

    def __iter__(self):
        cfg = self.cfg
        s, p = cfg.seq, cfg.past
        self._cache = {f"past_{k}.{i}": np.zeros((1, cfg.kv_heads, p, cfg.head_dim), np.float32)
                       for i in range(cfg.layers) for k in ("key", "value")}
        for c in range(len(self)):
            if c and self._seen != c - 1:
                raise RuntimeError("Prefill: observe() the outputs of each chunk before asking for the next")
            sin, cos = rope_tables(cfg, c * s)
            self._chunk = c
            yield {"input_ids": self.tokens[c * s:(c + 1) * s].astype(np.int32)[None], "sin": sin, "cos": cos,
                   "mask": chunk_mask(cfg, c * s), **{k: v.copy() for k, v in self._cache.items()}}

    def observe(self, outputs: Mapping[str, Any]) -> None:
        """The float graph's outputs on the chunk just yielded: its keys and values enter the cache."""
        c, s = self._chunk, self.cfg.seq
        if (c + 1) * s <= self.cfg.past:
            for name, arr in self._cache.items():
                arr[:, :, c * s:(c + 1) * s] = np.asarray(outputs["present_" + name[5:]])
        self._seen = c
