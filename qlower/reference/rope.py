"""Rotary embedding tables for the mllm RoPE ops.

When a model's positions (text) or image grids (vision) are known at
compile time the sin/cos operands of RoPE / VisionRoPE are constants; these
functions compute them the way mllm (and Qwen2-VL) does, in float64, and
return float32.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _inv_freq(n: int, width: int, theta: float) -> np.ndarray:
    """inv_freq[i] = theta^(-2i/width) for i < n."""
    return theta ** (-2.0 * np.arange(n, dtype=np.float64) / width)


def _grids(grid_thw: Sequence[tuple[int, int, int]] | tuple[int, int, int]) -> list[tuple[int, int, int]]:
    """Accepts one (t, h, w) triple or a sequence of them."""
    if len(grid_thw) == 3 and all(isinstance(v, (int, np.integer)) for v in grid_thw):
        return [tuple(int(v) for v in grid_thw)]  # type: ignore[list-item]
    grids = [tuple(int(v) for v in g) for g in grid_thw]  # type: ignore[union-attr]
    if not grids or any(len(g) != 3 for g in grids):
        raise ValueError(f"grid_thw must be (t, h, w) or a non-empty sequence of them, got {grid_thw!r}")
    return grids  # type: ignore[return-value]


def vision_patch_positions(t: int, h: int, w: int, spatial_merge_size: int = 2) -> np.ndarray:
    """[t*h*w, 2] (row, column) ids of a grid's patch tokens in sequence order.

    Tokens come block by block (spatial-merge blocks of m x m patches,
    blocks row-major), row-major inside a block, and the frame repeats for
    each temporal step.
    """
    m = spatial_merge_size
    if min(t, h, w) < 1 or m < 1:
        raise ValueError(f"grid ({t}, {h}, {w}) and spatial_merge_size {m} must be positive")
    if h % m or w % m:
        raise ValueError(f"grid h={h}, w={w} must be multiples of spatial_merge_size {m}")
    rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")

    def block_order(ids: np.ndarray) -> np.ndarray:
        # [h, w] -> [h/m, m, w/m, m] -> [h/m, w/m, m, m]: blocks outer, in-block inner.
        return ids.reshape(h // m, m, w // m, m).transpose(0, 2, 1, 3).reshape(-1)

    frame = np.stack([block_order(rows), block_order(cols)], axis=-1)
    return np.tile(frame, (t, 1))


def vision_rope_tables(grid_thw: Sequence[tuple[int, int, int]] | tuple[int, int, int], dims: int,
                       theta: float = 10000.0, spatial_merge_size: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """(sin, cos) for VisionRoPE, each [S, dims/2] float32, S = sum of t*h*w over the grids.

    With inv_freq[i] = theta^(-2i/(dims/2)) for i < dims/4, the row of a patch
    at (h, w) is concat(h*inv_freq, w*inv_freq); grids are concatenated along S.
    """
    if dims < 4 or dims % 4:
        raise ValueError(f"dims (head_dim) must be a positive multiple of 4, got {dims}")
    if theta <= 0:
        raise ValueError(f"theta must be positive, got {theta}")
    inv = _inv_freq(dims // 4, dims // 2, theta)
    pos = np.concatenate([vision_patch_positions(*g, spatial_merge_size) for g in _grids(grid_thw)])
    angles = np.concatenate([pos[:, :1] * inv, pos[:, 1:] * inv], axis=-1)
    return np.sin(angles).astype(np.float32), np.cos(angles).astype(np.float32)


def text_rope_tables(positions: Sequence[int] | int, dims: int,
                     theta: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """(sin, cos) for RoPE, each [S, dims] float32 in the rotate_half layout.

    inv_freq[i] = theta^(-2i/dims) for i < dims/2; a position p's row is
    concat(p*inv_freq, p*inv_freq). An int `positions` means 0..positions-1.
    """
    if dims < 2 or dims % 2:
        raise ValueError(f"dims (head_dim) must be a positive even number, got {dims}")
    if theta <= 0:
        raise ValueError(f"theta must be positive, got {theta}")
    if isinstance(positions, (int, np.integer)):
        pos = np.arange(int(positions), dtype=np.float64)
    else:
        pos = np.asarray(list(positions), dtype=np.float64)
    if pos.ndim != 1:
        raise ValueError("positions must be an int or a flat sequence of ints")
    freqs = pos[:, None] * _inv_freq(dims // 2, dims, theta)
    angles = np.concatenate([freqs, freqs], axis=-1)
    return np.sin(angles).astype(np.float32), np.cos(angles).astype(np.float32)
