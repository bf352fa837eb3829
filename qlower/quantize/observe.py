"""What calibration keeps of each tensor: its range and, for percentile and MSE, a histogram.

Memory is fixed per tensor (BINS counts), however many chunks are observed: a histogram whose
range must grow is re-binned onto the wider range (counts move with their bins' centres).
"""

from __future__ import annotations

import numpy as np

BINS = 2048


class RangeObserver:
    """min, max and (when `histogram`) the distribution of every value seen; for a Softmax's operand
    also the least row maximum (`update_rows`)."""

    __slots__ = ("lo", "hi", "counts", "edges", "histogram", "row_floor", "feature_axis", "feature_sum",
                 "feature_count")

    def __init__(self, histogram: bool) -> None:
        self.lo, self.hi = np.inf, -np.inf
        self.counts: np.ndarray | None = None
        self.edges: tuple[float, float] | None = None
        self.histogram = histogram
        self.row_floor = np.inf
        self.feature_axis: int | None = None
        self.feature_sum: np.ndarray | None = None
        self.feature_count = 0

    def update_features(self, x: np.ndarray, axis: int) -> None:
        """The running mean of each feature along `axis` (a weight op's input: see
        `qlower.quantize.correct`); memory is one float64 a feature."""
        x = np.asarray(x)
        if x.ndim == 0 or x.size == 0:
            return
        axis %= x.ndim
        if self.feature_axis is not None and (axis != self.feature_axis or
                                              self.feature_sum.shape[0] != x.shape[axis]):
            raise ValueError(f"features along axis {axis} of {x.shape[axis]}, were along {self.feature_axis}")
        others = tuple(a for a in range(x.ndim) if a != axis)
        total = x.sum(axis=others, dtype=np.float64)
        if self.feature_sum is None:
            self.feature_axis, self.feature_sum = axis, total
        else:
            self.feature_sum += total
        self.feature_count += x.size // x.shape[axis]

    def feature_mean(self, axis: int) -> np.ndarray | None:
        if self.feature_sum is None or self.feature_count == 0 or axis != self.feature_axis \
                or not np.isfinite(self.feature_sum).all():
            return None
        return self.feature_sum / self.feature_count

    def update_rows(self, x: np.ndarray, axis: int) -> None:
        """The least maximum of a row along `axis` (a Softmax's): values far enough below their row's
        maximum weigh nothing in its softmax. A row of one value (a query every key is masked for)
        weighs its entries equally wherever they lie, so it bounds nothing."""
        x = np.asarray(x)
        if x.size == 0 or x.ndim == 0:
            return
        top, bottom = x.max(axis=axis), x.min(axis=axis)
        spread = np.isfinite(top) & (top > bottom)
        if spread.any():
            self.row_floor = min(self.row_floor, float(top[spread].min()))

    def update(self, x: np.ndarray) -> None:
        x = np.asarray(x)
        if x.size == 0:
            return
        finite = x if np.isfinite(x).all() else x[np.isfinite(x)]
        if finite.size == 0:
            return
        lo, hi = float(finite.min()), float(finite.max())
        self.lo, self.hi = min(self.lo, lo), max(self.hi, hi)
        if not self.histogram:
            return
        if self.edges is None:
            a, b = min(lo, 0.0), max(hi, 0.0)  # encodings always hold 0
            self.edges = (a, b if b - a > 1e-6 * max(1.0, abs(a)) else a + max(1.0, abs(a)))
            self.counts = np.zeros(BINS, np.float64)
        elif lo < self.edges[0] or hi > self.edges[1]:
            self._rebin(min(lo, self.edges[0]), max(hi, self.edges[1]))
        a, b = self.edges
        self.counts += np.histogram(finite.astype(np.float64, copy=False), BINS, (a, b))[0]

    def _rebin(self, a: float, b: float) -> None:
        old_a, old_b = self.edges
        centres = old_a + (np.arange(BINS) + 0.5) * (old_b - old_a) / BINS
        self.counts = np.histogram(centres, BINS, (a, b), weights=self.counts)[0].astype(np.float64)
        self.edges = (a, b)

    @property
    def seen(self) -> bool:
        return self.lo <= self.hi

    def centres(self) -> np.ndarray:
        a, b = self.edges
        return a + (np.arange(BINS) + 0.5) * (b - a) / BINS

    def percentile_range(self, pct: float) -> tuple[float, float]:
        """The central `pct` percent of the values (the two tails cut equally)."""
        if self.counts is None or pct >= 100.0:
            return self.lo, self.hi
        cdf = np.cumsum(self.counts)
        total = cdf[-1]
        tail = total * (100.0 - pct) / 200.0
        a, b = self.edges
        width = (b - a) / BINS
        i = int(np.searchsorted(cdf, tail, side="right"))
        j = int(np.searchsorted(cdf, total - tail, side="left"))
        lo, hi = a + i * width, a + (j + 1) * width
        return max(self.lo, min(lo, 0.0) if self.lo <= 0 else lo), min(self.hi, max(hi, 0.0) if self.hi >= 0 else hi)

    def mse_range(self, levels: int, symmetric: bool) -> tuple[float, float]:
        """The clipping range whose expected squared quantization error on the observed distribution
        is least: clipped values cost their distance to the bound, the others a rounding error of
        step²/12 (the SQNR search of QNN's `enhanced` / AIMET's TF-enhanced, on a histogram)."""
        if self.counts is None:
            return self.lo, self.hi
        x, c = self.centres(), self.counts
        lo, hi = min(self.lo, 0.0), max(self.hi, 0.0)
        f = np.linspace(0.1, 1.0, 46)
        if symmetric:
            m = max(-lo, hi) * f
            a, b = -m, m
        else:  # every pair of a shrunk lower and a shrunk upper bound
            a, b = (lo * f)[:, None].repeat(f.size, 1).ravel(), (hi * f)[None, :].repeat(f.size, 0).ravel()
        ok = b > a
        a, b = a[ok], b[ok]
        if a.size == 0:
            return self.lo, self.hi
        step = (b - a) / (levels - 1)
        clipped = np.clip(x[None, :], a[:, None], b[:, None])
        err = ((x[None, :] - clipped) ** 2) @ c + c.sum() * step * step / 12.0
        k = int(np.argmin(err))
        return float(a[k]), float(b[k])
