"""Benchmark: `qlower lower` on the workload W(B), per phase, per op.

    python bench/run_bench.py [--sizes 1000,10000,100000,1000000] [--onnxscript] [--runs R]
    python bench/run_bench.py --sizes 1000000 --runs 3     # the 1M-op figure (issue 13: <= 20 s)
    python bench/run_bench.py --sizes 1000000 --runs 3 --baseline ../qlower-old   # and another checkout's

For each N = 4·B it generates the graph (cached in bench/cache/), runs
`qlower lower --timings` in a fresh process, and prints the phase times, the
per-op cost of the `lower` phase, the process's wall and CPU time (user + sys,
its children included: the `.cpp` writer is one) and its peak memory. On a
shared machine wall time depends on the neighbours; CPU time much less so.
Before each run the bench flushes dirty page-cache data (`os.sync`), so that no
earlier write-back (the generated graph, other programs' files) competes with
the run; the artifacts themselves go out through O_DIRECT where the filesystem
takes it. With --baseline DIR (a checkout of another qlower revision) each run
of this checkout is followed by one of that checkout's on the same graph (its
code, this interpreter), and a line gives the ratio of the wall times. With
--onnxscript (needs `pip install onnxscript onnx-ir`), the comparable
onnxscript rewrite (Mul(h, Sigmoid(h)) → one fused op, MatMul → one custom op,
to fixpoint) and an onnx_ir load-rewrite-save process are timed on the same
workload exported as ONNX.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORK = HERE / "cache"


def _run(cmd: list[str], checkout: Path | None = None) -> tuple[float, float, float]:
    """Wall time, CPU time (user + sys, with its own children) and peak RSS (MiB) of a child process
    (run with `checkout`'s qlower first on the path, when given): `os.wait4` gives this process's
    own figures, not the maximum over every child so far."""
    env = None
    if checkout is not None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(checkout),
                                                                          os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=checkout)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"failed: {' '.join(cmd)}\n{err.read().decode(errors='replace')[-3000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def bench_qlower(n: int, checkout: Path | None = None) -> dict:
    from gen_workload import write  # noqa: E402

    blocks = n // 4
    graph = WORK / f"w{blocks}.json"
    if not graph.exists():
        write(graph, blocks)
    timings = WORK / f"w{blocks}.timings.json"
    out = WORK / f"out{blocks}"
    cmd = [sys.executable, "-m", "qlower.cli.main", "lower", str(graph), "--backend", "cpu", "-o", str(out),
           "--timings", str(timings), "-q"]
    os.sync()
    wall, cpu, peak = _run(cmd, checkout)
    t = json.loads(timings.read_text())
    t["process_wall"] = wall
    t["process_cpu"] = cpu
    t["peak_rss_mib"] = peak
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


def _line(n: int, t: dict) -> str:
    return (f"N={n:>8}: load {t['load']:.2f}s  lower {t['lower']:.2f}s ({t['lower'] / n * 1e6:.2f} µs/op)  "
            f"validate {t['validate']:.2f}s  emit {t['emit']:.2f}s  total {t['total']:.2f}s  "
            f"process {t['process_wall']:.2f}s wall, {t['process_cpu']:.2f}s cpu  "
            f"peak {t['peak_rss_mib']:.0f} MiB  ops_out {t['ops_out']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000,1000000")
    ap.add_argument("--onnxscript", action="store_true")
    ap.add_argument("--runs", type=int, default=1, help="runs per size (each line is one run)")
    ap.add_argument("--baseline", type=Path, help="a checkout of another qlower revision, run side by side")
    a = ap.parse_args()
    if a.baseline is not None and not (a.baseline / "qlower" / "__init__.py").is_file():
        ap.error(f"--baseline {a.baseline}: not a qlower checkout (no qlower/__init__.py)")
    WORK.mkdir(exist_ok=True)
    sys.path.insert(0, str(HERE))
    rows = []
    for n in [int(s) for s in a.sizes.split(",") for _ in range(a.runs)]:
        t = bench_qlower(n)
        line = _line(n, t)
        if a.baseline is not None:
            b = bench_qlower(n, a.baseline.resolve())
            line += (f"\n  baseline {_line(n, b)}\n  ratio: this/baseline wall "
                     f"{t['process_wall'] / b['process_wall']:.2f}, cpu {t['process_cpu'] / b['process_cpu']:.2f}")
            rows.append({"n": n, "baseline": str(a.baseline), **b})
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
