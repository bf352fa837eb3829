"""Shared by the rewrite tests: rule text loaded through the checker, and a tiny graph builder."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

import numpy as np

from qlower.api import Rules, load_registry, load_rules
from qlower.graph import Graph, Value

_names = itertools.count()


@functools.cache
def registry():
    """The shipped op definitions, loaded once per test session."""
    return load_registry()


def load_text(tmp_path: Path, text: str) -> Rules:
    """Write `text` to a fresh .qpat file and load it (semantic checks included)."""
    p = tmp_path / f"r{next(_names)}.qpat"
    p.write_text(text, encoding="utf-8")
    return load_rules([p], registry=registry(), plugins=False)


class B:
    """A tiny graph builder: values default to float32[2, 3]."""

    def __init__(self) -> None:
        self.g = Graph("t")
        self.inputs: list[Value] = []

    def inp(self, name: str, shape=(2, 3), dtype="float32") -> Value:
        v = self.g.add_value(name, dtype, shape)
        self.inputs.append(v)
        return v

    def const(self, name: str, shape=(2, 3), dtype="float32") -> Value:
        return self.g.add_value(name, dtype, shape, data=np.ones(shape, dtype))

    def op(self, name: str, type: str, operands, attrs=None, *, out=None, n_out=1, shape=None, dtype=None):
        first = next((o for o in operands if o is not None), None)
        shape = shape if shape is not None else (first.shape if first is not None else (2, 3))
        dtype = dtype or (first.dtype if first is not None else "float32")
        names = [out or name] if n_out == 1 else [f"{name}.{i}" for i in range(n_out)]
        results = [self.g.add_value(n, dtype, shape) for n in names]
        self.g.add_op(name, type, operands, results, attrs or {})
        return results[0] if n_out == 1 else results

    def done(self, *outputs: Value) -> Graph:
        self.g.set_io(self.inputs, list(outputs))
        return self.g
