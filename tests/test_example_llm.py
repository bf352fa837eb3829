"""The whole-LLM example builder (examples/build_qwen2.py), at small dims.

The float graph is checked against Hugging Face transformers' own Qwen2 (random weights loaded
from the graph's safetensors shards, same KV cache, same positions); the quantized graphs are
lowered for HTP and compared with their source through the reference interpreters.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import qlower
from qlower.graph.io import load_graph
from qlower.graph.lazy import LazyArray
from qlower.reference.mllm import MLLM_KERNELS
from qlower.reference.source import run_graph

_PATH = Path(__file__).resolve().parents[1] / "examples" / "build_qwen2.py"


def _load_builder():
    sys.path.insert(0, str(_PATH.parent))
    spec = importlib.util.spec_from_file_location("build_qwen2", _PATH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("build_qwen2", mod)
    spec.loader.exec_module(mod)
    return mod


B = _load_builder()
CFG = B.LlmConfig("tiny_qwen2", layers=2, hidden=64, intermediate=128, heads=4, kv_heads=2, vocab=256, seq=8,
                  past=8, block_size=32)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("llm")
    return out, B.build(out, CFG, ("float", "w8a16", "w4a16"))


def _inputs(path: Path) -> dict[str, np.ndarray]:
    with np.load(path.with_name(path.stem + "_inputs.npz")) as z:
        return {k: z[k] for k in z.files}


def test_structure_and_references(built):
    _, paths = built
    g = load_graph(paths["float"])
    assert [v.name for v in g.inputs][:4] == ["input_ids", "sin", "cos", "mask"]
    assert len(g.inputs) == 4 + 2 * CFG.layers and len(g.outputs) == 1 + 2 * CFG.layers
    assert isinstance(g.value("model.layers.1.mlp.down_proj.weight").data, LazyArray)
    lm_head = g.op("lm_head")
    assert lm_head.operands[1] is g.value("model.embed_tokens.weight")  # tied
    q = load_graph(paths["w8a16"])
    for name in ("past_key.0", "present_value.1"):
        v = q.value(name)
        assert v.dtype == np.uint8 and v.quant.zero_point == (128,)
    w4 = load_graph(paths["w4a16"]).value("model.layers.0.mlp.up_proj.weight")
    assert w4.dtype == np.int8 and w4.quant.bitwidth == 4 and w4.quant.block_size == 32
    assert -8 <= int(np.asarray(w4.data).min()) and int(np.asarray(w4.data).max()) <= 7


def test_float_graph_computes_what_transformers_qwen2_computes(built):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from safetensors.numpy import load_file

    out, paths = built
    g = load_graph(paths["float"])
    inputs = _inputs(paths["float"])
    ours = run_graph(g, inputs, {"mllm": MLLM_KERNELS})

    config = transformers.Qwen2Config(vocab_size=CFG.vocab, hidden_size=CFG.hidden,
                                      intermediate_size=CFG.intermediate, num_hidden_layers=CFG.layers,
                                      num_attention_heads=CFG.heads, num_key_value_heads=CFG.kv_heads,
                                      rms_norm_eps=CFG.eps, rope_theta=CFG.theta, tie_word_embeddings=True,
                                      max_position_embeddings=256, attn_implementation="eager")
    model = transformers.Qwen2ForCausalLM(config).eval()
    state = {}
    for shard in sorted(out.glob(f"{CFG.name}-model-*.safetensors")):
        state.update({k: torch.from_numpy(v) for k, v in load_file(str(shard)).items()})
    state["lm_head.weight"] = state["model.embed_tokens.weight"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k.endswith("rotary_emb.inv_freq") for k in missing)
    cache = transformers.DynamicCache()
    for i in range(CFG.layers):
        cache.update(torch.from_numpy(inputs[f"past_key.{i}"]), torch.from_numpy(inputs[f"past_value.{i}"]), i)
    ids = torch.from_numpy(inputs["input_ids"].astype(np.int64))
    pos = torch.arange(CFG.past, CFG.past + CFG.seq)[None]
    with torch.no_grad():
        res = model(input_ids=ids, position_ids=pos, past_key_values=cache, use_cache=True)
    np.testing.assert_allclose(ours["logits"], res.logits.numpy(), atol=2e-4, rtol=1e-3)
    kv = res.past_key_values
    for i in range(CFG.layers):
        k, v = (kv.layers[i].keys, kv.layers[i].values) if hasattr(kv, "layers") else kv[i]
        np.testing.assert_allclose(ours[f"present_key.{i}"], k[:, :, CFG.past:].numpy(), atol=1e-5, rtol=1e-4)
        np.testing.assert_allclose(ours[f"present_value.{i}"], v[:, :, CFG.past:].numpy(), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("mode", ["w8a16", "w4a16"])
def test_quantized_llm_lowers_for_htp_and_stays_close(built, mode):
    _, paths = built
    rules = qlower.load_rules(packs=["mllm"])
    res = qlower.lower(load_graph(paths[mode]), rules, backend="htp")
    res.raise_for_errors()
    assert res.qnn_op_counts()["FullyConnected"] == 7 * CFG.layers + 1
    verification = qlower.api.verify(load_graph(paths[mode]), res, rules, inputs=_inputs(paths[mode]))
    worst = max(o.relative for o in verification.outputs)
    assert worst < 0.02 and verification.passed, verification.summary()


@pytest.mark.parametrize("mode", ["float", "w4a16"])
def test_artifacts_of_the_converted_table_are_those_of_its_object_view(built, mode):
    """What conversion knows and hands to the writers (the tensors no op produces) changes no byte: the
    artifacts written from the table are those written from the table of its `QnnGraph`."""
    from qlower.qnn import emit_cpp, emit_json
    from qlower.qnn.table import table_of

    _, paths = built
    res = qlower.lower(load_graph(paths[mode]), qlower.load_rules(packs=["mllm"]), backend="htp")
    res.raise_for_errors()
    again = table_of(res.table.graph())
    assert res.table.unproduced is not None and again.unproduced is None
    assert emit_cpp.render(res.table) == emit_cpp.render(again)
    assert emit_json.dumps(res.table) == emit_json.dumps(again)
