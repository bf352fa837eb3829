"""Benchmark: `qlower.qnn.artifacts.save` on a lowered workload graph, per op.

    PYTHONPATH=. python bench/bench_artifacts.py bench/work/w25000.json bench/work/art25000

Loads the graph (make one with `bench/gen_workload.py`), lowers it for the
cpu backend with the `mllm` pack, then times `save` alone: process CPU time
and wall time per QNN op, the sizes of the three files and the peak RSS of
the process before and after the save (the lowering's own peak is included
in the first number, so the save's extra memory is the difference).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path


def _peak_mib() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graph", type=Path, help="workload graph (bench/gen_workload.py output)")
    ap.add_argument("outdir", type=Path, help="directory to write the artifacts into")
    ap.add_argument("--repeat", type=int, default=1, help="time the save this many times, report the best")
    a = ap.parse_args()

    from qlower.api import load_rules, lower
    from qlower.graph.io import load_graph
    from qlower.qnn import artifacts

    rules = load_rules(packs=["mllm"])
    g = load_graph(a.graph)
    r = lower(g, rules, "cpu")
    qnn = r.qnn
    n = len(qnn.ops)
    peak_before = _peak_mib()
    best: tuple[float, float] | None = None
    for _ in range(max(1, a.repeat)):
        c0, w0 = time.process_time(), time.perf_counter()
        paths = artifacts.save(qnn, a.outdir)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        if best is None or cpu < best[0]:
            best = (cpu, wall)
    assert best is not None
    cpu, wall = best
    peak_after = _peak_mib()
    sizes = ", ".join(f"{p.name} {p.stat().st_size / 2**20:.1f} MiB" for p in paths)
    print(f"ops {n}, tensors {len(qnn.tensors)}")
    print(f"save: cpu {cpu:.2f}s ({cpu / n * 1e6:.2f} µs/op), wall {wall:.2f}s ({wall / n * 1e6:.2f} µs/op)")
    print(f"files: {sizes}")
    print(f"peak RSS: {peak_before:.0f} MiB before save, {peak_after:.0f} MiB after "
          f"(save added {peak_after - peak_before:.0f} MiB)")


if __name__ == "__main__":
    main()
