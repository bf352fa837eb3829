"""Maps, optional operands with defaults, folds and optype(): syntax, checks and behaviour."""

from __future__ import annotations

from pathlib import Path

import pytest

from qlower.cli.main import main
from qlower.lang import ast
from qlower.lang.formatter import format_text
from qlower.lang.loader import check_paths
from qlower.lang.parser import parse


def test_map_line_is_a_rule_with_derived_name_and_generated_test() -> None:
    m = parse("map mllm.ReLU(x) -> qnn.Relu(x) backends(cpu) tested f32[2, 3]\n"
              "map rm: mllm.ReduceMax(x) { dim: d } -> qnn.ReduceMax(x) { axes: [d] }\n", "t.qpat")
    relu, rm = m.rules
    assert relu.name == "relu" and relu.backends == ("cpu",)
    assert relu.emits[0].op == "qnn.Relu" and rm.name == "rm"
    (t,) = m.tests
    assert t.name == "relu" and [s.kind for s in t.body if isinstance(s, ast.Expect)] == ["ops", "close"]
    assert m.rules[0] is m.rules[0]  # stable identity: the checker indexes rules by object


@pytest.mark.parametrize("text", [
    "map mllm.Neg(x) -> qnn.ElementWiseNeg(x)\n",
    "map g: mllm.GELU(x) { approximate: \"none\" } -> qnn.Gelu(x) benefit 2 backends(cpu, htp) tested f32[1..4]\n",
    "rule r {\n  match y = mllm.LayerNorm(x, w, b?)\n  emit {\n    b ?= tensor(zeros(shape(w), f32))\n"
    "    y = qnn.LayerNorm(x, w, b)\n  }\n}\n",
    "rule r {\n  match y = onnx.Sum(xs...)\n  emit y = fold qnn.ElementWiseAdd(xs...)\n}\n",
])
def test_new_forms_are_canonical_and_round_trip(text: str) -> None:
    assert format_text(text) == text
    assert parse(format_text(text)) == parse(text)


def _check(tmp_path: Path, text: str) -> list[str]:
    f = tmp_path / "u.qpat"
    f.write_text("import mllm.ops\nimport onnx.ops\n\n" + text, encoding="utf-8")
    found, _ = check_paths([f])
    return [f"{d.span.line}:{d.span.column} {d.code}" for d in found if d.span is not None]


def test_default_needs_an_optional_capture(tmp_path: Path) -> None:
    got = _check(tmp_path, "rule r {\n  match y = mllm.LayerNorm(x, w, b)\n  emit {\n"
                           "    b ?= tensor(zeros(shape(w), f32))\n    y = qnn.LayerNorm(x, w, b)\n  }\n}\n"
                           "test r {\n  input x: f32[2, 4]\n  const w: f32[4]\n  const b: f32[4]\n"
                           "  graph y = mllm.LayerNorm(x, w, b)\n}\n")
    assert "7:5 default-not-optional" in got


def test_fold_needs_one_list(tmp_path: Path) -> None:
    got = _check(tmp_path, "rule r {\n  match y = onnx.Sum(a, b)\n  emit y = fold qnn.ElementWiseAdd(a, b)\n}\n"
                           "test r {\n  input a: f32[2]\n  input b: f32[2]\n  graph y = onnx.Sum(a, b)\n}\n")
    assert "6:17 fold-args" in got


def test_map_is_checked_like_a_rule_at_its_line(tmp_path: Path) -> None:
    got = _check(tmp_path, "map mllm.Neg(x) -> qnn.NoSuchOp(x) tested f32[2]\n")
    assert got == ["4:20 unknown-target-op"]  # once, though its generated test names the op too


_BEHAVIOUR = """import mllm.ops
import onnx.ops

map neg2: mllm.Neg(x) -> qnn.ElementWiseNeg(x) tested f32[2, 1..3]

rule ln {
  match y = mllm.LayerNorm(x, w, b?) { epsilon: eps }
  emit {
    b ?= tensor(zeros(shape(w), f32)) : dtype dtype(w)
    y = qnn.LayerNorm(x, w, b) { epsilon: eps, axes: [rank(x) - 1] }
  }
}

rule sum {
  match y = onnx.Sum(xs...)
  require len(xs) >= 2
  emit y = fold qnn.ElementWiseAdd(xs...)
}

rule minmax {
  match y = onnx.Max | onnx.Min(a, b)
  let kind = ["MAXIMUM", "MINIMUM"][index_of(["onnx.Max", "onnx.Min"], optype(y))]
  emit y = qnn.ElementWiseBinary(a, b) { operation: kind }
}

test ln {
  input x: f32[3, 16]
  const w: f32[16]
  graph y = mllm.LayerNorm(x, w)
  expect ops qnn.LayerNorm
  expect close atol 1e-4 rtol 1e-4
}

test ln_bias for ln {
  input x: f32[3, 16]
  const w: f32[16]
  const b: f32[16]
  graph y = mllm.LayerNorm(x, w, b)
  expect ops qnn.LayerNorm
  expect close atol 1e-4 rtol 1e-4
}

test sum {
  input a: f32[2, 3]
  input b: f32[2, 3]
  graph y = onnx.Sum(a, b)
  expect ops qnn.ElementWiseAdd
  expect close atol 1e-6 rtol 1e-6
}

test sum5 for sum {
  input a: f32[2, 3]
  input b: f32[2, 3]
  input c: f32[1, 3]
  input d: f32[3]
  input e: f32[2, 1]
  graph y = onnx.Sum(a, b, c, d, e)
  expect ops qnn.ElementWiseAdd, qnn.ElementWiseAdd, qnn.ElementWiseAdd, qnn.ElementWiseAdd
  expect close atol 1e-5 rtol 1e-5
}

test minmax {
  input a: f32[2, 3]
  input b: f32[2, 3]
  graph y = onnx.Min(a, b)
  expect ops qnn.ElementWiseBinary
  expect close atol 0 rtol 0
}

test minmax_max for minmax {
  input a: f32[2, 3]
  input b: f32[2, 3]
  graph y = onnx.Max(a, b)
  expect ops qnn.ElementWiseBinary
  expect close atol 0 rtol 0
}
"""


def test_behaviour_through_the_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Generated map test, both forms of an optional operand, a 2- and a 5-way fold, and optype()
    choosing MAXIMUM vs MINIMUM — checked numerically against the reference kernels."""
    f = tmp_path / "abstraction.qpat"
    f.write_text(_BEHAVIOUR, encoding="utf-8")
    assert main(["check", str(f)]) == 0, capsys.readouterr().out
    assert main(["test", str(f)]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "7 passed, 0 failed" in out


_FRAGMENTS = """import mllm.ops

fragment to_nhwc(x) -> xt {
  xt = qnn.Transpose(x) { perm: [0, 2, 3, 1] }
}

fragment to_nchw(c, ys) -> y {
  t = qnn.Reshape(c) : shape [ys[0], ys[2], ys[3], ys[1]]
  y = qnn.Transpose(t) { perm: [0, 3, 1, 2] }
}

rule relu_nhwc {
  match y = mllm.ReLU(x: [_, _, _, _])
  emit {
    xt = to_nhwc(x)
    r = qnn.Relu(xt)
    t = to_nchw(r, shape(y))
    y = to_nchw(to_nhwc_is_not_needed_here, shape(y))
  }
}
"""


def test_fragment_inlining_is_hygienic() -> None:
    text = _FRAGMENTS.replace("    y = to_nchw(to_nhwc_is_not_needed_here, shape(y))\n", "").replace(
        "t = to_nchw(r, shape(y))", "y = to_nchw(r, shape(y))")
    (rule,) = parse(text, "f.qpat").rules
    names = [i.binders.names for i in rule.emits]
    assert names == [("xt",), ("r",), ("_to_nchw2_t",), ("y",)]  # `t` of the fragment is private
    assert rule.emits[3].args[0].name == "_to_nchw2_t"


def test_fragment_checked_at_definition_and_use(tmp_path: Path) -> None:
    bad = ("fragment f(x) -> a, b {\n  a = qnn.Transpose(z) { perm: [1, 0] }\n}\n\n"
           "rule r {\n  match y = mllm.ReLU(x)\n  emit y = f(x, 1)\n}\n")
    got = _check(tmp_path, bad)
    assert got == ["4:1 fragment-result", "5:21 fragment-scope", "10:12 unknown-fragment"], got


def test_fragment_behaviour(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = _FRAGMENTS.replace("    y = to_nchw(to_nhwc_is_not_needed_here, shape(y))\n", "").replace(
        "t = to_nchw(r, shape(y))", "y = to_nchw(r, shape(y))")
    text += ("\ntest relu_nhwc {\n  input x: f32[1, 3, 4, 5]\n  graph y = mllm.ReLU(x)\n"
             "  expect ops qnn.Transpose, qnn.Relu, qnn.Reshape, qnn.Transpose\n  expect close atol 0 rtol 0\n}\n")
    f = tmp_path / "frag.qpat"
    f.write_text(text, encoding="utf-8")
    assert main(["test", str(f)]) == 0, capsys.readouterr().out


def test_long_map_lines_wrap_and_formatting_is_idempotent() -> None:
    long = ("map reduce_min: mllm.ReduceMin(x) { dim: d, keepdim: k } -> qnn.ReduceMin(x) { axes: [normdim(d, rank(x))], "
            "keep_dims: k }\n")
    text = "map mllm.Neg(x) -> qnn.ElementWiseNeg(x)\n" + long + long.replace("min", "max").replace("Min", "Max")
    once = format_text(text)
    assert format_text(once) == once and parse(once) == parse(text)
    assert "{\n  axes: [normdim(d, rank(x))],\n  keep_dims: k,\n}\n\nmap reduce_max" in once


def test_a_long_map_pattern_wraps_its_attributes_too() -> None:
    text = ("map conv: aten.conv1d | aten.conv2d(x, w, bias...) { stride: s, padding: p, dilation: d, groups: g } "
            "-> aten.convolution(x, w, bias...) { stride: s, padding: p, transposed: false }\n")
    once = format_text(text)
    assert all(len(line) <= 100 for line in once.splitlines()), once
    assert once.startswith("map conv: aten.conv1d | aten.conv2d(x, w, bias...) {\n  stride: s,\n")
    assert "  groups: g,\n} -> aten.convolution(x, w, bias...) {" in once
    assert format_text(once) == once and parse(once) == parse(text)
