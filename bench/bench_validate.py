"""Benchmark: Graph → QNN conversion and QNN validation on the workload W(B), per op.

    python bench/bench_validate.py [--blocks 25000[,2500,...]] [--backend cpu] [--repeat 3]

Lowers the workload graph (4·B ops: chains of MatMul / Sigmoid /
ElementWiseMultiply / ElementWiseAdd with B small static weights, cached in
bench/cache/) once with the mllm rules, then times `qlower.qnn.convert.to_qnn`
and `qlower.qnn.validate.validate_graph` separately. Process CPU time is the
headline figure (the machine may be shared); wall time is shown alongside.
The best of --repeat runs (CPU and wall each) is reported; several --blocks sizes show whether the
cost per op stays flat (linear scaling).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORK = HERE / "cache"


def _timed(fn):
    """(result, cpu seconds, wall seconds) of fn(), starting from a collected heap; garbage
    collection triggered inside fn counts against it."""
    gc.collect()
    c, w = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c, time.perf_counter() - w


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", default="25000", help="comma-separated workload sizes B (N = 4·B ops)")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from gen_workload import write

    from qlower.api import load_rules

    rules = load_rules(packs=["mllm"])
    WORK.mkdir(exist_ok=True)
    for blocks in [int(b) for b in a.blocks.split(",")]:
        path = WORK / f"w{blocks}.json"
        if not path.exists():
            write(path, blocks)
        bench(path, rules, a.backend, a.repeat)


def bench(path: Path, rules, backend: str, repeat: int) -> None:
    from qlower.api import lower
    from qlower.graph.io import load_graph
    from qlower.qnn.convert import to_qnn
    from qlower.qnn.validate import validate_graph

    graph = lower(load_graph(str(path)), rules, backend, validate=False).graph
    n = len(graph.ops)
    conv, val = [], []
    diags = []
    for _ in range(max(1, repeat)):
        qg, c, w = _timed(lambda: to_qnn(graph, rules.registry))
        conv.append((c, w))
        diags, c, w = _timed(lambda: validate_graph(qg, rules.registry, backend))
        val.append((c, w))
        qg = None  # freed before the next conversion
    errors = sum(d.is_error for d in diags)

    def line(label: str, runs: list[tuple[float, float]]) -> str:
        c, w = min(r[0] for r in runs), min(r[1] for r in runs)
        return f"  {label:<9} {c / n * 1e6:6.2f} µs/op CPU  {w / n * 1e6:6.2f} µs/op wall  ({c:.2f}s CPU, {w:.2f}s wall)"

    print(f"{path.name}: N={n} QNN ops, backend {backend}, best of {len(conv)}; "
          f"{len(diags)} diagnostics ({errors} errors)")
    print(line("convert", conv))
    print(line("validate", val))
    print(line("total", [(c1 + c2, w1 + w2) for (c1, w1), (c2, w2) in zip(conv, val)]))


if __name__ == "__main__":
    main()
