"""Convolutions, channels-last: Conv1d/2d/3d, DepthWiseConv1d/2d and
TransposeConv1d/2d/3d. Inputs are [batch, *spatial, channel]; filters are
[*kernel, channel_in/group, channel_out] (transpose: [*kernel, channel_in,
channel_out/group]). Accumulation is in float64 (int64 for plain integers)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from qlower.reference.qnn._common import compute_dtype, finish, need, p_int, p_pairs, spatial
from qlower.reference.spec import Kernel, KernelError, OutSpec

Inputs = Sequence["np.ndarray | None"]
Params = Mapping[str, Any]
Outs = Sequence[OutSpec]


def _window(start: int, count: int, step: int) -> slice:
    return slice(start, start + step * (count - 1) + 1, step)


def conv_nd(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, stride: Sequence[int],
            pads: Sequence[tuple[int, int]], dilation: Sequence[int], group: int) -> np.ndarray:
    """Grouped, strided, dilated N-d convolution; output size per the op definitions:
    floor((pad_before + size + pad_after − dilated_kernel) / stride) + 1."""
    n = x.ndim - 2
    kernel, cin_g, cout = w.shape[:n], w.shape[n], w.shape[n + 1]
    cin = x.shape[-1]
    if group < 1 or cin % group or cout % group or cin // group != cin_g:
        raise KernelError(f"filter {list(w.shape)} does not fit {cin} input channels in {group} group(s)")
    xp = np.pad(x, [(0, 0), *pads, (0, 0)])
    out_sz = []
    for i in range(n):
        dk = (kernel[i] - 1) * dilation[i] + 1
        size = (xp.shape[1 + i] - dk) // stride[i] + 1
        if size < 1:
            raise KernelError(f"spatial axis {i}: dilated kernel {dk} larger than padded input {xp.shape[1 + i]}")
        out_sz.append(size)
    y = np.zeros((x.shape[0], *out_sz, group, cout // group), dtype=compute_dtype(x, w))
    wg = w.reshape(*kernel, cin_g, group, cout // group)
    for k in itertools.product(*(range(s) for s in kernel)):
        idx = (slice(None), *(_window(k[i] * dilation[i], out_sz[i], stride[i]) for i in range(n)))
        patch = xp[idx].reshape(*xp[idx].shape[:-1], group, cin_g)
        y += np.einsum("...gi,igo->...go", patch, wg[k])
    y = y.reshape(x.shape[0], *out_sz, cout)
    return y if bias is None else y + np.asarray(bias).reshape(-1)


def transpose_conv_nd(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, stride: Sequence[int],
                      pads: Sequence[tuple[int, int]], dilation: Sequence[int], group: int,
                      out_pad: Sequence[int]) -> np.ndarray:
    """Scatter each input pixel through the filter, then crop pad_amount; output size
    stride·(size − 1) + dilated_kernel − pad_before − pad_after + output_padding."""
    n = x.ndim - 2
    kernel, cin, cout_g = w.shape[:n], w.shape[n], w.shape[n + 1]
    if x.shape[-1] != cin or cin % group:
        raise KernelError(f"filter {list(w.shape)} does not fit {x.shape[-1]} input channels in {group} group(s)")
    in_sz = x.shape[1:-1]
    full = [stride[i] * (in_sz[i] - 1) + (kernel[i] - 1) * dilation[i] + 1 + out_pad[i] for i in range(n)]
    y = np.zeros((x.shape[0], *full, group, cout_g), dtype=compute_dtype(x, w))
    xg = x.reshape(*x.shape[:-1], group, cin // group)
    wg = w.reshape(*kernel, group, cin // group, cout_g)
    for k in itertools.product(*(range(s) for s in kernel)):
        idx = (slice(None), *(_window(k[i] * dilation[i], in_sz[i], stride[i]) for i in range(n)))
        y[idx] += np.einsum("...gi,gio->...go", xg, wg[k])
    crop = tuple(slice(pads[i][0], full[i] - pads[i][1]) for i in range(n))
    y = y.reshape(x.shape[0], *full, group * cout_g)[(slice(None), *crop)]
    return y if bias is None else y + np.asarray(bias).reshape(-1)


def _parts(inputs: Inputs, rank: int, op: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    x, w = need(inputs[0], "in[0]"), need(inputs[1], "in[1]")
    bias = inputs[2] if len(inputs) > 2 else None
    if x.ndim != rank + 2 or w.ndim != rank + 2:
        raise KernelError(f"{op} expects rank-{rank + 2} input and filter, got {x.ndim} and {w.ndim}")
    dt = compute_dtype(x, w, bias)
    return x.astype(dt), w.astype(dt), None if bias is None else np.asarray(bias).astype(dt)


def _conv(rank: int, op: str) -> Kernel:
    def kernel(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
        x, w, b = _parts(inputs, rank, op)
        y = conv_nd(x, w, b, spatial(params, "stride", rank), p_pairs(params, "pad_amount", rank),
                    spatial(params, "dilation", rank, 1), p_int(params, "group", 1))
        return [finish(y, outs[0])]
    kernel.__name__ = op
    return kernel


def _depthwise(rank: int, op: str) -> Kernel:
    """Depthwise = grouped conv with group = channel_in; filter [*k, 1, channel_out]."""
    def kernel(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
        x, w, b = _parts(inputs, rank, op)
        if w.shape[rank] != 1:
            raise KernelError(f"{op} filter must be [*kernel, 1, channel_out], got {list(w.shape)}")
        y = conv_nd(x, w, b, spatial(params, "stride", rank), p_pairs(params, "pad_amount", rank),
                    spatial(params, "dilation", rank, 1), x.shape[-1])
        return [finish(y, outs[0])]
    kernel.__name__ = op
    return kernel


def _transpose_conv(rank: int, op: str) -> Kernel:
    def kernel(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
        x, w, b = _parts(inputs, rank, op)
        stride = spatial(params, "stride", rank)
        out_pad = spatial(params, "output_padding", rank, 0)
        if any(p >= s for p, s in zip(out_pad, stride)):
            raise KernelError(f"output_padding {list(out_pad)} must be < stride {list(stride)}")
        y = transpose_conv_nd(x, w, b, stride, p_pairs(params, "pad_amount", rank),
                              spatial(params, "dilation", rank, 1), p_int(params, "group", 1), out_pad)
        return [finish(y, outs[0])]
    kernel.__name__ = op
    return kernel


KERNELS: Mapping[str, Kernel] = MappingProxyType({
    "Conv1d": _conv(1, "Conv1d"),
    "Conv2d": _conv(2, "Conv2d"),
    "Conv3d": _conv(3, "Conv3d"),
    "DepthWiseConv1d": _depthwise(1, "DepthWiseConv1d"),
    "DepthWiseConv2d": _depthwise(2, "DepthWiseConv2d"),
    "TransposeConv1d": _transpose_conv(1, "TransposeConv1d"),
    "TransposeConv2d": _transpose_conv(2, "TransposeConv2d"),
    "TransposeConv3d": _transpose_conv(3, "TransposeConv3d"),
})
