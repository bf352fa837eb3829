"""Fixtures of the hostile-input suite: run qlower in-process (the CLI's `main`) or in a child
process held to an address-space limit and a timeout (the resource probes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from qlower.cli.main import main

sys.path.insert(0, str(Path(__file__).parent))

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


@pytest.fixture
def cli(capsys):
    def run(*argv: str) -> Outcome:
        code = main([str(a) for a in argv])
        got = capsys.readouterr()
        return Outcome(code, got.out, got.err)

    return run


def _limit() -> None:  # (runs in the child before exec)
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


@pytest.fixture
def bounded():
    """`qlower ARGV...` in a child process limited to 3 GB of address space and TIMEOUT seconds."""
    def run(*argv: str, cwd: Path | None = None) -> Outcome:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        try:
            r = subprocess.run([sys.executable, "-m", "qlower.cli.main", *map(str, argv)], capture_output=True,
                               text=True, timeout=TIMEOUT, preexec_fn=_limit, env=env, cwd=cwd)
        except subprocess.TimeoutExpired:
            pytest.fail(f"qlower {' '.join(map(str, argv))} did not finish within {TIMEOUT} s")
        return Outcome(r.returncode, r.stdout, r.stderr)

    return run
