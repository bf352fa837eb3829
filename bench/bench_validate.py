"""Benchmark: Graph → QNN conversion and QNN validation on the workload W(B), per op.

    python bench/bench_validate.py [--blocks 25000] [--backend cpu] [--repeat 3]

Lowers the workload graph (4·B ops: chains of MatMul / Sigmoid /
ElementWiseMultiply / ElementWiseAdd with B small static weights, cached in
bench/work/) once with the mllm rules, then times `qlower.qnn.convert.to_qnn`
and `qlower.qnn.validate.validate_graph` separately. Process CPU time is the
headline figure (the machine may be shared); wall time is shown alongside.
The best of --repeat runs is reported.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORK = HERE / "work"


def _timed(fn):
    """(result, cpu seconds, wall seconds) of fn(); the collector is paused as in a batch run."""
    gc.collect()
    c, w = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c, time.perf_counter() - w


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=25000)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from gen_workload import write

    from qlower.api import load_rules, lower
    from qlower.graph.io import load_graph
    from qlower.qnn.convert import to_qnn
    from qlower.qnn.validate import validate_graph

    WORK.mkdir(exist_ok=True)
    path = WORK / f"w{a.blocks}.json"
    if not path.exists():
        write(path, a.blocks)
    rules = load_rules(packs=["mllm"])
    graph = lower(load_graph(str(path)), rules, a.backend, validate=False).graph
    n = len(graph.ops)

    conv, val = [], []
    diags = []
    for _ in range(max(1, a.repeat)):
        qg, c, w = _timed(lambda: to_qnn(graph, rules.registry))
        conv.append((c, w))
        diags, c, w = _timed(lambda: validate_graph(qg, rules.registry, a.backend))
        val.append((c, w))
        del qg
    errors = sum(d.is_error for d in diags)

    def line(label: str, runs: list[tuple[float, float]]) -> str:
        c, w = min(runs)
        return f"{label:<10} {c / n * 1e6:7.2f} µs/op CPU  {w / n * 1e6:7.2f} µs/op wall  ({c:.2f}s CPU, {w:.2f}s wall)"

    print(f"N={n} QNN ops, backend {a.backend}, best of {len(conv)}; {len(diags)} diagnostics ({errors} errors)")
    print(line("convert", conv))
    print(line("validate", val))
    both = [(c1 + c2, w1 + w2) for (c1, w1), (c2, w2) in zip(conv, val)]
    print(line("total", both))


if __name__ == "__main__":
    main()
