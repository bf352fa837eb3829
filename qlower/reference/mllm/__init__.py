"""Reference kernels for the mllm dialect, keyed by op name without the
dialect prefix ("MatMul", "Repeat", "VisionRoPE", ...).

Kernels compute source semantics on real values: quantized operands arrive
dequantized, and float or quantized results come back as float32 (integer
and bool results in their declared dtype).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from qlower.reference.mllm import activations, arith, linalg, norm, rotary, shape
from qlower.reference.mllm.shape import SLICE_END
from qlower.reference.spec import Kernel


def _merge(*tables: Mapping[str, Kernel]) -> Mapping[str, Kernel]:
    """One read-only table; a name defined by two families is a bug."""
    merged: dict[str, Kernel] = {}
    for table in tables:
        clash = merged.keys() & table.keys()
        if clash:
            raise RuntimeError(f"mllm kernels defined twice: {sorted(clash)}")
        merged.update(table)
    return MappingProxyType(merged)


MLLM_KERNELS: Mapping[str, Kernel] = _merge(
    activations.KERNELS, arith.KERNELS, shape.KERNELS, linalg.KERNELS, norm.KERNELS, rotary.KERNELS,
)

__all__ = ["MLLM_KERNELS", "SLICE_END"]
