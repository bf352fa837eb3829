"""Memory a lowered graph needs: static bytes and peak live activation bytes.

The definition (docs/report.md): a tensor's bytes are its element count times
its QNN datatype's bit width, rounded up to whole bytes. Static bytes sum the
STATIC tensors, graph tensors and tensor params alike. Activations are the
other tensors (NULL placeholders aside); over the steps of `graph.ops` (the
order `_net.json` lists nodes and the `.cpp` adds them), a tensor is live from
the step of the op that produces it (graph inputs: step 0) through the step of
its last consumer (graph outputs: the last step). The peak is the largest sum
of live activation bytes over the steps.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import attrs
import numpy as np

from qlower.qnn.model import QnnGraph, QnnTensor, TensorParam, TensorType


def tensor_bytes(t: QnnTensor) -> int:
    """Bytes of a dense tensor: elements × datatype bits, rounded up to bytes."""
    return (math.prod(int(d) for d in t.dims) * t.datatype.bitwidth + 7) // 8


def static_tensors(graph: QnnGraph) -> Iterator[QnnTensor]:
    """Every STATIC tensor: the graph's, then each op's tensor params."""
    for t in graph.tensors.values():
        if t.type is TensorType.STATIC:
            yield t
    for op in graph.ops:
        for p in op.params:
            if isinstance(p, TensorParam):
                yield p.tensor


@attrs.frozen
class MemoryReport:
    """The figures `qlower lower --report` writes under `"memory"`."""

    static_bytes: int
    static_bytes_by_datatype: dict[str, int]
    peak_activation_bytes: int
    peak_step: int | None  # index into graph.ops; None for a graph without ops
    peak_node: str | None
    live_bytes: tuple[int, ...] = attrs.field(repr=False)  # summed live activation bytes per step

    def to_json(self) -> dict[str, object]:
        return {"static_bytes": self.static_bytes, "static_bytes_by_datatype": dict(self.static_bytes_by_datatype),
                "peak_activation_bytes": self.peak_activation_bytes, "peak_node": self.peak_node,
                "peak_step": self.peak_step, "steps": len(self.live_bytes)}


def live_intervals(graph: QnnGraph) -> dict[str, tuple[int, int]]:
    """Activation tensor -> (first, last) step it is live, by the module's definition."""
    n = len(graph.ops)
    last = n - 1
    start: dict[str, int] = {name: 0 for name in graph.inputs}
    end: dict[str, int] = {}
    for step, op in enumerate(graph.ops):
        for name in op.outputs:
            start.setdefault(name, step)
        for name in op.inputs:
            start.setdefault(name, 0)  # read but never produced: there from the start
            end[name] = step
    for name in graph.outputs:
        end[name] = last
    out: dict[str, tuple[int, int]] = {}
    tensors = graph.tensors
    for name, s in start.items():
        t = tensors.get(name)
        if t is None or t.type in (TensorType.STATIC, TensorType.NULL) or n == 0:
            continue
        out[name] = (s, max(s, end.get(name, s)))
    return out


def memory_report(graph: QnnGraph) -> MemoryReport:
    """Static and peak activation bytes of `graph` (see the module docstring)."""
    by_type: dict[str, int] = {}
    for t in static_tensors(graph):
        key = t.datatype.name
        by_type[key] = by_type.get(key, 0) + tensor_bytes(t)
    n = len(graph.ops)
    diff = np.zeros(n + 1, dtype=np.int64)
    for name, (s, e) in live_intervals(graph).items():
        b = tensor_bytes(graph.tensors[name])
        diff[s] += b
        diff[e + 1] -= b
    live = np.cumsum(diff[:n]) if n else np.zeros(0, dtype=np.int64)
    step = int(np.argmax(live)) if n else None
    return MemoryReport(
        static_bytes=sum(by_type.values()),
        static_bytes_by_datatype=dict(sorted(by_type.items())),
        peak_activation_bytes=int(live[step]) if step is not None else 0,
        peak_step=step, peak_node=graph.ops[step].name if step is not None else None,
        live_bytes=tuple(int(x) for x in live))


def human_bytes(n: int) -> str:
    """`950 B`, `12.5 KiB`, `3.1 MiB`, `1.2 GiB`."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
