"""Hugging Face checkpoints (config.json + safetensors, written by transformers' own save_pretrained
from random configs) against transformers' model of the same config and weights."""

from __future__ import annotations

import json

import numpy as np
import pytest

from qlower.diagnostics import QlowerError
from qlower.frontends.hf_checkpoint import checkpoint_config, load_checkpoint
from qlower.frontends.llm import Prefill, chunk_mask, rope_tables
from qlower.graph.lazy import LazyArray

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CHUNK, CONTEXT = 8, 24
SMALL = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=200)


def _config(family: str):
    if family == "qwen2":
        return transformers.Qwen2Config(**SMALL, tie_word_embeddings=True, rope_theta=1e6)
    if family == "qwen3":  # head_dim 32 ≠ hidden / heads: the projections are not square
        return transformers.Qwen3Config(**SMALL, head_dim=32, tie_word_embeddings=False)
    return transformers.LlamaConfig(**{**SMALL, "num_key_value_heads": 4}, tie_word_embeddings=False, rope_parameters={
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 16})


def _model(family: str, seed: int):
    torch.manual_seed(seed)
    m = transformers.AutoModelForCausalLM.from_config(_config(family)).eval()
    with torch.no_grad():  # untrained norms are all ones: make them matter
        for name, p in m.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.2)
    return m


@pytest.fixture(scope="module", params=[("qwen2", "float32", None), ("qwen3", "bfloat16", "60KB"),
                                        ("llama", "bfloat16", None)], ids=lambda p: p[0])
def checkpoint(request, tmp_path_factory):
    family, dtype, shard = request.param
    m = _model(family, seed=len(family))
    m = m.to(getattr(torch, dtype))
    path = tmp_path_factory.mktemp(family)
    m.save_pretrained(path, **({"max_shard_size": shard} if shard else {}))
    # transformers' model of the saved weights, in float32 (loaded afresh: `m.float()` would keep the
    # RoPE frequencies m.to(bfloat16) rounded)
    ref = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return family, path, ref


def _run(graph, feed):
    from qlower.reference.mllm import MLLM_KERNELS
    from qlower.reference.source import run_graph

    return run_graph(graph, feed, {"mllm": MLLM_KERNELS})


def test_matches_transformers(checkpoint):
    """The last chunk of a prefill, with transformers' own cache of the earlier positions as the KV cache
    inputs: logits and the chunk's keys/values match transformers' (float32 arithmetic on the same
    weights)."""
    family, path, model = checkpoint
    graph = load_checkpoint(path, chunk=CHUNK, context=CONTEXT)
    cfg = checkpoint_config(path, chunk=CHUNK, context=CONTEXT)
    if family == "qwen3":
        assert len(list(path.glob("*.safetensors"))) > 1  # sharded, with an index
    assert all(isinstance(v.data, LazyArray) for v in graph.iter_consts() if v.data.size > 1)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, cfg.vocab, size=(1, CONTEXT))
    with torch.no_grad():
        out = model(torch.as_tensor(ids), use_cache=True)
    p = CONTEXT - CHUNK
    sin, cos = rope_tables(cfg, p)
    feed = {"input_ids": ids[:, p:].astype(np.int32), "sin": sin, "cos": cos, "mask": chunk_mask(cfg, p)}
    cache = out.past_key_values
    for i in range(cfg.layers):
        feed[f"past_key.{i}"] = cache.layers[i].keys[:, :, :p].numpy()
        feed[f"past_value.{i}"] = cache.layers[i].values[:, :, :p].numpy()
    got = _run(graph, feed)
    want = out.logits[:, p:].numpy()
    np.testing.assert_allclose(got["logits"], want, atol=2e-4 * np.abs(want).max(), rtol=0)
    for i in range(cfg.layers):
        np.testing.assert_allclose(got[f"present_key.{i}"], cache.layers[i].keys[:, :, p:].numpy(), atol=1e-4)
        np.testing.assert_allclose(got[f"present_value.{i}"], cache.layers[i].values[:, :, p:].numpy(), atol=1e-4)


def test_prefill_chunk_by_chunk(checkpoint):
    """Prefill's chunks, each fed the cache the earlier chunks made, give transformers' logits for the
    whole sequence."""
    family, path, model = checkpoint
    graph = load_checkpoint(path, chunk=CHUNK, context=CONTEXT)
    cfg = checkpoint_config(path, chunk=CHUNK, context=CONTEXT)
    ids = np.random.default_rng(1).integers(0, cfg.vocab, size=CONTEXT)
    with torch.no_grad():
        want = model(torch.as_tensor(ids[None])).logits.numpy()
    feeds = Prefill(cfg, ids)
    logits = []
    for feed in feeds:
        out = _run(graph, feed)
        feeds.observe(out)
        logits.append(out["logits"])
    np.testing.assert_allclose(np.concatenate(logits, axis=1), want, atol=2e-4 * np.abs(want).max(), rtol=0)


def test_prefill_needs_observe(checkpoint):
    _, path, _ = checkpoint
    feeds = iter(Prefill(checkpoint_config(path, chunk=CHUNK, context=CONTEXT), np.zeros(16, int)))
    next(feeds)
    with pytest.raises(RuntimeError, match="observe"):
        next(feeds)


def _copy(src, dst):
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_errors_name_the_file(checkpoint, tmp_path):
    family, path, _ = checkpoint
    bad = _copy(path, tmp_path / "arch")
    doc = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**doc, "model_type": "gpt2"}))
    with pytest.raises(QlowerError, match="model_type 'gpt2' is not a supported architecture") as e:
        load_checkpoint(bad)
    assert str(bad / "config.json") in e.value.diagnostics[0].subject
    cut = _copy(path, tmp_path / "cut")
    shard = sorted(cut.glob("*.safetensors"))[0]
    shard.write_bytes(b"\x05")
    with pytest.raises(QlowerError, match="not a safetensors file") as e:
        load_checkpoint(cut)
    assert shard.name in e.value.diagnostics[0].subject
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "config.json").write_text("{")
    with pytest.raises(QlowerError, match="is not JSON"):
        load_checkpoint(tmp_path / "none")
    with pytest.raises(QlowerError, match="context length"):
        load_checkpoint(path, chunk=32, context=32)
