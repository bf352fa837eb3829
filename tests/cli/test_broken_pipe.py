"""A reader that goes away (`qlower ... | head`) ends qlower quietly, not with an internal error."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def test_closed_stdout_is_not_an_internal_error():
    proc = subprocess.Popen([sys.executable, "-m", "qlower.cli.main", "opdefs", "--backend", "htp"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before qlower writes a line
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 1
    assert "internal error" not in err and "Traceback" not in err, err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a device that is always full)")
@pytest.mark.parametrize("buffered", [True, False])
@pytest.mark.parametrize("command", [["opdefs", "--backend", "htp"], ["opdefs", "Sigmoid", "--backend", "htp"]])
def test_output_on_a_full_disk_is_an_error_not_a_bug(command, buffered):
    """Output that cannot be written fails with exit 1 and says why, whether the write fails while the
    command runs (unbuffered stdout) or at the process's final flush (buffered, a short output)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    with open("/dev/full", "wb") as full:
        proc = subprocess.run([sys.executable, "-m", "qlower.cli.main", *command], stdout=full,
                              stderr=subprocess.PIPE, timeout=120, env=env)
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert "No space left on device" in err and "internal error" not in err and "Traceback" not in err, err
