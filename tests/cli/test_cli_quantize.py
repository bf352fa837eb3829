"""`qlower quantize` on a Hugging Face checkpoint written by transformers' save_pretrained, then
`qlower lower --verify` on what it wrote: the user's path from a float checkpoint to HTP."""

from __future__ import annotations

import json

import numpy as np
import pytest

from qlower.cli.main import main

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

OPTS = ["--chunk-size", "8", "--context-length", "24"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    torch.manual_seed(5)
    cfg = transformers.Qwen3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, head_dim=32, vocab_size=160, tie_word_embeddings=True)
    transformers.AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).save_pretrained(root / "qwen3")
    np.savez(root / "calib.npz", input_ids=np.random.default_rng(0).integers(0, 160, size=(2, 24)))
    return root


@pytest.mark.parametrize("mode", [["--weights-bitwidth", "4", "--block-size", "16"], []], ids=["w4a16", "w8a16"])
def test_quantize_then_lower_verified(checkpoint, tmp_path, mode, capsys):
    q = tmp_path / "q.json"
    assert main(["quantize", str(checkpoint / "qwen3"), "--calibration", str(checkpoint / "calib.npz"),
                 "-o", str(q), *OPTS, *mode]) == 0
    doc = json.loads(q.read_text())
    t = doc["tensors"]
    assert t["past_key.0"]["dtype"] == "uint8" and t["past_key.0"]["quant"]["zero_point"] == 128
    assert t["present_key.0"]["quant"] == t["past_key.0"]["quant"]  # one encoding for the cache
    w = t["model.layers.0.mlp.up_proj.weight"]
    assert w["dtype"] == "int8" and "safetensors" in w["data"]
    if mode:
        assert w["quant"]["bitwidth"] == 4 and w["quant"]["block_size"] == 16
    assert t["logits"]["dtype"] == "uint16" and t["input_ids"]["dtype"] == "int32"
    assert (tmp_path / "q_inputs.npz").exists()
    out = tmp_path / "out"
    assert main(["lower", str(q), "--backend", "htp", "-o", str(out), "--verify", "-q"]) == 0, capsys.readouterr().err
    assert (out / "q.bin").stat().st_size > 0


def test_quantize_errors(checkpoint, tmp_path, capsys):
    ck, calib = str(checkpoint / "qwen3"), str(checkpoint / "calib.npz")
    assert main(["quantize", ck, "--calibration", str(tmp_path / "none.npz"), "-o", str(tmp_path / "q.json"),
                 *OPTS]) == 1
    assert "none.npz" in capsys.readouterr().err
    np.savez(tmp_path / "bad.npz", input_ids=np.zeros((1, 8), np.int32), sin=np.zeros((8, 32), np.float32))
    assert main(["quantize", ck, "--calibration", str(tmp_path / "bad.npz"), "-o", str(tmp_path / "q.json"),
                 *OPTS]) == 1
    err = capsys.readouterr().err
    assert "bad.npz" in err and "no array for graph input cos" in err
    np.savez(tmp_path / "long.npz", input_ids=np.zeros((1, 40), np.int32))
    assert main(["quantize", ck, "--calibration", str(tmp_path / "long.npz"), "-o", str(tmp_path / "q.json"),
                 *OPTS]) == 1
    assert "40 tokens" in capsys.readouterr().err
    assert main(["quantize", ck, "--calibration", calib, "-o", str(tmp_path / "q.json"), "--block-size", "16"]) == 2
    assert "--weights-bitwidth 4" in capsys.readouterr().err
    assert not (tmp_path / "q.json").exists()


@pytest.mark.parametrize("flag, value, name", [("--range-headroom", "3", "range_headroom"),
                                                ("--percentile-calibration-value", "200", "percentile")])
def test_an_option_out_of_its_range_is_a_usage_error(checkpoint, tmp_path, capsys, flag, value, name):
    ck, calib = str(checkpoint / "qwen3"), str(checkpoint / "calib.npz")
    assert main(["quantize", ck, "--calibration", calib, "-o", str(tmp_path / "q.json"), flag, value, *OPTS]) == 2
    err = capsys.readouterr().err
    assert name in err and "internal error" not in err and "Traceback" not in err
    assert not (tmp_path / "q.json").exists()
