"""Running one `test` block: build the source graph, lower it per backend,
validate, and compare source semantics with the lowered QNN graph.

Dims written as ranges (`1..8`) are drawn by hypothesis; every dim written
with the same range takes the same value in one example, so two inputs
declared `f32[2, 1..8]` always agree. Values are drawn by hypothesis too
(edge cases included) and shrunk when a check fails.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from qlower.graph.core import Graph
from qlower.graph.types import Quant, canonical_dtype
from qlower.lang import ast
from qlower.reference.spec import KernelError, OutSpec
from qlower.rewrite.expr import compile_expr
from qlower.rewrite.emit import resolve_encoding, quantize_real

DEFAULT_BACKENDS = ("cpu", "htp")
FP16_RTOL = 1e-2  # HTP runs float graphs in FLOAT_16


class RuleTestFailure(AssertionError):
    """A rule test block failed; the message says which check, where, and on what inputs."""


@attrs.frozen
class Tolerance:
    atol: float = 1e-5
    rtol: float = 1e-4
    steps: float = 2.0


@attrs.frozen
class Expectations:
    ops: tuple[str, ...] | None
    tol: Tolerance
    error: str | None
    rules: tuple[str, ...]

    @classmethod
    def of(cls, test: ast.Test) -> Expectations:
        ops = None
        tol: dict[str, float] = {}
        error = None
        rules = [test.rule_name]
        for s in test.body:
            if isinstance(s, ast.Expect):
                if s.kind == "ops":
                    ops = s.ops
                elif s.kind == "no_ops":
                    ops = ()
                elif s.kind == "close":
                    tol.update(dict(s.tolerances))
                elif s.kind == "error":
                    error = s.text
                elif s.kind == "rule":
                    rules.append(s.text)
        return cls(ops, Tolerance(**tol) if tol else Tolerance(), error, tuple(rules))


def _ranges(test: ast.Test) -> list[tuple[int, int]]:
    found: list[tuple[int, int]] = []
    for s in test.body:
        if isinstance(s, (ast.TestInput, ast.TestConst)):
            for d in s.type.dims:
                if d.hi is not None and (d.lo, d.hi) not in found:
                    found.append((d.lo, d.hi))
    return found


def _shape(tt: ast.TensorType, dims: Mapping[tuple[int, int], int]) -> tuple[int, ...]:
    return tuple(d.lo if d.hi is None else dims[(d.lo, d.hi)] for d in tt.dims)


def _props(props: Sequence[ast.ValueProp], functions) -> dict[str, Any]:
    return {p.kind: compile_expr(p.expr, (), functions)({}) for p in props}


def _int_range(dtype: np.dtype, quant: Quant | None) -> tuple[int, int]:
    """Storage range of a quantized tensor, narrowed by its bitwidth (4-bit weights in int8)."""
    info = np.iinfo(dtype)
    bits = quant.bitwidth if quant is not None and quant.bitwidth else info.bits
    if bits >= info.bits:
        return int(info.min), int(info.max)
    return (0, 2 ** bits - 1) if info.min == 0 else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


def _values_strategy(dtype: np.dtype, shape: tuple[int, ...], quantized: bool):
    if dtype.kind == "f":
        elements = st.floats(-4.0, 4.0, width=32, allow_nan=False, allow_infinity=False)
        return hnp.arrays(np.float32, shape, elements=elements)
    if dtype.kind == "b":
        return hnp.arrays(np.bool_, shape)
    if quantized:
        info = np.iinfo(dtype)
        return hnp.arrays(dtype, shape, elements=st.integers(int(info.min), int(info.max)))
    return hnp.arrays(dtype, shape, elements=st.integers(0, 2))


class RuleTest:
    """One test block, ready to run against a loaded rule set."""

    def __init__(self, test: ast.Test, rules: Any, file: str, *, backends: Sequence[str] | None = None) -> None:
        self.test = test
        self.rules = rules
        self.file = file
        self.expect = Expectations.of(test)
        rule = rules.ruleset.rule(test.rule_name)
        self.rule = rule
        chosen = backends or test.backends or (rule.backends if rule is not None and rule.backends else None)
        self.backends = tuple(chosen) if chosen else DEFAULT_BACKENDS
        self._engines: dict[str, Any] = {}

    @property
    def name(self) -> str:
        return self.test.name

    def engine(self, backend: str):
        if backend not in self._engines:
            self._engines[backend] = self.rules.engine(backend)
        return self._engines[backend]

    # ---------------------------------------------------------------- running
    def run(self, examples: int = 10) -> None:
        if self.rule is None:
            raise RuleTestFailure(f"test {self.name}: no rule named {self.test.rule_name}")
        ranges = _ranges(self.test)

        @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck), report_multiple_bugs=False)
        @given(st.data())
        def check(data: st.DataObject) -> None:
            dims = {r: data.draw(st.integers(r[0], r[1]), label=f"dim {r[0]}..{r[1]}") for r in ranges}
            feeds = {}
            for s in self.test.body:
                if isinstance(s, ast.TestInput):
                    dtype, quant = self._type(s.type, s.props)
                    arr = data.draw(_values_strategy(dtype, _shape(s.type, dims), quant is not None),
                                    label=f"input {s.name}")
                    feeds[s.name] = arr
            self.check_once(dims, feeds)

        check()

    def _type(self, tt: ast.TensorType, props) -> tuple[np.dtype, Quant | None]:
        p = _props(props, self.rules.functions)
        dtype = np.dtype(canonical_dtype(tt.dtype) or tt.dtype)
        quant = resolve_encoding(p.get("encoding"), dtype)
        return dtype, quant

    def build(self, dims: Mapping, feeds: Mapping[str, np.ndarray]) -> tuple[Graph, dict, dict]:
        """The source graph, the real-valued reference outputs, and the stored inputs."""
        from qlower.qnn.convert import encoding_of
        from qlower.reference.quant import dequantize

        functions = self.rules.functions
        g = Graph(f"test_{self.name}")
        real: dict[str, np.ndarray] = {}
        rng = np.random.default_rng(0)
        inputs = []
        for s in self.test.body:
            if isinstance(s, ast.TestInput):
                dtype, quant = self._type(s.type, s.props)
                v = g.add_value(s.name, dtype, _shape(s.type, dims), quant=quant)
                inputs.append(v)
                arr = feeds[s.name]
                real[s.name] = (dequantize(arr, encoding_of(quant, dtype), dtype).astype(np.float32)
                                if quant is not None else arr)
            elif isinstance(s, ast.TestConst):
                dtype, quant = self._type(s.type, s.props)
                shape = _shape(s.type, dims)
                if s.value is not None:
                    value = np.asarray(compile_expr(s.value, (), functions)({}))
                    data = quantize_real(value, quant, dtype) if quant is not None else value.astype(dtype)
                    data = data.reshape(shape) if data.size == int(np.prod(shape)) else data
                elif quant is not None:
                    lo, hi = _int_range(dtype, quant)
                    data = rng.integers(lo, hi + 1, size=shape).astype(dtype)
                elif dtype.kind == "f":
                    data = rng.standard_normal(shape).astype(dtype)
                else:
                    data = rng.integers(0, 3, size=shape).astype(dtype)
                g.add_value(s.name, dtype, data.shape, quant=quant, data=data)
                real[s.name] = (dequantize(data, encoding_of(quant, dtype), dtype).astype(np.float32)
                                if quant is not None else data)
            elif isinstance(s, ast.TestGraph):
                for node in s.nodes:
                    self._add_node(g, node, real)
        used = {id(v) for op in g.ops for v in op.operands if v is not None}
        outputs = [r for op in g.ops for r in op.results if id(r) not in used]
        g.set_io(inputs, outputs)
        return g, {v.name: real[v.name] for v in outputs}, dict(feeds)

    def _target_params(self, node: ast.GraphNode, opdef: Any, attrs_: dict) -> dict:
        """A target-dialect op's params as lowering stores them (enum names as their values, the
        declared datatypes), so its kernel and the cleanup rules see what a lowered graph holds."""
        from qlower.qnn.params import ParamError, coerce_param

        out = {}
        for name, value in attrs_.items():
            pdef = opdef.param(name)
            try:
                out[name] = coerce_param(pdef, value) if pdef is not None else value
            except ParamError as exc:
                raise RuleTestFailure(f"test {self.name}: {node.op} param `{name}`: {exc}") from None
        return out

    def _add_node(self, g: Graph, node: ast.GraphNode, real: dict) -> None:
        functions = self.rules.functions
        attrs_ = {p.name: compile_expr(p.expr, (), functions)({}) for p in node.params}
        args = [g.value(a.name) if a.kind == "value" else None for a in node.args]
        dialect, _, opname = node.op.partition(".")
        kernel = self.rules.kernels.get(dialect, {}).get(opname)
        registry = self.rules.registry
        if kernel is None and registry is not None and dialect == registry.dialect and self.rules.ops is not None:
            entry = self.rules.ops.get(opname)  # a target op whose kernel reads stored values (Cast, ...)
            if entry is not None and entry.kernel is not None and entry.raw_io:
                raw = entry.kernel

                def kernel(inputs, params, outs, raw=raw):
                    # test-graph values are real and unquantized: stored as they are
                    specs = [None if x is None else OutSpec(np.shape(x), np.asarray(x).dtype, None) for x in inputs]
                    return raw(inputs, params, outs, in_specs=specs)
        if kernel is None:
            raise RuleTestFailure(f"test {self.name}: no reference kernel for {node.op}")
        if registry is not None and dialect == registry.dialect and (opdef := registry.op(opname)) is not None:
            attrs_ = self._target_params(node, opdef, attrs_)
        props = _props(node.props, functions)
        names = node.binders.names
        from qlower.qnn.convert import encoding_of

        # a result with an encoding is computed as a real value, like every source semantics
        declared = np.dtype(canonical_dtype(str(props["dtype"]))) if "dtype" in props else np.dtype("float32")
        quant = resolve_encoding(props.get("encoding"), declared)
        enc = encoding_of(quant, declared) if quant is not None else None
        outs = [OutSpec(props.get("shape"), declared, enc) for _ in names]
        try:
            results = kernel([real[a.name] if a is not None else None for a in args], attrs_, outs)
        except KernelError as exc:
            if self.expect.error is None or props.get("shape") is None:
                raise RuleTestFailure(f"test {self.name}: source op {node.op} rejected its inputs: {exc}") from None
            # a test of a refusal compares no values: an op without reference semantics (random
            # numbers) is built from its declared shape and dtype alone
            results = [np.zeros(props["shape"], declared) for _ in names]
        values = []
        for name, res in zip(names, results):
            res = np.asarray(res)
            dtype = np.dtype(canonical_dtype(str(props["dtype"]))) if "dtype" in props else res.dtype
            quant = resolve_encoding(props.get("encoding"), dtype)
            values.append(g.add_value(name, dtype, res.shape, quant=quant))
            real[name] = res
        g.add_op(node.binders.names[0] if names else node.op, node.op, args, values, attrs_)

    def check_once(self, dims: Mapping, feeds: Mapping[str, np.ndarray]) -> None:
        for backend in self.backends:
            self._check_backend(backend, dims, feeds)

    def _check_backend(self, backend: str, dims: Mapping, feeds: Mapping[str, np.ndarray]) -> None:
        from qlower.diagnostics import render_all
        from qlower.reference.interpreter import run_dequantized
        from qlower.rewrite.pipeline import Lowering

        graph, expected, stored = self.build(dims, feeds)
        where = f"test {self.name} (rule {self.test.rule_name}) on {backend.upper()} with dims " \
                f"{[list(v.shape) for v in graph.inputs]}"
        # the pipeline `qlower.lower` runs, stopped after the rules to look at what they emitted
        target = self.rules.target(backend)
        run = Lowering(graph, target, self.engine(backend).run, decls=self.rules.ruleset.ops,
                       computes=self.rules.ruleset.computes).run(until="rewrite")
        errors = [d for d in run.diagnostics if d.is_error]
        if self.expect.error is not None:  # (from the check stage or the rules)
            if not any(self.expect.error in d.message for d in errors):
                raise RuleTestFailure(f"{where}: expected a lowering error containing {self.expect.error!r}, got "
                                      f"{[d.message for d in errors] or 'none'}")
            return
        if "rewrite" not in run.done:
            raise RuleTestFailure(f"{where}: the test graph is not well formed:\n{render_all(errors, self.rules.sources)}")
        outcome = run.outcome
        if errors:
            raise RuleTestFailure(f"{where}: lowering failed:\n{render_all(errors, self.rules.sources)}")
        for name in self.expect.rules:
            st = outcome.stats.get(name)
            if st is None or not st.applied:
                raise RuleTestFailure(f"{where}: rule {name} was never applied "
                                      f"(applied: {sorted(k for k, v in outcome.stats.items() if v.applied)})")
        emitted = [op.type for op in graph.ops]
        if self.expect.ops is not None and tuple(emitted) != tuple(self.expect.ops):
            raise RuleTestFailure(f"{where}: emitted {emitted}, expected {list(self.expect.ops)}")
        run.run(until="convert")
        table = run.table
        if table is None:
            raise RuleTestFailure(f"{where}: the lowered graph does not convert:\n"
                                  f"{render_all([d for d in run.diagnostics if d.is_error], self.rules.sources)}")
        fp16 = run.float16_changed > 0
        broken = table.check()  # (every rule test checks conversion's invariants too)
        if broken:
            raise RuleTestFailure(f"{where}: the converted QNN table breaks its invariants:\n  " + "\n  ".join(broken))
        before = len(run.diagnostics)
        run.run()
        problems = [d for d in run.diagnostics[before:] if d.is_error]
        if problems:
            raise RuleTestFailure(f"{where}: emitted ops do not validate:\n{render_all(problems)}")
        ops = self.rules.ops  # the interpreter's kernels (None: the built-in ones)
        qg = table.graph()
        got = run_dequantized(qg, stored, ops=ops)
        tol = self.expect.tol
        for name, want in expected.items():
            out = qg.tensors[name]
            have = np.asarray(got[name], np.float64).reshape(np.shape(want))
            want = np.asarray(want, np.float64)
            if out.encoding is not None:
                step = max(out.encoding.scales)
                limit = tol.steps * step + np.zeros_like(want)
                kind = f"{tol.steps:g} quantization steps ({step:.3g} each)"
            else:
                rtol = max(tol.rtol, FP16_RTOL) if fp16 else tol.rtol
                atol = max(tol.atol, FP16_RTOL * max(1.0, float(np.max(np.abs(want), initial=0)))) if fp16 \
                    else tol.atol
                limit = atol + rtol * np.abs(want)
                kind = f"atol {atol:g} rtol {rtol:g}"
            with np.errstate(invalid="ignore"):
                err = np.abs(have - want)
            # equal infinities and NaN on both sides are what the source computes
            bad = ~((err <= limit) | (have == want) | (np.isnan(have) & np.isnan(want)))
            if np.any(bad):
                idx = tuple(int(i) for i in np.argwhere(bad)[0])
                inputs_text = "; ".join(f"{k}={np.array2string(np.asarray(v), threshold=24, precision=4)}"
                                        for k, v in stored.items())
                raise RuleTestFailure(
                    f"{where}: output {name} differs from the source semantics beyond {kind}: max error "
                    f"{float(np.max(err)):.6g}; first at {list(idx)}: lowered {have[idx]:.6g}, source "
                    f"{want[idx]:.6g}\n  inputs: {inputs_text}")


# The pip extra that brings a dialect's reference semantics.
_EXTRAS = {"aten": "torch", "onnx": "onnx"}


def missing_semantics_reason(dialect: str) -> str:
    extra = _EXTRAS.get(dialect)
    how = f"pip install 'qlower[{extra}]'" if extra else "install the plugin that provides it"
    return f"no reference semantics for dialect {dialect} here ({how})"


def missing_semantics(test, rules) -> str | None:
    """A dialect the test graph uses whose reference kernels are not available (an extra not installed)."""
    for s in test.body:
        if isinstance(s, ast.TestGraph):
            for node in s.nodes:
                dialect = node.op.split(".", 1)[0]
                table = rules.kernels.get(dialect)
                if table is None or not getattr(table, "available", True):
                    return dialect
    return None
