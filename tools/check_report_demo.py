"""Acceptance check of the lowering report on `make demo`'s graphs (slow: not part of the test run).

    python tools/check_report_demo.py [EXAMPLES_DIR] [--out DIR] [--chromium PATH]

For each Qwen2-VL example graph (built by examples/build_qwen2vl.py into
EXAMPLES_DIR, default examples/), runs `qlower lower --backend htp --report
--html`, checks the report's memory figures against an independent reading
of the written `_net.json` (tests/report/report_support.py), opens the page in
headless Chromium from file:// with the network shut, checks the rendered DOM
names every QNN node and shows the memory figures, and takes a screenshot
(DIR/<graph>.png). Exit 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "report"))

from report_support import memory_from_net_json  # noqa: E402

GRAPHS = ("qwen2vl_vision_block", "qwen2vl_decoder_layer", "qwen2vl_vision_block_w8a16",
          "qwen2vl_decoder_layer_w8a16")


def chromium(path: str | None, url: str, *extra: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [path, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
             "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=10000",
             *extra, url], capture_output=True, text=True, timeout=300, check=False)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("examples", nargs="?", default=str(ROOT / "examples"))
    ap.add_argument("--out", default=str(ROOT / "out" / "report"))
    ap.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("google-chrome"))
    args = ap.parse_args()
    if not args.chromium:
        print("no Chromium found (Debian: apt-get install chromium)", file=sys.stderr)
        return 1
    out = Path(args.out)
    failed = False
    for name in GRAPHS:
        model = Path(args.examples) / f"{name}.json"
        d = out / name
        cmd = [sys.executable, "-m", "qlower.cli.main", "lower", str(model), "--backend", "htp", "-o", str(d),
               "--report", str(d / "report.json"), "--html", str(d / "report.html"), "-q"]
        run = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if run.returncode != 0:
            print(f"{name}: lower failed\n{run.stderr}")
            failed = True
            continue
        mem = json.loads((d / "report.json").read_text())["memory"]
        net_path = d / f"{name}_net.json"
        want = memory_from_net_json(net_path)
        same = (mem["static_bytes"], mem["peak_activation_bytes"], mem["peak_node"]) == (
            want["static_bytes"], want["peak_activation_bytes"], want["peak_node"])
        nodes = list(json.loads(net_path.read_text())["graph"]["nodes"])
        page = chromium(args.chromium, (d / "report.html").resolve().as_uri(), "--dump-dom")
        dom = page.stdout
        named = [n for n in nodes if f'data-name="{n}"' in dom and f"<title>{n}</title>" in dom]
        shot = out / f"{name}.png"
        chromium(args.chromium, (d / "report.html").resolve().as_uri(), f"--screenshot={shot}", "--window-size=1500,1100")
        ok = same and len(named) == len(nodes) and 'data-ready="1"' in dom and f"{mem['peak_activation_bytes']:,}" in dom
        failed |= not ok
        print(f"{name}: {'ok' if ok else 'FAILED'}: {len(nodes)} QNN nodes, {len(named)} named in the DOM; "
              f"static {mem['static_bytes']:,} B, peak {mem['peak_activation_bytes']:,} B at {mem['peak_node']} "
              f"(independent: {'equal' if same else want}); screenshot {shot}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
