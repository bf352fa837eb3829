"""The HTML page written by `qlower lower --html`, read back as HTML (the browser test renders it)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from report_support import mini_model

from qlower.cli.main import main
from qlower.qnn.datatypes import DataType as DT
from qlower.qnn.model import OpConfig, Origin, QnnGraph, QnnTensor
from qlower.qnn.model import TensorType as TT
from qlower.diagnostics import QlowerError
from qlower.report import load_verification, render_html
from qlower.report.source import SourceGraph, SourceNode


class Page(HTMLParser):
    """Collects the `<title>` of each graph node per panel, node classes, the embedded data and resource URLs."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.titles: dict[str, list[str]] = {"s": [], "q": []}
        self.classes: dict[str, str] = {}
        self.urls: list[str] = []
        self.data: dict | None = None
        self._node: str | None = None
        self._in_title = False
        self._in_data = False
        self._buf: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("src", "href"):
            if a.get(key) not in (None, "#"):
                self.urls.append(a[key])
        if tag == "link":
            self.urls.append(a.get("href") or "<link>")
        if tag == "g" and a.get("data-g"):
            self._node = a["id"]
            self.classes[a["id"]] = a.get("class", "")
        if tag == "title" and self._node:
            self._in_title = True
        if tag == "script" and a.get("id") == "qlower-data":
            self._in_data = True

    def handle_endtag(self, tag):
        if tag == "title" and self._in_title:
            self._in_title = False
        if tag == "g":
            self._node = None
        if tag == "script" and self._in_data:
            self._in_data = False
            self.data = json.loads("".join(self._buf))

    def handle_data(self, data):
        if self._in_title and self._node:
            self.titles[self._node[0]].append(data)
        if self._in_data:
            self._buf.append(data)


def lower(tmp_path: Path, capsys, *extra, model: Path | None = None, backend: str = "htp") -> tuple[int, str, str]:
    model = model or mini_model(tmp_path)
    code = main(["lower", str(model), "--backend", backend, "-o", str(tmp_path / "out"),
                 "--html", str(tmp_path / "page.html"), *map(str, extra)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_page_names_every_node_and_links_them_as_net_json_says(tmp_path, capsys):
    code, out, _ = lower(tmp_path, capsys, "--report", tmp_path / "r.json")
    assert code == 0 and "page.html" in out
    text = (tmp_path / "page.html").read_text(encoding="utf-8")
    page = Page(text)
    net = json.loads((tmp_path / "out" / "mini_net.json").read_text())
    nodes = net["graph"]["nodes"]
    assert set(nodes) <= set(page.titles["q"])
    assert {"norm", "up", "gate", "act", "mul", "down", "residual", "score"} <= set(page.titles["s"])
    # self-contained: no resource is fetched, the policy forbids it
    assert page.urls == [] and "default-src 'none'" in text
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", text)
    # the links are the provenance `_net.json` records
    data = page.data
    src_names = [n["name"] for n in data["source"]["nodes"]]
    for q in data["qnn"]["nodes"]:
        if q["kind"] != "op":
            continue
        prov = nodes[q["name"]]["provenance"]
        assert [src_names[i] for i in q["src"]] == prov["source_nodes"]
        assert (q["rule"], q["location"]) == (prov["rule"], prov["location"])
        for i in q["src"]:
            assert data["qnn"]["nodes"].index(q) in data["source"]["nodes"][i]["qnn"]
    report = json.loads((tmp_path / "r.json").read_text())
    assert data["memory"]["static_bytes"] == report["memory"]["static_bytes"]
    assert data["memory"]["peak_activation_bytes"] == report["memory"]["peak_activation_bytes"]
    assert data["total_macs"] == report["total_macs"] > 0
    assert f"{report['memory']['peak_activation_bytes']:,}" in text
    fc = {q["name"]: q["macs"] for q in data["qnn"]["nodes"] if q["type"] == "FullyConnected"}
    assert fc == {"up.f": 4 * 8 * 16, "gate.f": 4 * 8 * 16, "down.f": 4 * 16 * 8}  # seq × in × out


def test_failed_lowering_still_writes_the_page_with_the_error_on_the_source_node(tmp_path, capsys):
    code, _, err = lower(tmp_path, capsys, backend="dsp")
    assert code == 1 and "node norm" in err
    page = Page((tmp_path / "page.html").read_text(encoding="utf-8"))
    norm = page.data["source"]["nodes"]
    i = next(k for k, n in enumerate(norm) if n["name"] == "norm")
    assert "error" in page.classes[f"s{i}"]
    assert any("no rule lowers" in page.data["diagnostics"][k]["message"] for k in norm[i]["diags"])
    assert page.titles["q"] == [] and "was not lowered" in (tmp_path / "page.html").read_text()


def test_validation_error_sits_on_the_qnn_node(tmp_path, capsys):
    (tmp_path / "r.qpat").write_text("op m.Neg(x) -> y\n\nrule neg {\n  match y = m.Neg(x)\n"
                                     "  emit y = qnn.ElementWiseNeg(x)\n}\n")
    (tmp_path / "g.json").write_text(json.dumps({
        "format": "qlower-graph/1", "name": "t", "inputs": ["x"], "outputs": ["y"],
        "tensors": {"x": {"dtype": "int64", "shape": [2, 3]}, "y": {"dtype": "int64", "shape": [2, 3]}},
        "nodes": [{"name": "n", "op": "m.Neg", "inputs": ["x"], "outputs": ["y"]}]}))
    code, _, _ = lower(tmp_path, capsys, "--rules", tmp_path / "r.qpat", model=tmp_path / "g.json")
    assert code == 1
    page = Page((tmp_path / "page.html").read_text(encoding="utf-8"))
    q = page.data["qnn"]["nodes"]
    i = next(k for k, n in enumerate(q) if n["name"] == "n")
    assert "error" in page.classes[f"q{i}"] and q[i]["diags"]
    s = page.data["source"]["nodes"]
    assert "error" not in page.classes[f"s{next(k for k, n in enumerate(s) if n['name'] == 'n')}"]


def test_verification_rows_fill_the_panel(tmp_path, capsys):
    rows = [{"source_op": "up", "rule": "linear", "local_error": 1e-4, "cumulative_error": 2e-4,
             "tolerance": 1e-3, "verdict": "pass", "extra": 3},
            {"source_op": "act", "local_error": float("nan"), "verdict": "fail"}]
    (tmp_path / "v.json").write_text(json.dumps({"rows": rows}))
    code, _, _ = lower(tmp_path, capsys, "--html-verify", tmp_path / "v.json")
    assert code == 0
    shown = Page((tmp_path / "page.html").read_text(encoding="utf-8")).data["verification"]
    assert shown == [rows[0], {**rows[1], "local_error": "nan"}]  # JSON has no NaN: shown as text


def test_bad_verification_rows_are_a_user_error(tmp_path, capsys):
    (tmp_path / "v.json").write_text("{")
    code, _, err = lower(tmp_path, capsys, "--html-verify", tmp_path / "v.json")
    assert code == 1 and "not valid JSON" in err and "v.json" in err
    assert not (tmp_path / "page.html").exists() and not (tmp_path / "out").exists()  # checked before lowering


@pytest.mark.parametrize("content", ['{"rows": 3}', "[1, 2]", '"rows"'])
def test_verification_files_must_hold_row_objects(tmp_path, content):
    (tmp_path / "v.json").write_text(content)
    with pytest.raises(QlowerError, match="list of row objects"):
        load_verification(tmp_path / "v.json")
    with pytest.raises(QlowerError, match="cannot read"):
        load_verification(tmp_path / "missing.json")


def test_html_verify_needs_html(tmp_path, capsys):
    code = main(["lower", str(mini_model(tmp_path)), "--html-verify", "v.json"])
    assert code == 2 and "--html-verify needs --html" in capsys.readouterr().err


def _chain(n: int) -> tuple[SourceGraph, QnnGraph]:
    """n source ops, each lowered to two QNN ops, with a skip edge every 7 ops."""
    g = QnnGraph("big")
    g.add_tensor(QnnTensor("x", TT.APP_WRITE, DT.FLOAT_16, (1, 64)))
    g.inputs = ["x"]
    src, prev = [], "x"
    for k in range(n):
        mid, out = f"m{k}", f"o{k}"
        g.add_tensor(QnnTensor(mid, TT.NATIVE, DT.FLOAT_16, (1, 64)))
        g.add_tensor(QnnTensor(out, TT.APP_READ if k == n - 1 else TT.NATIVE, DT.FLOAT_16, (1, 64)))
        skip = [f"o{k - 7}"] if k >= 7 else []
        g.ops.append(OpConfig(f"l{k}.a", "ElementWiseAdd", [prev, *skip], [mid], origin=Origin("r", "p/f.qpat:1", (f"l{k}",))))
        g.ops.append(OpConfig(f"l{k}.b", "Relu", [mid], [out], origin=Origin("r", "p/f.qpat:1", (f"l{k}",))))
        src.append(SourceNode(f"l{k}", "mllm.Block", (prev.replace("o", "so"), *[s.replace("o", "so") for s in skip]),
                              (f"so{k}",), ((1, 64),)))
        prev = out
    g.outputs = [prev]
    return SourceGraph("big", tuple(src), ("x",), ("so%d" % (n - 1),), frozenset()), g


def test_big_graphs_are_paginated_and_every_node_is_drawn_once():
    source, qnn = _chain(800)  # 1600 QNN ops
    text = render_html(title="big", backend="htp", source=source, qnn=qnn, page_nodes=100)
    page = Page(text)
    assert sorted(page.titles["q"]) == sorted(["x", *(op.name for op in qnn.ops)])
    assert sorted(page.titles["s"]) == sorted(["x", *(n.name for n in source.nodes)])
    svgs = re.findall(r'<svg (?:style="display:none" )?class="graph" data-page="(\d+)"', text)
    assert len(svgs) == page.data["qnn"]["pages"] + page.data["source"]["pages"] and page.data["qnn"]["pages"] >= 16
    per_page: dict[int, int] = {}
    for n in page.data["qnn"]["nodes"]:
        per_page[n["page"]] = per_page.get(n["page"], 0) + 1
    assert max(per_page.values()) <= 100
    assert "edge stub" in text  # edges between pages are drawn as titled stubs
    assert text == render_html(title="big", backend="htp", source=source, qnn=qnn, page_nodes=100)  # deterministic


def test_names_are_escaped():
    source = SourceGraph("g", (SourceNode("<b>&x", "m.Op", ("in",), ("o",), (None,)),), ("in",), ("o",), frozenset())
    g = QnnGraph("g")
    g.add_tensor(QnnTensor("in", TT.APP_WRITE, DT.FLOAT_32, (2,)))
    g.add_tensor(QnnTensor("o", TT.APP_READ, DT.FLOAT_32, (2,)))
    g.add_tensor(QnnTensor("w</script>", TT.STATIC, DT.FLOAT_32, (2,), data=np.zeros(2, np.float32)))
    g.inputs, g.outputs = ["in"], ["o"]
    g.ops.append(OpConfig("<b>&x", "ElementWiseAdd", ["in", "w</script>"], ["o"], origin=Origin("r", "a/b:1", ("<b>&x",))))
    text = render_html(title="<t>", backend="cpu", source=source, qnn=g)
    page = Page(text)
    assert "<b>&x" in page.titles["q"] and "<b>&x" in page.titles["s"]
    assert text.count("</script>") == 2  # the data block and the page script, nothing from a name
    assert page.data["qnn"]["nodes"][1]["ins"][1][0] == "w</script>"
