"""Benchmark: writing a big artifact, buffered (open + write + fsync) vs `StreamFile`.

    PYTHONPATH=. python bench/bench_write.py DIR [--gib 2]

Writes GIB GiB in 1 MiB pieces (the size the artifact writers hand over) three
ways, side by side in one process: a plain buffered file with fsync (what
`save` did before), `StreamFile` with O_DIRECT, and `StreamFile` without it.
Prints wall time and this process's user and system CPU for each. The disk is
shared with whatever else runs: compare within one run.
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from pathlib import Path

from qlower._files import StreamFile


def _now() -> tuple[float, float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), r.ru_utime, r.ru_stime


def _plain(path: Path, piece: bytes, n: int) -> None:
    with open(path, "wb", buffering=1 << 20) as f:
        for _ in range(n):
            f.write(piece)
        f.flush()
        os.fsync(f.fileno())


def _stream(path: Path, piece: bytes, n: int, direct: bool) -> None:
    with StreamFile.create(path, direct=direct) as f:
        for _ in range(n):
            f.write(piece)
        f.finish()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--gib", type=float, default=2.0)
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    piece = os.urandom(1 << 20)
    n = int(args.gib * 1024)
    print(f"{n} MiB in 1 MiB pieces")
    for label, fn in (("buffered + fsync", lambda p: _plain(p, piece, n)),
                      ("StreamFile, O_DIRECT", lambda p: _stream(p, piece, n, True)),
                      ("StreamFile, buffered", lambda p: _stream(p, piece, n, False))):
        path = args.dir / "bench_write.tmp"
        t0 = _now()
        fn(path)
        t1 = _now()
        path.unlink()
        wall, user, sys_ = (b - a for a, b in zip(t0, t1))
        print(f"  {label:22s} wall {wall:6.2f} s   user {user:5.2f} s   sys {sys_:5.2f} s")


if __name__ == "__main__":
    main()
