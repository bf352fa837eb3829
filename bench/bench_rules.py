"""Benchmark: parse and check 1,000 rules (the mllm pack's rules, renamed, repeated).

    python bench/bench_rules.py [--rules 1000]

Prints parse and check time for the whole set and per rule. The rules are the
shipped mllm pack's own (so their size and mix are realistic), renamed so that
names are unique; op declarations are included once.
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def corpus(n: int) -> str:
    pack = ROOT / "patterns" / "mllm"
    decls = (pack / "ops.qpat").read_text()
    rules = []
    for f in sorted(pack.glob("*.qpat")):
        if f.name == "ops.qpat":
            continue
        text = re.sub(r"(?m)^test .*?^}\n", "", f.read_text(), flags=re.S)
        rules += re.findall(r"(?ms)^rule .*?^}\n", text)
    out = [decls]
    i = 0
    while len(out) - 1 < n:
        r = rules[i % len(rules)]
        out.append(re.sub(r"^rule (\w+)", lambda m: f"rule {m.group(1)}_{i}", r, count=1))
        i += 1
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rules", type=int, default=1000)
    a = ap.parse_args()
    from qlower.api import load_registry
    from qlower.lang.checker import check
    from qlower.lang.parser import parse
    from qlower.plugins import builtin_contributions

    text = corpus(a.rules)
    registry = load_registry()
    functions = builtin_contributions().functions
    parse(text, "warmup.qpat")
    t0 = time.perf_counter()
    module = parse(text, "bench.qpat")
    t1 = time.perf_counter()
    diags = check([module], registry=registry, functions=functions)
    t2 = time.perf_counter()
    errors = [d for d in diags if d.is_error]
    print(f"{len(module.rules)} rules, {text.count(chr(10))} lines: parse {t1 - t0:.3f}s, check {t2 - t1:.3f}s, "
          f"total {t2 - t0:.3f}s ({(t2 - t0) / len(module.rules) * 1e3:.2f} ms/rule); {len(errors)} errors")


if __name__ == "__main__":
    main()
