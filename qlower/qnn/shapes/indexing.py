"""Slicing, gathering and scattering: output shapes follow from index shapes
and slice ranges."""

from __future__ import annotations

from qlower.qnn.shapes.core import Call, Rule, Sig, fmt


def _bit(mask: int, i: int) -> bool:
    return bool((mask >> i) & 1)


def _strided_slice(call: Call) -> list[Sig]:
    """Row i of `ranges` is [begin, end, stride] for the i-th slice spec; the
    specs walk the input dims in order, except that a spec with its
    new_axes_mask bit set inserts a size-1 dim and consumes none. Masked
    begin/end mean "from the start"/"to the end" in the stride's direction;
    a shrink_axes bit picks the single index `begin` and drops the dim.
    Otherwise begin must lie in [0, n-1] and end in [-1, n] (MasterOpDef: QNN
    indices do not wrap, end -1 means "past index 0" for a negative stride),
    and the selection must not be empty."""
    x = call.inp(0)
    ranges = call.ints("ranges")
    if ranges.ndim != 2 or ranges.shape[1] != 3:
        raise call.fail(f"param 'ranges' must have shape [specs, 3] (begin, end, stride per row), got {fmt(ranges.shape)}")
    begin_mask = call.scalar("begin_mask", 0)
    end_mask = call.scalar("end_mask", 0)
    shrink = call.scalar("shrink_axes", 0)
    new = call.scalar("new_axes_mask", 0)
    rows = ranges.shape[0]
    inserted = sum(_bit(new, i) for i in range(rows))
    if rows - inserted != x.rank:
        raise call.fail(
            f"param 'ranges' has {rows} rows, {inserted} of them new axes, so it slices {rows - inserted} dims, "
            f"but in[0] {fmt(x.shape)} has rank {x.rank}"
        )
    out: list[int] = []
    dim = 0
    for i, (begin, end, stride) in enumerate(ranges.tolist()):
        if _bit(new, i):
            out.append(1)
            continue
        size = x.shape[dim]
        if stride == 0:
            raise call.fail(f"stride of ranges row {i} is 0")
        if _bit(begin_mask, i):
            begin = 0 if stride > 0 else size - 1
        if not 0 <= begin < size:
            raise call.fail(f"ranges row {i} begins at {begin}, outside [0, {size - 1}] for dimension {dim} "
                            f"of in[0] {fmt(x.shape)} (QNN indices do not wrap)")
        if not _bit(shrink, i):
            if _bit(end_mask, i):
                end = size if stride > 0 else -1
            if not -1 <= end <= size:
                raise call.fail(f"ranges row {i} ends at {end}, outside [-1, {size}] for dimension {dim} "
                                f"of in[0] {fmt(x.shape)}")
            count = len(range(begin, end, stride))
            if count == 0:
                raise call.fail(f"ranges row {i} = {[begin, end, stride]} selects nothing from dimension {dim}")
            out.append(count)
        dim += 1
    return [Sig(out, x.dtype)]


def _gather(call: Call) -> list[Sig]:
    """in[0] with dimension `axis` replaced by the whole shape of in[1]."""
    x, idx = call.inp(0), call.inp(1)
    axis = call.axis("axis", x.rank)
    return [Sig(x.shape[:axis] + idx.shape + x.shape[axis + 1:], x.dtype)]


def _gather_elements(call: Call) -> list[Sig]:
    """Output has the shape of the indices; they share rank with in[0]."""
    x, idx = call.inp(0), call.inp(1)
    call.axis("axis", x.rank, 0)
    if idx.rank != x.rank:
        raise call.fail(f"indices in[1] {fmt(idx.shape)} must have the rank of in[0] {fmt(x.shape)}")
    axis = call.axis("axis", x.rank, 0)
    if any(i > d for a, (i, d) in enumerate(zip(idx.shape, x.shape)) if a != axis):
        raise call.fail(f"indices in[1] {fmt(idx.shape)} must not exceed in[0] {fmt(x.shape)} off axis {axis}")
    return [Sig(idx.shape, x.dtype)]


def _nd_depth(call: Call, x: Sig, idx: Sig, batch_dims: int) -> int:
    """Depth q of one index tuple, checked against the data and batch dims."""
    if idx.rank < 1:
        raise call.fail("indices in[1] must have rank >= 1")
    q = idx.shape[-1]
    if not batch_dims < min(x.rank, idx.rank):
        raise call.fail(f"param 'batch_dims' = {batch_dims} must be < min(rank in[0], rank in[1]) = {min(x.rank, idx.rank)}")
    if x.shape[:batch_dims] != idx.shape[:batch_dims]:
        raise call.fail(
            f"the first {batch_dims} (batch) dims of in[0] {fmt(x.shape)} and in[1] {fmt(idx.shape)} must be equal"
        )
    if not 0 < q <= x.rank - batch_dims:
        raise call.fail(
            f"last dimension of indices in[1] {fmt(idx.shape)} is {q}; it must be in 1..{x.rank - batch_dims} "
            f"for in[0] {fmt(x.shape)} with batch_dims {batch_dims}"
        )
    return q


def _gather_nd(call: Call) -> list[Sig]:
    """indices[..., q] address the dims batch_dims..batch_dims+q-1 of in[0];
    the remaining trailing dims of in[0] are copied whole."""
    x, idx = call.inp(0), call.inp(1)
    batch_dims = call.scalar("batch_dims", 0)
    q = _nd_depth(call, x, idx, batch_dims)
    return [Sig(idx.shape[:-1] + x.shape[batch_dims + q:], x.dtype)]


def _scatter_elements(call: Call) -> list[Sig]:
    x, idx, upd = call.inp(0), call.inp(1), call.inp(2)
    call.axis("axis", x.rank, 0)
    if idx.rank != x.rank:
        raise call.fail(f"indices in[1] {fmt(idx.shape)} must have the rank of in[0] {fmt(x.shape)}")
    if upd.shape != idx.shape:
        raise call.fail(f"updates in[2] {fmt(upd.shape)} must have the shape of indices in[1] {fmt(idx.shape)}")
    return [Sig(x.shape, x.dtype)]


def _scatter_nd(call: Call) -> list[Sig]:
    """Output is in[0]'s shape with in[2]'s dtype; updates are shaped
    indices[:-1] + the dims of in[0] that one index tuple does not address."""
    x, idx, upd = call.inp(0), call.inp(1), call.inp(2)
    if idx.rank < 1 or idx.shape[-1] > x.rank:
        raise call.fail(f"last dimension of indices in[1] {fmt(idx.shape)} must be <= rank of in[0] {fmt(x.shape)}")
    expected = idx.shape[:-1] + x.shape[idx.shape[-1]:]
    if upd.shape != expected:
        raise call.fail(f"updates in[2] {fmt(upd.shape)} must have shape {fmt(expected)} for in[0] {fmt(x.shape)} and indices {fmt(idx.shape)}")
    return [Sig(x.shape, upd.dtype)]


RULES: dict[str, Rule] = {
    "StridedSlice": _strided_slice,
    "Gather": _gather,
    "GatherElements": _gather_elements,
    "GatherNd": _gather_nd,
    "ScatterElements": _scatter_elements,
    "ScatterNd": _scatter_nd,
}
