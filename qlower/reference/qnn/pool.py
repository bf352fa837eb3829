"""Pooling, channels-last: PoolAvg2d/3d and PoolMax2d/3d.

Output size: ROUND((pad_before + size + pad_after − filter) / stride + 1) with
ROUND floor or ceil per rounding_mode. A ceil-mode window may run past the
padded input; those positions never count. Max pooling ignores padding (it
pads with −∞, which is what lowering a framework MaxPool with pads relies on).
Average pooling divides by the in-input element count, or, with
count_pad_for_edges, by the count inside input plus explicit padding.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from qlower.reference.qnn._common import finish, need, p_bool, p_int, p_pairs, spatial
from qlower.reference.spec import Kernel, KernelError, OutSpec

Inputs = Sequence["np.ndarray | None"]
Params = Mapping[str, Any]
Outs = Sequence[OutSpec]


def pool_out_size(size: int, pads: tuple[int, int], k: int, s: int, ceil_mode: bool) -> int:
    span = pads[0] + size + pads[1] - k
    if span < 0:
        raise KernelError(f"pool filter {k} larger than padded input {size + pads[0] + pads[1]}")
    return (math.ceil(span / s) if ceil_mode else span // s) + 1


Windows = tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]


def _windows(x: np.ndarray, params: Params, rank: int, fill: float) -> Windows:
    """Per filter offset: the strided window values, an in-input mask and an in-padded-region mask."""
    k = spatial(params, "filter_size", rank)
    s = spatial(params, "stride", rank)
    pads = p_pairs(params, "pad_amount", rank)
    ceil_mode = p_int(params, "rounding_mode", 0) == 1
    size = x.shape[1:-1]
    out = [pool_out_size(size[i], pads[i], k[i], s[i], ceil_mode) for i in range(rank)]
    # Extend past the padding far enough for ceil-mode windows; track what is real input/padding.
    ext = [max(0, (out[i] - 1) * s[i] + k[i] - (pads[i][0] + size[i] + pads[i][1])) for i in range(rank)]
    widths = [(0, 0)] + [(pads[i][0], pads[i][1] + ext[i]) for i in range(rank)] + [(0, 0)]
    xp = np.pad(x, widths, constant_values=fill)
    inside = np.pad(np.ones(size, dtype=bool), widths[1:-1], constant_values=False)
    padded = np.pad(np.ones([size[i] + pads[i][0] + pads[i][1] for i in range(rank)], dtype=bool),
                    [(0, e) for e in ext], constant_values=False)
    vals, ins, pds = [], [], []
    for off in itertools.product(*(range(v) for v in k)):
        win = tuple(slice(off[i], off[i] + s[i] * (out[i] - 1) + 1, s[i]) for i in range(rank))
        vals.append(xp[(slice(None), *win)])
        ins.append(inside[win][None, ..., None])
        pds.append(padded[win][None, ..., None])
    return vals, ins, pds


def _check(x: np.ndarray, rank: int, op: str) -> np.ndarray:
    if x.ndim != rank + 2:
        raise KernelError(f"{op} expects a rank-{rank + 2} channels-last input, got rank {x.ndim}")
    return x.astype(np.float64)


def _avg(rank: int, op: str) -> Kernel:
    def kernel(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
        x = _check(need(inputs[0], "in[0]"), rank, op)
        vals, ins, pds = _windows(x, params, rank, 0.0)
        total = sum(vals)
        masks = pds if p_bool(params, "count_pad_for_edges", False) else ins
        count = sum(m.astype(np.float64) for m in masks)
        return [finish(total / np.maximum(count, 1.0), outs[0])]
    kernel.__name__ = op
    return kernel


def _max(rank: int, op: str) -> Kernel:
    def kernel(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
        x = _check(need(inputs[0], "in[0]"), rank, op)
        vals, _, _ = _windows(x, params, rank, -np.inf)
        return [finish(np.maximum.reduce(vals), outs[0])]
    kernel.__name__ = op
    return kernel


KERNELS: Mapping[str, Kernel] = MappingProxyType({
    "PoolAvg2d": _avg(2, "PoolAvg2d"),
    "PoolAvg3d": _avg(3, "PoolAvg3d"),
    "PoolMax2d": _max(2, "PoolMax2d"),
    "PoolMax3d": _max(3, "PoolMax3d"),
})
