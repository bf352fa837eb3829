"""The one quantizer: lowering (framework encodings) and the reference (QNN encodings) agree."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from qlower.graph.quantize import bounds, quantize_affine, quantize_real
from qlower.graph.types import Quant
from qlower.qnn.convert import encoding_of
from qlower.reference.quant import quantize
from qlower.rewrite.emit import quantize_real as lowering_quantize


def test_four_bit_saturates_in_lowering_and_reference():
    """Issue 17: scale 0.1, 4-bit: [-2, -0.5, 0, 0.5, 2] is [-8, -5, 0, 5, 7] in both."""
    q = Quant((0.1,), (0,), bitwidth=4)
    x = np.array([-2.0, -0.5, 0.0, 0.5, 2.0])
    dt = np.dtype("int8")
    want = [-8, -5, 0, 5, 7]
    assert lowering_quantize(x, q, dt).tolist() == want
    assert quantize(x, encoding_of(q, dt), dt).tolist() == want
    assert quantize_real(x, Quant((0.1,), (0,), bitwidth=4), np.dtype("uint8")).tolist() == [0, 0, 0, 5, 15]


@st.composite
def _case(draw):
    dt = np.dtype(draw(st.sampled_from(["int8", "uint8", "int16", "uint16", "int32"])))
    bits = dt.itemsize * 8
    bw = draw(st.one_of(st.none(), st.integers(2, bits)))
    lo, hi = bounds(dt, bw)
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=6))
    x = draw(hnp.arrays(np.float32, shape, elements=st.floats(-1e4, 1e4, width=32)))
    axis = draw(st.one_of(st.none(), st.integers(0, len(shape) - 1)))
    n = 1 if axis is None else shape[axis]
    scale = draw(st.lists(st.floats(1e-3, 10.0), min_size=n, max_size=n))
    zp = draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n))
    return x, Quant(tuple(scale), tuple(zp), axis=axis, bitwidth=bw), dt


@settings(max_examples=150, deadline=None)
@given(_case())
def test_lowering_and_reference_quantizers_agree(case):
    x, q, dt = case
    a = quantize_real(x, q, dt)
    b = quantize(x, encoding_of(q, dt), dt)
    assert a.dtype == b.dtype == dt
    np.testing.assert_array_equal(a, b)
    lo, hi = bounds(dt, q.bitwidth)
    assert a.min(initial=lo) >= lo and a.max(initial=hi) <= hi


@settings(max_examples=100, deadline=None)
@given(hnp.arrays(np.float32, hnp.array_shapes(min_dims=2, max_dims=3, min_side=1, max_side=9),
                  elements=st.floats(-4, 4, width=32)),
       st.integers(1, 5), st.data())
def test_block_quantization_slices_like_the_whole(x, block_size, data):
    """Chunked block quantization equals the element-by-element definition."""
    axis = data.draw(st.integers(0, x.ndim - 1))
    baxis = data.draw(st.sampled_from([a for a in range(x.ndim) if a != axis]))
    c, nb = x.shape[axis], -(-x.shape[baxis] // block_size)
    scale = np.asarray(data.draw(st.lists(st.floats(0.01, 1.0), min_size=c * nb, max_size=c * nb)))
    q = Quant(tuple(scale), (0,) * (c * nb), axis=axis, bitwidth=4, block_size=block_size, block_axis=baxis)
    got = quantize_real(x, q, np.dtype("int8"))
    for chunk in (1, 3, 8):  # slices of one, several and a block's worth of rows
        np.testing.assert_array_equal(quantize_real(x, q, np.dtype("int8"), chunk=chunk), got)
    idx = np.indices(x.shape)
    s = scale.reshape(c, nb)[idx[axis], idx[baxis] // block_size]
    want = np.clip(np.rint(x.astype(np.float64) / s), -8, 7).astype(np.int8)
    np.testing.assert_array_equal(got, want)


def test_slices_do_not_change_the_result():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(37, 11)).astype(np.float32)
    s = rng.uniform(0.01, 0.1, size=(37, 1))
    z = rng.integers(-3, 3, size=(37, 1)).astype(np.float64)
    whole = quantize_affine(x, s, z, -128, 127, np.int8)
    for chunk in (1, 7, 11, 100):
        np.testing.assert_array_equal(quantize_affine(x, s, z, -128, 127, np.int8, chunk=chunk), whole)
