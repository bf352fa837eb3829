"""The expression evaluator and the built-in functions.

Expressions are parsed the way rule authors write them (as the guard of a tiny rule), compiled
with `compile_expr` and evaluated against an environment of bound names.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qlower.graph import Graph, Quant
from qlower.lang import ast
from qlower.lang.parser import parse
from qlower.plugins import builtin_contributions
from qlower.rewrite.expr import compile_expr
from qlower.lang.functions import EvalError, RangeEncoding


@functools.cache
def _functions():
    return builtin_contributions().functions


@functools.cache
def _compiled(src: str, names: tuple[str, ...]):
    module = parse(f"rule r {{\n  match y = m.A(x)\n  require {src}\n  emit y = x\n}}\n", "e.qpat")
    (req,) = [s for s in module.rules[0].body if isinstance(s, ast.Require)]
    return compile_expr(req.expr, set(names), _functions())


def ev(src: str, **env):
    return _compiled(src, tuple(sorted(env)))(dict(env))


def evaluation_error(src: str, **env) -> str:
    with pytest.raises(EvalError) as exc:
        ev(src, **env)
    return str(exc.value)


@pytest.fixture
def values():
    """Graph values with different properties, by name."""
    g = Graph()
    x = g.add_value("x", "float32", [2, 3, 4])
    h = g.add_value("h", "float16", [5])
    c = g.add_value("c", "int8", [2, 2], quant=Quant(0.5, 3), data=np.arange(4, dtype=np.int8).reshape(2, 2))
    s = g.add_value("s", "float32", [])
    u = g.add_value("u", "float32", None)
    y = g.add_value("y", "float32", [2, 3, 4])
    z = g.add_value("z", "float32", [2, 3, 4])
    g.add_op("a", "m.Add", [x, x], [y])
    g.add_op("b", "m.Neg", [y], [z])
    g.set_io([x], [z])
    return {"x": x, "h": h, "c": c, "s": s, "u": u, "y": y, "z": z}


# ------------------------------------------------------------------ operators

@pytest.mark.parametrize("src, expected", [
    ("1 + 2 * 3", 7),
    ("(1 + 2) * 3", 9),
    ("2 - 3 - 4", -5),
    ("7 / 2", 3.5),
    ("7 // 2", 3),
    ("-7 // 2", -4),
    ("7 % 3", 1),
    ("-7 % 3", 2),
    ("-(2 + 3)", -5),
    ("--4", 4),
    ("2.5 * 2", 5.0),
    ("0x10 + 1", 17),
    ("1e-6 * 1e6", 1.0),
    ("2 * -3", -6),
    ("1e999", math.inf),
])
def test_arithmetic(src, expected):
    got = ev(src)
    assert got == expected
    assert type(got) is type(expected)


def test_true_division_always_gives_a_float():
    assert ev("4 / 2") == 2.0 and isinstance(ev("4 / 2"), float)


@settings(max_examples=60, deadline=None)
@given(st.integers(-1000, 1000), st.integers(-1000, 1000).filter(bool))
def test_integer_arithmetic_is_pythons(a, b):
    env = {"a": a, "b": b}
    assert ev("a + b", **env) == a + b
    assert ev("a - b", **env) == a - b
    assert ev("a * b", **env) == a * b
    assert ev("a // b", **env) == a // b
    assert ev("a % b", **env) == a % b
    assert ev("a / b", **env) == a / b


@pytest.mark.parametrize("src, expected", [
    ("1 < 2", True), ("2 <= 2", True), ("3 > 4", False), ("3 >= 4", False),
    ("1 == 1.0", True), ("1 != 2", True), ('"a" == "a"', True), ('"a" != "b"', True),
    ("[1, 2] == [1, 2]", True), ("[1, 2] != [2, 1]", True), ("none == none", True),
    ('"abc" < "abd"', True),
])
def test_comparisons(src, expected):
    assert ev(src) is expected


@pytest.mark.parametrize("src, expected", [
    ("true and false", False), ("true or false", True), ("not true", False),
    ("not 1 == 2", True),  # not (1 == 2)
    ("true or false and false", True),  # and binds tighter
    ("not false and false", False),  # (not false) and false
    ("1 < 2 and 2 < 3", True),
])
def test_boolean_logic(src, expected):
    assert ev(src) is expected


def test_and_or_short_circuit():
    assert ev("false and 1 // 0 == 0") is False
    assert ev("true or [1][5] == 0") is True
    assert ev("len(xs) > 0 and xs[0] == 1", xs=[]) is False


def test_conditional_is_lazy_and_nests_to_the_right():
    assert ev("1 if true else 1 // 0") == 1
    assert ev("1 // 0 if false else 2") == 2
    assert ev("1 if false else 2 if true else 3") == 2
    assert ev("1 if false else 2 if false else 3") == 3
    assert ev("(1 if false else 2) + 10") == 12


# ---------------------------------------------------------------------- lists

@pytest.mark.parametrize("src, expected", [
    ("[1, 2] ++ [3]", [1, 2, 3]),
    ("[] ++ []", []),
    ("[1] * 3", [1, 1, 1]),
    ("3 * [0]", [0, 0, 0]),
    ("[1] * 0", []),
    ("[1] * -2", []),
    ("[1] * 2 ++ [3]", [1, 1, 3]),  # * binds tighter than ++
    ("[1, 2] * 2", [1, 2, 1, 2]),
    ("[[0, 0]] * 2 ++ [[0, 5]]", [[0, 0], [0, 0], [0, 5]]),
    ('"ab" ++ "cd"', "abcd"),
    ('"n=" ++ 3', "n=3"),
    ("[1, 2, 3][0]", 1),
    ("[1, 2, 3][-1]", 3),
    ("[1, 2, 3][1:]", [2, 3]),
    ("[1, 2, 3][:2]", [1, 2]),
    ("[1, 2, 3][1:-1]", [2]),
    ("[1, 2, 3][:]", [1, 2, 3]),
    ("[1, 2, 3][5:]", []),
    ("[[1, 2], [3]][0][1]", 2),
    ("2 in [1, 2]", True),
    ("4 in [1, 2]", False),
    ('"a" not in ["b", "c"]', True),
    ("2 not in [1, 2]", False),
    ("[1] in [[1], [2]]", True),
])
def test_list_operations(src, expected):
    assert ev(src) == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(), max_size=8), st.integers(-10, 10), st.integers(-10, 10))
def test_slicing_is_pythons(xs, a, b):
    assert ev("xs[a:b]", xs=xs, a=a, b=b) == xs[a:b]
    assert ev("xs[a:]", xs=xs, a=a) == xs[a:]
    assert ev("xs[:b]", xs=xs, b=b) == xs[:b]
    if -len(xs) <= a < len(xs):
        assert ev("xs[a]", xs=xs, a=a) == xs[a]
    else:
        with pytest.raises(EvalError):
            ev("xs[a]", xs=xs, a=a)


def test_names_and_dtype_constants():
    assert ev("n * 2", n=21) == 42
    assert ev("f32") == "float32"
    assert ev("float32 == f32") is True
    assert ev("u8") == "uint8"
    assert ev("i32 != i64") is True


# ----------------------------------------------------------------- functions

def test_value_properties(values):
    assert ev("rank(x)", **values) == 3
    assert ev("rank(s)", **values) == 0
    assert ev("shape(x)", **values) == [2, 3, 4]
    assert ev("shape(s)", **values) == []
    assert ev("numel(x)", **values) == 24
    assert ev("numel(s)", **values) == 1
    assert ev("dtype(x) == f32", **values) is True
    assert ev("dtype(h) == float16", **values) is True
    assert ev("dtype(c) == i8", **values) is True
    assert ev("is_const(c)", **values) is True
    assert ev("is_const(x)", **values) is False
    assert ev("is_quantized(c)", **values) is True
    assert ev("is_quantized(x)", **values) is False
    assert ev("quantized_like(c)", **values) is True
    assert ev("quantized_like(h)", **values) is False
    assert ev("is_input(x)", **values) is True
    assert ev("is_input(y)", **values) is False
    assert ev("is_output(z)", **values) is True
    assert ev("is_output(y)", **values) is False
    assert ev("uses(x)", **values) == 2  # both operands of the Add
    assert ev("uses(y)", **values) == 1
    assert ev("uses(z)", **values) == 0
    assert ev("encoding(c)", **values) == Quant(0.5, 3)
    assert ev("encoding(x)", **values) is None
    assert ev("encoding(x) == none", **values) is True
    np.testing.assert_array_equal(ev("const_value(c)", **values), np.arange(4).reshape(2, 2))


@pytest.mark.parametrize("src", ["rank(u)", "shape(u)", "numel(u)"])
def test_unknown_shape_is_an_evaluation_error(values, src):
    assert "u" in evaluation_error(src, **values)


def test_const_value_of_a_non_constant_is_an_error(values):
    assert "x" in evaluation_error("const_value(x)", **values)


@pytest.mark.parametrize("src, expected", [
    ("len([1, 2, 3])", 3),
    ("len([])", 0),
    ("range(3)", [0, 1, 2]),
    ("range(1, 4)", [1, 2, 3]),
    ("range(0)", []),
    ("min(3, 1, 2)", 1),
    ("max(3, 1, 2)", 3),
    ("min([4, 2, 8])", 2),
    ("max([4, 2, 8])", 8),
    ("min(1.5, 2)", 1.5),
    ("abs(-3)", 3),
    ("abs(-2.5)", 2.5),
    ("sum([1, 2, 3])", 6),
    ("sum([])", 0),
    ("sum([0.5, 0.25])", 0.75),
    ("prod([2, 3, 4])", 24),
    ("prod([])", 1),
    ("reversed([1, 2, 3])", [3, 2, 1]),
    ("index_of([5, 6, 7], 7)", 2),
    ('index_of(["a", "b"], "a")', 0),
    ("str(3)", "3"),
    ('str("s")', "s"),
    ("int(2.7)", 2),
    ("int(-2.7)", -2),
    ("float(2)", 2.0),
    ("normdim(-1, 4)", 3),
    ("normdim(0, 4)", 0),
    ("normdim(3, 4)", 3),
    ("normdim(-4, 4)", 0),
    ("normperm([0, -1, 1], 3)", [0, 2, 1]),
    ("swap_perm(4, 1, -1)", [0, 3, 2, 1]),
    ("swap_perm(3, 0, 0)", [0, 1, 2]),
    ("resolve_shape([2, -1], 6)", [2, 3]),
    ("resolve_shape([-1], 0)", [0]),
    ("resolve_shape([2, 3], 6)", [2, 3]),
    ("resolve_shape([1, -1, 4], 8)", [1, 2, 4]),
    ("broadcast([2, 1], [3])", [2, 3]),
    ("broadcast([], [4, 5])", [4, 5]),
    ("broadcast([1, 5], [4, 1])", [4, 5]),
    ("slice_ranges([0, -2], [2, 100], [4, 5])", [[0, 2, 1], [3, 5, 1]]),
    ("slice_ranges([3], [1], [4])", [[3, 3, 1]]),
    ("split_index([2, 3, 4])", [2, 5]),
    ("split_index([7])", []),
    ("split_index([])", []),
])
def test_builtin_functions(src, expected):
    got = ev(src)
    assert got == expected
    assert type(got) is type(expected)


@pytest.mark.parametrize("src, fragment", [
    ("normdim(4, 4)", "4"),
    ("normdim(-5, 4)", "-5"),
    ("normperm([0, 0], 2)", "permutation"),
    ("normperm([0, 2], 2)", "2"),
    ("swap_perm(2, 0, 2)", "2"),
    ("resolve_shape([-1, -1], 6)", "-1"),
    ("resolve_shape([4, -1], 6)", "6"),
    ("resolve_shape([2, 3], 7)", "7"),
    ("resolve_shape([0, -1], 0)", "-1"),
    ("broadcast([2], [3])", "broadcast"),
    ("slice_ranges([0], [1, 2], [4, 5])", "slice"),
    ("index_of([1, 2], 3)", "3"),
    ("min([])", "min"),
    ("int(1e999)", "int"),
    ("range(1.5)", "range"),
])
def test_builtin_function_errors(src, fragment):
    assert fragment in evaluation_error(src)


@pytest.mark.parametrize("src, expected", [
    pytest.param("min(7)", 7),
    pytest.param("max(7)", 7),
    ("min([7])", 7),
])
def test_min_max_of_one_argument(src, expected):
    assert ev(src) == expected


def test_tensor_builders():
    z = ev("zeros([2, 3], f16)")
    assert z.dtype == np.float16 and z.shape == (2, 3) and not z.any()
    o = ev("ones([4], i32)")
    assert o.dtype == np.int32 and o.tolist() == [1, 1, 1, 1]
    f = ev("full([1, 2], 1.5, f32)")
    assert f.dtype == np.float32 and f.tolist() == [[1.5, 1.5]]
    a = ev("array([[1, 2], [3, 4]], u8)")
    assert a.dtype == np.uint8 and a.tolist() == [[1, 2], [3, 4]]
    assert ev("array([1.5, 2.5])").tolist() == [1.5, 2.5]
    r = ev("reshape_tensor(array([1, 2, 3, 4, 5, 6]), [3, 2])")
    assert r.shape == (3, 2) and r[2, 1] == 6
    t = ev("transpose_tensor(array([[1, 2, 3], [4, 5, 6]]), [1, 0])")
    assert t.tolist() == [[1, 4], [2, 5], [3, 6]] and t.flags["C_CONTIGUOUS"]


@pytest.mark.parametrize("src", ['zeros([2], "f13")', "reshape_tensor(array([1, 2, 3]), [2, 2])",
                                 "transpose_tensor(array([[1, 2]]), [0])"])
def test_tensor_builder_errors(src):
    evaluation_error(src)


def test_encodings():
    assert ev("quant(0.1, 128)") == Quant(0.1, 128)
    assert ev("quant(0.5)") == Quant(0.5, 0)
    per_axis = ev("quant([0.1, 0.2], [0, 1], 1)")
    assert per_axis == Quant([0.1, 0.2], [0, 1], axis=1)
    assert ev("quant_range(0.0, 1.0)") == RangeEncoding(0.0, 1.0)
    assert ev("quant_range(-1, 3)") == RangeEncoding(-1.0, 3.0)
    assert ev("scale_encoding(quant(0.1, 128), 2)") == Quant(0.2, 128)
    assert ev("scale_encoding(quant_range(-1.0, 2.0), 2)") == RangeEncoding(-2.0, 4.0)
    assert ev("scale_encoding(none, 2)") is None
    assert ev("with_axis(quant([0.1, 0.2], [0, 0], 0), 3)").axis == 3
    assert ev("with_axis(quant(0.1, 0), 3)") == Quant(0.1, 0)  # per-tensor: unchanged
    assert ev("with_axis(none, 1)") is None
    q = ev("quant_blocks([[0.1, 0.2], [0.3, 0.4]], 0, 1, 4)")
    assert (q.scale, q.axis, q.block_axis, q.block_size, q.bitwidth, q.symmetric) == (
        (0.1, 0.2, 0.3, 0.4), 0, 1, 4, 4, True)
    assert ev("quant_blocks([[0.1], [0.2]], 0, 1, 8, 8)").bitwidth == 8


def test_quant_blocks_needs_a_rectangle():
    evaluation_error("quant_blocks([[0.1, 0.2], [0.3]], 0, 1, 4)")


# ------------------------------------------------------- function properties

@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=4).flatmap(
    lambda shape: st.tuples(st.just(shape),
                            st.lists(st.integers(-8, 8), min_size=len(shape), max_size=len(shape)),
                            st.lists(st.integers(-8, 8), min_size=len(shape), max_size=len(shape)))))
def test_slice_ranges_select_what_python_slices_select(args):
    shape, starts, ends = args
    ranges = ev("slice_ranges(b, e, s)", b=starts, e=ends, s=shape)
    data = np.arange(int(np.prod(shape))).reshape(shape)
    want = data[tuple(slice(b, e) for b, e in zip(starts, ends))]
    got = data[tuple(slice(b, e, st_) for b, e, st_ in ranges)]
    np.testing.assert_array_equal(got, want)
    for (b, e, step), n in zip(ranges, shape):
        assert 0 <= b <= e <= n and step == 1


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 5), max_size=6))
def test_split_index_gives_the_split_points(sizes):
    points = ev("split_index(s)", s=sizes)
    data = list(range(sum(sizes)))
    parts = np.split(np.array(data), points) if sizes else []
    assert [len(p) for p in parts] == sizes


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=4), st.data())
def test_resolve_shape_recovers_the_missing_dim(shape, data):
    i = data.draw(st.integers(0, len(shape) - 1))
    target = list(shape)
    target[i] = -1
    assert ev("resolve_shape(t, n)", t=target, n=int(np.prod(shape))) == shape


shapes = st.lists(st.sampled_from([1, 2, 3]), max_size=4)


@settings(max_examples=60, deadline=None)
@given(shapes, shapes)
def test_broadcast_is_numpys(a, b):
    try:
        want = list(np.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError:
        evaluation_error("broadcast(a, b)", a=a, b=b)
    else:
        assert ev("broadcast(a, b)", a=a, b=b) == want


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6).flatmap(lambda r: st.tuples(st.just(r), st.integers(-r, r - 1), st.integers(-r, r - 1))))
def test_swap_perm_and_normdim(args):
    r, a, b = args
    p = ev("swap_perm(r, a, b)", r=r, a=a, b=b)
    assert sorted(p) == list(range(r))
    assert ev("swap_perm(r, a, b)", r=r, a=b, b=a) == p
    na, nb = ev("normdim(a, r)", a=a, r=r), ev("normdim(b, r)", b=b, r=r)
    assert (na, nb) == (a % r, b % r)
    assert p[na] == nb and p[nb] == na
    assert all(p[i] == i for i in range(r) if i not in (na, nb))


# ---------------------------------------------------------------------- errors

@pytest.mark.parametrize("src, fragment", [
    ("1 / 0", "zero"),
    ("1.5 / 0", "zero"),
    ("1 // 0", "zero"),
    ("1 % 0", "zero"),
    ("[1, 2][2]", "out of range"),
    ("[1, 2][-3]", "out of range"),
    ("[][0]", "out of range"),
    ("[1, 2][true]", "integer"),
    ("5[0]", "5"),
    ('1 + "a"', "number"),
    ("-[1]", "number"),
    ("1 + true", "number"),
    ("[1] ++ 2", "++"),
    ('"a" ++ [1]', "join"),
    ('1 < "a"', "compare"),
    ("not 1", "true or false"),
    ("1 and true", "true or false"),
    ("1 if 2 else 3", "true or false"),
    ("2 in 5", "list"),
    ("5[1:]", "slice"),
])
def test_evaluation_errors(src, fragment):
    assert fragment in evaluation_error(src)


def test_unknown_name_and_function_are_rejected_when_compiling():
    with pytest.raises(EvalError, match="nope"):
        ev("nope + 1")
    with pytest.raises(EvalError, match="frobnicate"):
        ev("frobnicate(1)")


def test_bound_name_missing_at_run_time_is_an_evaluation_error():
    module = parse("rule r {\n  match y = m.A(x)\n  require n > 1\n  emit y = x\n}\n", "e.qpat")
    (req,) = [s for s in module.rules[0].body if isinstance(s, ast.Require)]
    fn = compile_expr(req.expr, {"n"}, _functions())
    with pytest.raises(EvalError, match="n"):
        fn({})


def test_documented_builtins_exist():
    documented = {
        "rank", "shape", "numel", "dtype", "is_const", "is_quantized", "quantized_like", "is_input", "is_output",
        "uses", "encoding", "const_value", "len", "range", "min", "max", "abs", "sum", "prod", "reversed",
        "index_of", "str", "int", "float", "normdim", "normperm", "swap_perm", "resolve_shape", "broadcast",
        "slice_ranges", "split_index", "quant", "quant_range", "scale_encoding", "with_axis", "zeros", "ones",
        "full", "array", "reshape_tensor", "transpose_tensor", "vision_rope_tables", "text_rope_tables",
    }
    assert documented <= set(_functions().names())


# ------------------------------------------------- functions added for frontends

def test_normdims():
    assert ev("normdims([-1, 0, -3], 3)") == [2, 0, 0]
    evaluation_error("normdims([3], 3)")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=3).flatmap(
    lambda shape: st.tuples(st.just(shape), st.integers(0, len(shape) - 1), st.integers(-8, 8),
                            st.integers(-8, 8), st.sampled_from([1, 2, -1, -2]))))
def test_strided_ranges_select_what_numpy_slices_select(args):
    shape, axis, b, e, step = args
    data = np.arange(int(np.prod(shape))).reshape(shape)
    index = [slice(None)] * len(shape)
    index[axis] = slice(b, e, step)
    want = data[tuple(index)]
    if want.size == 0:
        evaluation_error("strided_ranges([b], [e], [a], [s], sh)", b=b, e=e, a=axis, s=step, sh=shape)
        return
    ranges = ev("strided_ranges([b], [e], [a], [s], sh)", b=b, e=e, a=axis, s=step, sh=shape)
    got = data[tuple(slice(r0, r1 if r1 >= 0 else None, r2) for r0, r1, r2 in ranges)]
    np.testing.assert_array_equal(got, want)


def test_pad_pairs():
    assert ev("pad_pairs([1, 2, 3, 4])") == [[1, 3], [2, 4]]
    evaluation_error("pad_pairs([1, 2, 3])")


def test_conv_pads():
    assert ev('conv_pads("NOTSET", [1, 2, 3, 4], [8, 8], [3, 3], [1, 1], [1, 1])') == [[1, 3], [2, 4]]
    assert ev('conv_pads("VALID", [], [8], [3], [1], [1])') == [[0, 0]]
    # SAME: output size ceil(8 / 2) = 4 needs (4 - 1) * 2 + 3 - 8 = 1 padding, the odd one at the end (UPPER)
    assert ev('conv_pads("SAME_UPPER", [], [8], [3], [2], [1])') == [[0, 1]]
    assert ev('conv_pads("SAME_LOWER", [], [8], [3], [2], [1])') == [[1, 0]]
    evaluation_error('conv_pads("SIDEWAYS", [], [8], [3], [1], [1])')


def test_dim_sizes(values):
    assert ev("dim_sizes([x, y], -1)", **values) == [4, 4]
    assert ev("dim_sizes([x, h], 0)", **values) == [2, 5]


def test_sqrt():
    np.testing.assert_allclose(ev("sqrt(array([4.0, 9.0]))"), [2.0, 3.0])


@pytest.mark.parametrize("n", [
    2,
    pytest.param(np.int64(2)),
])
def test_list_repetition_by_any_integer(n):
    assert ev("[1] * n", n=n) == [1, 1]
    assert ev("n * [0]", n=n) == [0, 0]
    assert ev("n + 1", n=n) == 3


@given(st.text(alphabet="abcdefXYZ._", max_size=12), st.integers(-14, 14), st.integers(-14, 14))
def test_strings_slice_as_the_checker_types_them(s, lo, hi):
    """The checker types `s[a:b]` of a str as str, so the evaluator must slice strings too."""
    assert ev("s[lo:hi]", s=s, lo=lo, hi=hi) == s[lo:hi]
