"""Binary elementwise mllm ops, Equal, Where and CastType.

All follow numpy broadcasting. Arithmetic is done on real values (float64),
except that integer operands feeding a plain integer result stay integers
for Add/Sub/Mul so large ids are not rounded. Div is always true division;
an integer Div result is truncated toward zero.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from qlower.reference.mllm._common import finish, inputs_of, real, result_dtype, str_attr
from qlower.reference.spec import Kernel, KernelError, OutSpec


def _broadcast(op: str, *xs: np.ndarray) -> None:
    try:
        np.broadcast_shapes(*(x.shape for x in xs))
    except ValueError:
        shapes = ", ".join(str(list(x.shape)) for x in xs)
        raise KernelError(f"{op}: operand shapes {shapes} do not broadcast") from None


def _integer_path(xs: Sequence[np.ndarray], outs: Sequence[OutSpec]) -> bool:
    """True when exact integer arithmetic is the source semantics."""
    return (len(outs) == 1 and result_dtype(outs[0]).kind in "iu"
            and all(x.dtype.kind in "biu" for x in xs))


def _binary(op: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray], exact_ints: bool) -> Kernel:
    """Builds a broadcasting two-input kernel."""

    def kernel(inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any],
               outs: Sequence[OutSpec]) -> list[np.ndarray]:
        a, b = inputs_of(op, inputs, 2)
        _broadcast(op, a, b)
        if exact_ints and _integer_path((a, b), outs):
            y = fn(a.astype(np.int64), b.astype(np.int64))
        else:
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                y = fn(real(a), real(b))
        return finish(op, [y], outs)

    kernel.__name__ = kernel.__qualname__ = f"mllm_{op}"
    kernel.__doc__ = f"Reference semantics of mllm.{op} (numpy broadcasting)."
    return kernel


def equal(inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any],
          outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """Elementwise a == b, compared without converting (ints vs floats compare by value)."""
    a, b = inputs_of("Equal", inputs, 2)
    _broadcast("Equal", a, b)
    return finish("Equal", [np.equal(a, b)], outs)


def where(inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any],
          outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """Where(cond, a, b): a where cond is non-zero, else b."""
    cond, a, b = inputs_of("Where", inputs, 3)
    _broadcast("Where", cond, a, b)
    if _integer_path((a, b), outs):
        y = np.where(cond.astype(bool), a.astype(np.int64), b.astype(np.int64))
    else:
        y = np.where(cond.astype(bool), real(a), real(b))
    return finish("Where", [y], outs)


def cast_type(inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any],
              outs: Sequence[OutSpec]) -> list[np.ndarray]:
    """CastType {dtype}: source semantics on real values.

    Inputs arrive as real values (quantized tensors already dequantized).
    - quantized target (outs[0].encoding set): the identity on real values;
      the quantization error belongs to the lowered graph, not the source.
    - float target: the value rounded to that float type (e.g. float16),
      returned as float32.
    - integer/bool target: the value converted to that type (floats are
      truncated toward zero, like numpy's astype).
    The `dtype` attribute, when present, must agree with outs[0].dtype.
    """
    (x,) = inputs_of("CastType", inputs, 1)
    if len(outs) != 1:
        raise KernelError(f"CastType: computes 1 result but {len(outs)} OutSpec(s) were given")
    spec = outs[0]
    name = str_attr("CastType", attrs, "dtype", str(spec.dtype))
    try:
        target = np.dtype(name)
    except TypeError:
        raise KernelError(f"CastType: attribute 'dtype' is not a numpy dtype name: {name!r}") from None
    if target != spec.dtype:
        raise KernelError(f"CastType: attribute dtype {target} disagrees with the declared result dtype {spec.dtype}")
    if spec.encoding is not None:
        y = real(x)
    elif target.kind == "f":
        y = np.asarray(x).astype(target)
    elif target.kind in "biu":
        y = np.asarray(x).astype(target)
    else:
        raise KernelError(f"CastType: unsupported target dtype {target}")
    return finish("CastType", [y], outs)


KERNELS: Mapping[str, Kernel] = MappingProxyType({
    "Add": _binary("Add", np.add, exact_ints=True),
    "Sub": _binary("Sub", np.subtract, exact_ints=True),
    "Mul": _binary("Mul", np.multiply, exact_ints=True),
    "Div": _binary("Div", np.divide, exact_ints=False),
    "Equal": equal,
    "Where": where,
    "CastType": cast_type,
})
