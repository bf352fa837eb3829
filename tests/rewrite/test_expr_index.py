"""Built-in functions for index and data-movement ops (ONNX Pad modes, Compress, Transpose
collapsing, TfIdfVectorizer tables), checked against numpy."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qlower.lang import ast
from qlower.lang.functions import EvalError
from qlower.lang.parser import parse
from qlower.plugins import builtin_contributions
from qlower.rewrite.expr import compile_expr


@functools.cache
def _compiled(src: str, names: tuple[str, ...]):
    module = parse(f"rule r {{\n  match y = m.A(x)\n  require {src}\n  emit y = x\n}}\n", "e.qpat")
    (req,) = [s for s in module.rules[0].body if isinstance(s, ast.Require)]
    return compile_expr(req.expr, set(names), builtin_contributions().functions)


def ev(src: str, **env):
    return _compiled(src, tuple(sorted(env)))(dict(env))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=6).flatmap(
    lambda shape: st.tuples(st.just(shape), st.permutations(range(len(shape))))))
def test_transpose_collapse_moves_the_same_data(args):
    shape, perm = args
    dims, p = ev("transpose_collapse(s, p)", s=shape, p=list(perm))
    data = np.arange(int(np.prod(shape))).reshape(shape)
    got = data.reshape(dims).transpose(p)
    np.testing.assert_array_equal(got.reshape(-1), data.transpose(perm).reshape(-1))
    assert len(dims) <= len(shape) and (dims == [1] or 1 not in dims)


def test_transpose_collapse_brings_spelled_out_depth_to_space_to_rank_4():
    # SpaceToDepth DCR of [1, 2, 6, 8] by 2: [1, 2, 3, 2, 4, 2] transposed by [0, 3, 5, 1, 2, 4]
    assert ev("transpose_collapse([1, 2, 3, 2, 4, 2], [0, 3, 5, 1, 2, 4])") == [[6, 2, 4, 2], [1, 3, 0, 2]]
    with pytest.raises(EvalError):
        ev("transpose_collapse([2, 3], [0, 0])")


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(0, 7), st.integers(0, 7), st.sampled_from(["edge", "reflect", "wrap"]))
def test_pad_indices_pick_what_numpy_pads_with(n, before, after, mode):
    if mode == "reflect" and n < 2:
        with pytest.raises(EvalError):
            ev("pad_indices(n, b, a, m)", n=n, b=before, a=after, m=mode)
        return
    data = np.arange(10, 10 + n)
    got = data[ev("pad_indices(n, b, a, m)", n=n, b=before, a=after, m=mode)]
    np.testing.assert_array_equal(got, np.pad(data, (before, after), mode=mode))


def test_axes_pads_and_first_padded_axis():
    assert ev("axes_pads([0, 3, 0, 4], [-3, -1], 4)") == [0, 0, 0, 3, 0, 0, 0, 4]
    assert ev("axes_pads([1, 2, 3, 4], [], 2)") == [1, 2, 3, 4]
    assert ev("first_padded_axis([0, 0, 1, 0, 0, 0])") == 2
    assert ev("first_padded_axis([0, 0, 0, 0, 2, 0])") == 1
    assert ev("first_padded_axis([0, 0])") == -1
    with pytest.raises(EvalError):
        ev("axes_pads([1, 2, 3], [0], 2)")


def test_nonzero_positions_keeps_the_condition_prefix():
    c = np.array([True, False, True, True])
    assert ev("nonzero_positions(c, 4)", c=c) == [0, 2, 3]
    assert ev("nonzero_positions(c, 2)", c=c) == [0]


def test_tfidf_tables_count_like_the_definition():
    pool, counts, indexes = [2, 3, 5, 6, 7, 8, 6, 7], [0, 2], [4, 0, 1, 2, 3]
    vocab = ev("tfidf_vocab(p)", p=pool)
    w = ev("tfidf_weights(p, c, i, 1, 2)", p=pool, c=counts, i=indexes)
    assert vocab == [2, 3, 5, 6, 7, 8] and w.shape == (6 + 36, 5)
    x = np.array([3, 5, 6, 2, 7, 8, 3, 6, 8, 7])
    e = (x[:, None] == np.array(vocab)[None, :]).astype(np.float32)
    skip = 1
    band = np.array([[1.0 if 1 <= j - i <= skip + 1 else 0.0 for j in range(len(x))] for i in range(len(x))])
    got = np.concatenate([e.sum(0), (e.T @ band @ e).reshape(-1)]) @ w
    want = np.zeros(5)
    want[4], want[0] = (x == 2).sum(), (x == 3).sum()
    for (a, b), out in zip([(5, 6), (7, 8), (6, 7)], [1, 2, 3]):
        want[out] = sum(x[i] == a and x[j] == b for i in range(len(x)) for j in range(i + 1, min(len(x), i + skip + 2)))
    np.testing.assert_array_equal(got, want)
    with pytest.raises(EvalError):
        ev("tfidf_weights(p, c, i, 1, 3)", p=pool, c=counts, i=indexes)
