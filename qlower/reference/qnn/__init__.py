"""numpy reference kernels for QNN ops, keyed by QNN op type (no package prefix).

Every kernel in QNN_KERNELS computes on real values: the interpreter
dequantizes quantized inputs first and requantizes quantized outputs after, so
a kernel returns real (float) values for an output with an encoding and values
of the declared dtype otherwise. The kernels in RAW_IO_OPS (Quantize,
Dequantize, Convert, Cast) are the exception: they move between stored and
real values themselves and take the keyword-only `in_specs` (see `convert`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from qlower.reference.qnn import (
    activation, conv, convert, elementwise, index, linalg, norm, pool, reduce, resize, sample, shape, space,
)
from qlower.qnn.opdef import OpDefRegistry
from qlower.qnn.registry import QnnOps, ShapeFn
from qlower.reference.spec import Kernel

_FAMILIES: tuple[Mapping[str, Kernel], ...] = (
    elementwise.KERNELS, activation.KERNELS, linalg.KERNELS, shape.KERNELS, space.KERNELS,
    index.KERNELS, reduce.KERNELS, norm.KERNELS, conv.KERNELS, pool.KERNELS, resize.KERNELS, sample.KERNELS,
    convert.RAW_KERNELS,  # type: ignore[arg-type]  # called with in_specs, see RAW_IO_OPS
)


def _merge(families: tuple[Mapping[str, Kernel], ...]) -> Mapping[str, Kernel]:
    merged: dict[str, Kernel] = {}
    for fam in families:
        for op, fn in fam.items():
            if op in merged:
                raise RuntimeError(f"two reference kernels for QNN op {op}")
            merged[op] = fn
    return MappingProxyType(dict(sorted(merged.items())))


QNN_KERNELS: Mapping[str, Kernel] = _merge(_FAMILIES)

# Ops whose kernels see stored values and input encodings (keyword `in_specs`).
RAW_IO_OPS: frozenset[str] = frozenset(convert.RAW_KERNELS)

__all__ = ["QNN_KERNELS", "RAW_IO_OPS", "qnn_ops"]


def qnn_ops(opdefs: OpDefRegistry | None = None, *, kernels: Mapping[str, Kernel] | None = None,
            shape_fns: Mapping[str, ShapeFn] | None = None) -> QnnOps:
    """The QNN op registry with the reference kernels: assembled here because qnn may not import reference.

    `kernels` and `shape_fns` add custom ops' (a plugin's, by op type name); a kernel for an op that
    has a built-in one is an error, as merging plugins reports it, never a silent override."""
    extra = {n: k for n, k in (kernels or {}).items() if QNN_KERNELS.get(n) is not k}  # QNN's own come along
    return QnnOps.build(opdefs, QNN_KERNELS, RAW_IO_OPS, shape_fns, extra)
