"""Ops that move data without computing on it: permutations, joins, splits,
padding and block rearrangements."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from qlower.qnn.shapes.core import Call, Rule, ShapeError, Sig, fmt, same


def check_reshape(in_sig: Sig, out_shape: Sequence[int]) -> None:
    """Reshape keeps the element count. QNN's Reshape has no shape param (the
    output tensor carries the shape), so this is a check, not an inference."""
    size = int(np.prod(tuple(out_shape), dtype=np.int64))
    if size != in_sig.size:
        raise ShapeError(
            f"Reshape: in[0] {fmt(in_sig.shape)} has {in_sig.size} elements "
            f"but the output shape {fmt(out_shape)} has {size}"
        )


def _reshape(call: Call) -> None:
    call.inp(0)
    return None


def _transpose(call: Call) -> list[Sig]:
    x = call.inp(0)
    perm = [int(p) for p in call.ints("perm").reshape(-1)]
    if sorted(perm) != list(range(x.rank)):
        raise call.fail(f"param 'perm' = {perm} is not a permutation of 0..{x.rank - 1} for in[0] {fmt(x.shape)}")
    return [Sig(tuple(x.shape[p] for p in perm), x.dtype)]


def _tile(call: Call) -> list[Sig]:
    x = call.inp(0)
    multiples = call.ints("multiples").reshape(-1)
    if len(multiples) != x.rank:
        raise call.fail(f"param 'multiples' has {len(multiples)} values but in[0] {fmt(x.shape)} has rank {x.rank}")
    if (multiples < 0).any():
        raise call.fail(f"param 'multiples' = {multiples.tolist()} must not be negative")
    return [Sig(tuple(int(d) * int(m) for d, m in zip(x.shape, multiples)), x.dtype)]


def _concat(call: Call) -> list[Sig]:
    sigs = [call.inp(i) for i in range(len(call.inputs))]
    if not sigs:
        raise call.fail("needs at least one input")
    first = sigs[0]
    axis = call.axis("axis", first.rank, first.rank - 1)
    total = 0
    for i, s in enumerate(sigs):
        if s.rank != first.rank:
            raise call.fail(f"in[{i}] {fmt(s.shape)} has rank {s.rank} but in[0] {fmt(first.shape)} has rank {first.rank}")
        for k, (d, d0) in enumerate(zip(s.shape, first.shape)):
            if k != axis and d != d0:
                raise call.fail(
                    f"in[{i}] {fmt(s.shape)} differs from in[0] {fmt(first.shape)} in dimension {k}, "
                    f"which is not the concatenation axis {axis}"
                )
        total += s.shape[axis]
    shape = list(first.shape)
    shape[axis] = total
    return [Sig(shape, first.dtype)]


def _split(call: Call) -> list[Sig]:
    """split_index lists the cut points along axis: [3, 7] on 10 gives 3, 4, 3."""
    x = call.inp(0)
    axis = call.axis("axis", x.rank)
    cuts = [int(c) for c in call.ints("split_index").reshape(-1)]
    size = x.shape[axis]
    bounds = [0, *cuts, size]
    for lo, hi in zip(bounds, bounds[1:]):
        if hi <= lo:
            raise call.fail(
                f"param 'split_index' = {cuts} must increase strictly within 1..{size - 1} "
                f"(dimension {axis} of in[0] {fmt(x.shape)} has size {size})"
            )
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        shape = list(x.shape)
        shape[axis] = hi - lo
        out.append(Sig(shape, x.dtype))
    return out


def _pack(call: Call) -> list[Sig]:
    sigs = [call.inp(i) for i in range(len(call.inputs))]
    if not sigs:
        raise call.fail("needs at least one input")
    first = sigs[0]
    for i, s in enumerate(sigs):
        if s.shape != first.shape:
            raise call.fail(f"all inputs must have the same shape, but in[{i}] is {fmt(s.shape)} and in[0] is {fmt(first.shape)}")
    axis = call.axis("axis", first.rank, allow_end=True)
    return [Sig(first.shape[:axis] + (len(sigs),) + first.shape[axis:], first.dtype)]


def _unpack(call: Call) -> list[Sig]:
    x = call.inp(0)
    axis = call.axis("axis", x.rank)
    rest = x.shape[:axis] + x.shape[axis + 1:]
    return [Sig(rest, x.dtype) for _ in range(x.shape[axis])]


def _pad(call: Call) -> list[Sig]:
    x = call.inp(0)
    pads = call.ints("pad_amount", shape=(x.rank, 2))
    if (pads < 0).any():
        raise call.fail(f"param 'pad_amount' = {pads.tolist()} must not be negative")
    scheme = call.scalar("scheme", 0)
    if scheme in (1, 2):  # MIRROR_SYMMETRIC may repeat the border, MIRROR_REFLECT may not
        for i, (d, (b, a)) in enumerate(zip(x.shape, pads.tolist())):
            limit = d if scheme == 1 else d - 1
            if max(b, a) > limit:
                raise call.fail(f"param 'pad_amount' row {i} = {[b, a]} exceeds {limit}, the most "
                                f"{'MIRROR_SYMMETRIC' if scheme == 1 else 'MIRROR_REFLECT'} can pad dimension {i} "
                                f"of size {d} in in[0] {fmt(x.shape)}")
    return [Sig(tuple(int(d + b + a) for d, (b, a) in zip(x.shape, pads)), x.dtype)]


def _expand_dims(call: Call) -> list[Sig]:
    """`axes` (newer opsets) lists positions of the new size-1 dims in the
    output; otherwise the scalar `axis` is one such position."""
    x = call.inp(0)
    if call.has("axes"):
        axes = sorted(int(a) for a in call.ints("axes").reshape(-1))
        out_rank = x.rank + len(axes)
        if len(set(axes)) != len(axes) or any(not 0 <= a < out_rank for a in axes):
            raise call.fail(f"param 'axes' = {axes} must be distinct positions in 0..{out_rank - 1}")
    else:
        axes = [call.axis("axis", x.rank, allow_end=True)]
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return [Sig(shape, x.dtype)]


def _squeeze(call: Call) -> list[Sig] | None:
    """Without `axes` the output tensor alone says which dims go: no rule."""
    x = call.inp(0)
    if not call.has("axes"):
        return None
    axes = call.axes("axes", x.rank)
    for a in axes:
        if x.shape[a] != 1:
            raise call.fail(f"cannot squeeze dimension {a} of in[0] {fmt(x.shape)}: its size is {x.shape[a]}, not 1")
    return [Sig(tuple(d for k, d in enumerate(x.shape) if k not in axes), x.dtype)]


def _blocks(call: Call) -> tuple[Sig, int, int]:
    x = call.exact_rank(0, 4, "[batch, height, width, depth]")
    bh, bw = (int(v) for v in call.ints("block_size", shape=(2,)))
    if bh < 1 or bw < 1:
        raise call.fail(f"param 'block_size' = {[bh, bw]} must be >= 1")
    return x, bh, bw


def _depth_to_space(call: Call) -> list[Sig]:
    x, bh, bw = _blocks(call)
    b, h, w, d = x.shape
    if d % (bh * bw):
        raise call.fail(f"depth {d} of in[0] {fmt(x.shape)} is not divisible by block_size {bh}x{bw}")
    return [Sig((b, h * bh, w * bw, d // (bh * bw)), x.dtype)]


def _space_to_depth(call: Call) -> list[Sig]:
    x, bh, bw = _blocks(call)
    b, h, w, d = x.shape
    if h % bh or w % bw:
        raise call.fail(f"height and width of in[0] {fmt(x.shape)} must be divisible by block_size {[bh, bw]}")
    return [Sig((b, h // bh, w // bw, d * bh * bw), x.dtype)]


def _batch_to_space(call: Call) -> list[Sig]:
    x, bh, bw = _blocks(call)
    b, h, w, d = x.shape
    (ct, cb), (cl, cr) = call.ints("crops", [[0, 0], [0, 0]], shape=(2, 2)).tolist()
    if b % (bh * bw):
        raise call.fail(f"batch {b} of in[0] {fmt(x.shape)} is not divisible by block_size {bh}x{bw}")
    oh, ow = h * bh - ct - cb, w * bw - cl - cr
    if oh < 0 or ow < 0:
        raise call.fail(f"crops {[[ct, cb], [cl, cr]]} remove more than the {h * bh}x{w * bw} output")
    return [Sig((b // (bh * bw), oh, ow, d), x.dtype)]


def _space_to_batch(call: Call) -> list[Sig]:
    x, bh, bw = _blocks(call)
    b, h, w, d = x.shape
    (pt, pb), (pl, pr) = call.ints("pad_amount", [[0, 0], [0, 0]], shape=(2, 2)).tolist()
    ph, pw = h + pt + pb, w + pl + pr
    if ph % bh or pw % bw:
        raise call.fail(f"padded height x width {ph}x{pw} of in[0] {fmt(x.shape)} is not divisible by block_size {[bh, bw]}")
    return [Sig((b * bh * bw, ph // bh, pw // bw, d), x.dtype)]


def _channel_shuffle(call: Call) -> list[Sig]:
    x = call.inp(0)
    axis = call.axis("axis", x.rank, x.rank - 1)
    groups = call.scalar("num_groups")
    if groups < 1 or x.shape[axis] % groups:
        raise call.fail(f"dimension {axis} of in[0] {fmt(x.shape)} is not divisible by num_groups {groups}")
    return same(call)


def _shape(call: Call) -> list[Sig]:
    """A 1-D tensor of dims start..end-1; QNN defines it as UINT_32."""
    x = call.inp(0)
    start = call.scalar("start", 0)
    end = call.scalar("end", x.rank)
    if not 0 <= start < end <= x.rank:
        raise call.fail(f"params start={start}, end={end} must satisfy 0 <= start < end <= {x.rank} for in[0] {fmt(x.shape)}")
    return [Sig((end - start,), "uint32")]


RULES: dict[str, Rule] = {
    "Reshape": _reshape,
    "Transpose": _transpose,
    "Tile": _tile,
    "Concat": _concat,
    "Split": _split,
    "Pack": _pack,
    "UnPack": _unpack,
    "Pad": _pad,
    "ExpandDims": _expand_dims,
    "Squeeze": _squeeze,
    "DepthToSpace": _depth_to_space,
    "SpaceToDepth": _space_to_depth,
    "BatchToSpace": _batch_to_space,
    "SpaceToBatch": _space_to_batch,
    "ChannelShuffle": _channel_shuffle,
    "Shape": _shape,
}
