"""Benchmark: `qlower.qnn.artifacts.save` on a lowered workload graph, per op.

    PYTHONPATH=. python bench/bench_artifacts.py bench/cache/w25000.json bench/cache/art25000 [--repeat 3]

Loads the graph (make one with `bench/gen_workload.py OUT.json --blocks B`),
lowers it for the cpu backend with the `mllm` pack, then times `save` alone:
process CPU time (user + system) and wall time per QNN op, the sizes of the
three files, and memory. Before each timed save the graph's earlier
artifacts in `outdir` are deleted (outside the timing), so every run writes
into the same state. The machine may be shared: CPU time is the number to
compare, wall time also includes waiting for the disk (`save` fsyncs).

Memory: `ru_maxrss` after lowering is the process peak so far. On Linux the
peak is then reset just before each save (/proc/self/clear_refs), so the
save's own peak above the RSS it started with is printed; elsewhere
`ru_maxrss` after the saves is printed instead.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path


def _maxrss_mib() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def _proc_status(key: str) -> float | None:
    """VmRSS / VmHWM in MiB, where /proc has them."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        return True
    except OSError:
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graph", type=Path, help="workload graph (bench/gen_workload.py output)")
    ap.add_argument("outdir", type=Path, help="directory to write the artifacts into")
    ap.add_argument("--repeat", type=int, default=1, help="time the save this many times; report each and the best")
    a = ap.parse_args()

    from qlower.api import load_rules, lower
    from qlower.graph.io import load_graph
    from qlower.qnn import artifacts

    t0 = time.perf_counter()
    rules = load_rules(packs=["mllm"])
    g = load_graph(a.graph)
    r = lower(g, rules, "cpu")
    qnn = r.qnn
    n = len(qnn.ops)
    print(f"{a.graph}: {n} ops, {len(qnn.tensors)} tensors (load + lower {time.perf_counter() - t0:.1f}s)")
    print(f"peak RSS through lowering (ru_maxrss): {_maxrss_mib():.0f} MiB")
    any_reset = False
    best: tuple[float, float] | None = None
    for _ in range(max(1, a.repeat)):
        for name in artifacts.artifact_names(qnn.name):
            (a.outdir / name).unlink(missing_ok=True)
        rss0 = _proc_status("VmRSS")
        reset = _reset_peak()
        any_reset = any_reset or reset
        u0 = resource.getrusage(resource.RUSAGE_SELF)
        c0, w0 = time.process_time(), time.perf_counter()
        paths = artifacts.save(qnn, a.outdir)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        u1 = resource.getrusage(resource.RUSAGE_SELF)
        user, system = u1.ru_utime - u0.ru_utime, u1.ru_stime - u0.ru_stime
        line = (f"save: cpu {cpu:.2f}s = {cpu / n * 1e6:.2f} µs/op (user {user / n * 1e6:.2f}, "
                f"sys {system / n * 1e6:.2f}), wall {wall:.2f}s = {wall / n * 1e6:.2f} µs/op")
        hwm = _proc_status("VmHWM")
        if reset and rss0 is not None and hwm is not None:
            line += f"; save's peak {hwm - rss0:+.0f} MiB over {rss0:.0f} MiB"
        print(line)
        if best is None or cpu < best[0]:
            best = (cpu, wall)
    assert best is not None
    sizes = ", ".join(f"{p.name} {p.stat().st_size / 2**20:.1f} MiB" for p in paths)
    print(f"files: {sizes}")
    if a.repeat > 1:
        print(f"best: cpu {best[0] / n * 1e6:.2f} µs/op, wall {best[1] / n * 1e6:.2f} µs/op")
    if not any_reset:
        print(f"peak RSS after saving (ru_maxrss): {_maxrss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
