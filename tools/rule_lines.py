"""Rule lines per pack: non-blank, non-comment lines inside `rule`, `map` and `fragment` items.

Usage: python tools/rule_lines.py [PATTERNS_DIR]   (default: the shipped patterns/)
A `map` line counts once; tests and op declarations do not count.
"""

from __future__ import annotations

import sys
from pathlib import Path


def rule_lines(text: str) -> int:
    """Counts lines from a `rule`/`map`/`fragment` keyword to the end of that item."""
    count, depth, inside = 0, 0, False
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        if depth == 0:
            inside = line.split(" ", 1)[0] in ("rule", "map", "fragment")
        if inside:
            count += 1
        depth += line.count("{") - line.count("}")
    return count


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1] / "patterns"
    total = 0
    for pack in sorted(p for p in root.iterdir() if p.is_dir()):
        n = sum(rule_lines(f.read_text(encoding="utf-8")) for f in sorted(pack.rglob("*.qpat")))
        total += n
        print(f"{pack.name}\t{n}")
    print(f"total\t{total}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
