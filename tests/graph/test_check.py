"""check_graph: each kind of malformation yields one located diagnostic; clean graphs yield none."""

from __future__ import annotations


import numpy as np

from qlower.diagnostics import Severity
from qlower.graph.check import check_graph
from qlower.graph.core import Graph
from qlower.lang.ast import OpDecl, OperandDecl, ResultDecl

DECLS = {
    "mllm.Add": OpDecl("mllm.Add", (OperandDecl("a", "one"), OperandDecl("b", "one")), (ResultDecl("y"),)),
    "mllm.Linear": OpDecl("mllm.Linear", (OperandDecl("x", "one"), OperandDecl("w", "one"),
                                          OperandDecl("bias", "optional")), (ResultDecl("y"),)),
    "mllm.Concat": OpDecl("mllm.Concat", (OperandDecl("xs", "variadic"),), (ResultDecl("y"),)),
    "mllm.Split": OpDecl("mllm.Split", (OperandDecl("x", "one"),), (ResultDecl("ys", variadic=True),)),
}


def chain() -> Graph:
    """x → add(x, w) → t → linear(t, w, _) → y."""
    g = Graph("g")
    x = g.add_value("x", "float32", (1, 4))
    w = g.add_value("w", "float32", (4,), data=np.ones(4, np.float32))
    t = g.add_value("t", "float32", (1, 4))
    y = g.add_value("y", "float32", (1, 4))
    g.add_op("add", "mllm.Add", [x, w], [t])
    g.add_op("lin", "mllm.Linear", [t, w, None], [y])
    g.set_io([x], [y])
    return g


def codes(diags):
    return [(d.code, d.subject) for d in diags]


def test_clean_graph_has_no_diagnostics():
    assert check_graph(chain(), decls=DECLS, need_shapes=True) == []


def test_dangling_value():
    g = chain()
    z = g.add_value("z", "float32", (1, 4))
    g.add_op("add2", "mllm.Add", [g.value("y"), z], [g.add_value("y2", "float32", (1, 4))])
    g.set_io(g.inputs, [g.value("y2")])
    (d,) = check_graph(g)
    assert (d.code, d.subject, d.severity) == ("dangling-value", "tensor z", Severity.ERROR)
    assert "used by node `add2` (mllm.Add) (operand 1) but has no producer" in d.message


def test_unused_results_warn():
    g = chain()
    g.add_op("dead", "mllm.Add", [g.value("x"), g.value("x")], [g.add_value("u", "float32", (1, 4))])
    (d,) = check_graph(g)
    assert (d.code, d.subject, d.severity) == ("unused-result", "node dead", Severity.WARNING)


def test_cycle_names_the_ops_on_it():
    g = Graph()
    x = g.add_value("x", "float32", (1,))
    a, b, c, d = (g.add_value(n, "float32", (1,)) for n in "abcd")
    g.add_op("n1", "mllm.Add", [x, c], [a])
    g.add_op("n2", "mllm.Add", [a, x], [b])
    g.add_op("n3", "mllm.Add", [b, x], [c])
    g.add_op("tail", "mllm.Add", [c, x], [d])
    g.set_io([x], [d])
    (diag,) = check_graph(g)
    assert diag.code == "cycle"
    assert diag.message == "the graph has a cycle: `n1` → `n2` → `n3` → `n1`"
    assert "4 ops in all cannot be ordered" in diag.notes[0].message


def test_self_loop():
    g = Graph()
    a = g.add_value("a", "float32", (1,))
    g.add_op("n", "mllm.Add", [a, a], [a])
    g.set_io([], [a])
    assert codes(check_graph(g)) == [("cycle", "node n")]


def test_arity_against_declarations():
    g = chain()
    x, w = g.value("x"), g.value("w")
    g.add_op("add3", "mllm.Add", [x, w, x], [g.add_value("o1", "float32", (1, 4))])
    g.add_op("lin1", "mllm.Linear", [x], [g.add_value("o2", "float32", (1, 4))])
    g.add_op("lin2", "mllm.Linear", [x, None], [g.add_value("o3", "float32", (1, 4))])
    g.add_op("cat", "mllm.Concat", [x, x, x], [g.add_value("o4", "float32", (3, 4))])
    g.add_op("cat0", "mllm.Concat", [], [g.add_value("o5", "float32", (0,))])
    g.add_op("split", "mllm.Split", [x], [g.add_value(f"s{i}", "float32", (1, 2)) for i in range(3)])
    g.add_op("add_r", "mllm.Add", [x, w], [g.add_value("o6", "float32", (1, 4)), g.add_value("o7", "float32", (1,))])
    g.add_op("split0", "mllm.Split", [x], [])
    used = [v for v in g.values if v.producer is not None and not v.users]
    g.set_io([x], used)
    diags = check_graph(g, decls=DECLS)
    msgs = {d.subject: d.message for d in diags}
    assert codes(diags) == [("arity", "node add3"), ("arity", "node lin1"), ("missing-operand", "node lin2"),
                            ("arity", "node add_r")]
    assert msgs["node add3"] == "node `add3` (mllm.Add) has 3 operands; its declaration takes 2 ((a, b) -> (y))"
    assert "takes 2 to 3 ((x, w, bias?) -> (y))" in msgs["node lin1"]
    assert msgs["node lin2"] == "node `lin2` (mllm.Linear) is missing its required operand `w` (operand 1)"
    assert "has 2 results; its declaration gives 1" in msgs["node add_r"]


def test_unknown_op_type_with_hint():
    g = chain()
    g.op("add").type = "mllm.Ad"
    (d,) = check_graph(g, decls=DECLS)
    assert (d.code, d.subject, d.hint) == ("unknown-op", "node add", "did you mean `mllm.Add`?")
    assert check_graph(g) == []  # without declarations op types are not checked


def test_missing_shapes_only_when_asked():
    g = chain()
    g.value("t").shape = None
    assert check_graph(g) == []
    (d,) = check_graph(g, need_shapes=True)
    assert (d.code, d.subject) == ("missing-shape", "tensor t")


def test_outputs_and_inputs():
    g = chain()
    orphan = g.add_value("orphan", "float32", (1,))
    g.set_io([g.value("x"), g.value("t")], [g.value("y"), orphan, g.value("w"), g.value("x")])
    assert codes(check_graph(g)) == [("output-not-produced", "tensor orphan"), ("input-produced", "tensor t")]


def test_removed_value_is_reported():
    g = chain()
    t = g.value("t")
    g.rename_value(t, "t_renamed")
    g2 = chain()
    g2.op("lin").operands[0] = g.value("x")  # a value of another graph
    assert codes(check_graph(g)) == []
    assert ("foreign-value", "node lin") in codes(check_graph(g2))


def test_long_chain_checks_clean_without_recursion():
    """A 20k-op chain: no recursion limit hit, no findings (speed is benchmarked, not asserted)."""
    g = Graph()
    prev = g.add_value("x", "float32", (4,))
    for i in range(20000):
        out = g.add_value(f"t{i}", "float32", (4,))
        g.add_op(f"n{i}", "mllm.Add", [prev, prev], [out])
        prev = out
    g.set_io([g.value("x")], [prev])
    assert check_graph(g, decls=DECLS, need_shapes=True) == []


def test_real_op_missing_from_the_packs_is_not_called_a_typo():
    """An op no pack declares but that is only similar to a declared one gets no did-you-mean."""
    g = chain()
    g.op("add").type = "mllm.Addmm"
    (d,) = check_graph(g, decls=DECLS)
    assert d.code == "unknown-op" and "declared in no loaded rule pack" in d.message
    assert "did you mean" not in (d.hint or "")


def test_typo_of_is_strict():
    from qlower.diagnostics import typo_of

    assert typo_of("aten.conv2d", ["aten.clone", "aten.conv3d"]) == "aten.conv3d"
    assert typo_of("aten.conv2d", ["aten.clone"]) is None
    assert typo_of("onnx.ReduceLogSum", ["onnx.ReduceLogSumExp"]) is None
    assert typo_of("onnx.softmax", ["onnx.Softmax"]) == "onnx.Softmax"


def test_one_pass_proof_agrees_with_the_full_checks():
    """The one-pass proof that a graph is well formed (`_all_well`) says "fine" only when the full value
    and op checks find nothing, and check_graph reports what the full checks find, over random small
    graphs with random defects."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from qlower.graph.check import _all_well, _check_ops, _check_values

    types = ["mllm.Add", "mllm.Linear", "mllm.Concat", "mllm.Split", "mllm.Nope", "other.Op"]

    @settings(max_examples=300, deadline=None)
    @given(st.data())
    def law(data):
        g = Graph("g")
        pool = [g.add_value("x", "float32", (1, 4)), g.add_value("w", "float32", (4,), data=np.ones(4, np.float32))]
        if data.draw(st.booleans()):
            pool.append(g.add_value("orphan", "float32", None if data.draw(st.booleans()) else (1, 4)))
        if data.draw(st.booleans()):  # a value of another graph, named like one of this graph
            pool.append(Graph("h").add_value("x", "float32", (1, 4), data=np.ones((1, 4), np.float32)))
        for i in range(data.draw(st.integers(0, 6))):
            n = data.draw(st.integers(0, 3))
            operands = [data.draw(st.sampled_from(pool + [None])) for _ in range(n)]
            results = [g.add_value(f"v{i}_{k}", "float32", (1, 4)) for k in range(data.draw(st.integers(0, 2)))]
            g.add_op(f"n{i}", data.draw(st.sampled_from(types)), operands, results)
            pool += results
        if data.draw(st.booleans()) and len(g) > 0:
            g.detach_op(next(iter(g.ops)))  # its users keep pointing at a removed producer
        outs = [v for v in pool[2:] if data.draw(st.booleans())]
        g.set_io([pool[0]], outs)
        decls = data.draw(st.sampled_from([None, DECLS]))
        need = data.draw(st.booleans())
        live = {id(op) for op in g.ops}
        found = list(_check_values(g, live, need)) + list(_check_ops(g, live, decls))
        if _all_well(g, decls, need):  # the proof is sound (it may give up on a fine graph: then the
            assert not found, found     # full checks run and find nothing)
        assert check_graph(g, decls=decls, need_shapes=need, cycles=False) == found

    law()


def test_membership_follows_the_graph_through_its_edits():
    """`owner` (what the fast check reads) is the graph exactly while the graph's tables hold the value or op."""
    g = chain()
    t, lin = g.value("t"), g.op("lin")
    assert all(v.owner is g for v in g.values) and all(op.owner is g for op in g.ops)
    copy = g.copy()
    assert all(v.owner is copy for v in copy.values) and all(op.owner is copy for op in copy.ops)
    g.detach_op(lin)  # its result y stays, unproduced; t keeps no user
    assert lin.owner is None and g.value("y").producer is None
    g.remove_value(g.value("y"))
    g.set_io(g.inputs, [t])
    assert check_graph(g, decls=DECLS) == []
    removed = g.add_value("gone", "float32", (1, 4))
    g.remove_value(removed)
    g.op("add").operands[1] = removed  # a value no longer in the graph, still referenced
    assert ("foreign-value", "node add") in codes(check_graph(g, decls=DECLS))
    g2 = chain()
    g2.value("t").producer = lin  # an op detached from another graph
    assert ("dangling-value", "tensor t") in codes(check_graph(g2, decls=DECLS))
