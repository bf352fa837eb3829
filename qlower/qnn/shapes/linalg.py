"""Matrix products and recurrent cells: the ops whose output size comes from a
weight tensor rather than from the activation alone."""

from __future__ import annotations

from qlower.qnn.shapes.core import Call, Rule, Sig, broadcast_shapes, fmt


def _bias(call: Call, index: int, size: int) -> None:
    bias = call.opt(index)
    if bias is not None and bias.shape != (size,):
        raise call.fail(f"bias in[{index}] must have shape {fmt([size])} to match the output, got {fmt(bias.shape)}")


def _matmul(call: Call) -> list[Sig]:
    """[..., M, K] x [..., K, N] -> [..., M, N]; transpose_in0/1 swap the last
    two dims of an operand first; batch dims broadcast after right-aligning
    the ranks, as in numpy.matmul."""
    a, b = call.min_rank(0, 2), call.min_rank(1, 2)
    t0, t1 = call.flag("transpose_in0"), call.flag("transpose_in1")
    m, k0 = (a.shape[-1], a.shape[-2]) if t0 else (a.shape[-2], a.shape[-1])
    k1, n = (b.shape[-1], b.shape[-2]) if t1 else (b.shape[-2], b.shape[-1])
    if k0 != k1:
        note0 = " (transpose_in0 set)" if t0 else ""
        note1 = " (transpose_in1 set)" if t1 else ""
        raise call.fail(
            f"inner dimensions differ: in[0] {fmt(a.shape)}{note0} contracts over {k0} "
            f"but in[1] {fmt(b.shape)}{note1} over {k1}"
        )
    batch = broadcast_shapes(call, [("batch dims of in[0]", a.shape[:-2]), ("batch dims of in[1]", b.shape[:-2])])
    _bias(call, 2, n)
    return [Sig(batch + (m, n), a.dtype)]


def _fully_connected(call: Call) -> list[Sig]:
    """in[1] is [m, n]: in[0] is flattened to [batch, n] (or keeps its leading
    dims with keep_dims) and the output has m features."""
    x = call.inp(0)
    w = call.exact_rank(1, 2, "[units, features]")
    m, n = w.shape
    keep = call.flag("keep_dims")
    if x.rank == 0:
        raise call.fail("in[0] must have rank >= 1")
    if x.rank == 1 or keep:
        if x.shape[-1] != n:
            raise call.fail(f"last dimension of in[0] {fmt(x.shape)} is {x.shape[-1]} but weights in[1] {fmt(w.shape)} expect {n} features")
        out = (m,) if x.rank == 1 else x.shape[:-1] + (m,)
    else:
        if n == 0 or x.size % n:
            raise call.fail(f"in[0] {fmt(x.shape)} ({x.size} elements) cannot be reshaped to [batch, {n}] for weights in[1] {fmt(w.shape)}")
        out = (x.size // n, m)
    _bias(call, 2, m)
    return [Sig(out, x.dtype)]


def _lstm(call: Call) -> list[Sig]:
    """All eight outputs, mandatory first: the sequence output, the cell and
    hidden states, then the optional per-gate/state results. Callers that
    declare fewer outputs use the leading ones."""
    x = call.inp(0)
    if x.rank not in (2, 3):
        raise call.fail(f"in[0] must have rank 2 or 3, got {fmt(x.shape)}")
    time_major = call.flag("time_major", True)
    w_in = call.exact_rank(1, 2, "[num_units, input_size]")
    w_rec = call.exact_rank(4, 2, "[num_units, output_size]")
    units, input_size = w_in.shape
    if x.shape[-1] != input_size:
        raise call.fail(f"input size of in[0] {fmt(x.shape)} is {x.shape[-1]} but input weights in[1] {fmt(w_in.shape)} expect {input_size}")
    if w_rec.shape[0] != units:
        raise call.fail(f"recurrent weights in[4] {fmt(w_rec.shape)} must have {units} rows like in[1] {fmt(w_in.shape)}")
    out_size = w_rec.shape[1]
    batch = x.shape[1] if x.rank == 3 and time_major else x.shape[0]
    seq = x.shape[:-1] + (out_size,)
    cell, hidden = (batch, units), (batch, out_size)
    shapes = [seq, cell, hidden, cell, cell, cell, hidden, hidden]
    return [Sig(s, x.dtype) for s in shapes]


def _gru(call: Call) -> list[Sig]:
    """Sequence output and final hidden state [1, batch, hidden]."""
    x = call.exact_rank(0, 3)
    time_major = call.flag("time_major", True)
    w = call.exact_rank(1, 2, "[hidden_size, input_size]")
    hidden, input_size = w.shape
    if x.shape[-1] != input_size:
        raise call.fail(f"input size of in[0] {fmt(x.shape)} is {x.shape[-1]} but weights in[1] {fmt(w.shape)} expect {input_size}")
    batch = x.shape[1] if time_major else x.shape[0]
    return [Sig(x.shape[:2] + (hidden,), x.dtype), Sig((1, batch, hidden), x.dtype)]


RULES: dict[str, Rule] = {
    "MatMul": _matmul,
    "FullyConnected": _fully_connected,
    "Lstm": _lstm,
    "Gru": _gru,
}
