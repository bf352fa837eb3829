"""Fixtures of the hostile-input suite: run qlower in-process (the CLI's `main`) or in a child
process held to an address-space limit and a timeout (the resource probes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from qlower.cli.main import main  # noqa: E402
from probe import TIMEOUT, Outcome, _limit  # noqa: E402


@pytest.fixture
def cli(capsys):
    def run(*argv: str) -> Outcome:
        code = main([str(a) for a in argv])
        got = capsys.readouterr()
        return Outcome(code, got.out, got.err)

    return run


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
