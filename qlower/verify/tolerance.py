"""How far a lowered tensor may be from the source semantics, by precision.

One bound per compared tensor: |lowered − source| ≤ atol + rtol·peak + steps·scale,
where `peak` is the tensor's largest |source value| and `scale` its quantization
step (0 for float tensors). The precision class of the lowered tensor picks the
defaults:

  float32    atol 1e-5, rtol 1e-4   tight: only kernel rounding differs
  float16    atol 1e-4, rtol 1e-2   relative to the tensor's range (HTP's float path)
  quantized  4·2^(b−8) steps        four steps of an 8-bit grid over the encoding's
                                    range, whatever its bit width b (4 for 8 bits,
                                    1024 for 16 bits)
  exact      0                      integer and boolean tensors without an encoding

A float tensor computed from quantized activations (a Dequantize's output, and
float ops after it) is judged in steps of the coarsest encoding it derives from.

`--atol`/`--rtol` replace the float defaults, `--steps` the quantized one.
The same bound serves the per-op (local) and the whole-graph (cumulative) check,
so "locally within, cumulatively beyond" means accumulated drift.
"""

from __future__ import annotations

import attrs
import numpy as np

from qlower.qnn.datatypes import DataType
from qlower.qnn.model import QnnTensor

FLOAT32, FLOAT16, QUANTIZED, EXACT = "float32", "float16", "quantized", "exact"


@attrs.frozen
class Tolerance:
    """The bound for one tensor; `kind` is its precision class."""

    kind: str
    atol: float = 0.0
    rtol: float = 0.0
    steps: float = 0.0
    scale: float = 0.0  # quantization step of the tensor's encoding (largest, if per axis)

    def bound(self, peak: float) -> float:
        return self.atol + self.rtol * peak + self.steps * self.scale

    def describe(self) -> str:
        if self.kind == QUANTIZED:
            return f"{self.steps:g} steps ({self.steps * self.scale:.3g})"
        if self.kind == EXACT:
            return "exact" if not (self.atol or self.rtol) else f"atol {self.atol:g}"
        return f"atol {self.atol:g} + rtol {self.rtol:g}·peak"

    def to_json(self) -> dict:
        return {"kind": self.kind, "atol": self.atol, "rtol": self.rtol, "steps": self.steps, "scale": self.scale}


@attrs.frozen
class TolerancePolicy:
    """Default bounds per precision class, with the user's overrides (None: the default)."""

    atol: float | None = None
    rtol: float | None = None
    steps: float | None = None

    def for_tensor(self, tensor: QnnTensor, *, float16_graph: bool,
                   quantized_origin: QnnTensor | None = None) -> Tolerance:
        """The bound for a lowered tensor. Float32 tensors of a float16 graph (its I/O behind
        casts) carry float16 computation and get the float16 bound; float tensors computed
        from quantized activations (`quantized_origin`, e.g. a Dequantize's input) get the
        bound of that encoding."""
        enc = tensor.encoding
        if not (tensor.datatype.is_fixed_point and enc is not None and enc.scales) and quantized_origin is not None:
            tensor, enc = quantized_origin, quantized_origin.encoding
        if tensor.datatype.is_fixed_point and enc is not None and enc.scales:
            bits = enc.bitwidth or tensor.datatype.bitwidth
            steps = self.steps if self.steps is not None else 4.0 * 2.0 ** (bits - 8)
            return Tolerance(QUANTIZED, steps=steps, scale=float(np.max(np.abs(enc.scales))))
        if tensor.datatype in (DataType.FLOAT_16, DataType.BFLOAT_16) or (
                tensor.datatype == DataType.FLOAT_32 and float16_graph):
            return Tolerance(FLOAT16, self._pick(self.atol, 1e-4), self._pick(self.rtol, 1e-2))
        if tensor.datatype.is_float:
            return self.float32()
        return Tolerance(EXACT, self._pick(self.atol, 0.0), self._pick(self.rtol, 0.0))

    def float32(self) -> Tolerance:
        return Tolerance(FLOAT32, self._pick(self.atol, 1e-5), self._pick(self.rtol, 1e-4))

    @staticmethod
    def _pick(given: float | None, default: float) -> float:
        return default if given is None else float(given)

    def to_json(self) -> dict:
        return {"atol": self.atol, "rtol": self.rtol, "steps": self.steps}


def is_float16_graph(tensors) -> bool:
    """Whether the lowered graph computes in float16 (HTP's float path)."""
    return any(t.datatype == DataType.FLOAT_16 for t in tensors)
