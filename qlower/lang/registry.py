"""What the rule checker needs to know about target (QNN) ops.

The checker depends on this small Protocol rather than on the OpDef loader so
it can run against the real registry (`qlower.qnn.opdef.OpDefRegistry`), a
custom-op registry, or `MinimalRegistry` in tests and when the real one cannot
be loaded.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

import attrs


class DatatypeLike(Protocol):
    """A QNN datatype; only its name (`BOOL_8`, `UINT_32`, `FLOAT_32`...) matters here."""

    @property
    def name(self) -> str: ...


class TargetParam(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def mandatory(self) -> bool: ...

    @property
    def datatype(self) -> DatatypeLike | None: ...  # None: backend specific

    @property
    def rank(self) -> str: ...  # "SCALAR", "0D".."5D" or "ND"

    @property
    def default(self) -> str | None: ...

    @property
    def enum(self) -> tuple[str, ...] | None: ...  # names in value order


class TargetOp(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def params(self) -> Sequence[TargetParam]: ...

    def input_count_range(self) -> tuple[int, int | None]: ...

    def output_count_range(self) -> tuple[int, int | None]: ...


class TargetRegistry(Protocol):
    """Op definitions by target op name, without the dialect prefix (`qnn.`)."""

    @property
    def dialect(self) -> str: ...  # the dialect target ops are written in: `qnn` for `qnn.MatMul`

    def op(self, name: str) -> TargetOp | None: ...

    def names(self) -> Iterable[str]: ...


# ------------------------------------------------------------ a tiny registry


@attrs.frozen
class Datatype:
    name: str


@attrs.frozen
class MinimalParam:
    name: str
    mandatory: bool
    datatype: Datatype | None
    rank: str = "SCALAR"
    default: str | None = None
    enum: tuple[str, ...] | None = None


@attrs.frozen
class MinimalOp:
    name: str
    inputs: tuple[int, int | None]
    outputs: tuple[int, int | None] = (1, 1)
    params: tuple[MinimalParam, ...] = ()

    def input_count_range(self) -> tuple[int, int | None]:
        return self.inputs

    def output_count_range(self) -> tuple[int, int | None]:
        return self.outputs


_BOOL, _U32 = Datatype("BOOL_8"), Datatype("UINT_32")


def _minimal_ops() -> tuple[MinimalOp, ...]:
    return (
        MinimalOp("Reshape", (1, 2)),
        MinimalOp("Tile", (1, 1), params=(MinimalParam("multiples", True, _U32, "1D"),)),
        MinimalOp("MatMul", (2, 3), params=(
            MinimalParam("transpose_in0", False, _BOOL, default="false"),
            MinimalParam("transpose_in1", False, _BOOL, default="false"))),
        MinimalOp("Sigmoid", (1, 1)),
        MinimalOp("ElementWiseMultiply", (2, 2)),
        MinimalOp("ElementWiseAdd", (2, 2)),
        MinimalOp("Transpose", (1, 1), params=(MinimalParam("perm", True, _U32, "1D"),)),
        MinimalOp("Concat", (1, None), params=(MinimalParam("axis", False, _U32, default="N-1"),)),
        MinimalOp("Pad", (1, 1), params=(
            MinimalParam("scheme", True, _U32, enum=("CONSTANT", "MIRROR_SYMMETRIC", "MIRROR_REFLECT", "EDGE")),
            MinimalParam("pad_amount", True, _U32, "2D"))),
    )


@attrs.frozen
class MinimalRegistry:
    """A handful of QNN ops (for tests, and a fallback when the OpDef XML cannot load)."""

    ops: tuple[MinimalOp, ...] = attrs.field(factory=_minimal_ops)
    dialect: str = "qnn"

    def op(self, name: str) -> MinimalOp | None:
        return next((o for o in self.ops if o.name == name), None)

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(o.name for o in self.ops))


def default_registry() -> TargetRegistry:
    """The shipped QNN op definitions; MinimalRegistry only when the OpDef module is unavailable."""
    try:
        from qlower.qnn.opdef import OpDefRegistry
    except ImportError:
        return MinimalRegistry()
    return OpDefRegistry.load()
