"""Benchmark: CPU time of the rewrite engine alone (`Engine.run`) on the workload W(B), in process.

    python bench/bench_engine_cpu.py [--ops 100000] [--repeat 5]

`bench/run_bench.py` times `qlower lower` in a fresh process by the wall clock, which on a shared
machine moves by ±30% from run to run. This loads the graph anew for each repeat, runs only the
engine with the garbage collector off, and reports the smallest process CPU time: a figure that
two checkouts can be compared on (run each a few times, alternating).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=100_000, help="workload size N = 4·B ops")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from gen_workload import write  # noqa: E402

    from qlower.api import load_model, load_rules

    blocks = a.ops // 4
    path = HERE / "cache" / f"w{blocks}.json"
    if not path.exists():
        path.parent.mkdir(exist_ok=True)
        write(path, blocks)
    engine = load_rules(packs=["mllm"]).engine("cpu")
    best = float("inf")
    for _ in range(a.repeat):
        graph = load_model(path)
        gc.collect()
        gc.disable()
        t = time.process_time()
        engine.run(graph)
        best = min(best, time.process_time() - t)
        gc.enable()
    n = blocks * 4
    print(f"N={n}: Engine.run min CPU {best:.3f}s over {a.repeat} runs = {best / n * 1e6:.2f} µs/op")


if __name__ == "__main__":
    main()
