"""Plugins: what third-party packages add to qlower, through entry points.

A package declares, in its metadata, an entry point in the group
`qlower.plugins` naming a zero-argument callable that returns a `Plugin`.
Everything a plugin adds is merged here; two contributors defining the same
thing (a rule pack name, a function, a kernel, a shape function, a frontend)
are reported as a conflict and never silently resolved.

A custom op package is OpDef XML (`Plugin.opdefs`) plus, optionally, each op's
shape function (`Plugin.shapes`) and reference kernel (`Plugin.kernels["qnn"]`);
`Contributions.qnn_ops` joins them with QNN's own ops into the one op registry
(`qlower.qnn.registry.QnnOps`) that lowering, conversion and the interpreter use.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from types import MappingProxyType

import attrs

from qlower.diagnostics import Diagnostic, QlowerError, error, warning
from qlower.frontends.builtin import Frontend, builtin_frontends
from qlower.qnn.opdef import QNN_PACKAGE, OpDefRegistry
from qlower.qnn.registry import QnnOps, ShapeFn
from qlower.reference.qnn import qnn_ops
from qlower.reference.spec import Kernel
from qlower.lang.functions import Function, FunctionTable
from qlower.lang.builtins import builtin_functions


GROUP = "qlower.plugins"
BUILTIN = "qlower"  # the name qlower's own contributions go by
TARGET = "qnn"  # the dialect whose kernels and shape functions join the QNN op registry


@attrs.frozen
class Plugin:
    name: str
    rule_packs: Mapping[str, Path] = attrs.field(factory=dict, converter=lambda m: MappingProxyType(dict(m)))
    functions: tuple[Function, ...] = attrs.field(default=(), converter=tuple)
    kernels: Mapping[str, Mapping[str, Kernel]] = attrs.field(factory=dict,
                                                               converter=lambda m: MappingProxyType(dict(m)))
    opdefs: tuple[Path, ...] = attrs.field(default=(), converter=lambda xs: tuple(Path(x) for x in xs))
    frontends: tuple[Frontend, ...] = attrs.field(default=(), converter=tuple)
    version: str = ""
    # shape functions of the custom ops its `opdefs` define, by op type name (see qlower.qnn.registry.ShapeFn)
    shapes: Mapping[str, ShapeFn] = attrs.field(factory=dict, converter=lambda m: MappingProxyType(dict(m)))


@attrs.frozen
class Contributions:
    """The merged view of qlower's own contributions and every installed plugin."""

    plugins: tuple[Plugin, ...]
    packs: Mapping[str, Path]
    functions: FunctionTable
    kernels: Mapping[str, Mapping[str, Kernel]]
    opdef_paths: tuple[Path, ...]
    frontends: Mapping[str, Frontend]
    conflicts: tuple[Diagnostic, ...]
    shapes: Mapping[str, ShapeFn] = attrs.field(factory=dict, converter=lambda m: MappingProxyType(dict(m)))

    def pack(self, name: str) -> Path | None:
        return self.packs.get(name)

    def qnn_ops(self, opdefs: OpDefRegistry | None = None) -> QnnOps:
        """The one QNN op registry: `opdefs` (default: the shipped definitions plus every plugin's
        OpDef files; raises QlowerError naming a broken file) joined with the shape functions and
        reference kernels of QNN's ops and of the plugins' custom ops."""
        if opdefs is None:
            opdefs = OpDefRegistry.load(self.opdef_paths)
        return qnn_ops(opdefs, kernels=self.kernels.get(TARGET), shape_fns=self.shapes)

    def interpreter_ops(self) -> QnnOps:
        """The registry as the interpreter needs it: kernels of QNN's ops and the plugins' custom ops.
        QNN's own XML (a third of a second to load) is read only when a plugin brings op packages:
        it tells which package an op name belongs to."""
        return self.qnn_ops(None if self.opdef_paths else OpDefRegistry.from_files([]))

    def check_ops(self, ops: QnnOps) -> tuple[Diagnostic, ...]:
        """Warnings for what no rule can reach: shape functions and kernels of QNN-dialect ops no op
        definition names (a typo, or a missing `opdefs` file), and op-package ops whose name another
        package's op (QNN's, usually) has. qlower's own gaps are tests/qnn/registry_gaps.txt's business."""
        out = []
        for p in self.plugins:
            if p.name == BUILTIN:
                continue
            named = [*((n, "shape function") for n in p.shapes), *((n, "kernel") for n in p.kernels.get(TARGET, {}))]
            for name, kind in named:
                entry = ops.get(name)
                if entry is None or entry.definition is None:
                    out.append(warning(f"{kind} for {TARGET}.{name}, which no op definition names",
                                       subject=f"plugin {p.name}", code="plugin-undefined-op",
                                       hint="add the op package's OpDef XML to the plugin's `opdefs`"))
        for package, name in ops.unreachable():
            if package == QNN_PACKAGE:
                continue
            owner = ops.get(name)
            out.append(warning(f"op {name} of op package {package} has the name of an op of package "
                               f"{owner.package if owner is not None and owner.package else 'another package'}; "
                               f"rules naming {TARGET}.{name} do not reach it", subject=f"op package {package}",
                               code="plugin-shadowed-op", hint="give the custom op a name of its own"))
        return tuple(out)


def builtin_plugin() -> Plugin:
    """qlower's own contributions, declared the same way a plugin's are."""
    from qlower import _resources
    from qlower.reference.mllm import MLLM_KERNELS
    from qlower.rewrite.rope_functions import ROPE_FUNCTIONS

    patterns = _resources.data_dir("patterns")
    packs = {p.name: p for p in sorted(patterns.iterdir()) if p.is_dir()} if patterns.is_dir() else {}
    # QNN ops' own semantics, from the op registry: the source side of the cleanup rules' tests
    # (patterns/qnn). Kernels that move between stored and real values (Quantize, Cast) take more
    # than a source kernel does and stay with the interpreter.
    ops = qnn_ops(OpDefRegistry.from_files([]))
    qnn = {e.name: e.kernel for e in ops.entries.values() if e.kernel is not None and not e.raw_io}
    kernels: dict[str, Mapping[str, Kernel]] = {"mllm": MLLM_KERNELS, TARGET: qnn}
    if _importable("onnx"):  # the optional extra qlower[onnx]; onnx itself is imported on first use
        from qlower.reference.onnx_kernels import OnnxKernels

        kernels["onnx"] = OnnxKernels()
    if "aten" in packs and _importable("torch"):  # ATen's own semantics, from torch (the extra qlower[torch])
        from qlower.reference.aten_kernels import AtenKernels, declared_aten_ops

        kernels["aten"] = AtenKernels(declared_aten_ops(packs["aten"]))
    return Plugin(BUILTIN, packs, ROPE_FUNCTIONS, kernels, (), builtin_frontends())


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module blocked in sys.modules has no spec
        return False


def merge(plugins: Iterable[Plugin]) -> Contributions:
    plugins = tuple(plugins)
    conflicts: list[Diagnostic] = []
    owner: dict[tuple[str, str], str] = {}

    def claim(kind: str, key: str, who: str) -> bool:
        prev = owner.get((kind, key))
        if prev is not None and prev != who:
            conflicts.append(error(f"{kind} {key} is defined by both {prev} and {who}; neither is used "
                                   f"until one is uninstalled", subject=f"plugin {who}", code="plugin-conflict"))
            return False
        owner[(kind, key)] = who
        return True

    packs: dict[str, Path] = {}
    functions = builtin_functions()
    for f in functions.functions.values():
        owner[("function", f.name)] = BUILTIN
    extra_functions: dict[str, Function] = {}
    kernels: dict[str, Mapping[str, Kernel]] = {}
    opdefs: list[Path] = []
    frontends: dict[str, Frontend] = {}
    shapes: dict[str, ShapeFn] = {}
    for e in qnn_ops(OpDefRegistry.from_files([])).entries.values():  # QNN's own ops keep theirs
        if e.shape_fn is not None:
            owner[("shape function", f"{TARGET}.{e.name}")] = BUILTIN
        if e.kernel is not None:
            owner[("kernel", f"{TARGET}.{e.name}")] = BUILTIN
    rejected: set[tuple[str, str]] = set()
    for p in plugins:
        for name, path in p.rule_packs.items():
            if claim("rule pack", name, p.name):
                packs[name] = Path(path)
            else:
                rejected.add(("rule pack", name))
        for f in p.functions:
            if claim("function", f.name, p.name):
                extra_functions[f.name] = f
            else:
                rejected.add(("function", f.name))
        for dialect, table in p.kernels.items():
            if dialect != TARGET and sum(dialect in q.kernels for q in plugins) == 1:
                kernels[dialect] = table  # its only provider: kept as it is (onnx's lists its ops lazily)
                continue
            for op, k in table.items():
                key = f"{dialect}.{op}"
                if claim("kernel", key, p.name):
                    kernels.setdefault(dialect, {})[op] = k
                else:
                    rejected.add(("kernel", key))
        opdefs.extend(p.opdefs)
        for op, fn in p.shapes.items():
            if claim("shape function", f"{TARGET}.{op}", p.name):
                shapes[op] = fn
            else:
                rejected.add(("shape function", f"{TARGET}.{op}"))
        for fe in p.frontends:
            if claim("frontend", fe.name, p.name):
                frontends[fe.name] = fe
            else:
                rejected.add(("frontend", fe.name))
    for kind, key in rejected:
        if kind == "rule pack":
            packs.pop(key, None)
        elif kind == "function":
            extra_functions.pop(key, None)
        elif kind == "frontend":
            frontends.pop(key, None)
        elif kind == "kernel":
            d, op = key.split(".", 1)
            table = kernels.get(d)
            if isinstance(table, dict):
                table.pop(op, None)
        elif kind == "shape function":
            shapes.pop(key.split(".", 1)[1], None)
    table = functions.extend(f for name, f in extra_functions.items() if functions.get(name) is None)
    return Contributions(plugins, MappingProxyType(packs), table,
                         MappingProxyType({d: MappingProxyType(k) for d, k in kernels.items()}),
                         tuple(opdefs), MappingProxyType(frontends), tuple(conflicts), shapes)


def discover() -> list[Plugin]:
    """Plugins installed through the `qlower.plugins` entry-point group, by name."""
    found = []
    for ep in sorted(metadata.entry_points(group=GROUP), key=lambda e: e.name):
        try:
            factory = ep.load()
            plugin = factory() if callable(factory) else factory
        except Exception as exc:  # a broken plugin must not break qlower
            raise QlowerError(error(f"plugin {ep.name} ({ep.value}) failed to load: {exc}",
                                    code="plugin-load")) from None
        if not isinstance(plugin, Plugin):
            raise QlowerError(error(f"plugin {ep.name} returned {type(plugin).__name__}, not qlower.plugins.Plugin",
                                    code="plugin-load"))
        found.append(plugin)
    return found


def builtin_contributions() -> Contributions:
    return merge([builtin_plugin()])


def installed() -> Contributions:
    """qlower's own contributions plus every installed plugin."""
    return merge([builtin_plugin(), *discover()])
