"""One entry per QNN op: its definition, constraints, shape rule and reference kernel.

Four tables describe a QNN op, each keyed by the op's type name: the OpDef XML
(``OpDefRegistry``), the constraints files (held by the same registry), the
shape rules (``qnn.shapes``) and the numpy reference kernels
(``reference.qnn``). `QnnOps` joins them so a caller asks one place, and so a
test can list what is missing.

Custom op packages (OpDef XML a user or plugin adds) are entries too: an op of
another package is found by name when no QNN op has that name, as
``OpDefRegistry.op`` finds it, and its entry says its package. A plugin may bring
the op's shape function and reference kernel (``qlower.plugins.Plugin.shapes``
and ``kernels["qnn"]``); they join here, next to the built-in ones.

Layering: this module is in ``qnn`` and must not import ``reference`` (a higher
layer). Kernels therefore come in as a plain name → kernel table passed to
`QnnOps.build`; ``qlower.reference.qnn.qnn_ops()`` is where the full registry,
kernels included, is assembled. A `QnnOps` built here without kernels answers
``kernel=None`` for every op.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs

from qlower.qnn import shapes
from qlower.qnn.constraints import Check
from qlower.qnn.opdef import QNN_PACKAGE, OpDef, OpDefRegistry, OpSupplement, ParamDef
from qlower.qnn.shapes import ShapeError, Sig

__all__ = ["OpEntry", "QnnOps", "ShapeFn", "ShapeError", "Sig"]

# shape_fn(inputs, params) -> one Sig per output, or None when QNN leaves the shape to the output tensor
ShapeFn = Callable[[Sequence[Sig | None], Mapping[str, Any]], "list[Sig] | None"]


@attrs.frozen
class OpEntry:
    """Everything qlower knows about one QNN op; a None field is a gap the coverage test lists."""

    name: str
    definition: OpDef | None
    shape_fn: ShapeFn | None
    kernel: Callable[..., Any] | None
    raw_io: bool = False  # the kernel sees stored values and takes `in_specs` (Quantize, Cast, ...)
    opdefs: OpDefRegistry | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def package(self) -> str | None:
        """The op package that defines the op (``qti.aisw`` for QNN's own); None without a definition."""
        return self.definition.package if self.definition is not None else None

    def param(self, name: str) -> ParamDef | None:
        """The definition of param `name`; None when the op has no definition or no such param."""
        return self.definition.param(name) if self.definition is not None else None

    def supported(self, backend: str) -> bool:
        """Whether `backend` runs the op (its supplement lists it, or its package runs anywhere)."""
        if self.opdefs is None or self.definition is None:
            return False
        return self.opdefs.supported(self.name, backend, self.definition.package)

    def supplement(self, backend: str) -> OpSupplement | None:
        """The op's datatype rows and static-input rules on `backend`."""
        if self.opdefs is None or self.definition is None:
            return None
        return self.opdefs.supplement(self.name, backend, self.definition.package)

    def checks(self, backend: str) -> tuple[Check, ...]:
        """The structured constraints of this op on `backend` (master ones included)."""
        if self.opdefs is None or self.definition is None:
            return ()
        return self.opdefs.checks(self.name, backend, self.definition.package)

    def infer(self, inputs: Sequence[Sig | None], params: Mapping[str, Any]) -> list[Sig] | None:
        """Output signatures, None when there is no shape rule or it leaves the shape open."""
        return None if self.shape_fn is None else self.shape_fn(inputs, params)


def _builtin_shape_fn(name: str) -> ShapeFn:
    def infer(inputs: Sequence[Sig | None], params: Mapping[str, Any]) -> list[Sig] | None:
        return shapes.infer(name, inputs, params)
    infer.__name__ = f"infer_{name}"
    return infer


@attrs.frozen
class QnnOps:
    """The QNN op registry: `get(name)` gives the op's `OpEntry`, `names()` every op known to any table."""

    entries: Mapping[str, OpEntry] = attrs.field(converter=lambda m: MappingProxyType(dict(sorted(m.items()))),
                                                 hash=False)
    opdefs: OpDefRegistry = attrs.field(hash=False, repr=False)

    @classmethod
    def build(cls, opdefs: OpDefRegistry | None = None, kernels: Mapping[str, Callable[..., Any]] | None = None,
              raw_io: frozenset[str] = frozenset(), shape_fns: Mapping[str, ShapeFn] | None = None,
              package_kernels: Mapping[str, Callable[..., Any]] | None = None) -> QnnOps:
        """Join the OpDefs (QNN's and any op package's), the shape rules and `kernels` (by op type name).

        The shape rules and `kernels` are QNN's ops' (qlower's own): they never serve an op package's
        op that happens to share a name. `shape_fns` and `package_kernels` are custom ops' (a
        plugin's); one for an op that has a built-in one is an error, never a silent override."""
        opdefs = opdefs if opdefs is not None else OpDefRegistry.load()
        kernels = kernels or {}
        shape_fns = shape_fns or {}
        package_kernels = package_kernels or {}
        rules = shapes.supported_ops()
        clash = sorted((set(shape_fns) & rules) | (set(package_kernels) & set(kernels)))
        if clash:
            raise ValueError(f"custom shape functions or kernels for ops that have built-in ones: {', '.join(clash)}")
        names = set(opdefs.names()) | set(rules) | set(kernels) | set(shape_fns) | set(package_kernels)
        entries = {}
        for n in names:
            d = opdefs.op(n)
            own = d is None or d.package == QNN_PACKAGE
            shape_fn = _builtin_shape_fn(n) if own and n in rules else shape_fns.get(n)
            kernel = kernels.get(n) if own and n in kernels else package_kernels.get(n)
            entries[n] = OpEntry(n, d, shape_fn, kernel, own and n in raw_io, opdefs)
        return cls(entries, opdefs)

    @property
    def backends(self) -> tuple[str, ...]:
        """The backends the op definitions describe (qlower.qnn.backends.BACKENDS, plus any a package adds)."""
        return self.opdefs.backends

    def param(self, op: str, name: str) -> ParamDef | None:
        """The definition of param `name` of op type `op`; None when either is unknown."""
        entry = self.get(op)
        return entry.param(name) if entry is not None else None

    def supported(self, op: str, backend: str) -> bool:
        """Whether `backend` runs op type `op` (False for an op no definition names)."""
        entry = self.get(op)
        return entry is not None and entry.supported(backend)

    def get(self, name: str) -> OpEntry | None:
        """The entry of an op type (no package prefix); spellings `ArgMax`/`BatchNorm` name QNN's
        `Argmax`/`Batchnorm` unless an op package defines an op of exactly that name."""
        entry = self.entries.get(name)
        return entry if entry is not None else self.entries.get(shapes.canonical_name(name))

    def of_package(self, name: str, package: str) -> OpEntry | None:
        """The entry of op `name` when it is `package`'s op (an op named so by another package, QNN's
        usually, is not: its shape function and kernel do not apply)."""
        entry = self.get(name)
        return entry if entry is not None and (entry.package or QNN_PACKAGE) == package else None

    def op(self, name: str) -> OpDef | None:
        """The op definition of an op type, None when no definition names it (as `OpDefRegistry.op`,
        so code written against either finds ops the same way)."""
        entry = self.get(name)
        return entry.definition if entry is not None else None

    def names(self) -> tuple[str, ...]:
        return tuple(self.entries)

    def defined(self) -> tuple[str, ...]:
        """Ops with an OpDef: the QNN op set proper."""
        return tuple(n for n, e in self.entries.items() if e.definition is not None)

    def missing_shape_fn(self) -> tuple[str, ...]:
        """QNN ops (package qti.aisw) without a shape function; a custom op may leave shapes to its outputs."""
        return tuple(n for n, e in self.entries.items() if e.package == QNN_PACKAGE and e.shape_fn is None)

    def missing_kernel(self) -> tuple[str, ...]:
        """QNN ops (package qti.aisw) without a reference kernel."""
        return tuple(n for n, e in self.entries.items() if e.package == QNN_PACKAGE and e.kernel is None)

    def unreachable(self) -> tuple[tuple[str, str], ...]:
        """(package, op) of op-package definitions no name reaches: QNN's op (or another package's) has
        the name, as in the SDK's example packages (ReluOpPackage's `Relu`), so `qnn.Relu` is QNN's."""
        return tuple(sorted(key for key, d in self.opdefs.ops.items() if self.opdefs.op(key[1]) is not d))

    def undefined(self) -> tuple[str, ...]:
        """Shape rules or kernels for names no OpDef defines (typos, or ops the XML lacks)."""
        return tuple(n for n, e in self.entries.items() if e.definition is None)
