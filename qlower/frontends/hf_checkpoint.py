"""Hugging Face checkpoints as a frontend: a folder with `config.json` and `*.safetensors` (one file,
or shards with `model.safetensors.index.json`) of a decoder mllm deploys — Qwen2/Qwen2.5, Qwen3,
Llama 3 — becomes the mllm-dialect prefill graph of `qlower.frontends.llm`, its weights references
to the checkpoint's tensors by key (BF16, FP16, FP32; read when needed, never held whole).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from qlower.diagnostics import QlowerError, error
from qlower.frontends.llm import FLOAT, LlmConfig, build_llm
from qlower.graph.core import Graph, Value
from qlower.graph.lazy import LazyArray, SafetensorsSource, safetensors_header

FAMILIES = ("qwen2", "qwen3", "llama")  # config.json's model_type
DEFAULT_CHUNK = 32
DEFAULT_CONTEXT = 1024
_READ = {"bfloat16": "bf16", "float16": "float16", "float32": "float32"}


def _fail(message: str, path: Path, hint: str | None = None) -> QlowerError:
    return QlowerError(error(message, subject=str(path), hint=hint, code="checkpoint"))


def is_checkpoint(path: str | Path) -> bool:
    p = Path(path)
    return p.is_dir() and (p / "config.json").is_file()


def checkpoint_config(path: str | Path, *, chunk: int = DEFAULT_CHUNK, context: int = DEFAULT_CONTEXT) -> LlmConfig:
    """The graph's shape from `config.json`; a clear error for what qlower cannot build exactly."""
    root = Path(path)
    file = root / "config.json"
    try:
        cfg = json.loads(file.read_text())
    except OSError as exc:
        raise _fail(f"cannot read {file}: {exc.strerror or exc}", file) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _fail(f"{file} is not JSON: {exc}", file) from None
    if type(cfg) is not dict:
        raise _fail(f"{file} is not a JSON object", file)
    family = cfg.get("model_type")
    if family not in FAMILIES:
        raise _fail(f"{file}: model_type {family!r} is not a supported architecture",
                    file, hint=f"qlower builds {', '.join(FAMILIES)} decoders")
    if chunk < 1 or context <= chunk:
        raise _fail(f"context length {context} must exceed the chunk size {chunk} (both positive)", file)

    def need(key: str) -> Any:
        if key not in cfg:
            raise _fail(f"{file}: no {key!r}", file)
        return cfg[key]

    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise _fail(f"{file}: hidden_act {act!r}: only silu (SwiGLU) MLPs are supported", file)
    if cfg.get("use_sliding_window"):
        raise _fail(f"{file}: sliding-window attention is not supported", file)
    if family == "llama" and (cfg.get("attention_bias") or cfg.get("mlp_bias")):
        raise _fail(f"{file}: Llama with attention_bias/mlp_bias is not supported", file)
    rope = dict(cfg.get("rope_parameters") or {})
    scaling = cfg.get("rope_scaling") or (rope if rope.get("rope_type", "default") != "default" else None)
    theta = float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind == "default":
            scaling = None
        elif kind != "llama3":
            raise _fail(f"{file}: RoPE scaling {kind!r} is not supported (plain and llama3 are)", file)
        else:
            scaling = {k: float(scaling[k]) for k in ("factor", "low_freq_factor", "high_freq_factor",
                                                        "original_max_position_embeddings")}
    hidden, heads = int(need("hidden_size")), int(need("num_attention_heads"))
    return LlmConfig(
        name=root.resolve().name or "model", layers=int(need("num_hidden_layers")), hidden=hidden,
        intermediate=int(need("intermediate_size")), heads=heads,
        kv_heads=int(cfg.get("num_key_value_heads") or heads), vocab=int(need("vocab_size")),
        head_dim=int(cfg.get("head_dim") or hidden // heads), seq=chunk, past=context - chunk,
        eps=float(cfg.get("rms_norm_eps", 1e-6)), theta=theta,
        qkv_bias=True if family == "qwen2" else bool(cfg.get("attention_bias", False)),
        qk_norm=family == "qwen3", tied=bool(cfg.get("tie_word_embeddings", False)), rope_scaling=scaling)


def _weight_files(root: Path) -> dict[str, Path]:
    """tensor key → the shard holding it (from the index when there is one)."""
    index = root / "model.safetensors.index.json"
    if index.is_file():
        try:
            doc = json.loads(index.read_text())
            mapping = doc["weight_map"]
            return {str(k): root / str(v) for k, v in mapping.items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise _fail(f"{index} is not a safetensors index (a JSON object with weight_map): {exc}", index) from None
    files = sorted(root.glob("*.safetensors"))
    if not files:
        raise _fail(f"{root} has no *.safetensors weights", root,
                    hint="save the model with save_pretrained(..., safe_serialization=True)")
    out: dict[str, Path] = {}
    for f in files:
        for key in _header(f):
            out.setdefault(key, f)
    return out


def _header(path: Path, cache: dict | None = None) -> dict[str, tuple[str, tuple[int, ...]]]:
    if cache is not None and path in cache:
        return cache[path]
    try:
        got = safetensors_header(path)
    except OSError as exc:
        raise _fail(f"cannot read {path}: {exc.strerror or exc}", path) from None
    except ValueError as exc:
        raise _fail(f"{path} is not a safetensors file: {exc}", path) from None
    if cache is not None:
        cache[path] = got
    return got


def load_checkpoint(path: str | Path, *, chunk: int = DEFAULT_CHUNK, context: int = DEFAULT_CONTEXT) -> Graph:
    """The prefill graph of the checkpoint in folder `path` (weights by reference)."""
    root = Path(path)
    cfg = checkpoint_config(root, chunk=chunk, context=context)
    files = _weight_files(root)
    headers: dict[Path, dict] = {}

    def const(g: Graph, name: str, shape: tuple[int, ...], kind: str) -> Value:
        file = files.get(name)
        if file is None:
            raise _fail(f"{root}: the checkpoint has no tensor {name!r} (a {cfg.layers}-layer "
                        f"{'tied' if cfg.tied else 'untied'} model needs it)", root)
        header = _header(file, headers)
        if name not in header:
            raise _fail(f"{file}: no tensor {name!r} (the index says it is there)", file)
        dname, got = header[name]
        if tuple(got) != tuple(shape):
            raise _fail(f"{file}: tensor {name!r} has shape {list(got)}, config.json implies {list(shape)}", file)
        how = _READ.get(dname)
        if how is None:
            raise _fail(f"{file}: tensor {name!r} has dtype {dname}; weights must be BF16, F16 or F32", file)
        data = LazyArray(SafetensorsSource(file, name, bf16=how == "bf16"),
                         FLOAT if how != "float16" else np.dtype(np.float16), shape)
        return g.add_value(name, FLOAT, shape, data=data.astype(FLOAT))

    return build_llm(cfg, const)
