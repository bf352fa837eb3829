"""The Python API frontends use: load rules, lower a graph, save QNN artifacts.

    rules = qlower.load_rules(packs=["mllm"])
    result = qlower.lower(graph, rules, backend="htp")
    result.raise_for_errors()
    result.save("out/")
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from qlower._gc import paused
from qlower.diagnostics import Diagnostic, QlowerError, SourceCache, error
from qlower.graph.core import Graph
from qlower.qnn.model import QnnGraph
from qlower.qnn.table import QnnTable
from qlower.reference.spec import Kernel
from qlower.lang.functions import FunctionTable

from qlower.qnn.backends import BACKENDS


@attrs.frozen
class Rules:
    """A checked rule set with everything needed to lower and verify with it."""

    ruleset: Any  # qlower.lang.loader.RuleSet
    registry: Any  # qlower.qnn.opdef.OpDefRegistry
    functions: FunctionTable
    kernels: Mapping[str, Mapping[str, Kernel]]
    # qlower.qnn.registry.QnnOps: the one op registry (definitions, shape functions, kernels; QNN's and
    # the plugins' custom ops), which lowering, conversion and the interpreter share
    ops: Any = None
    # Engines compiled per backend; an Engine is reusable across graphs, so lowering many
    # graphs with one rule set compiles the rules once.
    _engines: dict = attrs.field(factory=dict, init=False, repr=False, eq=False)
    _targets: dict = attrs.field(factory=dict, init=False, repr=False, eq=False)

    @property
    def sources(self) -> SourceCache:
        return self.ruleset.sources

    def target(self, backend: str):
        """What lowering for `backend` with these rules targets (`qlower.rewrite.pipeline.Target`)."""
        from qlower.rewrite.pipeline import Target

        got = self._targets.get(backend)
        if got is None:
            got = self._targets[backend] = Target.of(backend, self.registry, self.ops)
        return got

    def engine(self, backend: str | None):
        from qlower.qnn.registry import QnnOps
        from qlower.rewrite.driver import Engine

        got = self._engines.get(backend)
        if got is None:
            got = self._engines[backend] = Engine(self.ruleset.rules, self.ruleset.ops,
                                                  registry=self.ops if self.ops is not None else QnnOps.build(self.registry),
                                                  backend=backend, functions=self.functions,
                                                  target=self.registry.dialect)
        return got


def rules_from_text(text: str, *, name: str = "<rules>.qpat", opdefs: Sequence[str | Path] = (),
                    plugins: bool = True, cleanup: bool = False) -> Rules:
    """`load_rules` for rules held in a string (imports resolve like a file's in the working directory)."""
    from qlower.lang.loader import load_rules as _load
    from qlower.plugins import builtin_contributions, installed

    extra = installed() if plugins else builtin_contributions()
    path = (Path.cwd() / name).resolve()
    paths = [path] + ([extra.pack("qnn")] if cleanup and extra.pack("qnn") is not None else [])
    reg = load_registry(list(opdefs) + list(extra.opdef_paths))
    ruleset = _load(paths, registry=reg, functions=extra.functions, packs=extra.packs, overlay={path: text})
    return Rules(ruleset, reg, extra.functions, extra.kernels, extra.qnn_ops(reg))


def load_registry(opdefs: Sequence[str | Path] = ()):
    from qlower.qnn.opdef import OpDefRegistry

    return OpDefRegistry.load(tuple(Path(p) for p in opdefs))


def load_rules(paths: Sequence[str | Path] = (), *, packs: Sequence[str] = (), opdefs: Sequence[str | Path] = (),
               plugins: bool = True, registry: Any = None, cleanup: bool | None = None) -> Rules:
    """Load and check rule files/folders and shipped packs; raises QlowerError on errors.

    `cleanup` adds the `qnn` pack: QNN → QNN rules run after lowering (transposes that cancel,
    reshape chains). By default it comes with any pack named in `packs`; rule files and folders
    given as paths are loaded as they are."""
    from qlower.lang.loader import load_rules as _load
    from qlower.plugins import installed

    from qlower.plugins import builtin_contributions

    extra = installed() if plugins else builtin_contributions()
    functions = extra.functions
    all_paths = [Path(p) for p in paths]
    for name in packs:
        found = extra.pack(name)
        if found is None:
            raise QlowerError(error(f"no rule pack named {name}", hint=f"known packs: {', '.join(sorted(extra.packs))}",
                                    code="no-pack"))
        all_paths.append(found)
    if cleanup is None:
        cleanup = bool(packs)
    if cleanup and "qnn" not in packs and extra.pack("qnn") is not None:
        all_paths.append(extra.pack("qnn"))
    opdefs = list(opdefs) + list(extra.opdef_paths)
    reg = registry if registry is not None else load_registry(opdefs)
    ruleset = _load(all_paths, registry=reg, functions=functions, packs=extra.packs)
    return Rules(ruleset, reg, functions, extra.kernels, extra.qnn_ops(reg))


@attrs.define
class LowerResult:
    """What `lower` produced: the lowered graph, its QNN form, and what went wrong.

    The QNN form is a `QnnTable` (`table`: what validation and `save` walk); `qnn` is the same
    graph as `QnnGraph` objects, made on first use."""

    graph: Graph
    table: QnnTable | None
    backend: str
    diagnostics: list[Diagnostic]
    coverage: dict[str, Any]
    timings: dict[str, float]
    ops_in: int
    sources: SourceCache | None = None
    # set by `lower(..., verify=True)` or `verify`: a qlower.verify.compare.Verification
    verification: Any = None
    # per rule name, a qlower.rewrite.driver.RuleStats: what the engine tried, matched and applied
    rule_stats: dict[str, Any] = attrs.field(factory=dict)
    # checks `table` against the backend's op definitions (set by `lower`; see `validate`)
    validator: Callable[[QnnTable], list[Diagnostic]] | None = attrs.field(default=None, repr=False)
    validated: bool = False
    _qnn: QnnGraph | None = attrs.field(default=None, init=False, repr=False)

    @property
    def qnn(self) -> QnnGraph | None:
        """The QNN graph as objects, made from `table` once: a view to read (`save`, `validate` and the
        reports use `table`, so an edit of these objects is not saved)."""
        if self._qnn is None and self.table is not None:
            self._qnn = self.table.graph()
        return self._qnn

    @property
    def ok(self) -> bool:
        return self.table is not None and not any(d.is_error for d in self.diagnostics)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.is_error]

    def raise_for_errors(self) -> None:
        if not self.ok:
            raise QlowerError(self.errors or [error("lowering produced no QNN graph")])

    def validate(self) -> list[Diagnostic]:
        """Check the QNN graph against the backend's op definitions, once (`lower(validate=False)`
        leaves it to this, or to `save(validate=True)`); the findings join `diagnostics`."""
        if self.validated or self.table is None:
            return []
        if self.validator is None:
            raise QlowerError(error("this result cannot validate: it was not made by `lower`"))
        t = time.perf_counter()
        with paused():
            found = self.validator(self.table)
        self.validated = True
        self.diagnostics.extend(found)
        self.timings["validate"] = self.timings.get("validate", 0.0) + time.perf_counter() - t
        return found

    def save(self, outdir: str | Path, *, converter_command: str = "qlower", name: str | None = None,
             progress: Callable[[int, int], None] | None = None, validate: bool = False) -> list[Path]:
        """Write `<name>_net.json`, `<name>.cpp`, `<name>.bin` (each complete or absent); `name`
        defaults to the graph's. `progress(done, total)` hears of the `.bin` bytes written.

        `validate` first runs `validate` (if `lower` did not), overlapped with writing: a big graph's
        `.cpp` is written by a second process meanwhile. When validation finds errors, nothing is
        written and [] is returned; the errors are in `diagnostics`."""
        from qlower.qnn.artifacts import save

        if self.table is None:
            raise QlowerError(error("nothing to save: the graph was not lowered"))
        qnn = self.table if name is None or name == self.table.name else attrs.evolve(self.table, name=name)
        gate = None
        if validate and not self.validated:
            def gate() -> bool:
                self.validate()
                return self.ok
        t = time.perf_counter()
        v0 = self.timings.get("validate", 0.0)
        with paused():
            paths = save(qnn, Path(outdir), converter_command=converter_command, progress=progress, gate=gate)
        self.timings["emit"] = time.perf_counter() - t - (self.timings.get("validate", 0.0) - v0)
        return paths

    def rule_stats_json(self) -> dict[str, dict[str, int]]:
        """`rule_stats` as JSON, rules that were tried only, by name."""
        return {k: v.to_json() for k, v in sorted(self.rule_stats.items()) if v.tries}

    def coverage_json(self) -> dict[str, Any]:
        return {k: v.to_json() for k, v in sorted(self.coverage.items())}

    def qnn_op_counts(self) -> dict[str, int]:
        return self.table.op_type_counts() if self.table is not None else {}


def lower(graph: Graph, rules: Rules, backend: str = "htp", *, validate: bool = True,
          float16: bool | None = None, allow_partial: bool = False, inplace: bool = True, verify: bool = False,
          inputs: Mapping[str, Any] | None = None, tolerance: Any = None, seed: int = 0) -> LowerResult:
    """Rewrite `graph` until it is in the qnn dialect, then convert and validate.

    `float16` (default: on for HTP) runs HTP's float path in FLOAT_16, keeping
    float32 graph inputs/outputs behind Cast ops. `inplace=False` lowers a copy
    (`result.graph`) and leaves `graph` as it was, e.g. to lower one graph for
    several backends. `verify` keeps a copy of the source graph and sets
    `result.verification` (see `verify`).
    """
    if not inplace:
        graph = graph.copy()
    if verify:
        from qlower.verify.compare import snapshot

        source = snapshot(graph)
        result = lower(graph, rules, backend, validate=validate, float16=float16, allow_partial=allow_partial)
        if result.ok:
            _verify(source, result, rules, inputs, tolerance, seed, None)
        return result
    from qlower.rewrite.pipeline import Lowering, validate_table

    if backend not in BACKENDS:
        raise QlowerError(error(f"unknown backend {backend}", hint=f"one of {', '.join(BACKENDS)}",
                                code="backend"))
    ops_in = len(graph)
    target = rules.target(backend)
    run = Lowering(graph, target, rules.engine(backend).run, decls=rules.ruleset.ops,
                   computes=rules.ruleset.computes, float16=float16, validate=validate,
                   allow_partial=allow_partial)
    with paused():
        run.run()
    coverage = run.outcome.coverage if run.outcome is not None else {}
    stats = dict(run.outcome.stats) if run.outcome is not None else {}
    return LowerResult(graph, run.table, backend, run.diagnostics, coverage, run.timings, ops_in, rules.sources,
                       validator=lambda qnn: validate_table(qnn, target),
                       validated=validate, rule_stats=stats)


def verify(source: Graph, result: LowerResult, rules: Rules, *, inputs: Mapping[str, Any] | None = None,
           tolerance: Any = None, seed: int = 0, localise: bool | None = None,
           max_input_bytes: int | None = None) -> Any:
    """Judge a lowering against the source semantics; sets and returns `result.verification`.

    `source` is the graph as it was before `lower` (which rewrites in place).
    `inputs` (stored form, by input name; default: seeded random) feed both graphs;
    `tolerance` is a qlower.verify.tolerance.TolerancePolicy (default: per-precision
    defaults). The Verification passes when every graph output is within tolerance;
    when it fails (or with `localise=True`) its report names the first source op
    whose lowering is wrong, or says the error is accumulated drift. Random inputs beyond
    `max_input_bytes` (default `qlower.verify.compare.MAX_INPUT_BYTES`, 1 GiB) are refused.
    """
    return _verify(source, result, rules, inputs, tolerance, seed, localise, max_input_bytes)


def _verify(source: Graph, result: LowerResult, rules: Rules, inputs: Mapping[str, Any] | None, tolerance: Any,
            seed: int, localise: bool | None, max_input_bytes: int | None = None) -> Any:
    from qlower.verify.compare import MAX_INPUT_BYTES, random_inputs, verify_lowering

    if result.qnn is None:
        raise QlowerError(error("nothing to verify: the graph was not lowered", code="verify"))
    t = time.perf_counter()
    used_seed = None if inputs is not None else seed
    limit = MAX_INPUT_BYTES if max_input_bytes is None else max_input_bytes
    feed = dict(inputs) if inputs is not None else random_inputs(source, seed, limit)
    result.verification = verify_lowering(source, result.graph, result.qnn, rules.kernels, feed,
                                          backend=result.backend, policy=tolerance, localise=localise,
                                          seed=used_seed, ops=rules.ops)
    result.timings["verify"] = time.perf_counter() - t
    return result.verification


def load_model(path: str | Path, frontend: str = "auto", *, input_shapes: Mapping[str, Sequence[int]] | None = None,
               trust_pickle: bool = False, quantization_overrides: str | Path | Any = None,
               **options: Any) -> Graph:
    """Import a model file (or a Hugging Face checkpoint folder) with the named (or, for `auto`, the
    suffix's) frontend.

    `input_shapes` (name → dims) and other keyword `options` (the checkpoint frontend's `chunk` and
    `context`) go to frontends that take them (`Frontend.options`); None means the default.
    `trust_pickle` lets frontends that take it run pickles from the file (a `.pt2`'s pickled
    weights or objects): only for files from someone you trust, see docs/security.md.
    `quantization_overrides`: an AIMET encodings file (path, or a read
    `qlower.graph.encodings.EncodingSet`) applied to the float model as QNN's converter applies
    `--quantization_overrides` (`qlower.frontends.overrides`).
    """
    chosen = choose_frontend(path, frontend)
    given = {k: v for k, v in {"input_shapes": input_shapes or None, **options}.items() if v is not None}
    for key in given:
        if key not in chosen.options:
            what = "input shapes (--input-shape)" if key == "input_shapes" else f"option {key}"
            raise QlowerError(error(f"the {chosen.name} frontend takes no {what}",
                                    hint="its models have static shapes already" if key == "input_shapes" else
                                    f"it takes: {', '.join(sorted(chosen.options)) or 'no options'}", code="usage"))
    if trust_pickle and "trust_pickle" in chosen.options:  # (other frontends run nothing from the file)
        given["trust_pickle"] = True
    with paused():  # (a load allocates millions of objects that live on)
        graph = chosen.load(Path(path), **given)
    if quantization_overrides is not None:
        from qlower.frontends.overrides import apply_overrides
        from qlower.graph.encodings import EncodingSet, read_encodings

        enc = (quantization_overrides if isinstance(quantization_overrides, EncodingSet)
               else read_encodings(quantization_overrides))
        apply_overrides(graph, enc)
    return graph


def choose_frontend(path: str | Path, frontend: str = "auto"):
    """The frontend that reads `path`: the named one, or for `auto` the one for its suffix."""
    from qlower.plugins import installed

    p = Path(path)
    if not p.exists():
        raise QlowerError(error(f"no such file: {path}", code="io"))
    if not (p.is_file() or p.is_dir()):  # a FIFO, socket or device: a read that may never end
        raise QlowerError(error(f"{path} is not a regular file", code="io"))
    frontends = installed().frontends
    if frontend == "auto":
        suffix = "/" if p.is_dir() else "".join(p.suffixes[-1:]).lower()  # a folder: a checkpoint
        chosen = next((f for f in frontends.values() if suffix in f.suffixes), None)
        if chosen is None:
            raise QlowerError(error(f"no frontend reads {suffix or 'files without a suffix'}",
                                    hint=f"pass --frontend, one of {', '.join(sorted(frontends))}", code="frontend"))
    else:
        chosen = frontends.get(frontend)
        if chosen is None:
            raise QlowerError(error(f"unknown frontend {frontend}",
                                    hint=f"one of {', '.join(sorted(frontends))}", code="frontend"))
    return chosen
