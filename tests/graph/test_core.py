"""The graph IR: building, editing, execution order, names — and that the networkx view and the
operand/result/user lists always agree."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qlower.graph import Graph, GraphError, Provenance, Quant


def check_consistent(g: Graph) -> None:
    """The list view (operands, results, users, producer) and the networkx view agree."""
    ops = list(g.ops)
    values = list(g.values)
    for op in ops:
        assert not op.dead
        assert g.op(op.name) is op
        for i, v in enumerate(op.operands):
            if v is not None:
                assert (op, i) in v.users, (op, i, v)
                assert g.nx.has_edge(v, op, key=i)
                assert g.value(v.name) is v
        for i, r in enumerate(op.results):
            assert r.producer is op
            assert g.nx.has_edge(op, r, key=i)
            assert g.value(r.name) is r
    for v in values:
        assert g.value(v.name) is v
        for user, i in v.users:
            assert user.operands[i] is v
            assert g.has_op(user.name) and g.op(user.name) is user
        assert len(v.users) == len(set((id(u), i) for u, i in v.users))
        if v.producer is not None:
            assert any(r is v for r in v.producer.results)
    edges = sum(1 for op in ops for v in op.operands if v is not None) + sum(len(op.results) for op in ops)
    assert g.nx.number_of_edges() == edges
    assert g.nx.number_of_nodes() == len(ops) + len(values)
    assert {v for v in g.inputs if not v.is_input} == set()
    assert {v for v in g.outputs if not v.is_output} == set()


def chain(n: int = 3) -> Graph:
    """x -> op0 -> v0 -> op1 -> v1 ...; the last value is the output."""
    g = Graph("chain")
    x = g.add_value("x", "float32", [2, 3])
    v = x
    for i in range(n):
        out = g.add_value(f"v{i}", "float32", [2, 3])
        g.add_op(f"op{i}", "m.Neg", [v], [out])
        v = out
    g.set_io([x], [v])
    return g


# ---------------------------------------------------------------- building

def test_add_value_normalizes_dtype_and_shape():
    g = Graph()
    v = g.add_value("v", "float16", [2, 3])
    assert v.dtype == np.dtype("float16") and isinstance(v.dtype, np.dtype)
    assert v.shape == (2, 3)
    assert g.add_value("s", np.float32, []).shape == ()
    assert g.add_value("u", "int8", None).shape is None
    w = g.add_value("w", "int8", [2], quant=Quant(0.5, 1), data=np.array([1, 2], np.int8))
    assert w.is_const and w.quant == Quant(0.5, 1)
    assert [c.name for c in g.iter_consts()] == ["w"]
    check_consistent(g)


@pytest.mark.parametrize("shape", [
    [np.int64(2), 3],
    np.array([2, 3]),
    pytest.param((np.int64(2), np.int32(3))),
    pytest.param(tuple(np.array([2, 3]))),
])
def test_shape_dims_are_python_ints(shape):
    g = Graph()
    v = g.add_value("v", "float32", shape)
    assert v.shape == (2, 3)
    assert all(type(d) is int for d in v.shape)


def test_duplicate_names_are_errors():
    g = chain(1)
    with pytest.raises(GraphError, match="x"):
        g.add_value("x", "float32", [1])
    with pytest.raises(GraphError, match="op0"):
        g.add_op("op0", "m.Neg", [g.value("x")], [g.add_value("fresh", "float32", [1])])
    check_consistent(g)


def test_add_op_links_operands_results_and_users():
    g = Graph()
    x = g.add_value("x", "float32", [2])
    y = g.add_value("y", "float32", [2])
    op = g.add_op("sq", "m.Mul", [x, x], [y], {"a": 1})
    assert x.users == [(op, 0), (op, 1)]
    assert y.producer is op and x.producer is None
    assert op.attrs == {"a": 1} and op.dialect == "m"
    assert g.nx.number_of_edges(x, op) == 2  # one edge per operand position
    assert len(g) == 1 and g.has_op("sq") and not g.has_op("nope")
    check_consistent(g)


def test_absent_operand_has_no_user_entry():
    g = Graph()
    x = g.add_value("x", "float32", [2])
    y = g.add_value("y", "float32", [2])
    op = g.add_op("lin", "m.Lin", [x, None, x], [y])
    assert op.operands[1] is None
    assert x.users == [(op, 0), (op, 2)]
    check_consistent(g)


def test_add_op_with_an_already_produced_result_changes_nothing():
    g = chain(1)
    before = (g.value("x").users[:], g.nx.number_of_nodes(), g.nx.number_of_edges())
    with pytest.raises(GraphError, match="v0"):
        g.add_op("again", "m.Neg", [g.value("x")], [g.value("v0")])
    assert not g.has_op("again")
    assert (g.value("x").users, g.nx.number_of_nodes(), g.nx.number_of_edges()) == before
    assert g.value("v0").producer is g.op("op0")
    check_consistent(g)
    g.topo_order()


def test_set_io_marks_and_unmarks():
    g = chain(2)
    x, v0, v1 = g.value("x"), g.value("v0"), g.value("v1")
    assert x.is_input and v1.is_output and not v0.is_output
    g.set_io([x], [v0, v1])
    assert v0.is_output and v1.is_output
    g.set_io([], [v0])
    assert not x.is_input and not v1.is_output and v0.is_output
    assert g.inputs == [] and g.outputs == [v0]


def test_bulk_building_gives_the_same_graph():
    def build(g: Graph) -> None:
        x = g.add_value("x", "float32", [2])
        c = g.add_value("c", "float32", [2], data=np.ones(2, np.float32))
        a = g.add_value("a", "float32", [2])
        b = g.add_value("b", "float32", [2])
        g.add_op("op_a", "m.Mul", [x, x], [a])
        g.add_op("op_b", "m.Add", [a, None, c], [b])
        g.set_io([x], [b])

    plain, bulk = Graph(), Graph()
    build(plain)
    with bulk.bulk():
        build(bulk)
    check_consistent(plain)
    check_consistent(bulk)

    def edges(g):
        return sorted((u.name, v.name, k) for u, v, k in g.nx.edges(keys=True))

    assert edges(plain) == edges(bulk)
    assert [o.name for o in plain.topo_order()] == [o.name for o in bulk.topo_order()]


# ------------------------------------------------------------- topo order

def test_topo_order_puts_producers_first_and_is_deterministic():
    g = Graph()
    x = g.add_value("x", "float32", [2])
    vals = {n: g.add_value(n, "float32", [2]) for n in "abcd"}
    # inserted consumers first
    g.add_op("d", "m.Add", [vals["b"], vals["c"]], [vals["d"]])
    g.add_op("c", "m.Neg", [vals["a"]], [vals["c"]])
    g.add_op("b", "m.Neg", [vals["a"]], [vals["b"]])
    g.add_op("a", "m.Neg", [x], [vals["a"]])
    order = [o.name for o in g.topo_order()]
    assert order.index("a") < order.index("b") < order.index("d")
    assert order.index("c") < order.index("d")
    assert order == [o.name for o in g.topo_order()]
    assert sorted(order) == ["a", "b", "c", "d"]


def test_topo_order_reports_a_cycle():
    g = chain(3)
    g.set_operand(g.op("op0"), 0, g.value("v2"))  # op0 now consumes op2's result
    with pytest.raises(GraphError, match="cycle") as exc:
        g.topo_order()
    assert "op0" in str(exc.value)


@st.composite
def dags(draw):
    """A random DAG: each op consumes 1..3 earlier values (maybe the same twice, maybe absent)."""
    g = Graph("rand")
    with_bulk = draw(st.booleans())
    ctx = g.bulk() if with_bulk else _nullcontext()
    with ctx:
        avail = [g.add_value(f"in{i}", "float32", [1]) for i in range(draw(st.integers(1, 3)))]
        inputs = list(avail)
        for i in range(draw(st.integers(1, 12))):
            k = draw(st.integers(1, 3))
            operands = [draw(st.sampled_from(avail + [None])) if j else draw(st.sampled_from(avail))
                        for j in range(k)]
            n_res = draw(st.integers(1, 2))
            results = [g.add_value(f"op{i}.{j}", "float32", [1]) for j in range(n_res)]
            g.add_op(f"op{i}", "m.X", operands, results)
            avail.extend(results)
    unused = [v for v in g.values if not v.users and v.producer is not None]
    g.set_io(inputs, unused[: draw(st.integers(1, max(1, len(unused))))])
    return g


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


@settings(max_examples=60, deadline=None)
@given(dags())
def test_topo_order_of_random_dags(g):
    check_consistent(g)
    order = g.topo_order()
    assert sorted(o.name for o in order) == sorted(o.name for o in g.ops)
    pos = {o.name: i for i, o in enumerate(order)}
    for op in g.ops:
        for v in op.operands:
            if v is not None and v.producer is not None:
                assert pos[v.producer.name] < pos[op.name]
    assert [o.name for o in g.topo_order()] == [o.name for o in order]


@settings(max_examples=60, deadline=None)
@given(dags(), st.data())
def test_edits_keep_both_views_consistent(g, data):
    for _ in range(data.draw(st.integers(1, 6))):
        order = g.topo_order()
        if not order:
            break
        op = data.draw(st.sampled_from(order))
        # values defined before op in execution order (so edits keep the graph acyclic)
        before = {id(o) for o in order[: order.index(op)]}
        earlier = [v for v in g.values if v.producer is None or id(v.producer) in before]
        kind = data.draw(st.sampled_from(["set_operand", "replace_uses", "remove_dead", "retype"]))
        if kind == "set_operand":
            i = data.draw(st.integers(0, len(op.operands) - 1))
            g.set_operand(op, i, data.draw(st.sampled_from(earlier + [None])))
        elif kind == "replace_uses":
            old = data.draw(st.sampled_from(op.results))
            new = data.draw(st.sampled_from(earlier))
            users = [(u, i) for u, i in old.users]
            was_output = old.is_output
            g.replace_uses(old, new)
            assert old.users == []
            for u, i in users:
                assert u.operands[i] is new
            if was_output:
                assert new.is_output and not old.is_output and new in g.outputs
        elif kind == "remove_dead":
            n = len(g)
            removed = g.remove_dead()
            assert len(g) == n - removed
            for o in g.ops:
                assert any(r.users or r.is_output for r in o.results)
        else:
            g.retype(op, "qnn.Y", {"k": 1}, Provenance("r", "f:1:1", op.name))
            assert op.type == "qnn.Y" and op.provenance.rule == "r"
        check_consistent(g)
        g.topo_order()


# ------------------------------------------------------------------ editing

def test_replace_uses_moves_users_and_outputs():
    g = chain(2)
    x, v0, v1 = g.value("x"), g.value("v0"), g.value("v1")
    op1 = g.op("op1")
    g.replace_uses(v0, x)
    assert op1.operands == [x] and v0.users == []
    assert (op1, 0) in x.users
    g.replace_uses(v1, v0)
    assert g.outputs == [v0] and v0.is_output and not v1.is_output
    check_consistent(g)


def test_replace_uses_with_itself_is_a_no_op():
    class Bounded(list):
        def append(self, item):
            if len(self) > 100:
                raise AssertionError("replace_uses(v, v) keeps growing v.users")
            super().append(item)

    g = chain(2)
    v0 = g.value("v0")
    v0.users = Bounded(v0.users)  # guard against an endless loop
    g.replace_uses(v0, v0)
    assert list(v0.users) == [(g.op("op1"), 0)]
    check_consistent(g)


def test_remove_op_requires_unused_results():
    g = chain(2)
    with pytest.raises(GraphError, match="op0"):
        g.remove_op(g.op("op0"))
    op1 = g.op("op1")
    g.set_io([g.value("x")], [g.value("v0")])
    g.remove_op(op1)
    assert op1.dead and not g.has_op("op1")
    assert g.value("v0").users == []
    assert g.value("v1").producer is None and g.has_value("v1")  # values stay
    g.remove_value(g.value("v1"))
    assert not g.has_value("v1")
    check_consistent(g)


def test_detach_op_keeps_results_and_their_users():
    g = chain(2)
    op0, v0 = g.op("op0"), g.value("v0")
    g.detach_op(op0)
    assert op0.dead and not g.has_op("op0")
    assert v0.producer is None and v0.users == [(g.op("op1"), 0)]
    assert g.value("x").users == []
    check_consistent(g)


def test_set_operand():
    g = chain(2)
    op1, x, v0 = g.op("op1"), g.value("x"), g.value("v0")
    g.set_operand(op1, 0, x)
    assert op1.operands == [x] and v0.users == [] and (op1, 0) in x.users
    g.set_operand(op1, 0, None)
    assert op1.operands == [None] and (op1, 0) not in x.users
    g.set_operand(op1, 0, v0)
    assert v0.users == [(op1, 0)]
    check_consistent(g)


def test_replace_result():
    g = chain(1)
    op0, v0 = g.op("op0"), g.value("v0")
    w = g.add_value("w", "float32", [2, 3])
    old = g.replace_result(op0, 0, w)
    assert old is v0 and v0.producer is None and w.producer is op0 and op0.results == [w]
    with pytest.raises(GraphError, match="w"):
        g.replace_result(g.add_op("op1", "m.Neg", [w], [g.add_value("z", "float32", [1])]), 0, w)
    check_consistent(g)


def test_remove_value_must_be_disconnected():
    g = chain(1)
    for name in ["x", "v0"]:
        with pytest.raises(GraphError, match=name):
            g.remove_value(g.value(name))
    check_consistent(g)


def test_rename():
    g = chain(2)
    v0, op0 = g.value("v0"), g.op("op0")
    g.rename_value(v0, "mid")
    g.rename_op(op0, "first")
    assert g.value("mid") is v0 and not g.has_value("v0")
    assert g.op("first") is op0 and not g.has_op("op0")
    with pytest.raises(GraphError):
        g.rename_value(v0, "x")
    with pytest.raises(GraphError):
        g.rename_op(op0, "op1")
    check_consistent(g)


def test_retype_keeps_edges():
    g = chain(1)
    op0 = g.op("op0")
    edges = sorted((u.name, v.name, k) for u, v, k in g.nx.edges(keys=True))
    g.retype(op0, "qnn.ElementWiseNeg", {"x": 1})
    assert op0.type == "qnn.ElementWiseNeg" and op0.attrs == {"x": 1} and op0.provenance is None
    assert sorted((u.name, v.name, k) for u, v, k in g.nx.edges(keys=True)) == edges


def test_remove_dead_drops_unused_chains_but_not_outputs_or_inputs():
    g = Graph()
    x = g.add_value("x", "float32", [2])
    c = g.add_value("c", "float32", [2], data=np.zeros(2, np.float32))
    y = g.add_value("y", "float32", [2])
    d1 = g.add_value("d1", "float32", [2])
    d2 = g.add_value("d2", "float32", [2])
    g.add_op("keep", "m.Neg", [x], [y])
    g.add_op("dead1", "m.Add", [x, c], [d1])
    g.add_op("dead2", "m.Neg", [d1], [d2])
    g.set_io([x], [y])
    assert g.remove_dead() == 2
    assert [o.name for o in g.ops] == ["keep"]
    assert sorted(v.name for v in g.values) == ["x", "y"]  # the constant only fed dead ops
    assert g.remove_dead() == 0
    check_consistent(g)


def test_remove_dead_keeps_multi_result_ops_with_one_used_result():
    g = Graph()
    x = g.add_value("x", "float32", [2])
    lo, hi = g.add_value("lo", "float32", [1]), g.add_value("hi", "float32", [1])
    g.add_op("mm", "m.MinMax", [x], [lo, hi])
    g.set_io([x], [hi])
    assert g.remove_dead() == 0
    assert g.has_op("mm") and g.has_value("lo")


# -------------------------------------------------------------------- names

def test_fresh_names():
    g = chain(1)
    assert g.fresh_value_name("new") == "new"
    assert g.fresh_value_name("v0") == "v0_1"
    g.add_value("v0_1", "float32", [1])
    assert g.fresh_value_name("v0") == "v0_2"
    assert g.fresh_op_name("op0") == "op0_1"
    assert g.fresh_op_name("v0") == "v0"  # op and value names are separate
    g.add_value(g.fresh_value_name("v0"), "float32", [1])
    assert g.has_value("v0_2")


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(["a", "a_1", "b", "a_2"]), max_size=8))
def test_fresh_value_names_never_collide(names):
    g = Graph()
    made = []
    for n in names:
        fresh = g.fresh_value_name(n)
        assert not g.has_value(fresh)
        g.add_value(fresh, "float32", [1])
        made.append(fresh)
    assert len(set(made)) == len(made)
