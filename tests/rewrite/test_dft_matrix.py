"""`dft_matrix`: ONNX DFT along an axis as one real matrix, against numpy's FFTs (which ONNX's
reference implementation calls)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qlower.lang.functions import EvalError
from qlower.plugins import builtin_contributions


def _dft_matrix(*args):
    return builtin_contributions().functions.get("dft_matrix").impl(*args)


def _apply(x: np.ndarray, m: np.ndarray, parts_out: int) -> np.ndarray:
    """x [rows, n, parts] times the matrix, as complex [rows, bins]."""
    y = (x.reshape(x.shape[0], -1) @ m.astype(np.float64)).reshape(x.shape[0], -1, parts_out)
    return y[..., 0] + (1j * y[..., 1] if parts_out == 2 else 0)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 12), length=st.integers(1, 16), parts=st.sampled_from([1, 2]),
       inverse=st.booleans(), onesided=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_dft_matrix_is_numpys_transform(n, length, parts, inverse, onesided, seed):
    x = np.random.default_rng(seed).standard_normal((3, n, parts))
    signal = x[..., 0] + (1j * x[..., 1] if parts == 2 else 0)
    m = _dft_matrix(n, parts, length, inverse, onesided)
    if inverse and onesided:
        want = np.fft.irfft(signal, n=length, axis=1)
        got = _apply(x, m, 1)
    elif inverse:
        want, got = np.fft.ifft(signal, n=length, axis=1), _apply(x, m, 2)
    else:
        want = np.fft.fft(signal, n=length, axis=1)
        want = want[:, : length // 2 + 1] if onesided else want
        got = _apply(x, m, 2)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-4 * max(1, length))


def test_dft_matrix_rejects_a_bad_part_count():
    with pytest.raises(EvalError, match="no DFT matrix"):
        _dft_matrix(4, 3, 4, False, False)
