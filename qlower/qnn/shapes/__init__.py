"""Output shape and dtype inference for QNN ops.

`infer(op_type, inputs, params)` returns one `Sig` per output of the op, or
None when no rule applies: either the op is unknown here, or QNN leaves the
output shape to the output tensor itself (Reshape, Resize*, Squeeze without
`axes`). Inconsistent inputs raise `ShapeError` with a message naming the op,
the operands and the mismatch.

Dtypes: outputs keep in[0]'s dtype unless the op definition fixes another one
(comparisons and logic ops give "bool", Argmax/Argmin and TopK indices
"int32", Shape "uint32"). Cast, Convert and Quantize cannot know their target
dtype from their inputs, so they echo in[0]'s dtype and Dequantize says
"float32": callers should state the real output dtype of those ops.
Params absent from `params` take their QNN default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from qlower.qnn.shapes import elementwise, indexing, layout, linalg, reductions, spatial
from qlower.qnn.shapes.core import Call, Rule, ShapeError, Sig
from qlower.qnn.shapes.layout import check_reshape

__all__ = ["Sig", "ShapeError", "infer", "check_reshape", "supported_ops", "canonical_name"]

# Spellings some callers use for the QNN type names Argmax/Argmin/Batchnorm.
_ALIASES = {"ArgMax": "Argmax", "ArgMin": "Argmin", "BatchNorm": "Batchnorm"}

_RULES: Mapping[str, Rule] = MappingProxyType({
    **elementwise.RULES,
    **linalg.RULES,
    **layout.RULES,
    **indexing.RULES,
    **reductions.RULES,
    **spatial.RULES,
})


def supported_ops() -> frozenset[str]:
    """QNN op type names that have a rule (some rules may still answer None)."""
    return frozenset(_RULES)


def canonical_name(op_type: str) -> str:
    """The QNN type name for the spellings some callers use (ArgMax → Argmax)."""
    return _ALIASES.get(op_type, op_type)


def infer(op_type: str, inputs: Sequence[Sig | None], params: Mapping[str, Any]) -> list[Sig] | None:
    """Output signatures of `op_type` applied to `inputs` with `params`."""
    name = canonical_name(op_type)
    rule = _RULES.get(name)
    if rule is None:
        return None
    return rule(Call(op=name, inputs=tuple(inputs), params=dict(params or {})))
