"""Ops that work along axes: reductions (which drop or keep those axes) and
normalizations (which keep the shape but take per-axis scale tensors)."""

from __future__ import annotations

from collections.abc import Sequence

from qlower.qnn.shapes.core import Call, Rule, Sig, fmt, same

INDEX_DTYPE = "int32"


def _reduced(shape: Sequence[int], axes: Sequence[int], keep: bool) -> tuple[int, ...]:
    if keep:
        return tuple(1 if k in axes else d for k, d in enumerate(shape))
    return tuple(d for k, d in enumerate(shape) if k not in axes)


def _reduce(call: Call) -> list[Sig]:
    """QNN keeps at least one dim: reducing every axis without keep_dims gives
    shape [1] (rank max(1, N - M)), not a scalar."""
    x = call.min_rank(0, 1)
    axes = call.axes("axes", x.rank)
    if not axes:
        raise call.fail("param 'axes' must name at least one axis")
    shape = _reduced(x.shape, axes, call.flag("keep_dims"))
    return [Sig(shape or (1,), x.dtype)]


def _arg(call: Call) -> list[Sig]:
    x = call.min_rank(0, 1)
    axis = call.axis("axis", x.rank)
    return [Sig(_reduced(x.shape, [axis], call.flag("keep_dims")), INDEX_DTYPE)]


def _moments(call: Call) -> list[Sig]:
    """Mean and variance, both shaped like a reduction over `axes`."""
    x = call.min_rank(0, 1)
    axes = call.axes("axes", x.rank)
    shape = _reduced(x.shape, axes, call.flag("keep_dims"))
    return [Sig(shape, x.dtype), Sig(shape, x.dtype)]


def _top_k(call: Call) -> list[Sig]:
    """Values (in[0]'s dtype) and their int32 indices along the last axis."""
    x = call.min_rank(0, 1)
    k = call.scalar("k")
    if not 1 <= k <= x.shape[-1]:
        raise call.fail(f"k = {k} must be in 1..{x.shape[-1]}, the size of the last dimension of in[0] {fmt(x.shape)}")
    shape = x.shape[:-1] + (k,)
    return [Sig(shape, x.dtype), Sig(shape, INDEX_DTYPE)]


def _along_axis(call: Call) -> list[Sig]:
    """Same shape; the axis (default last) must exist."""
    x = call.min_rank(0, 1)
    call.axis("axis", x.rank, x.rank - 1)
    return same(call)


def _masked_softmax(call: Call) -> list[Sig]:
    x = call.exact_rank(0, 4, "[batch, height, width, channel]")
    mask = call.exact_rank(1, 2, "[batch, M]")
    if mask.shape[0] != x.shape[0]:
        raise call.fail(f"mask in[1] {fmt(mask.shape)} must have the batch size {x.shape[0]} of in[0] {fmt(x.shape)}")
    if call.scalar("mode", 0) == 0 and mask.shape[1] != x.shape[3]:  # UNCOMPRESSED: M = channel
        raise call.fail(f"mask in[1] {fmt(mask.shape)} must be [batch, channel] = [{x.shape[0]}, {x.shape[3]}] "
                        f"in mode UNCOMPRESSED")
    if call.scalar("mode", 0) == 1 and x.shape[2] != x.shape[3]:
        raise call.fail(f"in[0] {fmt(x.shape)} must have width == channel in mode COMPRESSED")
    return same(call)


def _check_param_tensor(call: Call, index: int, expected: Sequence[int], what: str) -> None:
    """Scale/offset tensors must match `expected`; a size-1 dim also fits."""
    sig = call.opt(index)
    if sig is None:
        return
    ok = sig.rank == len(expected) and all(d in (e, 1) for d, e in zip(sig.shape, expected))
    if not ok:
        raise call.fail(f"{what} in[{index}] {fmt(sig.shape)} must have shape {fmt(expected)}")


def _axes_norm(call: Call) -> list[Sig]:
    """LayerNorm/RmsNorm: gamma and beta span the normalized axes."""
    x = call.min_rank(0, 1)
    axes = call.axes("axes", x.rank)
    expected = [x.shape[a] for a in axes]
    _check_param_tensor(call, 1, expected, "gamma")
    _check_param_tensor(call, 2, expected, "beta")
    return same(call)


def _channel_params(call: Call, first: int = 1) -> None:
    x = call.inp(0)
    channels = [x.shape[-1]]
    _check_param_tensor(call, first, channels, "scale")
    _check_param_tensor(call, first + 1, channels, "offset")


def _group_norm(call: Call) -> list[Sig]:
    x = call.min_rank(0, 1)
    group = call.scalar("group")
    if group < 1 or x.shape[-1] % group:
        raise call.fail(f"channel count {x.shape[-1]} of in[0] {fmt(x.shape)} is not divisible by group {group}")
    _channel_params(call)
    return same(call)


def _instance_norm(call: Call) -> list[Sig]:
    x = call.inp(0)
    if x.rank <= 2:
        raise call.fail(f"in[0] must have rank > 2, got {fmt(x.shape)}")
    call.inp(1)
    _channel_params(call)
    return same(call)


def _batch_norm(call: Call) -> list[Sig]:
    call.min_rank(0, 1)
    call.inp(1)
    _channel_params(call)
    return same(call)


def _l2_norm(call: Call) -> list[Sig]:
    x = call.min_rank(0, 1)
    if call.has("axes"):
        call.axes("axes", x.rank)
    elif call.has("axis"):
        call.axis("axis", x.rank)
    return same(call)


def _lrn(call: Call) -> list[Sig]:
    x = call.min_rank(0, 1)
    if call.scalar("region", 0) == 1 and x.rank != 4:
        raise call.fail(f"WITHIN_CHANNEL region needs a rank-4 input, got {fmt(x.shape)}")
    return same(call)


_REDUCE_OPS = ("ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare")

RULES: dict[str, Rule] = {
    **{op: _reduce for op in _REDUCE_OPS},
    "Argmax": _arg,
    "Argmin": _arg,
    "Moments": _moments,
    "TopK": _top_k,
    "Softmax": _along_axis,
    "LogSoftmax": _along_axis,
    "CumulativeSum": _along_axis,
    "MaskedSoftmax": _masked_softmax,
    "LayerNorm": _axes_norm,
    "RmsNorm": _axes_norm,
    "GroupNorm": _group_norm,
    "InstanceNorm": _instance_norm,
    "Batchnorm": _batch_norm,
    "L2Norm": _l2_norm,
    "Lrn": _lrn,
}
