"""The QNN data model: what a QNN graph is, independent of how it was made.

Mirrors the QNN C API (Qnn_Tensor_t, Qnn_Param_t, Qnn_OpConfig_t) closely
enough that the converter's `_net.json`/`.cpp`/`.bin` artifacts can be written
from it and read back into it without loss.
"""

from __future__ import annotations

import enum
from typing import Any

import attrs
import numpy as np

from qlower._frozen import Frozen, frozen_floats, frozen_ints, frozen_rows
from qlower.qnn.datatypes import DataType

PACKAGE = "qti.aisw"


class TensorType(enum.IntEnum):
    """Qnn_TensorType_t codes (QNN_TENSOR_TYPE_*)."""

    APP_WRITE = 0
    APP_READ = 1
    APP_READWRITE = 2
    NATIVE = 3
    STATIC = 4
    NULL = 5


class EncodingKind(enum.IntEnum):
    """Qnn_QuantizationEncoding_t codes used by qlower."""

    SCALE_OFFSET = 0
    AXIS_SCALE_OFFSET = 1
    BW_SCALE_OFFSET = 2
    BW_AXIS_SCALE_OFFSET = 3
    BLOCKWISE_EXPANSION = 5
    UNDEFINED = 0x7FFFFFFF


@attrs.frozen
class QuantEncoding:
    """A QNN quantization encoding: real = scale * (q + offset).

    `offsets` are QNN offsets, i.e. the negated zero points. Per-tensor kinds
    hold one scale/offset; axis kinds one per channel along `axis`.
    BLOCKWISE_EXPANSION keeps per-channel float scales plus integer per-block
    scales (`block_scales`, shape [channels, num_blocks_per_axis]) of
    `block_scale_bitwidth` bits; the effective scale of a block is
    channel_scale * block_scale.

    The numbers are read-only numpy arrays (`qlower._frozen.Frozen`: float64 scales, int64 offsets,
    2-D int64 block scales) that behave as the tuples they replace; two encodings are equal when their
    numbers have the same bits, as `qlower.qnn.keys.encoding_key` keys them.
    """

    kind: EncodingKind
    scales: Frozen = attrs.field(converter=frozen_floats)
    offsets: Frozen = attrs.field(converter=frozen_ints)
    axis: int | None = None
    bitwidth: int | None = None
    num_blocks_per_axis: int | None = None
    block_scale_bitwidth: int | None = None
    block_scales: Frozen | tuple[tuple[int, ...], ...] | None = attrs.field(
        default=None, converter=lambda v: None if v is None else frozen_rows(v))  # ragged: tuples, for checks

    @property
    def per_axis(self) -> bool:
        return self.kind in (EncodingKind.AXIS_SCALE_OFFSET, EncodingKind.BW_AXIS_SCALE_OFFSET,
                             EncodingKind.BLOCKWISE_EXPANSION)

    @classmethod
    def from_zero_point(cls, scale: Any, zero_point: Any, *, axis: int | None = None,
                        bitwidth: int | None = None) -> QuantEncoding:
        """Framework (scale, zero_point) to QNN: offset = -zero_point."""
        scales = frozen_floats(scale)
        offsets = frozen_ints(-frozen_ints(zero_point).array)
        if axis is None:
            kind = EncodingKind.BW_SCALE_OFFSET if bitwidth is not None else EncodingKind.SCALE_OFFSET
        else:
            kind = EncodingKind.BW_AXIS_SCALE_OFFSET if bitwidth is not None else EncodingKind.AXIS_SCALE_OFFSET
        return cls(kind, scales, offsets, axis=axis, bitwidth=bitwidth)


@attrs.define(eq=False, on_setattr=attrs.setters.NO_OP)
class QnnTensor:
    """One Qnn_Tensor_t. `data` is set for STATIC tensors only (numpy, storage dtype).

    `dims` is made a tuple when the tensor is built; assigning it later does not convert (a graph
    holds a million of these, and a converting `__setattr__` made building one three times dearer)."""

    name: str
    type: TensorType
    datatype: DataType
    dims: tuple[int, ...] = attrs.field(converter=tuple)
    encoding: QuantEncoding | None = None
    data: np.ndarray | None = None

    def same_as(self, other: QnnTensor) -> bool:
        """Structural equality, comparing static data by value."""
        if (self.name, self.type, self.datatype, self.dims, self.encoding) != (
            other.name, other.type, other.datatype, other.dims, other.encoding
        ):
            return False
        if (self.data is None) != (other.data is None):
            return False
        return self.data is None or (
            self.data.dtype == other.data.dtype and np.array_equal(self.data, other.data)
        )


@attrs.frozen
class ScalarParam:
    name: str
    datatype: DataType
    value: bool | int | float | str


@attrs.define(eq=False)
class TensorParam:
    """A tensor-valued param; its tensor is STATIC with data."""

    name: str
    tensor: QnnTensor


Param = ScalarParam | TensorParam


@attrs.frozen
class Origin:
    """Where a QNN op came from, as `_net.json` records it (see docs/artifacts.md).

    `rule` is None for an op that was already a QNN op in the input graph;
    `location` is the rule's `folder/file.qpat:line` (no machine paths, so
    artifacts do not depend on where qlower or the rules are installed);
    `sources` are the input graph's node names.
    """

    rule: str | None
    location: str | None
    sources: tuple[str, ...] = attrs.field(default=(), converter=tuple)

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "location": self.location, "source_nodes": list(self.sources)}


@attrs.define(eq=False)
class OpConfig:
    """One Qnn_OpConfig_t. `provenance` (rule and source node) is for messages only;
    `origin` is the same fact in structured form, written to `_net.json`."""

    name: str
    type: str
    inputs: list[str]
    outputs: list[str]
    params: list[Param] = attrs.Factory(list)
    package: str = PACKAGE
    provenance: str | None = None
    origin: Origin | None = None

    def param(self, name: str) -> Param | None:
        for p in self.params:
            if p.name == name:
                return p
        return None


@attrs.define(eq=False)
class QnnGraph:
    """A QNN graph: tensors by name (in creation order) and ops in execution order."""

    name: str
    tensors: dict[str, QnnTensor] = attrs.Factory(dict)
    ops: list[OpConfig] = attrs.Factory(list)
    inputs: list[str] = attrs.Factory(list)
    outputs: list[str] = attrs.Factory(list)

    def add_tensor(self, tensor: QnnTensor) -> QnnTensor:
        if tensor.name in self.tensors:
            raise ValueError(f"duplicate tensor {tensor.name}")
        self.tensors[tensor.name] = tensor
        return tensor
