"""Plugins: what third-party packages add to qlower, through entry points.

A package declares, in its metadata, an entry point in the group
`qlower.plugins` naming a zero-argument callable that returns a `Plugin`.
Everything a plugin adds is merged here; two contributors defining the same
thing (a rule pack name, a function, a kernel, a frontend) are reported as a
conflict and never silently resolved.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from types import MappingProxyType

import attrs

from qlower.diagnostics import Diagnostic, QlowerError, error
from qlower.frontends.builtin import Frontend, builtin_frontends
from qlower.reference.spec import Kernel
from qlower.lang.functions import Function, FunctionTable
from qlower.lang.builtins import builtin_functions


GROUP = "qlower.plugins"


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

    def pack(self, name: str) -> Path | None:
        return self.packs.get(name)


def builtin_plugin() -> Plugin:
    """qlower's own contributions, declared the same way a plugin's are."""
    from qlower import _resources
    from qlower.reference.mllm import MLLM_KERNELS
    from qlower.rewrite.rope_functions import ROPE_FUNCTIONS

    patterns = _resources.data_dir("patterns")
    packs = {p.name: p for p in sorted(patterns.iterdir()) if p.is_dir()} if patterns.is_dir() else {}
    from qlower.reference.qnn import QNN_KERNELS, RAW_IO_OPS

    # QNN ops' own semantics: the source side of the cleanup rules' tests (patterns/qnn)
    qnn = {op: k for op, k in QNN_KERNELS.items() if op not in RAW_IO_OPS}
    kernels: dict[str, Mapping[str, Kernel]] = {"mllm": MLLM_KERNELS, "qnn": qnn}
    if _importable("onnx"):  # the optional extra qlower[onnx]; onnx itself is imported on first use
        from qlower.reference.onnx_kernels import OnnxKernels

        kernels["onnx"] = OnnxKernels()
    if "aten" in packs and _importable("torch"):  # ATen's own semantics, from torch (the extra qlower[torch])
        from qlower.reference.aten_kernels import AtenKernels, declared_aten_ops

        kernels["aten"] = AtenKernels(declared_aten_ops(packs["aten"]))
    return Plugin("qlower", packs, ROPE_FUNCTIONS, kernels, (), builtin_frontends())


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
        if prev is not None:
            conflicts.append(error(f"{kind} {key} is defined by both {prev} and {who}; neither is used "
                                   f"until one is uninstalled", subject=f"plugin {who}", code="plugin-conflict"))
            return False
        owner[(kind, key)] = who
        return True

    packs: dict[str, Path] = {}
    functions = builtin_functions()
    for f in functions.functions.values():
        owner[("function", f.name)] = "qlower"
    extra_functions: dict[str, Function] = {}
    kernels: dict[str, dict[str, Kernel]] = {}
    opdefs: list[Path] = []
    frontends: dict[str, Frontend] = {}
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
            for op, k in table.items():
                key = f"{dialect}.{op}"
                if claim("kernel", key, p.name):
                    kernels.setdefault(dialect, {})[op] = k
                else:
                    rejected.add(("kernel", key))
        opdefs.extend(p.opdefs)
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
            kernels.get(d, {}).pop(op, None)
    table = functions.extend(f for name, f in extra_functions.items() if functions.get(name) is None)
    return Contributions(plugins, MappingProxyType(packs), table,
                         MappingProxyType({d: MappingProxyType(k) for d, k in kernels.items()}),
                         tuple(opdefs), MappingProxyType(frontends), tuple(conflicts))


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
