"""The typed load path (msgspec, for big files: straight into `Value`s and `Op`s) builds exactly what the
general path builds, and gives way to it for everything it does not take as is: the general path then
reports the problems."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qlower.diagnostics import QlowerError
from qlower.graph import io as gio
from qlower.graph.io import dumps_graph, loads_graph

from tests.graph.test_io import PATHS, assert_same, doc, graphs, json_values  # noqa: E402


def _load_both(text: str, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object, list]:
    """(general path's graph or error, auto path's graph or error, what the typed builder returned)."""
    built: list = []
    real = gio._Loader.load_typed

    def spy(self, d):
        g = real(self, d)
        built.append(g)
        return g

    with monkeypatch.context() as m:
        m.setattr(gio, "_TYPED_MIN", float("inf"))  # the general path only
        try:
            general = loads_graph(text)
        except QlowerError as e:
            general = e
    with monkeypatch.context() as m:
        m.setattr(gio, "_TYPED_MIN", 0)
        m.setattr(gio._Loader, "load_typed", spy)
        try:
            auto = loads_graph(text)
        except QlowerError as e:
            auto = e
    return general, auto, built


def _not_plain_json(text: str) -> bool:
    """Text msgspec refuses as JSON although Python's json reads it."""
    return any(w in text for w in ("NaN", "Infinity", "\\ud8", "\\ud9", "\\uda", "\\udb", "\\udc", "\\udd",
                                   "\\ude", "\\udf")) or "e+" in text.lower() and "inf" in text.lower()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(g=graphs())
def test_typed_path_builds_the_same_graph(g, monkeypatch):
    text = dumps_graph(g)
    general, auto, built = _load_both(text, monkeypatch)
    assert not isinstance(general, QlowerError)
    assert_same(general, auto)
    assert dumps_graph(auto) == text
    if not _not_plain_json(text):
        assert built and built[0] is auto  # the typed path made it (the law is not vacuous)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.lists(st.tuples(st.sampled_from(PATHS), json_values), min_size=1, max_size=3))
def test_typed_path_takes_nothing_the_general_path_refuses(changes, monkeypatch):
    """On any change to a valid file: the same graph, or the same located errors (which only the
    general path reports: the typed one gives way at the first problem)."""
    try:
        text = doc(**dict(changes))
    except (KeyError, TypeError, IndexError, ValueError):
        return
    general, auto, built = _load_both(text, monkeypatch)
    if isinstance(general, QlowerError):
        assert isinstance(auto, QlowerError)
        assert [d.render() for d in auto.diagnostics] == [d.render() for d in general.diagnostics]
        assert built == [] or built == [None]
    else:
        assert not isinstance(auto, QlowerError)
        assert_same(general, auto)


def test_big_ints_and_absent_inputs_read_like_json(monkeypatch):
    """msgspec reads integers beyond 64 bits exactly (orjson, the general path's fast decoder, would
    not); "" inputs are absent operands; explicit nulls are absent keys."""
    d = json.loads(doc())
    d["nodes"][0]["attrs"]["big"] = 2**70
    d["nodes"][0]["inputs"] = ["x", ""]
    d["tensors"]["x"]["quant"] = None
    d["tensors"]["x"]["data"] = None
    general, auto, built = _load_both(json.dumps(d), monkeypatch)
    assert built and built[0] is auto
    assert_same(general, auto)
    assert auto.op("rep").attrs["big"] == 2**70 and auto.op("rep").operands[1] is None


def test_a_big_file_with_an_error_is_reported_by_the_general_path():
    """A file big enough for the typed path, with one bad node deep inside: the message locates it."""
    tensors = {f"t{i}": {"dtype": "float32", "shape": [2]} for i in range(30001)}
    nodes = [{"name": f"n{i}", "op": "mllm.Neg", "inputs": [f"t{i}"], "outputs": [f"t{i + 1}"]} for i in range(30000)]
    nodes[29000]["inputs"] = ["nope"]
    text = json.dumps({"format": "qlower-graph/1", "inputs": ["t0"], "outputs": ["t30000"], "tensors": tensors,
                       "nodes": nodes})
    assert len(text) >= gio._TYPED_MIN
    with pytest.raises(QlowerError) as e:
        loads_graph(text)
    [d] = e.value.diagnostics
    assert "nope" in d.message and "n29000" in d.message and d.span is not None
    nodes[29000]["inputs"] = ["t29000"]
    g = loads_graph(json.dumps({"format": "qlower-graph/1", "inputs": ["t0"], "outputs": ["t30000"],
                                "tensors": tensors, "nodes": nodes}))
    assert len(g) == 30000 and math.prod(g.value("t5").shape) == 2


def _two_nodes() -> dict:
    d = json.loads(doc())
    d["tensors"]["z"] = {"dtype": "uint8", "shape": [1, 8, 8, 64]}
    d["nodes"].append({"name": "neg", "op": "mllm.Neg", "inputs": ["y"], "outputs": ["z"]})
    d["outputs"] = ["z"]
    return d


def _set(d: dict, path: str, value) -> dict:
    *head, last = path.split("__")
    target = d
    for k in head:
        target = target[int(k)] if isinstance(target, list) else target[k]
    target[last] = value
    return d


BROKEN = [("nodes__1__op", "Neg"), ("nodes__1__op", ""), ("nodes__1__name", ""), ("nodes__1__name", "rep"),
          ("nodes__1__outputs", [""]), ("nodes__1__outputs", ["y"]),
          ("nodes__1__outputs", ["z", "z"]), ("nodes__1__inputs", ["q"]), ("nodes__1__inputs", ["", "q"]),
          ("nodes__1__attrs", {"a": {"b": 1}}), ("nodes__1__attrs", {"a": [1, {"b": 1}]}),
          ("tensors__z__dtype", "f32"), ("tensors__z__shape", [1, -1]), ("inputs", ["x", "x"]),
          ("inputs", ["z"]), ("outputs", ["nope"]), ("format", "qlower-graph/2"), ("tensors__", {"dtype": "int8"}),
          ("tensors__w__shape", [3, 2]), ("tensors__y__quant", {"scale": -1.0}),
          # keys the format does not have, though Value and Op have such fields (the graph's bookkeeping)
          ("tensors__z__producer", None), ("tensors__z__is_input", False), ("tensors__z__users", []),
          ("tensors__z__name", "z"), ("tensors__z__owner", None), ("nodes__1__provenance", None),
          ("nodes__1__dead", False), ("nodes__1__owner", None), ("nodes__1__type", "mllm.Neg"),
          ("nodes__1__operands", ["y"])]


@pytest.mark.parametrize(("path", "value"), BROKEN)
def test_each_problem_makes_the_typed_path_give_way(path, value, monkeypatch):
    text = json.dumps(_set(_two_nodes(), path, value))
    general, auto, built = _load_both(text, monkeypatch)
    assert isinstance(general, QlowerError), (path, value)
    assert isinstance(auto, QlowerError) and built in ([], [None])
    assert [d.render() for d in auto.diagnostics] == [d.render() for d in general.diagnostics]


@pytest.mark.parametrize("change", [None, ("nodes__1__outputs", []), ("nodes__1__inputs", ["", "y"]),
                                    ("nodes__1__attrs", {"a": [1, [2.5, None, "s"]], "b": True})])
def test_valid_files_are_built_by_the_typed_path(change, monkeypatch):
    d = _two_nodes() if change is None else _set(_two_nodes(), *change)
    general, auto, built = _load_both(json.dumps(d), monkeypatch)
    assert not isinstance(general, QlowerError)
    assert built and built[0] is auto
    assert_same(general, auto)
