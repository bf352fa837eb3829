"""Pack-wide fragments and defs, op-type fragment parameters and emit `if`: syntax, checks, behaviour,
and the law that a rule written with them lowers exactly like the same rule written out by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from qlower.api import Rules, lower
from qlower.graph import Graph
from qlower.lang import ast
from qlower.lang.formatter import format_text
from qlower.lang.loader import check_paths, load_rules as load_ruleset
from qlower.lang.parser import parse
from qlower.plugins import builtin_contributions
from qlower.verify.testcase import RuleTest
from tests.rewrite.rewrite_support import load_text, registry

# A pack of two files: `layout.qpat` defines the sandwich fragments, an op-type fragment and a def;
# `relu.qpat` uses all of them without defining any.
_LAYOUT = """import mllm.ops

fragment to_nhwc(x) -> xt {
  xt = qnn.Transpose(x) { perm: [0, 2, 3, 1] }
}

fragment to_nchw(c) -> y {
  y = qnn.Transpose(c) { perm: [0, 3, 1, 2] }
}

# `k` computed channels-last.
fragment channels_last(x, k: op) -> y {
  xt = to_nhwc(x)
  r = k(xt)
  y = to_nchw(r)
}

def is_image(x) = rank(x) == 4 and shape(x)[1] > 1
"""

_RELU = """import mllm.ops

rule relu_image {
  match y = mllm.ReLU | mllm.Sigmoid(x: f32)
  require is_image(x)
  emit {
    if optype(y) == "mllm.ReLU" {
      y = channels_last(x, qnn.Relu)
    } else {
      y = channels_last(x, ["qnn.Sigmoid", "qnn.Tanh"][0])
    }
  }
}

test relu_image {
  input x: f32[1, 3, 2, 2]
  graph y = mllm.ReLU(x)
  expect ops qnn.Transpose, qnn.Relu, qnn.Transpose
  expect close atol 0 rtol 0
}

test sigmoid_image for relu_image {
  input x: f32[1, 2, 2, 3]
  graph y = mllm.Sigmoid(x)
  expect ops qnn.Transpose, qnn.Sigmoid, qnn.Transpose
  expect close
}

test flat_is_not_an_image for relu_image {
  input x: f32[1, 1, 2, 3]
  graph y = mllm.ReLU(x)
  expect ops none
  expect error "no rule"
}
"""

_USER = """import demo

rule user_relu {
  match y = mllm.ReLU(x: f16 [_, _, _, _])
  emit {
    xt = demo.to_nhwc(x)
    r = qnn.Relu(xt)
    y = demo.to_nchw(r)
  }
}
"""


def _pack(tmp_path: Path, **files: str) -> Path:
    root = tmp_path / "demo"
    root.mkdir()
    for name, text in files.items():
        (root / f"{name}.qpat").write_text(text, encoding="utf-8")
    return root


def _findings(paths, root: Path) -> list[str]:
    found, _ = check_paths(paths, packs={"demo": root})
    return [f"{Path(d.span.file).name}:{d.span.line}:{d.span.column} {d.code}" if d.span else d.code for d in found]


def test_fragments_and_defs_are_visible_across_a_packs_files_and_qualified_outside(tmp_path: Path) -> None:
    root = _pack(tmp_path, layout=_LAYOUT, relu=_RELU)
    user = tmp_path / "user.qpat"
    user.write_text(_USER, encoding="utf-8")
    assert _findings([root, user], root) == []
    rs = load_ruleset([user], packs={"demo": root})
    user_rule = rs.rule("user_relu")
    assert [i.op for i in user_rule.emits] == ["qnn.Transpose", "qnn.Relu", "qnn.Transpose"]
    pack_rule = rs.rule("demo.relu_image")
    assert isinstance(pack_rule.emits[0], ast.EmitOp)  # `if` branches with the fragments inlined
    ops = sorted({i.op for i in pack_rule.emits if i.op_expr is None})
    assert ops == ["qnn.Relu", "qnn.Transpose"]
    dynamic = [i for i in pack_rule.emits if i.op_expr is not None]
    assert len(dynamic) == 1 and dynamic[0].op == "k"


def test_a_user_file_does_not_see_another_files_fragments_unqualified(tmp_path: Path) -> None:
    root = _pack(tmp_path, layout=_LAYOUT, relu=_RELU)
    user = tmp_path / "user.qpat"
    user.write_text(_USER.replace("demo.to_nhwc", "to_nhwc"), encoding="utf-8")
    assert _findings([user], root) == ["user.qpat:6:10 unknown-fragment"]


def test_duplicate_fragment_or_def_in_a_pack_is_located_at_both(tmp_path: Path) -> None:
    again = "fragment to_nhwc(x) -> xt {\n  xt = qnn.Transpose(x) { perm: [0, 2, 3, 1] }\n}\n\ndef is_image(x) = true\n"
    root = _pack(tmp_path, layout=_LAYOUT, relu=_RELU, more=again)
    found, _ = check_paths([root], packs={"demo": root})
    dup = [d for d in found if d.code in ("duplicate-fragment", "duplicate-def")]
    assert len(dup) == 2
    for d in dup:
        assert Path(d.span.file).name == "more.qpat" and "defined twice in pack `demo`" in d.message
        (note,) = d.notes
        assert Path(note.span.file).name == "layout.qpat"


def test_pack_behaviour_through_the_rule_tests(tmp_path: Path) -> None:
    root = _pack(tmp_path, layout=_LAYOUT, relu=_RELU)
    extra = builtin_contributions()
    rs = load_ruleset([root], packs={**extra.packs, "demo": root}, functions=extra.functions)
    rules = Rules(rs, registry(), extra.functions, extra.kernels)
    assert len(rs.tests) == 3
    for t in rs.tests:
        RuleTest(t, rules, t.span.file).run(3)


@pytest.mark.parametrize("text", [
    "def full(sl, n) = sl == none or min(values(const_value(sl))) == n\n",
    "fragment f(x, k: op, xs...) -> y {\n  y = k(x, xs...) { axis: 0 } : shape shape(x)\n}\n",
    "rule r {\n  match y = mllm.ReLU(x)\n  emit {\n    if rank(x) == 4 {\n      y = demo.wrap(x)\n"
    "    } else if rank(x) == 3 {\n      # three\n      y = qnn.Relu(x)\n    } else {\n      y = f(x, qnn.Relu)\n"
    "    }\n  }\n}\n",
])
def test_new_forms_are_canonical_and_round_trip(text: str) -> None:
    assert format_text(text) == text
    assert parse(format_text(text)) == parse(text)


def test_if_keyword_is_told_apart_from_a_conditional_expression() -> None:
    (rule,) = parse('rule r {\n  match y = mllm.ReLU(x)\n  emit {\n    let a = 1 if rank(x) == 2 else "{"\n'
                    '    if a == 1 { y = qnn.Relu(x) } else { y = qnn.Sigmoid(x) }\n  }\n}\n').rules
    let, cond = rule.body[1].items
    assert isinstance(let.expr, ast.Conditional) and isinstance(cond, ast.EmitIf)
    assert [i.op for i in cond.then] == ["qnn.Relu"] and [i.op for i in cond.otherwise] == ["qnn.Sigmoid"]


def test_a_dynamic_op_type_is_checked_when_the_rule_emits(tmp_path: Path) -> None:
    """An op type the checker cannot know (`k` a string built per match) that names no QNN op fails
    the rewrite with a message located at the expression."""
    rules = load_text(tmp_path, "import mllm.ops\n\nfragment apply(x, k: op) -> y {\n  y = k(x)\n}\n\n"
                                "rule r {\n  match y = mllm.ReLU(x)\n"
                                "  emit y = apply(x, \"qnn.\" ++ (\"Relu\" if rank(x) == 2 else \"Nope\"))\n}\n")
    ok = lower(_relu_graph((2, 3), "mllm.ReLU"), rules, "cpu", validate=False)
    assert [op.type for op in ok.graph.ops] == ["qnn.Relu"]
    bad = lower(_relu_graph((2, 3, 4), "mllm.ReLU"), rules, "cpu", validate=False)
    err = bad.errors[0]
    assert "is qnn.Nope, which the target registry does not know" in err.message
    assert (err.span.line, err.span.column) == (9, 21)  # the op-type expression of the call


def test_two_dynamic_op_items_of_one_type_keep_their_own_operands(tmp_path: Path) -> None:
    """A fragment applying its op-type parameter twice (and a rule calling such a fragment twice):
    both items resolve to one op type per match, yet each keeps its own binders and operands."""
    rules = load_text(tmp_path, "import mllm.ops\n\nfragment twice(x, k: op) -> y {\n  a = k(x)\n  y = k(a)\n}\n\n"
                                "rule r {\n  match y = mllm.ReLU(x)\n  emit {\n"
                                "    u = twice(x, \"qnn.\" ++ \"Relu\")\n    y = twice(u, \"qnn.\" ++ \"Relu\")\n  }\n}\n")
    res = lower(_relu_graph((2, 3), "mllm.ReLU"), rules, "cpu")
    assert res.ok, [str(d) for d in res.errors]
    ops = res.graph.topo_order()
    assert [op.type for op in ops] == ["qnn.Relu"] * 4
    chain = [ops[0].operands[0]] + [op.results[0] for op in ops]
    assert all(op.operands == [chain[i]] for i, op in enumerate(ops))  # x → a → u → a' → y, in order


def test_a_def_may_use_dtype_constants(tmp_path: Path) -> None:
    """`f32` is a constant, not a name the def must take as a parameter."""
    rules = load_text(tmp_path, "import mllm.ops\n\ndef zero_fill(s) = full(s, 0.0, f32)\n\n"
                                "rule r {\n  match y = mllm.ReLU(x)\n"
                                "  emit y = qnn.ElementWiseMaximum(x, tensor(zero_fill(shape(x))))\n}\n")
    res = lower(_relu_graph((2, 3), "mllm.ReLU"), rules, "cpu")
    assert res.ok and [op.type for op in res.graph.ops] == ["qnn.ElementWiseMaximum"]


# ---------------------------------------------------------------- the law

_ABSTRACT = """import mllm.ops

fragment to_nhwc(x) -> xt {
  xt = qnn.Transpose(x) { perm: [0, 2, 3, 1] }
}

fragment around(x, k: op, q) -> y {
  let perm = [0, 3, 1, 2]
  xt = to_nhwc(x)
  r = k(xt) : shape [shape(xt)[0], shape(xt)[1], shape(xt)[2], q]
  y = qnn.Transpose(r) { perm: perm }
}

def wide(x, n) = rank(x) == 4 and shape(x)[3] >= n

rule r {
  match y = mllm.ReLU | mllm.Sigmoid(x: [_, _, _, _])
  require wide(x, 2)
  emit {
    if optype(y) == "mllm.ReLU" and shape(x)[1] > 1 {
      y = around(x, qnn.Relu, shape(x)[1])
    } else if shape(x)[2] > 2 {
      y = around(x, ["qnn.Relu", "qnn.Sigmoid"][index_of(["mllm.ReLU", "mllm.Sigmoid"], optype(y))], shape(x)[1])
    } else {
      y = qnn.Tanh(x)
    }
  }
}
"""

_BY_HAND = """import mllm.ops

rule relu_a {
  match y = mllm.ReLU(x: [_, _, _, _])
  require rank(x) == 4 and shape(x)[3] >= 2 and shape(x)[1] > 1
  emit {
    xt = qnn.Transpose(x) { perm: [0, 2, 3, 1] }
    r = qnn.Relu(xt) : shape [shape(xt)[0], shape(xt)[1], shape(xt)[2], shape(x)[1]]
    y = qnn.Transpose(r) { perm: [0, 3, 1, 2] }
  }
}

rule relu_b {
  match y = mllm.ReLU(x: [_, _, _, _])
  require rank(x) == 4 and shape(x)[3] >= 2 and shape(x)[1] <= 1 and shape(x)[2] > 2
  emit {
    xt = qnn.Transpose(x) { perm: [0, 2, 3, 1] }
    r = qnn.Relu(xt) : shape [shape(xt)[0], shape(xt)[1], shape(xt)[2], shape(x)[1]]
    y = qnn.Transpose(r) { perm: [0, 3, 1, 2] }
  }
}

rule sigmoid_b {
  match y = mllm.Sigmoid(x: [_, _, _, _])
  require rank(x) == 4 and shape(x)[3] >= 2 and shape(x)[2] > 2
  emit {
    xt = qnn.Transpose(x) { perm: [0, 2, 3, 1] }
    r = qnn.Sigmoid(xt) : shape [shape(xt)[0], shape(xt)[1], shape(xt)[2], shape(x)[1]]
    y = qnn.Transpose(r) { perm: [0, 3, 1, 2] }
  }
}

rule tanh_c {
  match y = mllm.ReLU | mllm.Sigmoid(x: [_, _, _, _])
  require rank(x) == 4 and shape(x)[3] >= 2
  emit y = qnn.Tanh(x)
}
"""


def _relu_graph(shape, op: str) -> Graph:
    g = Graph("t")
    x = g.add_value("x", "float32", tuple(shape))
    y = g.add_value("y", "float32", tuple(shape))
    g.add_op("n", op, [x], [y], {})
    g.set_io([x], [y])
    return g


def _summary(graph: Graph) -> list:
    return [(op.type, sorted((k, np.asarray(v).tolist()) for k, v in op.attrs.items()),
             [tuple(r.shape) for r in op.results]) for op in graph.ops]


@pytest.fixture(scope="module")
def law_rules(tmp_path_factory) -> tuple[Rules, Rules]:
    d = tmp_path_factory.mktemp("law")
    return load_text(d, _ABSTRACT), load_text(d, _BY_HAND)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.lists(st.integers(1, 4), min_size=4, max_size=4), op=st.sampled_from(["mllm.ReLU", "mllm.Sigmoid"]))
def test_fragment_if_and_def_lower_like_the_rule_written_out(law_rules, shape, op) -> None:
    abstract, by_hand = law_rules
    results = []
    for rules in (abstract, by_hand):
        got = lower(_relu_graph(shape, op), rules, "cpu", validate=False)
        results.append((_summary(got.graph), len(got.errors)))
    assert results[0] == results[1]


def test_a_folder_named_on_its_own_shares_fragments_and_defs_between_its_files(tmp_path: Path) -> None:
    """A copy of a pack loaded as a plain folder (names unqualified) still works as one scope;
    one of its files alone does not see the others' fragments and defs."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "layout.qpat").write_text(_LAYOUT, encoding="utf-8")
    (folder / "relu.qpat").write_text(_RELU, encoding="utf-8")
    found, _ = check_paths([folder])
    assert [str(d) for d in found if d.is_error] == []
    found, _ = check_paths([folder / "relu.qpat"])
    codes = sorted({d.code for d in found if d.is_error})
    assert codes == ["unknown-fragment", "unknown-function"], codes
