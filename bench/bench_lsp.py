"""Response times of `qlower lsp` on the shipped packs, measured as an editor sees them (stdio JSON-RPC).

    python bench/bench_lsp.py [FILE.qpat]

Default file: the largest shipped rule file; the issue's figure is for a ~700-line one
(`python bench/bench_lsp.py patterns/onnx/elementwise.qpat`). Prints the median and worst of N runs for: diagnostics
after a change (from sending didChange to receiving publishDiagnostics, including the server's
debounce), the check alone (the workspace, no protocol), completion, and hover.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "lsp"))

from client import LspClient  # noqa: E402

from qlower.lsp.server import DEBOUNCE_SECONDS, default_workspace  # noqa: E402

RUNS = 15


def _stats(xs: list[float]) -> str:
    return f"median {statistics.median(xs) * 1e3:7.1f} ms   worst {max(xs) * 1e3:7.1f} ms"


def main() -> int:
    files = sorted((ROOT / "patterns").rglob("*.qpat"), key=lambda p: len(p.read_text().splitlines()))
    path = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else files[-1].resolve()
    text = path.read_text()
    lines = text.splitlines()
    print(f"file: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} ({len(lines)} lines)")

    ws = default_workspace()
    ws.open(path, text)
    ws.check(path)
    checks, cpu = [], []
    for i in range(RUNS):
        ws.open(path, text + f"\n# edit {i}\n")
        t, c = time.perf_counter(), time.process_time()
        ws.check(path)
        checks.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    print(f"check after a change (workspace)       {_stats(checks)}")
    print(f"  the same, CPU time of this process   {_stats(cpu)}   (steady on a loaded machine)")

    client = LspClient(cwd=ROOT)
    client.initialize(ROOT)
    uri = path.as_uri()
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "qpat", "version": 1,
                                                            "text": text}})
    client.wait_for("textDocument/publishDiagnostics", uri)
    diag = []
    for i in range(RUNS):
        version = i + 2
        t = time.perf_counter()
        client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                                 "contentChanges": [{"text": text + f"\n# edit {i}\n"}]})
        while client.wait_for("textDocument/publishDiagnostics", uri)["params"].get("version") != version:
            pass
        diag.append(time.perf_counter() - t)
    print(f"diagnostics after a change (stdio)     {_stats(diag)}   (includes {DEBOUNCE_SECONDS * 1e3:.0f} ms "
          f"debounce)")
    line = next(i for i, s in enumerate(lines) if "qnn." in s)
    col = lines[line].index("qnn.") + 4
    comp, hov = [], []
    for _ in range(RUNS):
        t = time.perf_counter()
        client.request("textDocument/completion", {"textDocument": {"uri": uri},
                                                   "position": {"line": line, "character": col}})
        comp.append(time.perf_counter() - t)
        t = time.perf_counter()
        client.request("textDocument/hover", {"textDocument": {"uri": uri},
                                              "position": {"line": line, "character": col + 1}})
        hov.append(time.perf_counter() - t)
    print(f"completion after `qnn.` (stdio)        {_stats(comp)}")
    print(f"hover on a QNN op (stdio)              {_stats(hov)}")
    client.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
