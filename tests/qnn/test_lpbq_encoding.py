"""LPBQ block scales into QNN's blockwise expansion: a per-channel scale times integer block scales,
exactly the numbers the weights were quantized with, whichever integer grid made them."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from qlower.graph.types import Quant
from qlower.qnn.convert import encoding_of


def _quant(scales: np.ndarray) -> Quant:
    channels, blocks = scales.shape
    return Quant(scales.reshape(-1), [0] * scales.size, axis=0, bitwidth=4, symmetric=True, block_size=16,
                 block_axis=1)


def _effective(scales: np.ndarray) -> np.ndarray:
    channels, blocks = scales.shape
    enc = encoding_of(_quant(scales), np.dtype(np.int8), (channels, blocks * 16))
    ints = np.asarray(enc.block_scales, np.float64).reshape(channels, blocks)
    return np.asarray(enc.scales, np.float64)[:, None] * ints, ints


grids = st.sampled_from([15, 16])  # qlower's quantizer; AIMET's LPBQ (integer scales 1..16)


@settings(max_examples=60, deadline=None)
@given(levels=grids, data=st.data())
def test_block_scales_on_a_channel_grid_are_kept_exactly(levels, data):
    channels = data.draw(st.integers(1, 6))
    blocks = data.draw(st.integers(1, 8))
    ints = np.array(data.draw(st.lists(st.integers(1, levels), min_size=channels * blocks,
                                       max_size=channels * blocks)), np.float64).reshape(channels, blocks)
    ints[:, 0] = levels  # each channel's largest block sets its grid
    per_channel = np.array(data.draw(st.lists(st.floats(1e-6, 1.0), min_size=channels, max_size=channels)))
    scales = per_channel[:, None] * ints
    got, stored = _effective(scales)
    np.testing.assert_allclose(got, scales, rtol=1e-9)
    assert stored.min() >= 1 and stored.max() <= 16


def test_an_aimet_lpbq_channel_is_not_recompressed():
    """AIMET writes per_block_int_scale 1..16; splitting it on a 1..15 grid moved block scales by up to
    1/30 and the lowered GPT-2 off AIMET's QuantSim by 1115 output steps."""
    scales = 0.000379428 * np.array([[14.0, 14, 16, 16], [6, 11, 13, 16]])
    got, stored = _effective(scales)
    np.testing.assert_allclose(got, scales, rtol=1e-9)
    assert stored.tolist() == [[14, 14, 16, 16], [6, 11, 13, 16]]


def test_block_scales_on_no_grid_take_the_nearest_on_aimets():
    scales = np.array([[1.0, 0.337, 0.5]])
    got, stored = _effective(scales)
    assert stored.max() == 16
    assert np.all(np.abs(got - scales) <= (1.0 / 16) / 2 + 1e-12)


def test_a_channel_of_zeros_has_scale_one():
    got, stored = _effective(np.array([[0.0, 0.0], [0.15, 0.01]]))
    assert stored[0].tolist() == [1, 1] and got[0].tolist() == [1.0, 1.0]
