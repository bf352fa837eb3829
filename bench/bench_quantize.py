"""Scale of the float-checkpoint path (outside the default test run): a Qwen3-1.7B-shaped (or
Qwen2.5-7B-shaped) BF16 checkpoint with random weights, built locally, quantized by `qlower quantize`
to w4a16 (LPBQ, blocks of 32) with the KV cache in uint8 on >= 4 calibration chunks, then lowered for
HTP; peak RSS and wall time of each, side by side with the I/O floors.

    python bench/bench_quantize.py [--config 1.7b|7b|small] [--cache DIR] [--chunks 4] [--verify]

Floors, measured in this process's children the same way:
  quantize  read every BF16 weight once, write it as int8 to one file
  lower     read every quantized weight once, write it to one file (what the .bin needs at least)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

CONFIGS = {
    "1.7b": dict(model_type="qwen3", num_hidden_layers=28, hidden_size=2048, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, intermediate_size=6144, vocab_size=151936,
                 tie_word_embeddings=True),
    "7b": dict(model_type="qwen2", num_hidden_layers=28, hidden_size=3584, num_attention_heads=28,
               num_key_value_heads=4, head_dim=128, intermediate_size=18944, vocab_size=152064,
               tie_word_embeddings=False),
    "small": dict(model_type="qwen3", num_hidden_layers=4, hidden_size=512, num_attention_heads=8,
                  num_key_value_heads=4, head_dim=64, intermediate_size=1536, vocab_size=8192,
                  tie_word_embeddings=True),
}
SHARD_BYTES = 2 << 30


def tensors(cfg: dict) -> list[tuple[str, tuple[int, ...], str]]:
    """Every tensor of the checkpoint as transformers names it: (key, shape, kind)."""
    d, hd, h, kv = cfg["hidden_size"], cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    out = [("model.embed_tokens.weight", (cfg["vocab_size"], d), "w")]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        out += [(f"{p}.input_layernorm.weight", (d,), "n"), (f"{p}.post_attention_layernorm.weight", (d,), "n")]
        for name, rows in (("q", h * hd), ("k", kv * hd), ("v", kv * hd)):
            out.append((f"{p}.self_attn.{name}_proj.weight", (rows, d), "w"))
            if cfg["model_type"] == "qwen2":
                out.append((f"{p}.self_attn.{name}_proj.bias", (rows,), "b"))
        if cfg["model_type"] == "qwen3":
            out += [(f"{p}.self_attn.q_norm.weight", (hd,), "n"), (f"{p}.self_attn.k_norm.weight", (hd,), "n")]
        out += [(f"{p}.self_attn.o_proj.weight", (d, h * hd), "w"),
                (f"{p}.mlp.gate_proj.weight", (cfg["intermediate_size"], d), "w"),
                (f"{p}.mlp.up_proj.weight", (cfg["intermediate_size"], d), "w"),
                (f"{p}.mlp.down_proj.weight", (d, cfg["intermediate_size"]), "w")]
    out.append(("model.norm.weight", (d,), "n"))
    if not cfg["tie_word_embeddings"]:
        out.append(("lm_head.weight", (cfg["vocab_size"], d), "w"))
    return out


def _bf16(x: np.ndarray) -> np.ndarray:
    """float32 → bfloat16 bits, rounding to nearest even."""
    b = x.view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def write_checkpoint(path: Path, cfg: dict, seed: int = 17) -> None:
    """config.json + BF16 safetensors shards with an index, written a tensor (and a slice of rows) at a
    time from a fixed seed: no model is ever held whole."""
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    groups, cur, size = [], [], 0
    for t in tensors(cfg):
        n = math.prod(t[1]) * 2
        if cur and size + n > SHARD_BYTES:
            groups.append(cur)
            cur, size = [], 0
        cur.append(t)
        size += n
    groups.append(cur)
    weight_map = {}
    for k, group in enumerate(groups):
        name = f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors"
        header, offset = {}, 0
        for key, shape, _ in group:
            n = math.prod(shape) * 2
            header[key] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
            offset += n
            weight_map[key] = name
        raw = json.dumps(header).encode()
        raw += b" " * (-len(raw) % 8)
        with open(path / f"{name}.part", "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            for key, shape, kind in group:
                rows = shape[0]
                step = max(1, (64 << 20) // max(1, math.prod(shape[1:]) * 4))
                for i in range(0, rows, step):
                    part = rng.standard_normal((min(rows, i + step) - i, *shape[1:]), dtype=np.float32)
                    part *= np.float32(0.02 if kind != "n" else 0.2)
                    if kind == "n":
                        part += np.float32(1.0)
                    f.write(_bf16(part).tobytes())
        (path / f"{name}.part").replace(path / name)
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    doc = {"architectures": ["Qwen3ForCausalLM" if cfg["model_type"] == "qwen3" else "Qwen2ForCausalLM"],
           "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "torch_dtype": "bfloat16",
           "max_position_embeddings": 32768, **cfg}
    (path / "config.json").write_text(json.dumps(doc, indent=1))


def run_measured(cmd: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """Like `run`, with the child's own peak RSS from os.wait4."""
    os.sync()
    t0 = time.perf_counter()
    with open(os.devnull, "w") as null:
        log = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_quantize_{os.getpid()}.log"
        with open(log, "w") as f:
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=null, env=env)
            _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    text = log.read_text()
    log.unlink()
    if status:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{text}")
    return wall, usage.ru_maxrss / 2**20, text


FLOOR = r'''
import sys, json, numpy as np
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from qlower.graph.lazy import SafetensorsSource, safetensors_header
mode, out, files = sys.argv[2], sys.argv[3], sys.argv[4:]
total = 0
with open(out, "wb") as f:
    for file in files:
        for key, (dtype, shape) in safetensors_header(Path(file)).items():
            src = SafetensorsSource(Path(file), key, bf16=dtype == "bfloat16")
            step = max(1, (32 << 20) // max(1, int(np.prod(shape[1:])) * 4))
            for i in range(0, shape[0] if shape else 1, step):
                part = src.rows(i, min(shape[0], i + step)) if shape else src.read()
                if mode == "quantize":  # what any quantizer must at least do: scale, round, store int8
                    part = np.clip(np.rint(part * 50.0), -127, 127).astype(np.int8)
                f.write(memoryview(np.ascontiguousarray(part)).cast("B"))
                total += part.nbytes
print(f"wrote {total / 2**30:.2f} GiB")
'''


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="1.7b")
    ap.add_argument("--cache", default=str(ROOT / "bench" / "cache" / "quantize"))
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--chunk-size", type=int, default=32)
    ap.add_argument("--context-length", type=int, default=1024)
    ap.add_argument("--verify", action="store_true", help="also lower with --verify (needs the float model in RAM)")
    args = ap.parse_args(argv)
    cfg = CONFIGS[args.config]
    cache = Path(args.cache)
    ckpt = cache / f"qwen_{args.config}_bf16"
    py = sys.executable
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if not (ckpt / "model.safetensors.index.json").exists():
        t0 = time.perf_counter()
        write_checkpoint(ckpt, cfg)
        print(f"built {ckpt} in {time.perf_counter() - t0:.0f} s", flush=True)
    ckpt_bytes = sum(p.stat().st_size for p in ckpt.glob("*.safetensors"))
    params = sum(math.prod(s) for _, s, _ in tensors(cfg))
    print(f"checkpoint: {params / 1e9:.2f} B params, {ckpt_bytes / 2**30:.2f} GiB BF16", flush=True)
    calib = cache / f"calib_{args.config}.npz"
    tokens = args.chunks * args.chunk_size
    np.savez(calib, input_ids=np.random.default_rng(3).integers(0, cfg["vocab_size"], size=(1, tokens)))
    work = cache / f"w4a16_{args.config}"
    work.mkdir(parents=True, exist_ok=True)
    q = work / "q.json"
    timings = work / "quantize_timings.json"
    wall_q, rss_q, _ = run_measured([py, "-m", "qlower.cli.main", "quantize", str(ckpt), "--calibration", str(calib),
                                     "-o", str(q), "--weights-bitwidth", "4", "--block-size", "32", "--kv-bitwidth",
                                     "8", "--chunk-size", str(args.chunk_size), "--context-length",
                                     str(args.context_length), "--timings", str(timings), "-q"], env)
    t = json.loads(timings.read_text())
    print(f"quantize: {wall_q:.1f} s wall, peak RSS {rss_q:.2f} GiB; load {t['load']:.1f} s, weights "
          f"{t['weights']:.1f} s, calibration {sum(t['calibration']):.1f} s over {len(t['calibration'])} chunks "
          f"({', '.join(f'{x:.1f}' for x in t['calibration'])} s per chunk of {args.chunk_size} tokens), "
          f"activations {t['activations']:.1f} s, save {t['save']:.1f} s", flush=True)
    shards = sorted(str(p) for p in ckpt.glob("*.safetensors"))
    wall_fq, rss_fq, _ = run_measured([py, "-c", FLOOR, str(ROOT), "quantize", str(work / "floor_q.bin"), *shards], env)
    print(f"quantize I/O floor (read BF16 once, write int8 once): {wall_fq:.1f} s, peak RSS {rss_fq:.2f} GiB; "
          f"weights phase / floor = {t['weights'] / wall_fq:.2f}", flush=True)
    (work / "floor_q.bin").unlink()
    out = work / "htp"
    wall_l, rss_l, text = run_measured([py, "-m", "qlower.cli.main", "lower", str(q), "--backend", "htp", "-o",
                                        str(out), "--timings", str(work / "lower_timings.json"), "-q"], env)
    qshards = sorted(str(p) for p in work.glob("q-*.safetensors"))
    wall_fl, rss_fl, _ = run_measured([py, "-c", FLOOR, str(ROOT), "copy", str(work / "floor_l.bin"), *qshards], env)
    (work / "floor_l.bin").unlink()
    binsize = (out / "q.bin").stat().st_size
    print(f"lower for HTP: {wall_l:.1f} s wall, peak RSS {rss_l:.2f} GiB, .bin {binsize / 2**30:.2f} GiB; "
          f"I/O floor (read every quantized weight once, write one file) {wall_fl:.1f} s; "
          f"ratio {wall_l / wall_fl:.2f}", flush=True)
    if args.verify:
        wall_v, rss_v, text = run_measured([py, "-m", "qlower.cli.main", "lower", str(q), "--backend", "htp", "-o",
                                            str(work / "htp_verified"), "--verify"], env)
        line = next((x for x in text.splitlines() if "verification" in x), text[-500:])
        print(f"lower --verify: {wall_v:.1f} s, peak RSS {rss_v:.2f} GiB: {line.strip()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
