"""Write a small Hugging Face checkpoint with transformers' own `save_pretrained` (random weights from
a fixed seed, no download), and calibration data for it: what a user starting from a float model has.

    python examples/make_checkpoint.py OUTDIR [--family qwen3|qwen2|llama] [--dtype bfloat16|float32]

Writes OUTDIR/<family>_demo/ (config.json, model.safetensors) and OUTDIR/<family>_demo_calibration.npz
(`input_ids` [N, T]: N token sequences that `qlower quantize` prefills chunk by chunk).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

SHAPE = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=2048, max_position_embeddings=1024)


def make(outdir: Path, family: str = "qwen3", dtype: str = "bfloat16", seed: int = 28,
         sequences: int = 2, tokens: int = 128) -> tuple[Path, Path]:
    import torch
    import transformers

    torch.manual_seed(seed)
    if family == "qwen3":
        cfg = transformers.Qwen3Config(**SHAPE, head_dim=64, tie_word_embeddings=True)
    elif family == "qwen2":
        cfg = transformers.Qwen2Config(**SHAPE, tie_word_embeddings=True)
    else:
        cfg = transformers.LlamaConfig(**SHAPE, tie_word_embeddings=False, rope_parameters={
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 256})
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():  # an untrained model's norms are all ones; give them some spread
        for name, p in model.named_parameters():
            if "norm" in name:
                p.mul_(1 + 0.2 * torch.randn_like(p))
    path = outdir / f"{family}_demo"
    model.to(getattr(torch, dtype)).save_pretrained(path)
    ids = np.random.default_rng(seed).integers(0, cfg.vocab_size, size=(sequences, tokens)).astype(np.int32)
    calib = outdir / f"{family}_demo_calibration.npz"
    np.savez(calib, input_ids=ids)
    return path, calib


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("outdir")
    ap.add_argument("--family", choices=("qwen3", "qwen2", "llama"), default="qwen3")
    ap.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16")
    args = ap.parse_args(argv)
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    path, calib = make(out, args.family, args.dtype)
    print(f"wrote {path} and {calib}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
