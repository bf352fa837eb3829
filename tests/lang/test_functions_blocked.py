"""Built-ins behind blocked quantization and MaxPool's Indices (block_expand,
pool_argmax_offsets, pool_argmax_base, pool_window_valid): shapes, laws and clear errors. Their
values end to end are checked against onnx.reference in tests/frontends/test_onnx_blocked_and_argmax.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from qlower.lang.functions import EvalError
from qlower.lang.functions_shape import _block_expand
from qlower.lang.functions_spatial import _pool_argmax_base, _pool_argmax_offsets, _pool_window_valid


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
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 3), st.integers(1, 3), st.integers(1, 2), st.integers(1, 2),
       st.integers(1, 3), st.integers(1, 3), st.integers(0, 2), st.integers(0, 2), st.sampled_from([0, 1]))
def test_base_plus_offset_is_the_taps_flat_position(h, w, kh, kw, dh, dw, sh, sw, ph, pw, order):
    """For every window tap inside the input, base + offset is its flat index (row- or column-major)."""
    oh = (h + 2 * ph - (kh - 1) * dh - 1) // sh + 1
    ow = (w + 2 * pw - (kw - 1) * dw - 1) // sw + 1
    assume(oh >= 1 and ow >= 1)
    pads = [[ph, ph], [pw, pw]]
    off = _pool_argmax_offsets([h, w], [kh, kw], [dh, dw], order)
    base = _pool_argmax_base(2, [h, w], [sh, sw], pads, [oh, ow], order)
    valid = _pool_window_valid([h, w], [kh, kw], [sh, sw], [dh, dw], pads, [oh, ow])
    assert off.dtype == base.dtype == np.int32 and base.shape == (2, oh, ow) and valid.shape == (oh, ow, kh * kw)
    for p in range(2):
        for y in range(oh):
            for x in range(ow):
                for k in range(kh * kw):
                    r, c = y * sh - ph + (k // kw) * dh, x * sw - pw + (k % kw) * dw
                    inside = 0 <= r < h and 0 <= c < w
                    assert bool(valid[y, x, k]) == inside
                    if inside:
                        want = p * h * w + (r * w + c if order == 0 else r + c * h)
                        assert base[p, y, x] + off[k] == want
