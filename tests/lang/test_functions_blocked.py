"""Built-ins behind blocked quantization and MaxPool's Indices (block_expand, pool_index_offsets,
pool_index_base, pool_window_tables): shapes, laws and clear errors. Their
values end to end are checked against onnx.reference in tests/frontends/test_onnx_blocked_and_argmax.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from qlower.lang.functions import EvalError
from qlower.lang.functions_shape import _block_expand
from qlower.lang.functions_spatial import _pool_index_base, _pool_index_offsets, _pool_window_tables


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=3), st.data())
def test_block_expand_gives_each_element_its_blocks_entry(shape, data):
    axis = data.draw(st.integers(0, len(shape) - 1))
    block = data.draw(st.integers(1, 4))
    pshape = list(shape)
    pshape[axis] = -(-shape[axis] // block)
    params = np.arange(int(np.prod(pshape))).reshape(pshape)
    out = _block_expand(params, axis - len(shape), block, shape[axis])
    assert out.shape == tuple(shape)
    for idx in np.ndindex(*shape):
        src = list(idx)
        src[axis] //= block
        assert out[idx] == params[tuple(src)]


def test_block_expand_refuses_a_wrong_block_count():
    with pytest.raises(EvalError, match=r"3 blocks along axis 1 do not cover 4 elements in blocks of 2"):
        _block_expand(np.zeros((2, 3)), 1, 2, 4)
    with pytest.raises(EvalError, match="block_size must be positive"):
        _block_expand(np.zeros((2, 3)), 1, 0, 4)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.integers(1, 3), st.integers(1, 2), st.integers(1, 3),
                          st.integers(0, 2)), min_size=1, max_size=3), st.sampled_from([0, 1]))
def test_base_plus_offset_is_the_taps_flat_position(dims, order):
    """For every window tap inside the input (1-D to 3-D), base + offset is its flat index (row- or
    column-major), and the window tables mark exactly those taps valid, at their row-major position."""
    spatial, kernel, dil, strides, pad = (list(x) for x in zip(*dims))
    out = [(n + 2 * p - (k - 1) * d - 1) // s + 1 for n, k, d, s, p in zip(spatial, kernel, dil, strides, pad)]
    assume(min(out) >= 1)
    pads = [[p, p] for p in pad]
    off = _pool_index_offsets(spatial, kernel, dil, order)
    planes, first = _pool_index_base(2, spatial, strides, pads, out, order)
    taps, valid, _hit, _miss = _pool_window_tables(spatial, kernel, strides, dil, pads, out)
    n_out, n_taps = int(np.prod(out)), int(np.prod(kernel))
    assert off.dtype == planes.dtype == first.dtype == np.int32
    assert planes.shape == (2, 1) and first.shape == (1, n_out) and valid.shape == taps.shape == (n_out, n_taps)
    size = int(np.prod(spatial))
    for pl in range(2):
        for o, pos in enumerate(np.ndindex(*out)):
            for k, tap in enumerate(np.ndindex(*kernel)):
                at = [q * s - p + t * d for q, s, p, t, d in zip(pos, strides, pad, tap, dil)]
                inside = all(0 <= c < n for c, n in zip(at, spatial))
                assert bool(valid[o, k]) == inside
                if inside:
                    row_major = int(np.ravel_multi_index(at, spatial))
                    flat = row_major if order == 0 else int(np.ravel_multi_index(at, spatial, order="F"))
                    assert planes[pl, 0] + first[0, o] + off[k] == pl * size + flat
                    assert taps[o, k] == row_major
