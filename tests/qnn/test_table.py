"""QnnTable: a QNN graph as kinds and names, and what walks it (validation, MACs, the writers).

Laws: the table of a graph is the graph (its object view gives it back); validating per kind finds
what validating each op on its own finds; the writers' fast paths (per-kind text, compiled joins for
plain names) write what formatting each tensor and node on its own writes.
"""

from __future__ import annotations

import json
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qlower.graph.core import Graph, Provenance
from qlower.qnn import emit_cpp, emit_json
from qlower.qnn.convert import origin_of, to_table
from qlower.qnn.joiner import all_identifiers, all_plain_json, compile_join
from qlower.qnn.macs import graph_macs, op_macs, shipped_table
from qlower.qnn.datatypes import DataType
from qlower.qnn.model import OpConfig, Origin, QnnGraph, QnnTensor, ScalarParam, TensorType
from qlower.qnn.opdef import OpDefRegistry
from qlower.qnn.table import table_of
from qlower.qnn.validate import validate_graph, validate_op
from tests.qnn.test_artifacts import assert_graph_equal, chain_graph, graphs, rich_graph

_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_identifiers = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,5}", fullmatch=True)
_any_names = st.lists(st.text(min_size=0, max_size=4), max_size=6)


@pytest.fixture(scope="module")
def registry() -> OpDefRegistry:
    return OpDefRegistry.load()


# ------------------------------------------------------------------ the joiner

@given(_any_names)
def test_all_identifiers_is_each_name_an_identifier(names: list[str]) -> None:
    assert all_identifiers(names) == all(n.isascii() and n.isidentifier() for n in names)


@given(_any_names)
def test_all_plain_json_is_each_name_its_own_json_string(names: list[str]) -> None:
    assert all_plain_json(names) == all(n and json.dumps(n) == f'"{n}"' for n in names)


@given(st.lists(st.one_of(st.text(max_size=3), st.sampled_from([("n",), ("i", 0), ("i", 1), ("o", 0), ("s",)])),
                max_size=8),
       st.text(max_size=3), st.lists(st.text(max_size=3), min_size=2, max_size=2),
       st.lists(st.text(max_size=3), min_size=1, max_size=1), st.lists(st.text(max_size=3), max_size=3))
def test_compile_join_fills_each_slot(parts, n, ins, outs, srcs) -> None:
    def value(p):
        if isinstance(p, str):
            return p
        if p[0] == "s":
            return ", ".join(f'"{x}"' for x in srcs)
        return {"n": n, "i": ins, "o": outs}[p[0]] if len(p) == 1 else {"i": ins, "o": outs}[p[0]][p[1]]

    # the op's names sit in flat lists after other ops' names, at its offsets
    flat_in, flat_out = ["x", "y", *ins, "z"], ["u", *outs]
    assert compile_join(parts)(n, flat_in, 2, flat_out, 1, tuple(srcs)) == "".join(map(value, parts))


# ------------------------------------------------------------------ the table

@_SETTINGS
@given(graphs())
def test_the_table_of_a_graph_gives_the_graph_back(g: QnnGraph) -> None:
    table = table_of(g)
    assert_graph_equal(g, table.graph())


def test_ops_of_one_signature_share_a_kind() -> None:
    table = table_of(chain_graph(50))
    # MatMul, Sigmoid, Multiply, Add; the first MatMul and Add (they read the APP_WRITE x0) and the last
    # Add (its output is APP_READ) are kinds of their own
    assert len(table.op_kinds) == 7
    assert table.op_type_counts() == {"ElementWiseAdd": 50, "ElementWiseMultiply": 50, "MatMul": 50, "Sigmoid": 50}


# ------------------------------------------------------------------ what walks it

# Op signatures a graph repeats (so ops share kinds): a type, its params and where it came from. A
# Softmax over axis 5 of a rank-2 tensor is invalid, so a kind with findings is shared by several ops.
_SIGNATURES = [("Sigmoid", []), ("ElementWiseAdd", []), ("Softmax", [("axis", DataType.UINT_32, 1)]),
               ("Softmax", [("axis", DataType.UINT_32, 5)]), ("ElementWiseMultiply", [])]
_ORIGINS = [None, Origin("r1", "pack/a.qpat:1", ()), Origin("r2", "pack/a.qpat:1", ())]


@st.composite
def repeated_graphs(draw) -> QnnGraph:
    """A chain of 8-20 ops, each one of at most three (signature, origin) pairs: ops share kinds."""
    pairs = st.tuples(st.integers(0, len(_SIGNATURES) - 1), st.integers(0, len(_ORIGINS) - 1))
    pool = draw(st.lists(pairs, min_size=1, max_size=3, unique=True))
    picks = draw(st.lists(st.sampled_from(pool), min_size=8, max_size=20))
    g = QnnGraph("repeated")
    g.add_tensor(QnnTensor("x0", TensorType.APP_WRITE, DataType.FLOAT_32, (2, 8)))
    prev = "x0"
    for i, (s, o) in enumerate(picks):
        op_type, params = _SIGNATURES[s]
        out = f"t{i}"
        g.add_tensor(QnnTensor(out, TensorType.APP_READ if i == len(picks) - 1 else TensorType.NATIVE,
                               DataType.FLOAT_32, (2, 8)))
        inputs = [prev] if op_type in ("Sigmoid", "Softmax") else [prev, "x0"]
        origin = _ORIGINS[o]
        if origin is not None:
            origin = Origin(origin.rule, origin.location, (f"src{i}",))
        g.ops.append(OpConfig(f"op{i}", op_type, inputs, [out], [ScalarParam(*p) for p in params],
                              provenance=None if origin is None else f"rule {origin.rule} at {origin.location}",
                              origin=origin))
        prev = out
    g.inputs, g.outputs = ["x0"], [prev]
    return g


@_SETTINGS
@given(g=repeated_graphs())
def test_ops_that_share_a_kind_keep_their_own_facts(registry: OpDefRegistry, g: QnnGraph) -> None:
    """Laws on graphs whose ops share kinds: the table gives each op back (names, origin, provenance),
    validation per kind finds what validating each op finds, MACs per kind are each op's."""
    table = table_of(g)
    assert len(table.op_kinds) < len(g.ops)  # (what this strategy is for)
    assert_graph_equal(g, table.graph())
    for backend in ("cpu", "htp"):
        each = [d.render() for op in g.ops for d in validate_op(op, g, registry, backend)]
        assert [d.render() for d in validate_graph(table, registry, backend)] == each
    assert graph_macs(table) == [op_macs(op, g.tensors, shipped_table()) for op in g.ops]


@_SETTINGS
@given(g=graphs())
def test_validating_per_kind_finds_what_validating_each_op_finds(registry: OpDefRegistry, g: QnnGraph) -> None:
    for backend in ("cpu", "htp"):
        each = [d for op in g.ops for d in validate_op(op, g, registry, backend)]
        assert [d.render() for d in validate_graph(g, registry, backend)] == [d.render() for d in each]


def test_a_kind_with_findings_names_each_node(registry: OpDefRegistry) -> None:
    g = chain_graph(3)
    for op in g.ops:
        if op.type == "Sigmoid":
            op.outputs = [op.outputs[0], "nowhere"]
    found = [d for d in validate_graph(g, registry, "htp") if d.code == "unknown-tensor"]
    assert [d.subject.split()[1] for d in found] == ["sig0", "sig1", "sig2"]
    assert all("`nowhere`" in d.message for d in found)


@_SETTINGS
@given(graphs())
def test_macs_per_kind_are_each_ops_macs(g: QnnGraph) -> None:
    assert graph_macs(g) == [op_macs(op, g.tensors, shipped_table()) for op in g.ops]


@_SETTINGS
@given(g=graphs(names_from=_identifiers))
def test_plain_names_write_what_escaping_each_name_writes(g: QnnGraph) -> None:
    """Identifier names take the compiled joins of both writers; the bytes are the reference's."""
    assert emit_cpp.render(g) == emit_cpp.render(g, templates=False)
    fast = emit_json.dumps(g)
    with mock.patch.object(emit_json, "all_plain_json", lambda names: False):
        assert fast == emit_json.dumps(g)


def test_the_rich_graph_takes_the_general_paths_and_a_chain_the_fast_ones() -> None:
    """Which path each writer takes: compiled joins for a chain of identifier names; the rich graph's
    names are no C identifiers, so the .cpp writer formats them one by one (its JSON names need no
    escaping: that writer still joins); each writes the reference bytes."""
    rich = rich_graph()
    plain_json = all_plain_json([*rich.tensors, *(op.name for op in rich.ops)])
    for g, fast in ((rich, (False, plain_json)), (chain_graph(4), (True, True))):
        with mock.patch.object(emit_cpp, "compile_join", wraps=compile_join) as cpp_joins, \
                mock.patch.object(emit_json, "compile_join", wraps=compile_join) as json_joins:
            text = emit_cpp.render(g)
            doc = json.loads(emit_json.dumps(g))
        assert (cpp_joins.call_count > 0, json_joins.call_count > 0) == fast, g.name
        assert text == emit_cpp.render(g, templates=False)
        assert list(doc["graph"]["nodes"]) == [op.name for op in g.ops]
    assert doc["graph"]["tensors"]["w1"]["id"] == 1 + 5  # x0, then w0 h0 s0 y0 x1 before it


# ------------------------------------------------------------------ conversion keeps each op's own facts

_PROVENANCES = [None, Provenance("r1", "pack/a.qpat:1:1", "", ()), Provenance("r2", "pack/a.qpat:1:1", "", ()),
                Provenance("compute in[0]", "qlower/qnn/retype.py", "", ()),
                Provenance("compute in[0]/out[0]", "qlower/qnn/retype.py", "", ()),
                Provenance("r1", "pack/b.qpat:7:3", "", ())]


@_SETTINGS
@given(st.lists(st.tuples(st.sampled_from(["qnn.Sigmoid", "qnn.ElementWiseAdd"]),
                          st.integers(0, len(_PROVENANCES) - 1)), min_size=2, max_size=24))
def test_conversion_gives_each_op_its_own_rule_and_sources(ops: list[tuple[str, int]]) -> None:
    """Law: ops that share everything but their rule (several rules can share a location, as the
    retype pass's do) each keep their own rule, location and source nodes: the converted op's origin is
    `origin_of` the source op, its provenance the source op's."""
    g = Graph("g")
    prev = x = g.add_value("x", "float32", [2, 3])
    for i, (op_type, p) in enumerate(ops):
        y = g.add_value(f"y{i}", "float32", [2, 3])
        prov = _PROVENANCES[p]
        if prov is not None:
            prov = prov._replace(source=f"n{i}", sources=(f"n{i}",))
        g.add_op(f"op{i}", op_type, [prev] if op_type == "qnn.Sigmoid" else [prev, x], [y], {}, prov)
        prev = y
    g.set_io([x], [prev])
    converted = {op.name: op for op in to_table(g).graph().ops}
    for op in g.ops:
        got = converted[op.name]
        assert got.origin == origin_of(op)
        assert got.provenance == (None if op.provenance is None else str(op.provenance))
