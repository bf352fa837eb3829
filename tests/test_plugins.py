"""Plugins: merging contributions, conflicts, entry-point discovery, and the example plugin end to end."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

import qlower
import qlower.plugins as plugins
from qlower import QlowerError
from qlower.cli.main import main
from qlower.graph import Graph
from qlower.plugins import Frontend, Plugin, builtin_plugin, merge
from qlower.lang.functions import Function

EXAMPLE = Path(__file__).parent / "example_plugin"
TOY_RULES = EXAMPLE / "qlower_toy" / "rules"


def kernel(inputs, attrs, outs):
    return [np.asarray(inputs[0])]


def fn(name: str) -> Function:
    return Function(name, ("number",), "number", lambda x: x)


def conflicts(c) -> list[str]:
    assert all(d.code == "plugin-conflict" and d.is_error for d in c.conflicts)
    return [d.message for d in c.conflicts]


# ---------------------------------------------------------------------- merge

def test_merge_without_conflicts_keeps_everything(tmp_path):
    a = Plugin("a", rule_packs={"pa": tmp_path}, functions=[fn("fa")], kernels={"da": {"Op": kernel}},
               frontends=[Frontend("fea", (".a",), lambda p: None)], opdefs=[tmp_path / "a.xml"])
    b = Plugin("b", rule_packs={"pb": tmp_path}, functions=[fn("fb")], kernels={"da": {"Other": kernel}})
    c = merge([builtin_plugin(), a, b])
    assert c.conflicts == ()
    assert {"pa", "pb", "mllm"} <= set(c.packs)
    assert c.pack("pa") == tmp_path and c.pack("nope") is None
    assert c.functions.get("fa") is not None and c.functions.get("fb") is not None
    assert c.functions.get("rank") is not None  # built-ins stay
    assert set(c.kernels["da"]) == {"Op", "Other"}
    assert "Repeat" in c.kernels["mllm"]
    assert "fea" in c.frontends
    assert tmp_path / "a.xml" in c.opdef_paths
    assert [p.name for p in c.plugins] == ["qlower", "a", "b"]


@pytest.mark.parametrize("kind, make", [
    ("rule pack", lambda who, tmp: Plugin(who, rule_packs={"dup": tmp / who})),
    ("function", lambda who, tmp: Plugin(who, functions=[fn("dup_fn")])),
    ("kernel", lambda who, tmp: Plugin(who, kernels={"toy": {"Dup": kernel}})),
    ("frontend", lambda who, tmp: Plugin(who, frontends=[Frontend("dup_fe", (".dup",), lambda p: None)])),
])
def test_same_name_from_two_plugins_is_a_conflict_and_neither_is_used(tmp_path, kind, make):
    one, two = make("one", tmp_path), make("two", tmp_path)
    keep = Plugin("three", rule_packs={"fine": tmp_path}, functions=[fn("fine_fn")])
    c = merge([builtin_plugin(), one, two, keep])
    (msg,) = conflicts(c)
    assert kind in msg and "one" in msg and "two" in msg
    assert "dup" not in c.packs
    assert c.functions.get("dup_fn") is None
    assert "Dup" not in c.kernels.get("toy", {})
    assert "dup_fe" not in c.frontends
    # the rest still merges
    assert "fine" in c.packs and c.functions.get("fine_fn") is not None


def test_three_claimants_give_two_conflicts_and_no_winner(tmp_path):
    c = merge([Plugin(n, rule_packs={"dup": tmp_path / n}) for n in ["a", "b", "c"]])
    assert len(conflicts(c)) == 2
    assert "dup" not in c.packs


def test_a_plugin_cannot_replace_a_builtin_function():
    c = merge([builtin_plugin(), Plugin("evil", functions=[Function("rank", ("value",), "int", lambda v: 99)])])
    (msg,) = conflicts(c)
    assert "rank" in msg and "evil" in msg
    assert c.functions.get("rank").impl is not None
    assert c.functions.get("rank").returns == "int"
    g = Graph()
    v = g.add_value("v", "float32", [1, 2, 3])
    assert c.functions.get("rank").impl(v) == 3  # still the built-in


def test_a_plugin_cannot_take_over_a_shipped_pack(tmp_path):
    c = merge([builtin_plugin(), Plugin("evil", rule_packs={"mllm": tmp_path})])
    assert "mllm" in conflicts(c)[0]
    assert c.pack("mllm") is None  # neither is used


# ----------------------------------------------------- discovery / installed()

def test_installed_reports_conflicts_from_discovered_plugins(monkeypatch, tmp_path, capsys):
    found = [Plugin("p1", rule_packs={"dup": tmp_path}), Plugin("p2", rule_packs={"dup": tmp_path})]
    monkeypatch.setattr(plugins, "discover", lambda: found)
    c = plugins.installed()
    assert len(c.conflicts) == 1
    with pytest.raises(QlowerError) as exc:
        qlower.load_rules(packs=["dup"])
    assert exc.value.diagnostics[0].code == "no-pack"
    code = main(["plugins"])
    out, err = capsys.readouterr()
    assert code == 1
    assert "p1" in out and "p2" in out and "dup" in err


def test_plugin_pack_loads_through_load_rules(monkeypatch):
    monkeypatch.setattr(plugins, "discover", lambda: [Plugin("toy", rule_packs={"toy": TOY_RULES},
                                                             functions=[fn("toy_half")])])
    r = qlower.load_rules(packs=["toy"])
    assert [x.name for x in r.ruleset.rules if x.name.startswith("toy.")] == ["toy.toy_scale_add", "toy.toy_double"]
    assert r.functions.get("toy_half") is not None


def test_plugin_functions_reach_the_checker(monkeypatch, tmp_path):
    p = tmp_path / "uses_fn.qpat"
    p.write_text("op m.Neg(x) -> y\n\nrule r {\n  match y = m.Neg(x)\n  require halve(rank(x)) == 1\n"
                 "  emit y = qnn.ElementWiseNeg(x)\n}\n")
    with pytest.raises(QlowerError, match="halve"):
        qlower.load_rules([p])
    monkeypatch.setattr(plugins, "discover", lambda: [Plugin("h", functions=[
        Function("halve", ("int",), "int", lambda x: x // 2)])])
    r = qlower.load_rules([p])
    g = Graph()
    x, y = g.add_value("x", "float32", [2, 3]), g.add_value("y", "float32", [2, 3])
    g.add_op("n", "m.Neg", [x], [y])
    g.set_io([x], [y])
    assert r.engine("cpu").run(g).ok
    assert g.op("n").type == "qnn.ElementWiseNeg"


class _EP:
    """Stands in for an importlib.metadata.EntryPoint."""

    def __init__(self, name, obj):
        self.name, self.value, self._obj = name, f"fake:{name}", obj

    def load(self):
        if isinstance(self._obj, Exception):
            raise self._obj
        return self._obj


@pytest.mark.parametrize("obj, fragment", [
    (ImportError("no module named nowhere"), "failed to load"),
    (lambda: "not a plugin", "not qlower.plugins.Plugin"),
    (lambda: 1 / 0, "failed to load"),
])
def test_broken_plugins_are_reported(monkeypatch, obj, fragment):
    monkeypatch.setattr(plugins.metadata, "entry_points", lambda group=None: [_EP("broken", obj)])
    with pytest.raises(QlowerError) as exc:
        plugins.discover()
    (d,) = exc.value.diagnostics
    assert d.code == "plugin-load" and "broken" in d.message and fragment in d.message


def test_discover_sorts_by_name(monkeypatch):
    eps = [_EP("zeta", lambda: Plugin("zeta")), _EP("alpha", Plugin("alpha"))]
    monkeypatch.setattr(plugins.metadata, "entry_points", lambda group=None: eps)
    assert [p.name for p in plugins.discover()] == ["alpha", "zeta"]


# --------------------------------------------------------- the example plugin

def toy_graph() -> Graph:
    g = Graph("toy")
    x = g.add_value("x", "float32", [2, 3])
    y = g.add_value("y", "float32", [2, 3])
    z = g.add_value("z", "float32", [2, 3])
    w = g.add_value("w", "float32", [2, 3])
    g.add_op("sa", "toy.ScaleAdd", [x, y], [z], {"alpha": 3.0})
    g.add_op("dbl", "toy.Double", [z], [w])
    g.set_io([x, y], [w])
    return g


def check_toy_plugin_works(tmp_path: Path) -> None:
    c = plugins.installed()
    toy = [p for p in c.plugins if p.name == "toy"]
    assert len(toy) == 1 and toy[0].version == "0.1.0"
    assert c.conflicts == ()
    assert c.pack("toy") is not None
    assert c.functions.get("toy_half") is not None
    assert set(c.kernels["toy"]) == {"ScaleAdd", "Double"}

    rules = qlower.load_rules(packs=["toy"])
    g = toy_graph()
    res = qlower.lower(g, rules, "cpu")
    res.raise_for_errors()
    assert res.qnn_op_counts() == {"ElementWiseAdd": 2, "ElementWiseMultiply": 1}
    assert {o.provenance.rule for o in g.ops} == {"toy.toy_scale_add", "toy.toy_double"}

    from qlower.qnn.reader import load
    from qlower.reference.interpreter import run

    res.save(tmp_path)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.ones((2, 3), np.float32)
    out = run(load(tmp_path / "toy_net.json"), {"x": x, "y": y})
    np.testing.assert_allclose(out["w"], 2 * (3 * x + y), rtol=1e-6)

    # its test blocks run against its own reference kernels
    assert main(["test", str(c.pack("toy")), "--examples", "2"]) == 0
    assert main(["plugins"]) == 0


def test_example_plugin_installed_through_its_entry_point(tmp_path, capsys):
    pytest.importorskip("qlower_toy")
    check_toy_plugin_works(tmp_path)
    out, _ = capsys.readouterr()
    assert "toy 0.1.0" in out and "rule packs: toy" in out and "toy_half" in out


def test_example_plugin_through_entry_point_metadata(tmp_path, monkeypatch, capsys):
    """The same, without pip: a dist-info folder on sys.path declares the entry point."""
    if any(ep.name == "toy" for ep in metadata.entry_points(group=plugins.GROUP)):
        pytest.skip("qlower_toy is installed; the test above covers it")
    site = tmp_path / "site"
    dist = site / "qlower_toy-0.1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: qlower-toy\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[qlower.plugins]\ntoy = qlower_toy:plugin\n")
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "qlower_toy", raising=False)
    assert [ep.name for ep in metadata.entry_points(group=plugins.GROUP)] == ["toy"]
    check_toy_plugin_works(tmp_path)
    out, _ = capsys.readouterr()
    assert "toy 0.1.0" in out and "rule packs: toy" in out and "toy_half" in out
