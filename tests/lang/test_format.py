"""The formatter: canonical layout, exact round trips, kept comments, idempotence."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qlower.diagnostics import QlowerError
from qlower.lang import ast
from qlower.lang.formatter import format_expr, format_module, format_text, literal_text, quote
from qlower.lang.parser import parse
from tests.lang import strategies as S

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _expr(text: str) -> ast.Expr:
    (rule,) = parse(f"rule r {{ let v = {text} }}").rules
    return rule.body[0].expr


def _roundtrip(text: str) -> str:
    """Format, check the tree and idempotence, return the formatted text."""
    out = format_text(text)
    assert S.tree_key(parse(out).items) == S.tree_key(parse(text).items)
    assert format_text(out) == out
    return out


def _comment_bodies(m: ast.Module) -> list[str]:
    """Every comment's words, free or doc, whatever the formatter did to its place."""
    bodies = [c.text[1:].strip() for c in m.comments]
    for item in m.items:
        doc = getattr(item, "doc", None)
        if doc is not None:
            bodies += [line.strip() for line in doc.split("\n")]
    return sorted(bodies)


# ----------------------------------------------------------------- properties


@FAST
@given(S.modules)
def test_generated_modules_round_trip(module: ast.Module) -> None:
    text = format_module(module)
    again = parse(text, "<formatted>")
    assert S.tree_key(again.items) == S.tree_key(module.items)
    assert again.items == module.items
    assert format_module(again) == text


@FAST
@given(S.exprs)
def test_expressions_round_trip_with_minimal_parentheses(e: ast.Expr) -> None:
    text = format_expr(e)
    assert S.tree_key(_expr(text)) == S.tree_key(e)
    # Minimal: dropping any one pair of grouping parentheses breaks the syntax or the meaning.
    for i, j in _paren_pairs(text):
        fewer = text[:i] + text[i + 1:j] + text[j + 1:]
        try:
            tree = _expr(fewer)
        except QlowerError:
            continue
        assert S.tree_key(tree) != S.tree_key(e), fewer


def _paren_pairs(text: str) -> list[tuple[int, int]]:
    """Grouping parentheses (not calls), outside string literals."""
    pairs, stack, in_str, esc = [], [], False, False
    for i, ch in enumerate(text):
        if in_str:
            esc, in_str = (False, True) if esc else (ch == "\\", ch != '"')
        elif ch == '"':
            in_str = True
        elif ch == "(":
            call = i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")
            stack.append(None if call else i)
        elif ch == ")":
            start = stack.pop()
            if start is not None:
                pairs.append((start, i))
    return pairs


@FAST
@given(S.modules, st.data())
def test_comments_survive_formatting(module: ast.Module, data: st.DataObject) -> None:
    lines = format_module(module).split("\n")
    marks = data.draw(st.lists(st.tuples(st.integers(0, len(lines)), st.booleans(), st.sampled_from("abcdef")),
                               max_size=6))
    for n, (at, trailing, word) in enumerate(sorted(marks, reverse=True)):
        if trailing and at < len(lines) and lines[at].strip():
            lines[at] += f"  # t{word}{n}"
        else:
            lines.insert(at, f"# c{word}{n}")
    text = "\n".join(lines)
    before = parse(text)
    out = format_text(text)
    after = parse(out)
    assert S.tree_key(after.items) == S.tree_key(before.items)  # docs stay docs, free comments stay free
    assert _comment_bodies(after) == _comment_bodies(before)
    assert format_text(out) == out


@FAST
@given(st.text())
def test_string_escapes_round_trip(s: str) -> None:
    assert _expr(quote(s)) == ast.Literal(s)


@FAST
@given(st.floats(allow_nan=False))
def test_floats_keep_their_exact_value(x: float) -> None:
    (rule,) = parse(f"rule r {{ match y = m.A() {{ a: {literal_text(x)} }} }}").rules
    value = rule.body[0].pattern.attrs[0].value
    assert value == x and type(value) is float and str(value) == str(x)


# ------------------------------------------------------ real rule files

ROOT = Path(__file__).resolve().parents[2]
RULE_FILES = sorted([*(ROOT / "patterns").glob("**/*.qpat"), *(ROOT / "tests" / "lang").glob("**/*.qpat")])


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_rule_files_round_trip(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    try:
        module = parse(text, str(path))
    except QlowerError:
        return  # a syntax-error fixture
    out = format_module(module)
    again = parse(out)
    assert S.tree_key(again.items) == S.tree_key(module.items)
    assert _comment_bodies(again) == _comment_bodies(module)
    assert format_text(out) == out


# -------------------------------------------------------------- the layout

CANONICAL = '''\
import "common.qpat"
import mllm

# Repeat an input along one dim.
op mllm.Repeat(x) -> y { dim: int, times: int = 2 }
op my.Split(x, w?, rest...) -> (ys...) commutative { axes: list[int] = [1, -2] }
op my.Pair(x) -> (a, b)

# Repeat → Tile.
rule repeat_to_tile benefit 2 backends(cpu, htp) {
  match y = mllm.Repeat(x: f32[1, n, ...]) { dim: d, times: t }
  require d >= 0 and t > 1
  let multiples = [1] * d ++ [t] ++ [1] * (rank(x) - d - 1)
  emit y = qnn.Tile(x) { multiples: multiples }
}

rule several {
  match a, b = my.Pair(x) commutative
  emit {
    a = x
    w = tensor(zeros([4], f32)) : dtype f32
    b = qnn.ElementWiseAdd(x, w) : shape shape(x), encoding none
  }
}

test repeat_to_tile {
  input x: f32[1, 2..8, 16]
  graph y = mllm.Repeat(x) { dim: 1, times: 4 }
  expect ops qnn.Tile
  expect close atol 0.001 rtol 0 steps 5
}
'''


def test_canonical_text_is_a_fixed_point() -> None:
    assert format_text(CANONICAL) == CANONICAL


def test_messy_text_becomes_canonical() -> None:
    messy = '''
import "common.qpat"   import mllm
# Repeat an input along one dim.
op mllm.Repeat( x ) ->( y ){dim:int,times:int=2}
op my.Split(x,w?,rest...)->(ys...)commutative{axes:list[int]=[1,-2],} op my.Pair
(x) -> (a, b,)
# Repeat → Tile.
rule repeat_to_tile backends(cpu,htp) benefit 2{match y=mllm.Repeat(x:f32[1,n,...]){dim:d,times:t}
require(d>=0)and(t>1)
let multiples=(([1]*d)++[t])++([1]*(rank(x)-d-1))
emit{y=qnn.Tile(x){multiples:multiples}}}
rule several { match a,b = my.Pair(x) commutative emit {
 a = x w = tensor(zeros([4], f32)):dtype f32
 b = qnn.ElementWiseAdd(x, w):shape shape(x),encoding none } }
test repeat_to_tile { input x : f32[1,2..8,16,] graph { y = mllm.Repeat(x){dim:1,times:4} }
expect ops qnn.Tile expect close atol 1e-3 rtol 0 steps 5.0 }
'''
    assert format_text(messy) == CANONICAL


@pytest.mark.parametrize("src, want", [
    ("a + b * c", "a + b * c"),
    ("(a + b) * c", "(a + b) * c"),
    ("a - (b - c)", "a - (b - c)"),
    ("(a - b) - c", "a - b - c"),
    ("a - -1", "a - -1"),
    ("-(-x)", "--x"),
    ("-x[0]", "-x[0]"),
    ("(-x)[0]", "(-x)[0]"),
    ("(a < b) == c", "(a < b) == c"),
    ("not (a and b)", "not (a and b)"),
    ("not a == b", "not a == b"),
    ("(not a) == b", "(not a) == b"),
    ("a or (b or c)", "a or (b or c)"),
    ("(a if b else c) if d else e", "(a if b else c) if d else e"),
    ("a if b else (c if d else e)", "a if b else c if d else e"),
    ("a if (b if c else d) else e", "a if (b if c else d) else e"),
    ("[1] * (n + 1) ++ x[1:] ++ x[:-1]", "[1] * (n + 1) ++ x[1:] ++ x[:-1]"),
    ("(a ++ b)[0]", "(a ++ b)[0]"),
    ("x not in [1,2]", "x not in [1, 2]"),
    ("f( a , b , )", "f(a, b)"),
    ("0x1F + 007 + 1. + 2e3 + 1e-05 + 0.0001 + 0.001 + 0.0015 + 1e16",
     "31 + 7 + 1.0 + 2000.0 + 1e-5 + 1e-4 + 0.001 + 0.0015 + 1e16"),
    ("1e999", "1e999"),
    ('"tab\there \\"q\\" \\u00e9 \\u0001"', '"tab\\there \\"q\\" é \\u0001"'),
])
def test_expression_spelling(src: str, want: str) -> None:
    assert format_expr(_expr(src)) == want


def test_long_attribute_patterns_wrap_but_long_props_do_not() -> None:
    src = ("rule r { match y = mllm.Conv2D(x: [_, _, _, _], w: const [_, _, _, _], bias...) "
           "{ stride: st, padding: pad, dilation: dil, groups: g } commutative "
           "emit y = qnn.Concat(x, w) { axis: 0 } : shape [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18] }")
    assert _roundtrip(src) == textwrap.dedent('''\
        rule r {
          match y = mllm.Conv2D(x: [_, _, _, _], w: const [_, _, _, _], bias...) {
            stride: st,
            padding: pad,
            dilation: dil,
            groups: g,
          } commutative
          emit y = qnn.Concat(x, w) { axis: 0 } : shape [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]
        }
        ''')


def test_long_param_blocks_wrap_and_single_emits_become_blocks() -> None:
    src = ("rule r { match y = m.A(x) emit y = qnn.Conv2d(x, w, b) { stride: [1, 1], dilation: [1, 1], "
           "pad_amount: [[0, 0], [0, 0]], group: 1 } : dtype f32 }")
    out = _roundtrip(src)
    assert out == textwrap.dedent('''\
        rule r {
          match y = m.A(x)
          emit {
            y = qnn.Conv2d(x, w, b) {
              stride: [1, 1],
              dilation: [1, 1],
              pad_amount: [[0, 0], [0, 0]],
              group: 1,
            } : dtype f32
          }
        }
        ''')


def test_comment_placement() -> None:
    src = '''\
# file header

import mllm  # why mllm
import vendor.pack

# doc line 1
#   indented doc line
rule r {  # on the header
  # before the match
  match y = m.A(x)  # trailing
  require f(
    x)  # trails a statement that becomes one line
  emit {
    # inside the block
    y = x
  }  # after the block
  # at the end of the rule
}
op m.A(x) -> y  # trailing an op
op m.B(x) -> y
op m.C(x) -> y

op m.D(x) -> y
# at the end of the file
'''
    out = _roundtrip(src)
    assert out == '''\
# file header

import mllm  # why mllm
import vendor.pack

# doc line 1
#   indented doc line
rule r {
  # on the header
  # before the match
  match y = m.A(x)  # trailing
  require f(x)  # trails a statement that becomes one line
  emit {
    # inside the block
    y = x
    # after the block
  }
  # at the end of the rule
}

op m.A(x) -> y  # trailing an op
op m.B(x) -> y
op m.C(x) -> y

op m.D(x) -> y

# at the end of the file
'''
    assert parse(out).rules[0].doc == "doc line 1\n  indented doc line"
    assert parse(out).ops[0].doc is None


def test_two_trailing_comments_on_one_statement_move_above() -> None:
    src = "rule r {\n  require a and  # one\n    b  # two\n}\n"
    assert _roundtrip(src) == "rule r {\n  # one\n  # two\n  require a and b\n}\n"


def test_free_comment_above_a_documented_item_stays_free() -> None:
    src = "# free\n\n# doc\nrule r {}\n"
    assert _roundtrip(src) == src
    assert parse(src).rules[0].doc == "doc"


def test_comments_in_one_line_emits() -> None:
    src = "rule r {\n  emit y = x  # why\n}\n"
    assert _roundtrip(src) == src
    src = "rule r {\n  emit {  # one\n    y = x  # two\n  }\n}\n"
    assert _roundtrip(src) == "rule r {\n  emit {\n    # one\n    y = x  # two\n  }\n}\n"


def test_empty_things() -> None:
    assert format_text("") == ""
    assert format_text("# only a comment") == "# only a comment\n"
    assert _roundtrip("rule r { emit {} }") == "rule r {\n  emit {}\n}\n"
    assert _roundtrip("test t { graph {} }") == "test t {\n  graph {}\n}\n"
    assert _roundtrip("rule r {}\ntest t {}") == "rule r {}\n\ntest t {}\n"


def test_keyword_like_names_survive() -> None:
    src = ("rule shape { match y = m.A(dtype: const f32[_], shape) { encoding: steps }\n"
           "let rule = dtype(dtype) emit y = qnn.Cast(shape) : dtype dtype(dtype), shape shape(shape) }")
    _roundtrip(src)


def test_nan_has_no_spelling() -> None:
    with pytest.raises(ValueError):
        literal_text(float("nan"))
