"""A reader that goes away (`qlower ... | head`) ends qlower quietly, not with an internal error."""

from __future__ import annotations

import subprocess
import sys


def test_closed_stdout_is_not_an_internal_error():
    proc = subprocess.Popen([sys.executable, "-m", "qlower.cli.main", "opdefs", "--backend", "htp"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before qlower writes a line
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 1
    assert "internal error" not in err and "Traceback" not in err, err
