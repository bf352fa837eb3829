"""mllm reference kernels checked against independent computations:
hand-worked values, explicit loops and alternative numpy formulations."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qlower.qnn.model import QuantEncoding
from qlower.reference.mllm import MLLM_KERNELS, SLICE_END
from qlower.reference.rope import text_rope_tables, vision_rope_tables
from qlower.reference.spec import KernelError, OutSpec

RNG_SEED = 1234


def rng() -> np.random.Generator:
    return np.random.default_rng(RNG_SEED)


def run(op: str, inputs: list[Any], attrs: dict[str, Any] | None = None,
        shape: tuple[int, ...] | list[tuple[int, ...]] | None = None, dtype: Any = np.float32,
        encoding: QuantEncoding | None = None) -> Any:
    """Runs one kernel; a single shape gives a single array back."""
    shapes = shape if isinstance(shape, list) else [shape]
    outs = [OutSpec(s, dtype, encoding) for s in shapes]
    ys = MLLM_KERNELS[op](inputs, attrs or {}, outs)
    return ys if isinstance(shape, list) else ys[0]


def test_registry_has_every_op() -> None:
    expected = {
        "MatMul", "Repeat", "View", "SiLU", "Sigmoid", "GELU", "QuickGELU", "ReLU", "Tanh", "Exp",
        "Sqrt", "Rsqrt", "Neg", "Abs", "Sin", "Cos", "VisionRoPE", "RoPE", "Linear", "RMSNorm",
        "LayerNorm", "Softmax", "Transpose", "Permute", "Slice", "Concat", "Split", "Embedding",
        "Gather", "Index", "Add", "Sub", "Mul", "Div", "Equal", "Where", "ReduceMin", "ReduceMax",
        "ReduceSum", "ReduceMean", "CastType", "Conv2D",
    }
    assert set(MLLM_KERNELS) == expected


# ---------------------------------------------------------------- MatMul / Linear

def _loop_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    m, k = a.shape
    n = b.shape[1]
    return np.array([[sum(a[i, p] * b[p, j] for p in range(k)) for j in range(n)] for i in range(m)])


def test_matmul_hand_case() -> None:
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    b = np.array([[5.0, 6.0], [7.0, 8.0]])
    np.testing.assert_array_equal(run("MatMul", [a, b], shape=(2, 2)), [[19, 22], [43, 50]])
    np.testing.assert_array_equal(run("MatMul", [a, b], {"transpose_b": True}, (2, 2)), [[17, 23], [39, 53]])


@pytest.mark.parametrize("ta,tb", list(itertools.product([False, True], repeat=2)))
def test_matmul_flags_and_broadcast(ta: bool, tb: bool) -> None:
    r = rng()
    a = r.standard_normal((2, 1, 4, 3) if ta else (2, 1, 3, 4))
    b = r.standard_normal((5, 2, 4) if tb else (5, 4, 2))
    y = run("MatMul", [a, b], {"transpose_a": ta, "transpose_b": tb}, (2, 5, 3, 2))
    assert y.dtype == np.float32
    for i, j in itertools.product(range(2), range(5)):
        ai = a[i, 0].T if ta else a[i, 0]
        bj = b[j].T if tb else b[j]
        np.testing.assert_allclose(y[i, j], _loop_matmul(ai, bj), rtol=1e-5, atol=1e-6)


def test_matmul_errors() -> None:
    with pytest.raises(KernelError, match="contracted"):
        run("MatMul", [np.ones((2, 3)), np.ones((2, 3))], shape=(2, 3))
    with pytest.raises(KernelError, match="batch dims"):
        run("MatMul", [np.ones((2, 2, 3)), np.ones((3, 3, 4))], shape=(2, 2, 4))
    with pytest.raises(KernelError, match="transpose_a"):
        run("MatMul", [np.ones((2, 3)), np.ones((3, 2))], {"transpose_a": "yes"}, (2, 2))


def test_linear_against_loops() -> None:
    r = rng()
    x, w, b = r.standard_normal((2, 3, 4)), r.standard_normal((5, 4)), r.standard_normal(5)
    y = run("Linear", [x, w, b], shape=(2, 3, 5))
    for i, j, o in itertools.product(range(2), range(3), range(5)):
        want = sum(x[i, j, k] * w[o, k] for k in range(4)) + b[o]
        assert y[i, j, o] == pytest.approx(want, rel=1e-5, abs=1e-5)
    y_nobias = run("Linear", [x, w, None], shape=(2, 3, 5))
    np.testing.assert_allclose(y_nobias, y - b, rtol=1e-5, atol=1e-5)
    with pytest.raises(KernelError, match="weight"):
        run("Linear", [x, w.T], shape=(2, 3, 5))
    with pytest.raises(KernelError, match="bias"):
        run("Linear", [x, w, np.ones(4)], shape=(2, 3, 5))


# ---------------------------------------------------------------- Repeat / View / layout

def test_repeat_interleaves_hand_case() -> None:
    x = np.array([[1, 2], [3, 4]], dtype=np.int32)  # "heads" along dim 0
    y = run("Repeat", [x], {"dim": 0, "times": 2}, (4, 2), np.int32)
    np.testing.assert_array_equal(y, [[1, 2], [1, 2], [3, 4], [3, 4]])
    assert y.dtype == np.int32


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_repeat_matches_np_repeat_and_index_formula(dim: int) -> None:
    x = rng().standard_normal((2, 3, 4))
    out = list(x.shape)
    out[dim] *= 3
    y = run("Repeat", [x], {"dim": dim, "times": 3}, tuple(out))
    np.testing.assert_array_equal(y, np.repeat(x, 3, axis=dim).astype(np.float32))
    # Independent: result slice i along dim is source slice i // times.
    src = np.take(x, [i // 3 for i in range(out[dim])], axis=dim)
    np.testing.assert_array_equal(y, src.astype(np.float32))


def test_repeat_is_not_tile() -> None:
    x = rng().standard_normal((1, 3, 2, 4))  # BSHD with 2 KV heads
    y = run("Repeat", [x], {"dim": 2, "times": 2}, (1, 3, 4, 4))
    tiled = np.tile(x, (1, 1, 2, 1)).astype(np.float32)
    assert not np.array_equal(y, tiled)
    # The correct lowering: unit axis after dim, tile it, reshape back.
    lowered = np.tile(x[:, :, :, None, :], (1, 1, 1, 2, 1)).reshape(1, 3, 4, 4)
    np.testing.assert_array_equal(y, lowered.astype(np.float32))


def test_repeat_times_one_and_errors() -> None:
    x = rng().standard_normal((2, 3))
    np.testing.assert_array_equal(run("Repeat", [x], {"dim": 1, "times": 1}, (2, 3)), x.astype(np.float32))
    with pytest.raises(KernelError, match="times must be >= 1"):
        run("Repeat", [x], {"dim": 1, "times": 0}, (2, 0))
    with pytest.raises(KernelError, match="out of range"):
        run("Repeat", [x], {"dim": 2, "times": 2}, (2, 6))
    with pytest.raises(KernelError, match="missing required attribute 'times'"):
        run("Repeat", [x], {"dim": 1}, (2, 3))


def test_view() -> None:
    x = np.arange(24, dtype=np.int64)
    y = run("View", [x], {"shape": [2, -1, 4]}, (2, 3, 4), np.int64)
    assert y[1, 2, 3] == 23 and y.dtype == np.int64
    np.testing.assert_array_equal(run("View", [x], {}, (4, 6), np.int64), x.reshape(4, 6))
    with pytest.raises(KernelError, match="holds 25 elements"):
        run("View", [x], {"shape": [5, 5]}, (5, 5))
    with pytest.raises(KernelError, match="at most one -1"):
        run("View", [x], {"shape": [-1, -1]}, (4, 6))
    with pytest.raises(KernelError, match="cannot infer"):
        run("View", [x], {"shape": [5, -1]}, (5, 5))
    with pytest.raises(KernelError, match="declared"):
        run("View", [x], {"shape": [4, 6]}, (6, 4))


def test_transpose_and_permute_against_index_loops() -> None:
    x = rng().standard_normal((2, 3, 4))
    y = run("Transpose", [x], {"dim0": 0, "dim1": -1}, (4, 3, 2))
    p = run("Permute", [x], {"perm": [1, 2, 0]}, (3, 4, 2))
    for i, j, k in itertools.product(range(2), range(3), range(4)):
        assert y[k, j, i] == np.float32(x[i, j, k])
        assert p[j, k, i] == np.float32(x[i, j, k])
    with pytest.raises(KernelError, match="not a permutation"):
        run("Permute", [x], {"perm": [0, 0, 1]}, (2, 2, 3))


def test_slice_hand_cases() -> None:
    x = np.arange(24).reshape(2, 3, 4)
    y = run("Slice", [x], {"starts": [0, 1, -3], "ends": [SLICE_END, SLICE_END, -1]}, (2, 2, 2), np.int64)
    np.testing.assert_array_equal(y, [[[5, 6], [9, 10]], [[17, 18], [21, 22]]])
    y = run("Slice", [x], {"starts": [1, -10, 0], "ends": [2, 2, 100]}, (1, 2, 4), np.int64)
    np.testing.assert_array_equal(y, [[[12, 13, 14, 15], [16, 17, 18, 19]]])
    assert SLICE_END == 2147483647
    with pytest.raises(KernelError, match="one entry per dim"):
        run("Slice", [x], {"starts": [0], "ends": [1]}, (1, 3, 4))


def test_concat_and_split_round_trip() -> None:
    r = rng()
    parts = [r.standard_normal((2, n, 3)) for n in (1, 2, 4)]
    y = run("Concat", parts, {"dim": -2}, (2, 7, 3))
    np.testing.assert_array_equal(y[:, 1:3], parts[1].astype(np.float32))
    back = run("Split", [y], {"dim": 1, "sizes": [1, 2, 4]}, [(2, 1, 3), (2, 2, 3), (2, 4, 3)])
    for got, want in zip(back, parts):
        np.testing.assert_array_equal(got, want.astype(np.float32))
    with pytest.raises(KernelError, match="sum to"):
        run("Split", [y], {"dim": 1, "sizes": [3, 3]}, [(2, 3, 3), (2, 3, 3)])
    with pytest.raises(KernelError, match="OutSpec"):
        run("Split", [y], {"dim": 1, "sizes": [3, 4]}, [(2, 3, 3)])
    with pytest.raises(KernelError, match="differ outside"):
        run("Concat", [np.ones((2, 3)), np.ones((3, 3))], {"dim": 1}, (2, 6))


def test_embedding_gather_index() -> None:
    table = np.arange(12.0).reshape(4, 3)
    ids = np.array([[3, 0], [1, 1]])
    y = run("Embedding", [ids, table], shape=(2, 2, 3))
    np.testing.assert_array_equal(y[0, 0], [9, 10, 11])
    np.testing.assert_array_equal(y[1, 1], [3, 4, 5])
    with pytest.raises(KernelError, match=r"ids must lie in \[0, 4\)"):
        run("Embedding", [np.array([4]), table], shape=(1, 3))
    x = rng().standard_normal((2, 5, 3))
    idx = np.array([4, -1, 0])
    for op in ("Gather", "Index"):
        g = run(op, [x, idx], {"dim": 1}, (2, 3, 3))
        for b, j, c in itertools.product(range(2), range(3), range(3)):
            assert g[b, j, c] == np.float32(x[b, idx[j] % 5, c])
        with pytest.raises(KernelError, match="indices must lie"):
            run(op, [x, np.array([5])], {"dim": 1}, (2, 1, 3))
    with pytest.raises(KernelError, match="integers"):
        run("Gather", [x, np.array([0.5])], {"dim": 1}, (2, 1, 3))


# ---------------------------------------------------------------- unary

_SCALAR_REFS = {
    "SiLU": lambda v: v / (1 + math.exp(-v)),
    "Sigmoid": lambda v: 1 / (1 + math.exp(-v)),
    "GELU": lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))),
    "QuickGELU": lambda v: v / (1 + math.exp(-1.702 * v)),
    "ReLU": lambda v: max(v, 0.0),
    "Tanh": math.tanh,
    "Exp": math.exp,
    "Sqrt": lambda v: math.sqrt(abs(v)),
    "Rsqrt": lambda v: 1 / math.sqrt(abs(v)),
    "Neg": lambda v: -v,
    "Abs": abs,
    "Sin": math.sin,
    "Cos": math.cos,
}


@pytest.mark.parametrize("op", sorted(_SCALAR_REFS))
def test_unary_against_math_module(op: str) -> None:
    x = np.linspace(-4.0, 4.0, 17)
    if op in ("Sqrt", "Rsqrt"):
        x = np.abs(x) + 0.25
    y = run(op, [x.reshape(1, 17)], shape=(1, 17))
    assert y.dtype == np.float32
    want = np.array([_SCALAR_REFS[op](float(v)) for v in x], dtype=np.float32)
    np.testing.assert_allclose(y[0], want, rtol=1e-6, atol=1e-7)


def test_gelu_hand_values_and_tanh_mode() -> None:
    x = np.array([-1.0, 0.0, 1.0, 2.0])
    np.testing.assert_allclose(run("GELU", [x], shape=(4,)), [-0.15865525, 0.0, 0.84134475, 1.95449974],
                               rtol=1e-6)
    tanh = run("GELU", [x], {"approximate": "tanh"}, (4,))
    np.testing.assert_allclose(tanh, [-0.15880801, 0.0, 0.84119199, 1.95459769], rtol=1e-6)
    with pytest.raises(KernelError, match="approximate"):
        run("GELU", [x], {"approximate": "fast"}, (4,))


def test_sigmoid_extremes_do_not_overflow() -> None:
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        y = run("Sigmoid", [np.array([-1000.0, 1000.0])], shape=(2,))
    np.testing.assert_array_equal(y, [0.0, 1.0])


# ---------------------------------------------------------------- binary / select / cast

def test_binary_broadcasting_against_loops() -> None:
    r = rng()
    a, b = r.standard_normal((2, 1, 3)), r.standard_normal((4, 1)) + 3.0
    fns = {"Add": float.__add__, "Sub": float.__sub__, "Mul": float.__mul__, "Div": float.__truediv__}
    for op, fn in fns.items():
        y = run(op, [a, b], shape=(2, 4, 3))
        for i, j, k in itertools.product(range(2), range(4), range(3)):
            assert y[i, j, k] == pytest.approx(fn(float(a[i, 0, k]), float(b[j, 0])), rel=1e-6)
    with pytest.raises(KernelError, match="do not broadcast"):
        run("Add", [np.ones(3), np.ones(4)], shape=(3,))


def test_integer_arithmetic_is_exact() -> None:
    a = np.array([2**40 + 1], dtype=np.int64)
    y = run("Add", [a, np.array([1], dtype=np.int64)], shape=(1,), dtype=np.int64)
    assert y.dtype == np.int64 and int(y[0]) == 2**40 + 2
    y = run("Div", [np.array([7, -7]), np.array([2, 2])], shape=(2,), dtype=np.int32)
    np.testing.assert_array_equal(y, [3, -3])  # true division truncated toward zero


def test_equal_and_where() -> None:
    a = np.array([1.0, 2.0, 3.0])
    eq = run("Equal", [a, np.array([1, 0, 3])], shape=(3,), dtype=np.bool_)
    assert eq.dtype == np.bool_ and eq.tolist() == [True, False, True]
    y = run("Where", [eq, a, np.array([-1.0])], shape=(3,))
    np.testing.assert_array_equal(y, [1.0, -1.0, 3.0])


def test_cast_type() -> None:
    x = np.array([0.1, -1.7, 2.5, 65504.0 + 8])
    enc = QuantEncoding.from_zero_point(0.02, 128)
    q = run("CastType", [x], {"dtype": "uint8"}, (4,), np.uint8, enc)
    np.testing.assert_array_equal(q, x.astype(np.float32))  # real value unchanged
    assert q.dtype == np.float32
    h = run("CastType", [x], {"dtype": "float16"}, (4,), np.float16)
    np.testing.assert_array_equal(h, x.astype(np.float16).astype(np.float32))
    assert h.dtype == np.float32
    i = run("CastType", [x], {"dtype": "int32"}, (4,), np.int32)
    assert i.dtype == np.int32 and i.tolist() == [0, -1, 2, 65512]
    with pytest.raises(KernelError, match="disagrees"):
        run("CastType", [x], {"dtype": "int8"}, (4,), np.int32)
    with pytest.raises(KernelError, match="not a numpy dtype"):
        run("CastType", [x], {"dtype": "kFloat9"}, (4,), np.float32)


# ---------------------------------------------------------------- norms / softmax / reduce

def test_rms_norm_hand_case() -> None:
    x = np.array([[3.0, 4.0]])  # mean(x^2) = 12.5
    w = np.array([1.0, 2.0])
    y = run("RMSNorm", [x, w], {"epsilon": 0.0}, (1, 2))
    s = math.sqrt(12.5)
    np.testing.assert_allclose(y, [[3 / s, 8 / s]], rtol=1e-6)
    y = run("RMSNorm", [x, w], {"epsilon": 0.0, "add_unit_offset": True}, (1, 2))
    np.testing.assert_allclose(y, [[6 / s, 12 / s]], rtol=1e-6)
    with pytest.raises(KernelError, match="weight"):
        run("RMSNorm", [x, np.ones(3)], shape=(1, 2))


def test_layer_norm_against_loop() -> None:
    r = rng()
    x, w, b = r.standard_normal((3, 5)), r.standard_normal(5), r.standard_normal(5)
    y = run("LayerNorm", [x, w, b], {"epsilon": 1e-5}, (3, 5))
    for row in range(3):
        vals = [float(v) for v in x[row]]
        mu = sum(vals) / 5
        var = sum((v - mu) ** 2 for v in vals) / 5
        for k in range(5):
            want = (vals[k] - mu) / math.sqrt(var + 1e-5) * w[k] + b[k]
            assert y[row, k] == pytest.approx(want, rel=1e-5, abs=1e-6)
    np.testing.assert_allclose(run("LayerNorm", [x, w], shape=(3, 5)), y - b, rtol=1e-5, atol=1e-5)


def test_softmax() -> None:
    y = run("Softmax", [np.array([[0.0, math.log(2.0)]])], shape=(1, 2))
    np.testing.assert_allclose(y, [[1 / 3, 2 / 3]], rtol=1e-6)
    x = rng().standard_normal((3, 4)) * 5 + 1000  # exp(1000) overflows without the shift
    y = run("Softmax", [x], {"dim": 0}, (3, 4))
    np.testing.assert_allclose(y.sum(axis=0), np.ones(4), rtol=1e-6)
    want = np.array([[math.exp(x[i, j] - x[:, j].max()) for j in range(4)] for i in range(3)])
    np.testing.assert_allclose(y, want / want.sum(axis=0), rtol=1e-5, atol=1e-30)


@pytest.mark.parametrize("op,fn", [("ReduceMin", min), ("ReduceMax", max), ("ReduceSum", sum),
                                   ("ReduceMean", lambda v: sum(v) / len(v))])
def test_reductions(op: str, fn: Any) -> None:
    x = rng().standard_normal((2, 3, 4))
    y = run(op, [x], {"dim": [0, -1]}, (3,))
    for j in range(3):
        vals = [float(x[i, j, k]) for i in range(2) for k in range(4)]
        assert y[j] == pytest.approx(fn(vals), rel=1e-5, abs=1e-6)
    yk = run(op, [x], {"dim": 1, "keepdim": True}, (2, 1, 4))
    assert yk[1, 0, 2] == pytest.approx(fn([float(v) for v in x[1, :, 2]]), rel=1e-5, abs=1e-6)
    with pytest.raises(KernelError, match="twice"):
        run(op, [x], {"dim": [1, -2]}, (2, 4))
    with pytest.raises(KernelError, match="missing required attribute 'dim'"):
        run(op, [x], {}, (2, 4))


# ---------------------------------------------------------------- rotary

def _loop_vision_rope(x: np.ndarray, sin: np.ndarray, cos: np.ndarray) -> np.ndarray:
    bsz, seq, heads, d = x.shape
    half = d // 2
    y = np.zeros_like(x)
    for b, s, h, k in itertools.product(range(bsz), range(seq), range(heads), range(half)):
        a, c = x[b, s, h, k], x[b, s, h, k + half]
        y[b, s, h, k] = a * cos[s, k] - c * sin[s, k]
        y[b, s, h, k + half] = a * sin[s, k] + c * cos[s, k]
    return y


def test_vision_rope_against_loop() -> None:
    r = rng()
    x = r.standard_normal((2, 4, 3, 8))
    sin, cos = r.standard_normal((4, 4)), r.standard_normal((4, 4))
    y = run("VisionRoPE", [x, sin, cos], {"dims": 8}, (2, 4, 3, 8))
    np.testing.assert_allclose(y, _loop_vision_rope(x, sin, cos), rtol=1e-5, atol=1e-6)
    with pytest.raises(KernelError, match="dims=16"):
        run("VisionRoPE", [x, sin, cos], {"dims": 16}, (2, 4, 3, 8))
    with pytest.raises(KernelError, match="sin table"):
        run("VisionRoPE", [x, np.ones((4, 8)), cos], {"dims": 8}, (2, 4, 3, 8))


def test_vision_rope_equals_qwen2vl_full_width_form() -> None:
    """Qwen2-VL applies cat(t, t) tables with rotate_half; the half-width op must agree."""
    x = rng().standard_normal((1, 16, 2, 8))
    sin, cos = vision_rope_tables((1, 4, 4), 8)
    y = run("VisionRoPE", [x, sin, cos], {"dims": 8, "theta": 10000.0, "spatial_merge_size": 2},
            (1, 16, 2, 8))
    full = run("RoPE", [x, np.concatenate([sin, sin], -1), np.concatenate([cos, cos], -1)],
               shape=(1, 16, 2, 8))
    np.testing.assert_allclose(y, full, rtol=1e-5, atol=1e-6)


def test_rope_against_loop_and_rotation_properties() -> None:
    r = rng()
    x = r.standard_normal((1, 5, 2, 6))
    sin, cos = text_rope_tables(5, 6)
    y = run("RoPE", [x, sin, cos], shape=(1, 5, 2, 6))
    want = np.zeros_like(x)
    for s, h, k in itertools.product(range(5), range(2), range(6)):
        rot = -x[0, s, h, k + 3] if k < 3 else x[0, s, h, k - 3]
        want[0, s, h, k] = x[0, s, h, k] * cos[s, k] + rot * sin[s, k]
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    # A rotation: norms kept, and q.k depends only on the position offset.
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5)
    q, k = r.standard_normal(6), r.standard_normal(6)
    qk = np.broadcast_to(np.stack([q, k])[None, None], (1, 5, 2, 6)).copy()
    rq = run("RoPE", [qk, sin, cos], shape=(1, 5, 2, 6))[0, :, :, :]
    assert rq[3, 0] @ rq[1, 1] == pytest.approx(rq[4, 0] @ rq[2, 1], rel=1e-4)


# ---------------------------------------------------------------- Conv2D

def _naive_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: tuple[int, int],
                pad: tuple[int, int], dil: tuple[int, int], groups: int) -> np.ndarray:
    n, c, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    oh = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    y = np.zeros((n, cout, oh, ow))
    per_group = cout // groups
    for bi in range(n):
        for o in range(cout):
            g = o // per_group
            for r in range(oh):
                for q in range(ow):
                    acc = 0.0 if b is None else float(b[o])
                    for ci in range(cin_g):
                        for i in range(kh):
                            for j in range(kw):
                                rr = r * stride[0] + i * dil[0] - pad[0]
                                cc = q * stride[1] + j * dil[1] - pad[1]
                                if 0 <= rr < h and 0 <= cc < wd:
                                    acc += x[bi, g * cin_g + ci, rr, cc] * w[o, ci, i, j]
                    y[bi, o, r, q] = acc
    return y


_CONV_CASES = [
    # (N, C, H, W, Cout, kh, kw, stride, padding, dilation, groups, bias)
    (1, 2, 5, 5, 3, 3, 3, (1, 1), (0, 0), (1, 1), 1, False),
    (2, 4, 7, 6, 4, 3, 2, (2, 1), (1, 0), (1, 1), 2, True),
    (1, 3, 8, 8, 6, 3, 3, (2, 2), (2, 1), (2, 1), 3, True),
    (1, 2, 6, 7, 2, 2, 3, (3, 2), (1, 2), (1, 2), 2, False),  # depthwise
    (1, 3, 4, 4, 5, 1, 1, (1, 1), (0, 0), (1, 1), 1, True),   # pointwise
    (1, 3, 14, 14, 4, 14, 14, (14, 14), (0, 0), (1, 1), 1, True),  # patch-embedding style
]


@pytest.mark.parametrize("case", _CONV_CASES)
def test_conv2d_against_naive_loops(case: tuple[Any, ...]) -> None:
    n, c, h, w, cout, kh, kw, stride, pad, dil, groups, has_bias = case
    r = rng()
    x = r.standard_normal((n, c, h, w))
    wt = r.standard_normal((cout, c // groups, kh, kw))
    b = r.standard_normal(cout) if has_bias else None
    want = _naive_conv(x, wt, b, stride, pad, dil, groups)
    attrs = {"stride": list(stride), "padding": list(pad), "dilation": list(dil), "groups": groups}
    y = run("Conv2D", [x, wt, b], attrs, want.shape)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3), st.integers(1, 2), st.integers(1, 3), st.integers(0, 2), st.integers(1, 2),
       st.integers(1, 3), st.integers(1, 2))
def test_conv2d_random_configs(k: int, stride: int, stride_w: int, pad: int, dil: int, groups: int,
                               cmul: int) -> None:
    c, cout = groups * cmul, groups * 2
    x = rng().standard_normal((1, c, 6, 5))
    wt = rng().standard_normal((cout, cmul, k, k))
    want = _naive_conv(x, wt, None, (stride, stride_w), (pad, pad), (dil, dil), groups)
    if want.shape[2] < 1 or want.shape[3] < 1:
        return
    y = run("Conv2D", [x, wt], {"stride": [stride, stride_w], "padding": pad, "dilation": [dil, dil],
                                "groups": groups}, want.shape)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_conv2d_errors() -> None:
    x, w = np.ones((1, 4, 5, 5)), np.ones((2, 4, 3, 3))
    with pytest.raises(KernelError, match="groups=2"):
        run("Conv2D", [x, w], {"groups": 2}, (1, 2, 3, 3))
    with pytest.raises(KernelError, match="does not fit"):
        run("Conv2D", [x, np.ones((2, 4, 7, 7))], {}, (1, 2, 1, 1))
    with pytest.raises(KernelError, match="stride"):
        run("Conv2D", [x, w], {"stride": [0, 1]}, (1, 2, 3, 3))


# ---------------------------------------------------------------- dtype contract

def test_result_dtypes_and_count_checks() -> None:
    enc = QuantEncoding.from_zero_point(0.1, 128)
    y = run("SiLU", [np.array([1.0, -2.0])], shape=(2,), dtype=np.uint8, encoding=enc)
    assert y.dtype == np.float32  # quantized results stay real-valued
    with pytest.raises(KernelError, match="expected 1 inputs"):
        run("SiLU", [np.ones(2), np.ones(2)], shape=(2,))
    with pytest.raises(KernelError, match="required but was omitted"):
        run("Linear", [np.ones((1, 2)), None], shape=(1, 2))
