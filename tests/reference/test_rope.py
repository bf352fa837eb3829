"""Rotary tables checked against hand-worked positions and explicit loops."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from qlower.reference.rope import text_rope_tables, vision_patch_positions, vision_rope_tables

# Worked by hand: grid h=w=4, 2x2 merge blocks taken row-major, row-major inside each block.
HAND_ORDER_4x4 = [
    (0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3), (1, 2), (1, 3),
    (2, 0), (2, 1), (3, 0), (3, 1), (2, 2), (2, 3), (3, 2), (3, 3),
]


def _loop_positions(t: int, h: int, w: int, m: int) -> list[tuple[int, int]]:
    return [(bh * m + ih, bw * m + iw)
            for _ in range(t)
            for bh in range(h // m) for bw in range(w // m)
            for ih in range(m) for iw in range(m)]


def test_patch_order_hand_worked() -> None:
    assert [tuple(p) for p in vision_patch_positions(1, 4, 4, 2).tolist()] == HAND_ORDER_4x4


@pytest.mark.parametrize("thw,m", [((1, 4, 6), 2), ((2, 6, 4), 2), ((1, 6, 6), 3), ((3, 2, 3), 1)])
def test_patch_order_matches_block_loops(thw: tuple[int, int, int], m: int) -> None:
    got = [tuple(p) for p in vision_patch_positions(*thw, m).tolist()]
    assert got == _loop_positions(*thw, m)


def test_vision_tables_hand_worked() -> None:
    # dims 8: D/2 = 4 columns, D/4 = 2 frequencies: inv_freq = [1, 10000^(-2/4)] = [1, 0.01].
    sin, cos = vision_rope_tables((1, 4, 4), 8)
    assert sin.shape == cos.shape == (16, 4) and sin.dtype == cos.dtype == np.float32
    for s, (h, w) in enumerate(HAND_ORDER_4x4):
        angles = [h * 1.0, h * 0.01, w * 1.0, w * 0.01]
        np.testing.assert_allclose(sin[s], [math.sin(a) for a in angles], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(cos[s], [math.cos(a) for a in angles], rtol=1e-6, atol=1e-7)
    # Token 5 is (h, w) = (0, 3): the h half is all zeros angle.
    np.testing.assert_array_equal(sin[5, :2], [0.0, 0.0])
    assert sin[5, 2] == pytest.approx(math.sin(3.0), rel=1e-6)


def test_vision_tables_against_loop_with_frames_and_grids() -> None:
    dims, theta, m = 16, 500.0, 2
    grids = [(2, 2, 4), (1, 4, 2)]
    sin, cos = vision_rope_tables(grids, dims, theta, m)
    inv = [theta ** (-2 * i / (dims // 2)) for i in range(dims // 4)]
    rows = [p for g in grids for p in _loop_positions(*g, m)]
    assert sin.shape == (len(rows), dims // 2) == (24, 8)
    for s, (h, w) in enumerate(rows):
        angles = [h * f for f in inv] + [w * f for f in inv]
        np.testing.assert_allclose(sin[s], np.sin(angles), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(cos[s], np.cos(angles), rtol=1e-6, atol=1e-6)
    # Each temporal frame repeats the same rows.
    np.testing.assert_array_equal(sin[:8], sin[8:16])


def test_single_grid_forms_agree() -> None:
    a = vision_rope_tables((1, 4, 4), 8)
    b = vision_rope_tables([(1, 4, 4)], 8)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_vision_table_errors() -> None:
    with pytest.raises(ValueError, match="multiples of spatial_merge_size"):
        vision_rope_tables((1, 3, 4), 8)
    with pytest.raises(ValueError, match="multiple of 4"):
        vision_rope_tables((1, 4, 4), 6)
    with pytest.raises(ValueError, match="positive"):
        vision_rope_tables((0, 4, 4), 8)


def test_text_tables_hand_worked() -> None:
    # dims 4: inv_freq = [1, 10000^(-2/4)] = [1, 0.01]; row p = [p, 0.01p, p, 0.01p].
    sin, cos = text_rope_tables(3, 4)
    assert sin.shape == cos.shape == (3, 4) and sin.dtype == np.float32
    for p in range(3):
        angles = [p, 0.01 * p, p, 0.01 * p]
        np.testing.assert_allclose(sin[p], [math.sin(a) for a in angles], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(cos[p], [math.cos(a) for a in angles], rtol=1e-6, atol=1e-7)


def test_text_tables_positions_and_theta() -> None:
    dims, theta = 6, 1e6
    positions = [7, 0, 42]
    sin, cos = text_rope_tables(positions, dims, theta)
    for s, i in itertools.product(range(3), range(dims)):
        angle = positions[s] * theta ** (-2 * (i % 3) / dims)
        assert sin[s, i] == pytest.approx(math.sin(angle), rel=1e-5, abs=1e-6)
        assert cos[s, i] == pytest.approx(math.cos(angle), rel=1e-5, abs=1e-6)
    with pytest.raises(ValueError, match="even"):
        text_rope_tables(3, 5)
