"""Running qlower on hostile files: in-process, or in a child held to an address-space limit and
a timeout (the resource probes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import attrs

AS_LIMIT = 3 << 30  # bytes of address space a probe may use
TIMEOUT = 120.0  # seconds a probe may take (a FIFO read would block forever)


@attrs.frozen
class Outcome:
    code: int
    out: str
    err: str

    def clean_failure(self) -> None:
        """Exit 1 with qlower's own message: no traceback, no internal error, no torch log line."""
        assert self.code == 1, (self.code, self.err)
        assert "Traceback" not in self.err and "internal error" not in self.err, self.err
        assert "error" in self.err, self.err


def _limit() -> None:  # (runs in the child before exec)
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


_DRIVER = """
import contextlib, io, json, resource, signal, sys
resource.setrlimit(resource.RLIMIT_AS, (%d, %d))
from qlower.cli.main import main
class Timeout(BaseException):
    pass
def ring(*_):
    raise Timeout()
signal.signal(signal.SIGALRM, ring)
out = []
for argv in json.loads(sys.stdin.read()):
    err, std = io.StringIO(), io.StringIO()
    signal.alarm(%d)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
            code = main(argv)
    except Timeout:
        code = "timeout"
    except MemoryError:
        code = "memory"
    finally:
        signal.alarm(0)
    out.append([code, std.getvalue(), err.getvalue()])
sys.stdout.write(json.dumps(out))
"""


def run_bounded(probes: list[list[str]]) -> list[Outcome]:
    """Each `qlower ARGV...` of `probes`, in one child process limited to 3 GB of address space,
    each probe to TIMEOUT seconds (one process: the interpreter and qlower are imported once)."""
    import json

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    code = _DRIVER % (AS_LIMIT, AS_LIMIT, int(TIMEOUT))
    r = subprocess.run([sys.executable, "-c", code], input=json.dumps([[str(a) for a in p] for p in probes]),
                       capture_output=True, text=True, timeout=TIMEOUT * len(probes) + 60, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    results = json.loads(r.stdout)
    for (c, _, err), argv in zip(results, probes):
        assert c not in ("timeout", "memory"), f"qlower {' '.join(map(str, argv))}: {c}\n{err}"
    return [Outcome(c, o, e) for c, o, e in results]


