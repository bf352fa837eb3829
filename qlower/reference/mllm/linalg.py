"""Contracting mllm ops: MatMul, Linear and Conv2D (NCHW, PyTorch weights)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from qlower.reference.mllm._common import bool_attr, finish, inputs_of, int_attr, ints_attr, real
from qlower.reference.spec import Kernel, KernelError, OutSpec

_Inputs = Sequence["np.ndarray | None"]
_Attrs = Mapping[str, Any]


def matmul(inputs: _Inputs, attrs: _Attrs, outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """MatMul(a, b) {transpose_a, transpose_b}: batched over the last two dims, batch dims broadcast."""
    a, b = (real(v) for v in inputs_of("MatMul", inputs, 2))
    if a.ndim < 2 or b.ndim < 2:
        raise KernelError(f"MatMul: operands need rank >= 2, got {list(a.shape)} and {list(b.shape)}")
    if bool_attr("MatMul", attrs, "transpose_a", False):
        a = np.swapaxes(a, -1, -2)
    if bool_attr("MatMul", attrs, "transpose_b", False):
        b = np.swapaxes(b, -1, -2)
    if a.shape[-1] != b.shape[-2]:
        raise KernelError(f"MatMul: contracted extents differ: {list(a.shape)} @ {list(b.shape)} "
                          "(after transpose flags)")
    try:
        np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise KernelError(f"MatMul: batch dims {list(a.shape[:-2])} and {list(b.shape[:-2])} "
                          "do not broadcast") from None
    return finish("MatMul", [a @ b], outs)


def linear(inputs: _Inputs, attrs: _Attrs, outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """Linear(x, weight[, bias]): x @ weight.T + bias with weight [out, in]."""
    x, w, b = inputs_of("Linear", inputs, 2, 1)
    x, w = real(x), real(w)
    if w.ndim != 2 or x.ndim < 1 or x.shape[-1] != w.shape[1]:
        raise KernelError(f"Linear: weight must be [out, in] matching x's last dim; got x "
                          f"{list(x.shape)}, weight {list(w.shape)}")
    y = x @ w.T
    if b is not None:
        if b.shape != (w.shape[0],):
            raise KernelError(f"Linear: bias must be [{w.shape[0]}], got {list(b.shape)}")
        y = y + real(b)
    return finish("Linear", [y], outs)


def _pair(attrs: _Attrs, name: str, default: tuple[int, int], least: int) -> tuple[int, int]:
    """A 2-D conv attribute given as [h, w] or one int for both."""
    h, w = ints_attr("Conv2D", attrs, name, list(default), length=2, scalar_ok=True)
    if h < least or w < least:
        raise KernelError(f"Conv2D: attribute '{name}' entries must be >= {least}, got {[h, w]}")
    return h, w


def conv2d(inputs: _Inputs, attrs: _Attrs, outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """Conv2D(x, weight[, bias]) {stride, padding, dilation, groups}.

    x [N, C, H, W], weight [Cout, C/groups, kh, kw], bias [Cout]; padding is
    symmetric (ph rows above and below, pw columns left and right). Computed
    as im2col: one strided window per kernel tap, contracted per group.
    """
    x, w, b = inputs_of("Conv2D", inputs, 2, 1)
    x, w = real(x), real(w)
    sh, sw = _pair(attrs, "stride", (1, 1), 1)
    ph, pw = _pair(attrs, "padding", (0, 0), 0)
    dh, dw = _pair(attrs, "dilation", (1, 1), 1)
    groups = int_attr("Conv2D", attrs, "groups", 1)
    if x.ndim != 4 or w.ndim != 4:
        raise KernelError(f"Conv2D: x must be NCHW and weight [Cout, Cin/groups, kh, kw]; got "
                          f"{list(x.shape)} and {list(w.shape)}")
    n, c, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    if groups < 1 or c % groups or cout % groups or cin_g != c // groups:
        raise KernelError(f"Conv2D: groups={groups} does not fit {c} input channels, {cout} output "
                          f"channels and weight {list(w.shape)}")
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise KernelError(f"Conv2D: the dilated kernel does not fit the padded input "
                          f"({h}x{wd} + padding {[ph, pw]}, kernel {kh}x{kw}, dilation {[dh, dw]})")
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    cols = np.empty((n, c, kh, kw, oh, ow))
    for i in range(kh):
        for j in range(kw):
            r0, c0 = i * dh, j * dw
            cols[:, :, i, j] = xp[:, :, r0:r0 + sh * (oh - 1) + 1:sh, c0:c0 + sw * (ow - 1) + 1:sw]
    cols = cols.reshape(n, groups, cin_g, kh, kw, oh, ow)
    wg = w.reshape(groups, cout // groups, cin_g, kh, kw)
    y = np.einsum("ngcijhw,gocij->ngohw", cols, wg).reshape(n, cout, oh, ow)
    if b is not None:
        if b.shape != (cout,):
            raise KernelError(f"Conv2D: bias must be [{cout}], got {list(b.shape)}")
        y = y + real(b)[None, :, None, None]
    return finish("Conv2D", [y], outs)


KERNELS: Mapping[str, Kernel] = MappingProxyType({
    "MatMul": matmul,
    "Linear": linear,
    "Conv2D": conv2d,
})
