"""Benchmark: lower a whole Qwen2.5-sized LLM for HTP; peak RSS and wall time against the I/O floor.

    python bench/bench_model.py [--configs 0.5b,1.5b] [--modes float,w8a16,w4a16] [--cache DIR]

For each config (examples/build_qwen2.py: 0.5b = 24 layers, hidden 896; 1.5b = 28 layers, hidden
1536, intermediate 8960, 12 heads, 2 KV heads, vocab 151936) the model is built once from a fixed
seed into safetensors shards under the cache folder (default bench/cache/models, not committed;
~6 GB float32 for 1.5b plus ~1.6 GB per quantized mode), with fixed activation ranges (no
calibration run). Quantized graphs keep their per-channel/block scales in `<name>.quant.npz` (by
reference, see docs/graph-format.md), not as JSON numbers; a cache built before that still loads
(inline lists), but measures the slower, larger load — delete its `*_w4a16.json` to rebuild.
Then, each in a fresh process under `/usr/bin/time -v`:

  floor   bench/io_floor.py: read every float32 weight once, convert to float16, write one file
  float   qlower lower MODEL.json --backend htp (float16 on HTP) -o OUT -q
  w8a16   the same graph with int8 per-channel weights
  w4a16   the same graph with 4-bit LPBQ weights (blocks of 64)

and prints peak RSS (max resident set size), wall time and the ratio of each wall time to the
floor's. Results also go to CACHE/results.json.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "examples"))


def timed(cmd: list[str]) -> dict:
    """Run under /usr/bin/time -v; wall seconds and peak RSS in MiB."""
    proc = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    err = proc.stderr
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", err).group(1)) / 1024
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", err)
    h, m, s = wall.groups()
    return {"wall_s": int(h or 0) * 3600 + int(m) * 60 + float(s), "peak_rss_mib": rss}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--configs", default="0.5b,1.5b")
    ap.add_argument("--modes", default="float,w8a16,w4a16")
    ap.add_argument("--cache", type=Path, default=HERE / "cache" / "models")
    args = ap.parse_args(argv)
    if not Path("/usr/bin/time").exists():
        raise SystemExit("needs GNU time at /usr/bin/time (apt-get install time)")
    from build_qwen2 import CONFIGS, build

    modes = tuple(m for m in args.modes.split(",") if m)
    results = {}
    for name in args.configs.split(","):
        cfg = CONFIGS[name]
        folder = args.cache / cfg.name
        want = {m: folder / (f"{cfg.name}.json" if m == "float" else f"{cfg.name}_{m}.json")
                for m in dict.fromkeys(("float", *modes))}
        missing = tuple(m for m, p in want.items() if not p.exists())
        if missing:
            print(f"building {cfg.name} ({', '.join(missing)}) in {folder} ...", flush=True)
            build(folder, cfg, tuple(dict.fromkeys(("float", *missing))), calibrated=False, verbose=True)
        shards = sorted(str(p) for p in folder.glob(f"{cfg.name}-model-*.safetensors"))
        row = {"floor": timed([sys.executable, str(HERE / "io_floor.py"), str(folder / "floor.bin"), *shards])}
        (folder / "floor.bin").unlink()
        for m in modes:
            out = folder / f"out_{m}"
            row[m] = timed([sys.executable, "-m", "qlower.cli.main", "lower", str(want[m]), "--backend", "htp",
                            "-o", str(out), "-q"])
            row[m]["bin_gib"] = sum(p.stat().st_size for p in out.glob("*.bin")) / 2**30
        results[cfg.name] = row
        floor = row["floor"]["wall_s"]
        print(f"\n{cfg.name}: {cfg.layers} layers, hidden {cfg.hidden}, intermediate {cfg.intermediate}, "
              f"vocab {cfg.vocab}")
        print(f"  {'run':8} {'peak RSS':>10} {'wall':>8} {'× floor':>8}")
        for k, r in row.items():
            print(f"  {k:8} {r['peak_rss_mib'] / 1024:7.2f} GiB {r['wall_s']:7.1f}s {r['wall_s'] / floor:7.2f}×",
                  flush=True)
        for m in modes:
            for p in (folder / f"out_{m}").glob("*"):
                p.unlink()
    args.cache.mkdir(parents=True, exist_ok=True)
    (args.cache / "results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
