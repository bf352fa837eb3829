"""Response times of `qlower lsp` on the shipped packs, measured as an editor sees them (stdio JSON-RPC).

    python bench/bench_lsp.py [FILE.qpat] [--root CHECKOUT]

Default file: the largest shipped rule file (patterns/onnx/conv.qpat). `--root` serves from another checkout's
qlower (`--root ../main` measures main side by side, through this bench's client). Prints the median and worst
of N runs for: open to first diagnostics (server start, initialize, didOpen, until publishDiagnostics; in a
first session, with nothing kept on disk, and in a session after one, as an editor is usually started), the
re-check after a change (the workspace, no protocol: wall and CPU time of the server's work), diagnostics
after a change over stdio (including the server's debounce), completion, and hover.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "lsp"))

from client import LspClient  # noqa: E402

DEBOUNCE_SECONDS = 0.075  # the server's (qlower.lsp.server), here so that `--root` can import another qlower
RUNS = 15
OPENS = 3


def _stats(xs: list[float]) -> str:
    return f"median {statistics.median(xs) * 1e3:7.1f} ms   worst {max(xs) * 1e3:7.1f} ms"


def main() -> int:
    args = sys.argv[1:]
    served = ROOT
    if "--root" in args:
        i = args.index("--root")
        served = Path(args[i + 1]).resolve()
        del args[i:i + 2]
        sys.path.insert(0, str(served))
        for name in [m for m in sys.modules if m == "qlower" or m.startswith("qlower.")]:
            del sys.modules[name]
    import qlower  # noqa: PLC0415

    print(f"serving qlower from {Path(qlower.__file__).parent.parent}")
    from qlower.lsp.server import default_workspace  # noqa: PLC0415

    files = sorted((ROOT / "patterns").rglob("*.qpat"), key=lambda p: len(p.read_text().splitlines()))
    path = Path(args[0]).resolve() if args else files[-1].resolve()
    text = path.read_text()
    lines = text.splitlines()
    print(f"file: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} ({len(lines)} lines)")

    ws = default_workspace()
    ws.open(path, text)
    ws.check(path)
    mid = next(i for i in range(len(lines) // 2, len(lines)) if lines[i].lstrip().startswith("let "))
    edits = {  # each a keystroke-sized change; the last shifts every later line (the piecewise parse's worst)
        "a comment appended at the end": lambda i: text + f"\n# edit {i}\n",
        f"a let renamed inside a rule (line {mid + 1})": lambda i: "\n".join(
            [*lines[:mid], lines[mid].replace("let ", f"let e{i}_", 1), *lines[mid + 1:]]) + "\n",
        "a line inserted at the top": lambda i: f"# edit {i}\n" * (i % 2 + 1) + text,
    }
    for what, edit in edits.items():
        checks, cpu = [], []
        for i in range(RUNS):
            ws.open(path, edit(i))
            t, c = time.perf_counter(), time.process_time()
            ws.check(path)
            checks.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        print(f"re-check after {what} (workspace)")
        print(f"  wall time                            {_stats(checks)}")
        print(f"  CPU time of the server's work        {_stats(cpu)}   (steadier on a loaded machine)")

    def open_once(cache: Path) -> float:
        t = time.perf_counter()
        client = LspClient(cwd=ROOT, root=served, env={"QLOWER_CACHE_DIR": str(cache)})
        client.initialize(ROOT)
        client.notify("textDocument/didOpen", {"textDocument": {"uri": path.as_uri(), "languageId": "qpat",
                                                                "version": 1, "text": text}})
        client.wait_for("textDocument/publishDiagnostics", path.as_uri())
        took = time.perf_counter() - t
        client.shutdown()
        return took

    with tempfile.TemporaryDirectory(prefix="qlower-bench-lsp-") as tmp:
        cold = [open_once(Path(tmp) / f"cold{i}") for i in range(OPENS)]
        open_once(Path(tmp) / "warm")  # a first session, so that the ones measured follow one
        warm = [open_once(Path(tmp) / "warm") for _ in range(OPENS)]
    print(f"open to first diagnostics (stdio), a first session      {_stats(cold)}   (server start included; "
          "nothing kept on disk)")
    print(f"open to first diagnostics (stdio), after one            {_stats(warm)}   (server start included; "
          "what the last session kept)")

    client = LspClient(cwd=ROOT, root=served)
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
