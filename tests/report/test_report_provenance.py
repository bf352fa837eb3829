"""Every `_net.json` node names its rule and the input graph's nodes, through fusions and multi-step rewrites."""

from __future__ import annotations

import json
import re

from report_support import mini_model

from qlower.cli.main import main

RULES = """\
op m.Neg(x) -> y
op m.Abs(x) -> y
op m.Pos(x) -> y

# a source-to-source step: Pos becomes Abs, then Abs is lowered
rule pos_is_abs {
  match y = m.Pos(x)
  emit y = m.Abs(x)
}

rule abs {
  match y = m.Abs(x)
  emit y = qnn.ElementWiseAbs(x)
}

# a fusion: Neg(Neg(x)) is one QNN op
rule neg_neg benefit 10 {
  match y = m.Neg(m.Neg(x))
  emit y = qnn.ElementWiseAbs(x)
}

rule neg {
  match y = m.Neg(x)
  emit y = qnn.ElementWiseNeg(x)
}
"""

GRAPH = {
    "format": "qlower-graph/1", "name": "p", "inputs": ["x"], "outputs": ["z"],
    "tensors": {k: {"dtype": "float32", "shape": [2, 3]} for k in ("x", "a", "b", "z")},
    "nodes": [
        {"name": "pos", "op": "m.Pos", "inputs": ["x"], "outputs": ["a"]},
        {"name": "n1", "op": "m.Neg", "inputs": ["a"], "outputs": ["b"]},
        {"name": "n2", "op": "m.Neg", "inputs": ["b"], "outputs": ["z"]},
    ],
}


def test_sources_are_traced_to_the_input_graph(tmp_path, capsys):
    (tmp_path / "r.qpat").write_text(RULES)
    (tmp_path / "g.json").write_text(json.dumps(GRAPH))
    code = main(["lower", str(tmp_path / "g.json"), "--rules", str(tmp_path / "r.qpat"), "--backend", "cpu",
                 "-o", str(tmp_path / "out"), "-q"])
    assert code == 0, capsys.readouterr().err
    nodes = json.loads((tmp_path / "out" / "g_net.json").read_text())["graph"]["nodes"]
    prov = {name: n["provenance"] for name, n in nodes.items()}
    assert sorted(prov.values(), key=lambda p: p["rule"]) == [
        {"rule": "abs", "location": f"{tmp_path.name}/r.qpat:11", "source_nodes": ["pos"]},
        {"rule": "neg_neg", "location": f"{tmp_path.name}/r.qpat:17", "source_nodes": ["n2", "n1"]},
    ]


def test_every_node_of_a_lowered_model_carries_its_rule(tmp_path, capsys):
    code = main(["lower", str(mini_model(tmp_path)), "--backend", "htp", "-o", str(tmp_path / "out"), "-q"])
    assert code == 0
    net = json.loads((tmp_path / "out" / "mini_net.json").read_text())
    sources = {"norm", "up", "gate", "act", "mul", "down", "residual", "score"}
    for name, node in net["graph"]["nodes"].items():
        p = node["provenance"]
        assert p["rule"], name
        if p["rule"] == "htp_float16":  # the float16 pass's casts at the graph's edges
            assert node["type"] == "Cast" and p["source_nodes"] == [] and p["location"] == "qnn/precision.py"
        else:
            assert re.fullmatch(r"mllm/\w+\.qpat:\d+", p["location"]) and set(p["source_nodes"]) <= sources, name
    assert net["Total MACs per inference"] != "0 (0%)"
    assert {n["macs_per_inference"] for n in net["graph"]["nodes"].values() if n["type"] == "Reshape"} == {"0 (0%)"}
