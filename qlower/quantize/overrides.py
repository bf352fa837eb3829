"""Encodings in AIMET's JSON format (`qlower.graph.encodings`), both ways: an overrides file in
(`--quantization-overrides`: keep a tensor float, give it a bitwidth, or impose a full encoding, as
QNN's converter takes them; `excluded_layers` keep those ops float), and a quantized graph's
encodings out (`--export-encodings`), which QNN's converter and AIMET read."""

from __future__ import annotations

from pathlib import Path

import attrs
import numpy as np

from qlower.diagnostics import QlowerError, error
from qlower.graph.core import Graph
from qlower.graph.encodings import EncodingSet, TensorEncoding, read_encodings, write_encodings
from qlower.quantize.options import Overrides


def read_overrides(path: Path) -> Overrides:
    """An AIMET-format file as overrides: `dtype: float` entries and `excluded_layers` keep float; an
    entry with scales is imposed as it is; one with only a bitwidth sets that bitwidth."""
    es = read_encodings(path)
    keep, bits, exact = set(es.excluded_layers), {}, {}
    for name, e in es.entries.items():
        if e.is_float:
            keep.add(name)
        elif e.scale:
            exact[name] = e
        else:
            bits[name] = e.bitwidth
    return Overrides(keep_float=keep, bitwidth=bits, encodings=exact)


def encoding_set(graph: Graph) -> EncodingSet:
    """Every quantized tensor's encoding: activations on their unsigned grid, weights and biases
    (constants) on their signed or unsigned storage's."""
    entries = {}
    for v in graph.values:
        if v.quant is None:
            continue
        signed = v.dtype.kind == "i"
        q = v.quant
        if q.block_size is not None and q.axis is not None and v.shape is not None:
            # the file keeps one offset per channel (a block's is its channel's): ours are uniform per channel
            blocks = len(q.scale) // v.shape[q.axis]
            q = attrs.evolve(q, zero_point=q.zero_point[::blocks])
        try:
            entries[v.name] = TensorEncoding.from_quant(v.name, q, signed=signed, bitwidth=v.dtype.itemsize * 8,
                                                        role="param" if v.is_const else "activation")
        except ValueError as exc:
            raise QlowerError(error(f"cannot export the encoding: {exc}", subject=f"tensor {v.name}",
                                    code="encodings")) from None
    return EncodingSet(entries)


def export_encodings(graph: Graph, path: Path) -> None:
    write_encodings(path, encoding_set(graph))


def imposed(e: TensorEncoding, dtype: np.dtype, axis: int | None = None, block_axis: int | None = None,
            shape: tuple[int, ...] | None = None):
    """An overrides entry as the Quant of storage `dtype`, checked against the tensor's shape."""
    try:
        q = e.quant(signed=np.dtype(dtype).kind == "i", axis=axis, block_axis=block_axis, shape=shape)
        if q.block_size is not None and len(q.zero_point) != len(q.scale):  # one per channel → one per block
            blocks = len(q.scale) // max(1, len(q.zero_point))
            q = attrs.evolve(q, zero_point=np.repeat(q.zero_point, blocks))
        return q
    except ValueError as exc:
        raise QlowerError(error(f"quantization overrides: {exc}", subject=f"tensor {e.name}",
                                code="overrides")) from None
