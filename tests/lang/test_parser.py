"""The parser: the tree built for each construct, comments and docs, syntax errors.

One test per capability; each also checks the formatter round trip, so every
hand-written construct is known to survive `qlower fmt`.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from qlower.diagnostics import QlowerError, Span, render_all
from qlower.lang import ast
from qlower.lang.ast import (
    Alternatives, Arg, AttrDecl, AttrPat, Binary, Binders, Call, Capture, Conditional, DimPat, DimRange, Emit,
    EmitAlias, EmitOp, EmitTensor, Expect, Fail, GraphNode, Import, Index, Let, ListExpr, Literal, Match, Name,
    NamedNested, OpDecl, OperandDecl, OpPattern, Param, Require, RestCapture, ResultDecl, Rule, Slice, TensorType,
    TypeRef, Unary, ValueProp, ValueType, Wildcard,
)
from qlower.lang.checker import check
from qlower.lang.formatter import format_module, format_text
from qlower.lang.loader import check_paths
from qlower.lang.parser import parse
from qlower.lang.registry import default_registry
from qlower.lang.builtins import builtin_functions
from tests.lang.strategies import tree_key

DOC = Path(__file__).resolve().parents[2] / "docs" / "language.md"


def items(text: str) -> tuple:
    m = parse(text, "t.qpat")
    again = parse(format_module(m), "fmt.qpat")
    assert tree_key(again.items) == tree_key(m.items), format_module(m)
    return m.items


def body(text: str) -> tuple:
    (rule,) = items(text)
    return rule.body


def expr(text: str) -> ast.Expr:
    (let,) = body(f"rule r {{ let v = {text} }}")
    return let.expr


def pattern(text: str) -> OpPattern:
    (match,) = body(f"rule r {{ match y = {text} }}")
    return match.pattern


def syntax_error(text: str):
    with pytest.raises(QlowerError) as info:
        parse(text, "bad.qpat")
    (d,) = info.value.diagnostics
    assert d.code == "syntax" and d.span is not None
    return d


def x(name: str) -> Capture:
    return Capture(name)


# ------------------------------------------------------------------ modules


def test_imports() -> None:
    assert items('import "lib/common.qpat"\nimport mllm\nimport vendor.pack') == (
        Import("lib/common.qpat", True), Import("mllm", False), Import("vendor.pack", False))


def test_empty_file_and_comment_only_file() -> None:
    assert parse("").items == ()
    m = parse("# nothing here\n\n")
    assert m.items == () and m.comments == (ast.Comment(1, "# nothing here"),)


# ------------------------------------------------------------- declarations


def test_op_declaration_operands_results_attributes() -> None:
    (d,) = items("op mllm.Split(x, axis?, extra...) -> (ys...) "
                 "{ dims: list[int], keep: bool = true, mode: str = \"a\", eps: float = 1e-5 }")
    assert d == OpDecl(
        "mllm.Split",
        (OperandDecl("x", "one"), OperandDecl("axis", "optional"), OperandDecl("extra", "variadic")),
        (ResultDecl("ys", True),),
        (AttrDecl("dims", TypeRef("list", TypeRef("int"))), AttrDecl("keep", TypeRef("bool"), Literal(True)),
         AttrDecl("mode", TypeRef("str"), Literal("a")), AttrDecl("eps", TypeRef("float"), Literal(1e-5))),
    )
    assert d.dialect == "mllm"


def test_op_declaration_single_and_multiple_results() -> None:
    a, b, c = items("op m.A() -> y\nop m.B(x,) -> (y,)\nop m.C(x) -> (lo, hi)")
    assert a == OpDecl("m.A", (), (ResultDecl("y"),))
    assert b == OpDecl("m.B", (OperandDecl("x", "one"),), (ResultDecl("y"),))
    assert c.results == (ResultDecl("lo"), ResultDecl("hi"))


def test_commutative_declaration_and_negative_default() -> None:
    (d,) = items("op m.Add(a, b) -> y commutative { axis: int = -1 }")
    assert d.commutative and d.attrs == (AttrDecl("axis", TypeRef("int"), Unary("-", Literal(1))),)


def test_doc_comments_attach_to_ops_rules_and_tests() -> None:
    text = ("# free, separated by a blank line\n\n# Repeat\n#   along one dim\nop m.R(x) -> y\n"
            "# the rule\nrule r {}\n# the test\ntest r {}\nimport mllm\n")
    m = parse(text)
    assert [getattr(i, "doc", None) for i in m.items] == ["Repeat\n  along one dim", "the rule", "the test", None]
    assert [c.text for c in m.comments] == ["# free, separated by a blank line"]
    assert format_text(format_text(text)) == format_text(text)


# -------------------------------------------------------------------- rules


def test_rule_metadata() -> None:
    a, b, c = items("rule a benefit 3 backends(cpu, htp) {}\nrule b benefit -2 {}\nrule c {}")
    assert a == Rule("a", (), 3, ("cpu", "htp"))
    assert b.benefit == -2 and b.backends is None
    assert c == Rule("c", ())


def test_single_op_match_with_captures() -> None:
    assert body("rule r { match y = mllm.Sigmoid(x) }") == (
        Match(Binders(("y",)), OpPattern(("mllm.Sigmoid",), (x("x"),))),)


def test_repeated_capture_is_just_the_same_name() -> None:
    assert pattern("m.Mul(x, x)").operands == (x("x"), x("x"))


def test_binder_forms() -> None:
    matches = body("rule r { match y = m.A() match a, b = m.B() match ys... = m.C() match _ = m.D() }")
    assert [m.binders for m in matches] == [
        Binders(("y",)), Binders(("a", "b")), Binders(("ys",), True), Binders(())]


def test_value_type_constraints() -> None:
    p = pattern("m.A(w: const f32[4, n, _, ...], v: f16, s: [1, n], c: const, e:)")
    assert p.operands == (
        Capture("w", ValueType(True, "f32", (DimPat("int", 4), DimPat("capture", "n"), DimPat("any"),
                                             DimPat("rest")))),
        Capture("v", ValueType(dtype="f16")),
        Capture("s", ValueType(shape=(DimPat("int", 1), DimPat("capture", "n")))),
        Capture("c", ValueType(const=True)),
        Capture("e", ValueType()),
    )
    assert pattern("m.A(x: [])").operands == (Capture("x", ValueType(shape=())),)


def test_wildcards() -> None:
    assert pattern("m.A(_, _: f32[1])").operands == (
        Wildcard(), Wildcard(ValueType(dtype="f32", shape=(DimPat("int", 1),))))


def test_rest_capture_for_variadic_operands() -> None:
    assert pattern("m.Concat(first, rest...)").operands == (x("first"), RestCapture("rest"))


def test_nested_and_named_nested_patterns() -> None:
    p = pattern("m.Mul(x, s = m.Sigmoid(m.Neg(x)))")
    assert p.operands == (x("x"), NamedNested("s", OpPattern(("m.Sigmoid",), (OpPattern(("m.Neg",), (x("x"),)),))))


def test_operand_alternatives() -> None:
    p = pattern("m.A((x: const | m.Cast(x) | _), (a | (b | c)))")
    assert p.operands == (
        Alternatives((Capture("x", ValueType(const=True)), OpPattern(("m.Cast",), (x("x"),)), Wildcard())),
        Alternatives((x("a"), Alternatives((x("b"), x("c"))))),
    )


def test_op_type_alternatives() -> None:
    assert pattern("m.Relu | m.Relu6 | onnx.Clip(x)").op_types == ("m.Relu", "m.Relu6", "onnx.Clip")


def test_attribute_patterns() -> None:
    p = pattern('m.A(x) { dim: d, keep: true, drop: false, mode: "nearest", axis: -1, eps: 1e-6, '
                'neg: -2.5, opt: none, any: _, }')
    assert p.attrs == (
        AttrPat("dim", "capture", "d"), AttrPat("keep", "literal", True), AttrPat("drop", "literal", False),
        AttrPat("mode", "literal", "nearest"), AttrPat("axis", "literal", -1), AttrPat("eps", "literal", 1e-6),
        AttrPat("neg", "literal", -2.5), AttrPat("opt", "literal", None), AttrPat("any", "any"),
    )
    assert type(p.attrs[4].value) is int and type(p.attrs[5].value) is float


def test_pattern_flags() -> None:
    p = pattern("m.Add(m.Mul(a, b) shared, c) { k: 1 } commutative")
    assert p.commutative and not p.shared
    assert p.operands[0] == OpPattern(("m.Mul",), (x("a"), x("b")), shared=True)
    assert pattern("m.A(x) shared commutative") == OpPattern(("m.A",), (x("x"),), commutative=True, shared=True)


def test_dag_patterns_are_later_matches() -> None:
    first, second = body("rule r { match y = m.Mul(x, s) match s = m.Sigmoid(x) }")
    assert second == Match(Binders(("s",)), OpPattern(("m.Sigmoid",), (x("x"),)))


def test_require_let_fail() -> None:
    assert body('rule r { require rank(x) == 4 let n = 2 fail "unsupported" }') == (
        Require(Binary("==", Call("rank", (Name("x"),)), Literal(4))),
        Let("n", Literal(2)),
        Fail(Literal("unsupported")),
    )


# -------------------------------------------------------------- expressions


@pytest.mark.parametrize("text, want", [
    ("42", Literal(42)), ("0x1F", Literal(31)), ("007", Literal(7)), ("1.5", Literal(1.5)),
    ("2.", Literal(2.0)), ("1e3", Literal(1000.0)), ("2.5E-3", Literal(0.0025)),
    ('"a\\"b\\n\\u00e9"', Literal('a"b\né')), ("true", Literal(True)), ("false", Literal(False)),
    ("none", Literal(None)), ("f32", Name("f32")),
])
def test_literals_and_names(text: str, want: ast.Expr) -> None:
    got = expr(text)
    assert tree_key(got) == tree_key(want)


def test_lists_calls_index_slice() -> None:
    assert expr("[1, [2], ]") == ListExpr((Literal(1), ListExpr((Literal(2),))))
    assert expr("[]") == ListExpr(())
    assert expr("f()") == Call("f", ())
    assert expr("shape(x)[0]") == Index(Call("shape", (Name("x"),)), Literal(0))
    assert expr("s[1:]") == Slice(Name("s"), Literal(1), None)
    assert expr("s[:-1]") == Slice(Name("s"), None, Unary("-", Literal(1)))
    assert expr("s[:]") == Slice(Name("s"), None, None)
    assert expr("s[a:b][0]") == Index(Slice(Name("s"), Name("a"), Name("b")), Literal(0))


def test_arithmetic_precedence_and_associativity() -> None:
    a, b, c = Name("a"), Name("b"), Name("c")
    assert expr("a + b * c") == Binary("+", a, Binary("*", b, c))
    assert expr("a - b - c") == Binary("-", Binary("-", a, b), c)
    assert expr("a // b % c") == Binary("%", Binary("//", a, b), c)
    assert expr("-a * b") == Binary("*", Unary("-", a), b)
    assert expr("-a[0]") == Unary("-", Index(a, Literal(0)))
    assert expr("a - -1") == Binary("-", a, Unary("-", Literal(1)))
    assert expr("[1] * n ++ a ++ b") == Binary("++", Binary("++", Binary("*", ListExpr((Literal(1),)), Name("n")), a), b)


def test_logic_comparison_membership() -> None:
    a, b, c = Name("a"), Name("b"), Name("c")
    assert expr("a or b and not c") == Binary("or", a, Binary("and", b, Unary("not", c)))
    assert expr("not a == b") == Unary("not", Binary("==", a, b))
    assert expr("a in b") == Binary("in", a, b)
    assert expr("a not in b") == Binary("not in", a, b)
    assert expr("a + 1 <= b ++ c") == Binary("<=", Binary("+", a, Literal(1)), Binary("++", b, c))
    for op in ("==", "!=", "<", "<=", ">", ">="):
        assert expr(f"a {op} b") == Binary(op, a, b)


def test_conditional_is_right_associative() -> None:
    a, b, c, d, e = map(Name, "abcde")
    assert expr("a if b else c if d else e") == Conditional(a, b, Conditional(c, d, e))
    assert expr("(a if b else c) if d else e") == Conditional(Conditional(a, b, c), d, e)
    assert expr("a or b if c and d else e") == Conditional(Binary("or", a, b), Binary("and", c, d), e)


def test_comparisons_do_not_chain() -> None:
    syntax_error("rule r { require a < b < c }")


# -------------------------------------------------------------------- emit


def test_emit_single_item_and_block() -> None:
    one, block = body("rule r { emit y = qnn.Sigmoid(x) emit {\n a = x\n b = qnn.Relu(a)\n} }")
    assert one == Emit((EmitOp(Binders(("y",)), "qnn.Sigmoid", (Arg("value", "x"),)),), block=False)
    assert block.items == (EmitAlias(Binders(("a",)), "x"), EmitOp(Binders(("b",)), "qnn.Relu", (Arg("value", "a"),)))
    assert block.block and not one.block
    assert one == Emit(one.items, block=True)  # layout is not part of equality


def test_emit_args_params_and_value_props() -> None:
    (emit,) = body("rule r { emit lo, hi = qnn.Split(x, _, rest..., tensor([1, 2])) { axis: 1, split_index: [2] } "
                   ": shape [2, n], dtype f16, encoding quant(0.1, 0) }")
    (op,) = emit.items
    assert op == EmitOp(
        Binders(("lo", "hi")), "qnn.Split",
        (Arg("value", "x"), Arg("none"), Arg("rest", "rest"), Arg("tensor", expr=ListExpr((Literal(1), Literal(2))))),
        (Param("axis", Literal(1)), Param("split_index", ListExpr((Literal(2),)))),
        (ValueProp("shape", ListExpr((Literal(2), Name("n")))), ValueProp("dtype", Name("f16")),
         ValueProp("encoding", Call("quant", (Literal(0.1), Literal(0))))),
    )


def test_emit_alias_and_static_tensor() -> None:
    (emit,) = body("rule r { emit { y = x\n w = tensor(zeros([4], f32)) : dtype f32\n } }")
    assert emit.items == (
        EmitAlias(Binders(("y",)), "x"),
        EmitTensor(Binders(("w",)), Call("zeros", (ListExpr((Literal(4),)), Name("f32"))),
                   (ValueProp("dtype", Name("f32")),)),
    )


def test_emit_rest_binders() -> None:
    (emit,) = body("rule r { emit ys... = qnn.Split(x) { axis: 0 } }")
    assert emit.items[0].binders == Binders(("ys",), True)


def test_emit_let() -> None:
    (emit,) = body("rule r { emit {\n t = qnn.Reshape(x)\n let ts = [t] * 2\n y = qnn.Concat(ts...)\n } }")
    assert emit.items[1] == ast.EmitLet("ts", Binary("*", ListExpr((Name("t"),)), Literal(2)))
    assert emit.items[2].args == (Arg("rest", "ts"),)


# -------------------------------------------------------------------- tests


def test_test_block() -> None:
    (t,) = items("""
        test tile_ok for repeat_to_tile backends(cpu, htp) {
          input x: f32[1, 2..8, 16] : encoding quant(0.05, 128)
          const w: f32[4] = [1, 2, 3, 4]
          const b: f32[]
          graph y = mllm.Repeat(x, _) { dim: 1, times: 4 } : dtype f32
          graph {
            a = mllm.Sigmoid(y)
            b2 = mllm.Mul(a, y)
          }
          expect ops qnn.Tile, qnn.Sigmoid
          expect ops none
          expect close atol 1e-3 rtol 0 steps 5
          expect error "not supported"
          expect rule repeat_to_tile
        }
    """)
    assert t.rule_name == "repeat_to_tile" and t.backends == ("cpu", "htp")
    assert t.body == (
        ast.TestInput("x", TensorType("f32", (DimRange(1), DimRange(2, 8), DimRange(16))),
                  (ValueProp("encoding", Call("quant", (Literal(0.05), Literal(128)))),)),
        ast.TestConst("w", TensorType("f32", (DimRange(4),)), ListExpr(tuple(map(Literal, (1, 2, 3, 4))))),
        ast.TestConst("b", TensorType("f32", ())),
        ast.TestGraph((GraphNode(Binders(("y",)), "mllm.Repeat", (Arg("value", "x"), Arg("none")),
                             (Param("dim", Literal(1)), Param("times", Literal(4))),
                             (ValueProp("dtype", Name("f32")),)),)),
        ast.TestGraph((GraphNode(Binders(("a",)), "mllm.Sigmoid", (Arg("value", "y"),)),
                   GraphNode(Binders(("b2",)), "mllm.Mul", (Arg("value", "a"), Arg("value", "y"))))),
        Expect("ops", ops=("qnn.Tile", "qnn.Sigmoid")),
        Expect("no_ops"),
        Expect("close", tolerances=(("atol", 1e-3), ("rtol", 0.0), ("steps", 5.0))),
        Expect("error", text="not supported"),
        Expect("rule", text="repeat_to_tile"),
    )
    assert items("test r {}")[0].rule_name == "r"


# ------------------------------------------------------- comments and spans


def test_comments_are_kept_with_lines() -> None:
    m = parse('rule r {  # trailing\n  # own line\n  let s = "# not a comment"\n}\n')
    assert [(c.line, c.text, c.own_line) for c in m.comments] == [
        (1, "# trailing", False), (2, "# own line", True)]
    assert m.rules[0].body[0].expr == Literal("# not a comment")


def test_spans_locate_nodes() -> None:
    m = parse("\nrule r {\n  require x > 1\n}\n", "f.qpat")
    rule = m.rules[0]
    assert rule.span == Span("f.qpat", 2, 1, 4, 2)
    assert rule.body[0].span == Span("f.qpat", 3, 3, 3, 16)
    assert rule.body[0].expr.right.span == Span("f.qpat", 3, 15, 3, 16)


def test_keywords_are_names_where_unambiguous() -> None:
    (r,) = items("rule shape { match y = m.A(dtype, steps) { encoding: shared } let rule = dtype(dtype) "
                 "emit y = qnn.Cast(steps) : dtype rule }")
    assert r.name == "shape" and r.body[0].pattern.operands == (x("dtype"), x("steps"))
    assert r.body[1] == Let("rule", Call("dtype", (Name("dtype"),)))


# ------------------------------------------------------------- syntax errors


def test_unclosed_block_points_past_the_last_token() -> None:
    d = syntax_error("rule r {\n  match y = m.A(x)")
    assert (d.span.line, d.span.column) == (2, 19)
    assert "end of file" in d.message and d.hint == "a `{` block is not closed"


def test_unexpected_token_says_what_was_expected() -> None:
    d = syntax_error("rule r { match y = m.A(x) emit y = }")
    assert (d.span.line, d.span.column) == (1, 36)
    assert d.message.startswith("unexpected `}`; expected") and "a name" in d.message
    assert "bad.qpat:1:36" in d.render()


def test_misspelled_keyword_gets_a_hint() -> None:
    d = syntax_error("rule r { requir x }")
    assert d.hint == "did you mean `require`?"


def test_bad_characters_are_shown_escaped() -> None:
    d = syntax_error("rule r { let x = 1 \x01 }")
    assert "`\\x01`" in d.message and (d.span.line, d.span.column) == (1, 20)


def test_bad_literals_are_located_errors() -> None:
    d = syntax_error('rule r {\n  let s = "bad \\q escape"\n}')
    assert (d.span.line, d.span.column) == (2, 11) and "string" in d.message
    d = syntax_error("rule r { let n = " + "9" * 5000 + " }")
    assert "too large" in d.message
    d = syntax_error("rule r { let n = " + "-" * 5000 + "1 }")
    assert "nested too deeply" in d.message


def test_byte_order_mark_is_skipped() -> None:
    m = parse("\ufeffrule r {\n  require x\n}\n", "f.qpat")
    assert m.rules[0].body[0].span == Span("f.qpat", 2, 3, 2, 12)


def test_raw_tab_in_string_is_allowed() -> None:
    assert expr('"a\tb"') == Literal("a\tb")


# -------------------------------------------------------- the reference doc


def _doc_blocks() -> list[tuple[int, str]]:
    text = DOC.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 2, m.group(1))
            for m in re.finditer(r"^```qpat\n(.*?)^```", text, re.S | re.M)]


def test_reference_has_examples() -> None:
    assert len(_BLOCKS) >= 20


_BLOCKS = _doc_blocks()


@pytest.mark.parametrize("line, block", _BLOCKS, ids=[f"line{n}" for n, _ in _BLOCKS])
def test_reference_examples_parse_and_round_trip(line: int, block: str) -> None:
    m = parse(block, f"{DOC.name}:{line}")
    again = parse(format_module(m))
    assert tree_key(again.items) == tree_key(m.items)


@pytest.mark.parametrize("line, block", _BLOCKS, ids=[f"line{n}" for n, _ in _BLOCKS])
def test_reference_examples_are_formatted(line: int, block: str) -> None:
    """The reference shows the canonical layout (`qlower fmt` leaves examples alone)."""
    assert format_text(block) == block


@pytest.mark.parametrize("line, block", _BLOCKS, ids=[f"line{n}" for n, _ in _BLOCKS])
def test_reference_examples_pass_the_checker(line: int, block: str, tmp_path: Path) -> None:
    """Examples teach valid rules: no findings, except in the one showing findings."""
    if "rule mistakes" in block:
        return
    if " overrides " in block:  # needs the whole pack it overrides a rule of, as its imports say
        from qlower.lang.loader import check_paths
        from qlower.plugins import builtin_contributions

        (tmp_path / "example.qpat").write_text(block)
        found, _ = check_paths([tmp_path / "example.qpat"], registry=_registry(),
                               functions=builtin_contributions().functions)
        assert [str(d) for d in found] == []
        return
    ops_file = DOC.parents[1] / "patterns" / "mllm" / "ops.qpat"
    modules = [parse(ops_file.read_text(encoding="utf-8"), str(ops_file)), parse(block, f"{DOC.name}:{line}")]
    found = check(modules, registry=_registry(), functions=builtin_functions())
    assert [str(d) for d in found] == []


@functools.cache
def _registry():
    return default_registry()


def test_reference_diagnostics_are_current(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The findings the reference shows for its `mistakes` example are what `qlower check` reports."""
    text = DOC.read_text(encoding="utf-8")
    (block,) = [b for _, b in _BLOCKS if "rule mistakes" in b]
    shown = re.search(r"`qlower check rules/mistakes.qpat` reports:\n\n```text\n(.*?)```", text, re.S)
    assert shown is not None
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "mistakes.qpat").write_text(block, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    diags, sources = check_paths(["rules/mistakes.qpat"])
    mine = [d for d in diags if d.span is not None and d.span.file == "rules/mistakes.qpat"]
    assert render_all(mine, sources) + "\n" == shown.group(1)
