"""The report page in a real browser: headless Chromium opens it from file:// with the network off.

Needs a Chromium binary: `QLOWER_CHROMIUM`, else `chromium`/`chromium-browser`/`google-chrome` on PATH
(Debian: `apt-get install chromium`); skipped with that reason when there is none.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest
from report_support import mini_model
from test_report_html import Page, _chain

from qlower.cli.main import main
from qlower.report import write_html


def _chromium() -> str | None:
    env = os.environ.get("QLOWER_CHROMIUM")
    if env:
        return env if Path(env).exists() else None
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


CHROMIUM = _chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found: install Debian's `chromium` package "
                                "or set QLOWER_CHROMIUM to a Chromium/Chrome binary")


def browse(url: str, *extra: str) -> subprocess.CompletedProcess:
    """Run headless Chromium on `url` with a fresh profile and every network path shut."""
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
             "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",  # network off
             "--virtual-time-budget=10000", *extra, url],
            capture_output=True, text=True, timeout=180, check=False)


@pytest.fixture(scope="module")
def lowered(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("browser")
    code = main(["lower", str(mini_model(d)), "--backend", "htp", "-o", str(d / "out"), "--html", str(d / "page.html"),
                 "-q"])
    assert code == 0
    return d


def test_rendered_dom_names_every_qnn_node(lowered):
    run = browse((lowered / "page.html").as_uri(), "--dump-dom")
    assert run.returncode == 0, run.stderr[-2000:]
    dom = run.stdout
    assert 'data-ready="1"' in dom  # the page script ran to the end
    net = json.loads((lowered / "out" / "mini_net.json").read_text())
    page = Page(dom)
    assert set(net["graph"]["nodes"]) <= set(page.titles["q"])
    # the node table is built by the script: one row per QNN node, named
    rows = [line for line in dom.split("<tr") if 'id="row' in line]
    assert sorted(r.split('data-name="', 1)[1].split('"', 1)[0] for r in rows) == sorted(net["graph"]["nodes"])
    assert "peak_activation_bytes" in dom and "static_bytes" in dom


def test_clicking_through_links_source_and_qnn_nodes(lowered):
    """`#select=qN` selects QNN node N as a click would: its source node lights up, details show the rule."""
    html = (lowered / "page.html").read_text(encoding="utf-8")
    data = Page(html).data
    q = next(i for i, n in enumerate(data["qnn"]["nodes"]) if n["type"] == "FullyConnected")
    node = data["qnn"]["nodes"][q]
    run = browse((lowered / "page.html").as_uri() + f"#select=q{q}", "--dump-dom")
    dom = Page(run.stdout)
    assert "sel" in dom.classes[f"q{q}"].split()
    for s in node["src"]:
        assert "hl" in dom.classes[f"s{s}"].split()
    assert node["location"] in run.stdout and f"{node['macs']:,}" in run.stdout
    s = node["src"][0]
    run = browse((lowered / "page.html").as_uri() + f"#select=s{s}", "--dump-dom")
    dom = Page(run.stdout)
    assert {k for k, v in dom.classes.items() if "hl" in v.split()} == {f"q{i}" for i in data["source"]["nodes"][s]["qnn"]}


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_screenshot(lowered, tmp_path):
    shot = Path(os.environ.get("QLOWER_SCREENSHOT_DIR", tmp_path)) / "report.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    run = browse((lowered / "page.html").as_uri(), f"--screenshot={shot}", "--window-size=1400,1000")
    assert run.returncode == 0, run.stderr[-2000:]
    assert _png_size(shot) == (1400, 1000)
    assert shot.stat().st_size > 20_000  # a drawn page, not a blank one


def test_a_paginated_big_graph_renders(tmp_path):
    source, qnn = _chain(400)  # 800 QNN ops on 8 pages
    write_html(tmp_path / "big.html", title="big", backend="htp", source=source, qnn=qnn, page_nodes=100)
    run = browse((tmp_path / "big.html").as_uri() + "#select=q800", "--dump-dom")
    assert 'data-ready="1"' in run.stdout
    page = Page(run.stdout)
    assert "sel" in page.classes["q800"].split()  # the last op, on the last page, selected
    assert "hl" in page.classes["s400"].split()  # and its source node, on the source graph's last page
    assert len([line for line in run.stdout.split("<tr") if 'id="row' in line]) == 800
