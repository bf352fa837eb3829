"""QnnTable.check (`qlower.qnn.table.check_table`): the table's own invariants.

Laws: every table conversion and `table_of` make keeps them (lowered graphs, random QNN graphs, graphs
whose ops share kinds), and each way of breaking one is reported, so the check can fail; the rule-test
helper runs it on every rule test's converted table.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import qlower
from qlower import Graph
from qlower.qnn import convert
from qlower.qnn.datatypes import DataType
from qlower.qnn.model import OpConfig, QnnGraph, QnnTensor, TensorType
from qlower.qnn.table import UNKNOWN, QnnTable, table_of
from qlower.verify.testcase import RuleTest, RuleTestFailure
from tests.qnn.test_artifacts import graphs, rich_graph
from tests.qnn.test_table import repeated_graphs

_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PACK = Path(__file__).resolve().parents[2] / "patterns" / "mllm"


@pytest.fixture(scope="module")
def rules() -> qlower.Rules:
    return qlower.load_rules(packs=["mllm"])


def _graph() -> Graph:
    """A small mllm graph whose table has every part: static data (weights, LayerNorm's params), tensor
    params (Transpose's perm), kinds shared by several ops, graph inputs and outputs."""
    g = Graph("small")
    rng = np.random.default_rng(0)
    x = prev = g.add_value("x", "float32", [1, 4, 8])
    for i in range(3):
        w = g.add_value(f"w{i}", "float32", [8], data=rng.standard_normal(8).astype(np.float32))
        b = g.add_value(f"b{i}", "float32", [8], data=np.zeros(8, np.float32))
        n = g.add_value(f"n{i}", "float32", [1, 4, 8])
        g.add_op(f"ln{i}", "mllm.LayerNorm", [prev, w, b], [n], {"epsilon": -0.0 if i == 1 else 1e-5})
        t = g.add_value(f"t{i}", "float32", [1, 8, 4])
        g.add_op(f"tr{i}", "mllm.Transpose", [n], [t], {"dim0": 1, "dim1": 2})
        s = g.add_value(f"s{i}", "float32", [1, 8, 4])
        g.add_op(f"silu{i}", "mllm.SiLU", [t], [s])
        prev = g.add_value(f"y{i}", "float32", [1, 4, 8])
        g.add_op(f"back{i}", "mllm.Transpose", [s], [prev], {"dim0": 1, "dim1": 2})
    g.set_io([x], [prev])
    return g


@pytest.fixture
def table(rules) -> QnnTable:
    res = qlower.lower(_graph(), rules, backend="cpu")
    res.raise_for_errors()
    assert res.table.tensor_data and res.table.op_params and len(res.table.op_kinds) < len(res.table)
    return res.table


# ------------------------------------------------------------------ tables that keep them

def test_a_lowered_table_keeps_its_invariants(table: QnnTable) -> None:
    assert table.check() == []
    assert table_of(table.graph()).check() == []


@_SETTINGS
@given(graphs())
def test_the_table_of_any_graph_keeps_them(g: QnnGraph) -> None:
    assert table_of(g).check() == []


@_SETTINGS
@given(repeated_graphs())
def test_tables_whose_ops_share_kinds_keep_them(g: QnnGraph) -> None:
    assert table_of(g).check() == []


def test_the_rich_graph_keeps_them() -> None:
    assert table_of(rich_graph()).check() == []


def test_a_name_that_is_no_tensor_is_open_not_broken() -> None:
    """A converter's file may name a tensor it lacks: its kind says UNKNOWN (validation reports it); only
    a closed table (conversion's) must not."""
    g = QnnGraph("g")
    g.add_tensor(QnnTensor("x", TensorType.APP_WRITE, DataType.FLOAT_32, (2,)))
    g.add_tensor(QnnTensor("y", TensorType.APP_READ, DataType.FLOAT_32, (2,)))
    g.ops.append(OpConfig("op", "ElementWiseAdd", ["x", "nowhere"], ["y"]))
    g.inputs, g.outputs = ["x"], ["y"]
    table = table_of(g)
    assert table.check(closed=False) == []
    assert [m for m in table.check() if "names no tensor" in m] == ["op 0 (op) input 1 `nowhere` names no tensor"]
    kind = table.op_kinds[0]
    assert kind.inputs[1] == UNKNOWN
    table.op_kinds[0] = attrs.evolve(kind, inputs=(kind.inputs[0], kind.inputs[0]))
    assert any("its kind says" in m for m in table.check(closed=False))


# ------------------------------------------------------------------ each way of breaking one is caught

def _other_kind_name(t: QnnTable, name: str) -> str:
    k = t.tensor_kind[t.tensor_names.index(name)]
    return next(n for n, j in zip(t.tensor_names, t.tensor_kind) if j != k)


def _first_static(t: QnnTable) -> int:
    return next(iter(t.tensor_data))


def _first_native(t: QnnTable) -> int:
    return next(i for i, k in enumerate(t.tensor_kind) if t.tensor_kinds[k].type is TensorType.NATIVE)


def _duplicate_kind(t: QnnTable) -> None:
    i = _first_native(t)
    t.tensor_kinds.append(t.tensor_kinds[t.tensor_kind[i]])
    t.tensor_kind[i] = len(t.tensor_kinds) - 1


def _duplicate_op_kind(t: QnnTable) -> None:
    i = next(i for i, k in enumerate(t.op_kind) if not t.op_kinds[k].tensor_params)
    t.op_kinds.append(attrs.evolve(t.op_kinds[t.op_kind[i]]))
    t.op_kind[i] = len(t.op_kinds) - 1


def _reversed_ops(t: QnnTable) -> QnnTable:
    qg = t.graph()
    qg.ops.reverse()
    return table_of(qg)


def _second_producer(t: QnnTable) -> None:
    t.op_output_names[1] = t.op_output_names[0]


CORRUPTIONS: dict[str, tuple[Callable[[QnnTable], QnnTable | None], str]] = {
    "a dangling tensor kind id": (lambda t: t.tensor_kind.__setitem__(3, len(t.tensor_kinds)), "not one of"),
    "a negative tensor kind id": (lambda t: t.tensor_kind.__setitem__(0, -1), "not one of"),
    "a dangling op kind id": (lambda t: t.op_kind.__setitem__(0, len(t.op_kinds) + 3), "not one of"),
    "an op kind naming no tensor kind": (lambda t: t.op_kinds.__setitem__(0, attrs.evolve(
        t.op_kinds[0], inputs=(len(t.tensor_kinds) + 7,) + t.op_kinds[0].inputs[1:])), "has tensor kind"),
    "an op input renamed to no tensor": (lambda t: t.op_input_names.__setitem__(0, "nowhere"), "names no tensor"),
    "an op input renamed to a tensor of another kind": (lambda t: t.op_input_names.__setitem__(
        0, _other_kind_name(t, t.op_input_names[0])), "its kind says"),
    "a missing output name": (lambda t: t.op_output_names.pop(), "output names"),
    "an extra input name": (lambda t: t.op_input_names.append("x"), "input and"),
    "a missing op source": (lambda t: t.op_sources.pop(), "op sources"),
    "a missing tensor kind id": (lambda t: t.tensor_kind.pop(), "tensor kind ids"),
    "two tensors of one name": (lambda t: t.tensor_names.__setitem__(5, t.tensor_names[4]), "both named"),
    "two ops of one name": (lambda t: t.op_names.__setitem__(2, t.op_names[1]), "both named"),
    "two producers of a tensor": (_second_producer, "also the output"),
    "ops out of execution order": (_reversed_ops, "the later op"),
    "static data dropped": (lambda t: t.tensor_data.pop(_first_static(t)), "has no data"),
    "data on a native tensor": (lambda t: t.tensor_data.__setitem__(_first_native(t), np.zeros(1)), "has data"),
    "data of no tensor": (lambda t: t.tensor_data.__setitem__(len(t.tensor_names) + 1, np.zeros(1)),
                          "no tensor index"),
    "tensor params dropped": (lambda t: t.op_params.pop(next(iter(t.op_params))), "tensor params"),
    "tensor params on an op without": (lambda t: t.op_params.__setitem__(
        next(i for i in range(len(t)) if i not in t.op_params), next(iter(t.op_params.values()))), "no tensor params"),
    "a tensor param of another kind": (lambda t: t.op_params.__setitem__(
        next(iter(t.op_params)), tuple(attrs.evolve(x, dims=(9, 9)) for x in next(iter(t.op_params.values())))),
        "prototype"),
    "two tensor kinds one under the keys": (_duplicate_kind, "one kind under qlower.qnn.keys"),
    "two op kinds one under the keys": (_duplicate_op_kind, "one kind under qlower.qnn.keys"),
    "a graph output that is no tensor": (lambda t: t.outputs.append("nowhere"), "graph output `nowhere`"),
    "a graph input that is no tensor": (lambda t: t.inputs.__setitem__(0, "gone"), "graph input `gone`"),
    "an unproduced tensor unlisted": (lambda t: t.unproduced.pop(0), "unproduced"),
    "a produced tensor listed unproduced": (lambda t: t.unproduced.append(len(t.tensor_names) - 1), "unproduced"),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_corrupted_table_is_caught(table: QnnTable, corruption: str) -> None:
    corrupt, says = CORRUPTIONS[corruption]
    assert table.check() == []
    got = corrupt(table)
    broken = (got if isinstance(got, QnnTable) else table).check()
    assert broken, f"{corruption}: not caught"
    assert any(says in m for m in broken), broken


def test_a_badly_broken_table_lists_a_bounded_number_of_problems(table: QnnTable) -> None:
    table.tensor_kind[:] = [len(table.tensor_kinds)] * len(table.tensor_kind)
    table.tensor_kind.extend([99] * 200)
    table.tensor_names.extend(f"extra{i}" for i in range(200))
    broken = table.check()
    assert 1 < len(broken) <= 52 and broken[-1] == "... more kind id problems"


# ------------------------------------------------------------------ every rule test runs it

def test_a_rule_test_fails_when_conversion_breaks_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    rules = qlower.load_rules([PACK])  # (as tests/verify/test_mutants.py runs a shipped test block)
    test = next(t for t in rules.ruleset.tests if t.name == "mllm.repeat_interleave")
    RuleTest(test, rules, "repeat.qpat").run(examples=2)
    real = convert.to_table

    def broken(*args, **kwargs) -> QnnTable:
        t = real(*args, **kwargs)
        t.unproduced = []
        return t

    monkeypatch.setattr(convert, "to_table", broken)
    with pytest.raises(RuleTestFailure, match="breaks its invariants"):
        RuleTest(test, rules, "repeat.qpat").run(examples=2)
