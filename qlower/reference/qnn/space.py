"""Layout kernels that move data between space, depth and batch (NHWC):
DepthToSpace, SpaceToDepth, BatchToSpace, SpaceToBatch, ChannelShuffle,
BatchPermutation, ArgbToRgb."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from qlower.reference.qnn._common import axis_in, finish, need, p_int, p_ints, p_pairs
from qlower.reference.spec import Kernel, KernelError, OutSpec

Inputs = Sequence["np.ndarray | None"]
Params = Mapping[str, Any]
Outs = Sequence[OutSpec]

DCR, CRD = 0, 1  # `mode` enum of DepthToSpace / SpaceToDepth


def _nhwc(x: np.ndarray, op: str) -> tuple[int, int, int, int]:
    if x.ndim != 4:
        raise KernelError(f"{op} expects a 4D [batch, height, width, depth] input, got rank {x.ndim}")
    b, h, w, c = x.shape
    return b, h, w, c


def _block(params: Params) -> tuple[int, int]:
    bs = p_ints(params, "block_size")
    if len(bs) != 2 or min(bs) < 1:
        raise KernelError(f"block_size must be two values >= 1, got {list(bs)}")
    return bs[0], bs[1]


def depth_to_space(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """DCR: depth index = (row·bw + col)·C' + c; CRD: c·bh·bw + row·bw + col."""
    x = need(inputs[0], "in[0]")
    b, h, w, c = _nhwc(x, "DepthToSpace")
    bh, bw = _block(params)
    if c % (bh * bw):
        raise KernelError(f"DepthToSpace depth {c} not divisible by {bh}x{bw}")
    co = c // (bh * bw)
    if p_int(params, "mode", DCR) == DCR:
        y = x.reshape(b, h, w, bh, bw, co).transpose(0, 1, 3, 2, 4, 5)
    else:
        y = x.reshape(b, h, w, co, bh, bw).transpose(0, 1, 4, 2, 5, 3)
    return [finish(y.reshape(b, h * bh, w * bw, co), outs[0])]


def space_to_depth(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """The inverse of DepthToSpace with the same mode."""
    x = need(inputs[0], "in[0]")
    b, h, w, c = _nhwc(x, "SpaceToDepth")
    bh, bw = _block(params)
    if h % bh or w % bw:
        raise KernelError(f"SpaceToDepth spatial size {h}x{w} not divisible by {bh}x{bw}")
    y = x.reshape(b, h // bh, bh, w // bw, bw, c)
    if p_int(params, "mode", DCR) == DCR:
        y = y.transpose(0, 1, 3, 2, 4, 5)
    else:
        y = y.transpose(0, 1, 3, 5, 2, 4)
    return [finish(y.reshape(b, h // bh, w // bw, c * bh * bw), outs[0])]


def batch_to_space(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """Batch is read as [bh, bw, batch'] (TensorFlow order), then crops apply."""
    x = need(inputs[0], "in[0]")
    b, h, w, c = _nhwc(x, "BatchToSpace")
    bh, bw = _block(params)
    if b % (bh * bw):
        raise KernelError(f"BatchToSpace batch {b} not divisible by {bh}x{bw}")
    (ct, cb), (cl, cr) = p_pairs(params, "crops", 2, [[0, 0], [0, 0]])
    y = x.reshape(bh, bw, b // (bh * bw), h, w, c).transpose(2, 3, 0, 4, 1, 5)
    y = y.reshape(b // (bh * bw), h * bh, w * bw, c)
    return [finish(y[:, ct:h * bh - cb, cl:w * bw - cr, :], outs[0])]


def space_to_batch(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """Zero-pad, then move bh x bw blocks into batch as [bh, bw, batch] (TensorFlow order)."""
    x = need(inputs[0], "in[0]")
    _nhwc(x, "SpaceToBatch")
    bh, bw = _block(params)
    pads = p_pairs(params, "pad_amount", 2, [[0, 0], [0, 0]])
    x = np.pad(x, [(0, 0), pads[0], pads[1], (0, 0)])
    b, h, w, c = x.shape
    if h % bh or w % bw:
        raise KernelError(f"SpaceToBatch padded size {h}x{w} not divisible by {bh}x{bw}")
    y = x.reshape(b, h // bh, bh, w // bw, bw, c).transpose(2, 4, 0, 1, 3, 5)
    return [finish(y.reshape(b * bh * bw, h // bh, w // bw, c), outs[0])]


def channel_shuffle(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """out_channel[i·G + g] = in_channel[g·(C/G) + i] along `axis` (default last)."""
    x = need(inputs[0], "in[0]")
    axis = axis_in(p_int(params, "axis", x.ndim - 1), x.ndim)
    groups, c = p_int(params, "num_groups"), x.shape[axis]
    if groups < 1 or c % groups:
        raise KernelError(f"ChannelShuffle: {c} channels not divisible into {groups} groups")
    y = np.moveaxis(x, axis, -1)
    y = y.reshape(*y.shape[:-1], groups, c // groups).swapaxes(-1, -2).reshape(y.shape)
    return [finish(np.moveaxis(y, -1, axis), outs[0])]


def batch_permutation(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    x, idx = need(inputs[0], "in[0]"), need(inputs[1], "in[1]").astype(np.int64).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= x.shape[0]):
        raise KernelError(f"BatchPermutation index out of range [0, {x.shape[0] - 1}]")
    return [finish(x[idx], outs[0])]


def argb_to_rgb(inputs: Inputs, params: Params, outs: Outs) -> list[np.ndarray]:
    """Drop alpha (channel 0 for ARGB, 3 for RGBA); reverse_output reverses the three colours."""
    x = need(inputs[0], "in[0]")
    if x.ndim != 4 or x.shape[-1] != 4:
        raise KernelError(f"ArgbToRgb expects [b, h, w, 4], got {list(x.shape)}")
    rgb = x[..., 1:] if p_int(params, "input_order", 0) == 0 else x[..., :3]
    if p_int(params, "reverse_output") != 0:
        rgb = rgb[..., ::-1]
    return [finish(rgb, outs[0])]


KERNELS: Mapping[str, Kernel] = MappingProxyType({
    "ArgbToRgb": argb_to_rgb,
    "DepthToSpace": depth_to_space,
    "SpaceToDepth": space_to_depth,
    "BatchToSpace": batch_to_space,
    "SpaceToBatch": space_to_batch,
    "ChannelShuffle": channel_shuffle,
    "BatchPermutation": batch_permutation,
})
