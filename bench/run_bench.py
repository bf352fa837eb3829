"""Benchmark: `qlower lower` on the workload W(B), per phase, per op.

    python bench/run_bench.py [--sizes 1000,10000,100000,1000000] [--onnxscript]

For each N = 4·B it generates the graph (cached in bench/cache/), runs
`qlower lower --timings` in a fresh process, and prints the phase times, the
per-op cost of the `lower` phase and the peak memory of the process. With
--onnxscript (needs `pip install onnxscript onnx-ir`), the comparable
onnxscript rewrite (Mul(h, Sigmoid(h)) → one fused op, MatMul → one custom op,
to fixpoint) and an onnx_ir load-rewrite-save process are timed on the same
workload exported as ONNX.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORK = HERE / "cache"


def _run(cmd: list[str]) -> tuple[float, float]:
    """Wall time and peak RSS (MiB) of a child process."""
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return wall, peak


def bench_qlower(n: int) -> dict:
    from gen_workload import write  # noqa: E402

    blocks = n // 4
    graph = WORK / f"w{blocks}.json"
    if not graph.exists():
        write(graph, blocks)
    timings = WORK / f"w{blocks}.timings.json"
    out = WORK / f"out{blocks}"
    cmd = [sys.executable, "-m", "qlower.cli.main", "lower", str(graph), "--backend", "cpu", "-o", str(out),
           "--timings", str(timings), "-q"]
    wall, peak = _run(cmd)
    t = json.loads(timings.read_text())
    t["process_wall"] = wall
    t["peak_rss_mib_max_so_far"] = peak
    return t


def bench_onnxscript(n: int) -> dict:
    sys.path.insert(0, str(HERE))
    from compare_onnxscript import rewrite_time  # noqa: E402
    from gen_workload import write_onnx

    blocks = n // 4
    model = WORK / f"w{blocks}.onnx"
    if not model.exists():
        write_onnx(model, blocks)
    return rewrite_time(model)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000,1000000")
    ap.add_argument("--onnxscript", action="store_true")
    a = ap.parse_args()
    WORK.mkdir(exist_ok=True)
    sys.path.insert(0, str(HERE))
    rows = []
    for n in [int(s) for s in a.sizes.split(",")]:
        t = bench_qlower(n)
        line = (f"N={n:>8}: load {t['load']:.2f}s  lower {t['lower']:.2f}s ({t['lower'] / n * 1e6:.2f} µs/op)  "
                f"validate {t['validate']:.2f}s  emit {t['emit']:.2f}s  total {t['total']:.2f}s  "
                f"process {t['process_wall']:.2f}s  ops_out {t['ops_out']}")
        if a.onnxscript:
            o = bench_onnxscript(n)
            line += (f"\n           onnxscript rewrite {o['rewrite']:.2f}s ({o['rewrite'] / n * 1e6:.1f} µs/op, "
                     f"{o['rewrite'] / max(t['lower'], 1e-9):.1f}× qlower's lower); onnx_ir load+rewrite+save "
                     f"{o['process']:.2f}s ({o['process'] / t['total']:.1f}× qlower's total)")
        print(line, flush=True)
        rows.append({"n": n, **t})
    (WORK / "results.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
