"""`backend()`: the backend a graph is lowered for, in guards, emit `if`s and defs."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qlower.cli.main import main
from qlower.lang import ast
from qlower.lang.backend import BACKEND_FUNCTION, for_backend, mentions_backend
from qlower.lang.builtins import builtin_functions
from qlower.lang.formatter import format_text
from qlower.lang.functions import FunctionTable
from qlower.lang.loader import check_paths
from qlower.lang.parser import parse
from qlower.qnn.backends import BACKENDS
from qlower.rewrite.expr import compile_expr
from tests.lang import strategies as S

_RULES = """import mllm.ops

def wide_on_htp(x) = backend() == "htp" and rank(x) > 1

# Relu on HTP and DSP, an ElementWiseNeuron on LPAI, max(x, 0) elsewhere.
rule act {
  match y = mllm.ReLU(x)
  emit {
    if backend() in ["htp", "dsp"] {
      y = qnn.Relu(x)
    } else if backend() == "lpai" {
      y = qnn.ElementWiseNeuron(x) { operation: "RELU" }
    } else {
      y = qnn.ElementWiseMaximum(x, tensor(zeros([1], dtype(x))))
    }
  }
}

rule sub_htp {
  match y = mllm.Sub(a, b)
  require wide_on_htp(a)
  emit y = qnn.ElementWiseSubtract(a, b)
}

rule sub {
  match y = mllm.Sub(a, b)
  let m = "sub" if backend() != "cpu" else "neg"
  emit {
    if m == "sub" {
      y = qnn.ElementWiseSubtract(a, b)
    } else {
      n = qnn.ElementWiseNeg(b)
      y = qnn.ElementWiseAdd(a, n)
    }
  }
}

test act_htp for act backends(htp) {
  input x: f32[2, 3]
  graph y = mllm.ReLU(x)
  expect ops qnn.Relu
  expect close atol 0 rtol 0
}

test act_dsp for act backends(dsp) {
  input x: u8[2, 3] : encoding quant(0.05, 128)
  graph y = mllm.ReLU(x) : dtype u8, encoding quant(0.05, 128)
  expect ops qnn.Relu
}

test act_lpai for act backends(lpai) {
  input x: u8[2, 3] : encoding quant(0.05, 128)
  graph y = mllm.ReLU(x) : dtype u8, encoding quant(0.05, 128)
  expect ops qnn.ElementWiseNeuron
}

test act_cpu for act backends(cpu, gpu) {
  input x: f32[2, 3]
  graph y = mllm.ReLU(x)
  expect ops qnn.ElementWiseMaximum
  expect close atol 0 rtol 0
}

test sub_htp backends(htp) {
  input a: f32[2, 3]
  input b: f32[2, 3]
  graph y = mllm.Sub(a, b)
  expect ops qnn.ElementWiseSubtract
  expect rule sub_htp
}

test sub_cpu for sub backends(cpu) {
  input a: f32[2, 3]
  input b: f32[2, 3]
  graph y = mllm.Sub(a, b)
  expect ops qnn.ElementWiseNeg, qnn.ElementWiseAdd
  expect rule sub
  expect close atol 1e-6 rtol 1e-6
}

test sub_gpu for sub backends(gpu) {
  input a: f32[2, 3]
  input b: f32[1, 3]
  graph y = mllm.Sub(a, b)
  expect ops qnn.ElementWiseSubtract
  expect rule sub
}
"""


def test_backend_parses_as_a_call_in_guards_and_emit_ifs() -> None:
    m = parse(_RULES, "b.qpat")
    (d,) = m.defines
    assert d.expr.left == ast.Binary("==", ast.Call("backend", ()), ast.Literal("htp"))  # kept as written
    act = next(r for r in m.rules if r.name == "act")
    (emit_if,) = [i for s in act.body if isinstance(s, ast.Emit) for i in s.items]
    assert emit_if.cond == ast.Binary("in", ast.Call("backend", ()), ast.ListExpr((ast.Literal("htp"), ast.Literal("dsp"))))
    assert emit_if.otherwise[0].cond == ast.Binary("==", ast.Call("backend", ()), ast.Literal("lpai"))


@pytest.mark.parametrize("text", [
    'rule r {\n  match y = t.Act(x)\n  require backend() in ["cpu", "htp"]\n  emit y = qnn.Relu(x)\n}\n',
    'rule r {\n  match y = t.Act(x)\n  emit {\n    if backend() == "htp" {\n      y = qnn.Relu(x)\n'
    '    } else if "dsp" != backend() {\n      y = qnn.Sigmoid(x)\n    } else {\n      y = x\n    }\n  }\n}\n',
    'def on_htp(x) = backend() == "htp" and rank(x) == 4\n',
])
def test_backend_forms_are_canonical_and_round_trip(text: str) -> None:
    assert format_text(text) == text
    assert parse(format_text(text)) == parse(text)


def test_lowering_differs_per_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each backend takes its branch: the tests pin the ops per backend (and the numbers where the
    reference kernels run); the LPAI branch is planned on LPAI only, the others never there."""
    f = tmp_path / "b.qpat"
    f.write_text(_RULES, encoding="utf-8")
    assert main(["check", str(f)]) == 0, capsys.readouterr().out
    capsys.readouterr()
    assert main(["test", str(f)]) == 0, capsys.readouterr().out
    assert "7 passed, 0 failed" in capsys.readouterr().out


def test_a_branch_with_an_op_a_backend_lacks_fails_only_there(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """LPAI has no Tile: the rule fails on LPAI (its own branch tiles) and lowers on CPU, where the
    Tile branch is not taken either."""
    text = ("import mllm.ops\n\nrule act {\n  match y = mllm.ReLU(x)\n  emit {\n    if backend() == \"lpai\" {\n"
            "      y = qnn.Tile(x) { multiples: [1, 1] }\n    } else {\n      y = qnn.Relu(x)\n    }\n  }\n}\n\n"
            "test act_cpu for act backends(cpu) {\n  input x: f32[2, 3]\n  graph y = mllm.ReLU(x)\n  expect ops qnn.Relu\n}\n\n"
            "test act_lpai for act backends(lpai) {\n  input x: f32[2, 3]\n  graph y = mllm.ReLU(x)\n"
            "  expect error \"Tile is not supported on LPAI\"\n}\n")
    f = tmp_path / "lack.qpat"
    f.write_text(text, encoding="utf-8")
    assert main(["check", str(f)]) == 0, capsys.readouterr().out
    capsys.readouterr()
    assert main(["test", str(f)]) == 0, capsys.readouterr().out
    assert "2 passed, 0 failed" in capsys.readouterr().out


def test_unknown_backend_names_are_located_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "u.qpat"
    f.write_text('op t.Act(x) -> y\n\nrule act {\n  match y = t.Act(x)\n  emit {\n    if backend() == "htpp" {\n'
                 '      y = qnn.Relu(x)\n    } else {\n      y = qnn.Sigmoid(x)\n    }\n  }\n}\n', encoding="utf-8")
    found, _ = check_paths([f])
    assert [(d.span.line, d.span.column, d.code, d.hint) for d in found if d.is_error] == [
        (6, 21, "unknown-backend", "did you mean `htp`?")]
    assert main(["check", str(f)]) == 1
    out = capsys.readouterr()
    assert ":6:21: error: unknown backend `htpp`" in out.out + out.err


def test_both_branches_are_checked_whatever_the_backend(tmp_path: Path) -> None:
    f = tmp_path / "u.qpat"
    f.write_text('op t.Act(x) -> y\n\nrule act backends(cpu) {\n  match y = t.Act(x)\n  emit {\n'
                 '    if backend() == "htp" {\n      y = qnn.Relu(z)\n    } else {\n      y = qnn.Sigmoid(x)\n    }\n'
                 '  }\n}\n', encoding="utf-8")
    found, _ = check_paths([f])
    assert [(d.span.line, d.code) for d in found if d.is_error] == [(7, "undefined-name")]


def test_specialised_rule_is_plain_where_the_backend_decides() -> None:
    """On each backend the `if` is gone: a one-op branch is a plain rule (the engine's fast path)."""
    act = next(r for r in parse(_RULES, "b.qpat").rules if r.name == "act")
    emitted = {b: [i for s in for_backend(act, b).body if isinstance(s, ast.Emit) for i in s.items] for b in BACKENDS}
    assert {b: [i.op for i in items] for b, items in emitted.items()} == {
        "cpu": ["qnn.ElementWiseMaximum"], "gpu": ["qnn.ElementWiseMaximum"], "htp": ["qnn.Relu"],
        "dsp": ["qnn.Relu"], "lpai": ["qnn.ElementWiseNeuron"]}
    assert for_backend(act, None) is act
    sub_htp = next(r for r in parse(_RULES, "b.qpat").rules if r.name == "sub_htp")  # the def inlined
    assert [s.expr for s in for_backend(sub_htp, "cpu").body if isinstance(s, ast.Require)] == [ast.Literal(False)]
    plain = parse('import mllm.ops\nrule r {\n  match y = mllm.ReLU(x)\n  emit y = qnn.Relu(x)\n}\n').rules[0]
    assert for_backend(plain, "cpu") is plain


_BOOL_NAMES = ("p", "q")
_conds = st.recursive(
    S.backend_tests | st.sampled_from(_BOOL_NAMES).map(ast.Name) | st.booleans().map(ast.Literal),
    lambda ch: st.one_of(st.builds(ast.Binary, st.sampled_from(["and", "or"]), ch, ch),
                         st.builds(ast.Unary, st.just("not"), ch),
                         st.builds(ast.Conditional, ch, ch, ch),
                         st.builds(ast.Binary, st.sampled_from(["==", "!="]), ch, ch)),
    max_leaves=8)


@settings(max_examples=150, deadline=None)
@given(_conds, st.sampled_from(BACKENDS), st.booleans(), st.booleans())
def test_specialising_keeps_the_meaning(cond: ast.Expr, backend: str, p: bool, q: bool) -> None:
    """Law: a guard specialised for a backend evaluates as the original does with backend() = that backend."""
    rule = ast.Rule("r", (ast.Match(ast.Binders(("y",)), ast.OpPattern(("t.Act",), (ast.Capture("x"),))),
                          ast.Require(cond), ast.Emit((ast.EmitAlias(ast.Binders(("y",)), "x"),))))
    table = builtin_functions()
    fixed = FunctionTable({**table.functions, "backend": attrs.evolve(BACKEND_FUNCTION, impl=lambda: backend)})
    env = {"p": p, "q": q}
    want = compile_expr(cond, _BOOL_NAMES, fixed)(dict(env))
    guards = [s.expr for s in for_backend(rule, backend).body if isinstance(s, ast.Require)]
    assert len(guards) <= 1
    got = compile_expr(guards[0], _BOOL_NAMES, table)(dict(env)) if guards else True
    assert got == want
    assert not mentions_backend(tuple(guards))
