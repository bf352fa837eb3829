"""ONNX operator conformance: the onnx package's backend node test cases through qlower, per backend.

Every node test case ONNX ships (`onnx.backend.test.case.node`) that qlower can import is
lowered with the onnx rule pack, validated against the backend's op definitions, run with the
QNN reference kernels and compared with the outputs ONNX ships with the case.

*Importable* cases: default-domain ops without subgraphs (no control flow), tensor inputs and
outputs only (no sequences, optionals, maps), of element types QNN represents (no strings,
float64, float8, bfloat16, int4/uint4, complex), and deterministic (no random-number ops, no Dropout
in training mode with a ratio above 0).
Parameter-like inputs (shapes, axes, k, scales, pads, weights and statistics a deployed model
holds as initializers) are frozen into constants holding the case's data.

For HTP, float graphs run in float16 (qlower's default); an HTP case whose outputs miss the
tolerance but match when the same graph is lowered in float32 is a *float16 precision case*:
listed, and left out of the HTP denominator.

Usage (from the repository root; outside the default test run, ~1-3 minutes):
    PYTHONPATH=. python tools/onnx_conformance.py [--backend cpu --backend htp] [--list STATUS] [--case SUBSTR]
"""

from __future__ import annotations

import argparse
import collections
import gc
import re
import sys
import time
import warnings
from collections.abc import Iterable, Sequence

import attrs
import numpy as np

from qlower.frontends import onnx_cases
from qlower.qnn.backends import BACKENDS, runs_float_in_float16
from qlower.frontends.onnx_cases import case_data, case_feeds as _feeds, compare as _compare

# Element types a QNN graph can hold (ONNX TensorProto names); int64/uint64 are narrowed on import.
QNN_TYPES = frozenset({"FLOAT", "FLOAT16", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32",
                       "UINT64", "BOOL"})
# Ops without deterministic outputs to compare with.
RANDOM_OPS = frozenset({"Bernoulli", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                        "Multinomial", "Dropout_training"})

# Parameter-like and static inputs per op (input positions), beyond qlower's own PARAM_INPUTS: inputs
# a deployed model holds as constants (weights, normalisation statistics, quantization parameters,
# shapes, counts and thresholds).
STATIC_INPUTS: dict[str, tuple[int, ...]] = {
    "Conv": (1, 2), "ConvTranspose": (1, 2), "ConvInteger": (1, 2, 3), "DeformConv": (1, 3),
    "BatchNormalization": (1, 2, 3, 4), "InstanceNormalization": (1, 2), "LayerNormalization": (1, 2),
    "GroupNormalization": (1, 2), "RMSNormalization": (1,), "PRelu": (1,),
    "QuantizeLinear": (1, 2), "DequantizeLinear": (1, 2), "QLinearConv": (1, 2, 3, 4, 5, 6, 7, 8),
    "QLinearMatMul": (1, 2, 4, 5, 6, 7), "MatMulInteger": (2, 3),
    "ConstantOfShape": (0,), "Range": (0, 1, 2), "OneHot": (1, 2), "Trilu": (1,), "Upsample": (1,),
    "CenterCropPad": (1,), "NonMaxSuppression": (2, 3, 4), "Dropout": (1, 2), "Col2Im": (1, 2),
    "LSTM": (1, 2, 3, 4), "GRU": (1, 2, 3, 4), "RNN": (1, 2, 3, 4), "STFT": (1, 3), "DFT": (1, 2),
    "BlackmanWindow": (0,), "HannWindow": (0,), "HammingWindow": (0,), "MelWeightMatrix": (0, 1, 2, 3, 4),
    "RotaryEmbedding": (1, 2, 3), "Attention": (3,),
}


@attrs.define
class Outcome:
    name: str
    status: str  # matched | mismatch | f16 precision | run error | invalid | not lowered | import error
    detail: str = ""


LOWERED = ("matched", "mismatch", "f16 precision", "run error", "invalid")
VALIDATED = ("matched", "mismatch", "f16 precision", "run error")


@attrs.define
class Tally:
    backend: str
    outcomes: list[Outcome] = attrs.Factory(list)
    seconds: float = 0.0

    def count(self, statuses: Sequence[str]) -> int:
        return sum(o.status in statuses for o in self.outcomes)

    def summary(self) -> str:
        n = len(self.outcomes)
        f16 = self.count(("f16 precision",))
        denom = n - f16
        matched = self.count(("matched",))
        pct = 100.0 * matched / denom if denom else 0.0
        extra = f", float16 precision cases {f16} (excepted)" if runs_float_in_float16(self.backend) else ""
        return (f"{self.backend}: importable {n}, lowered {self.count(LOWERED)}, validated {self.count(VALIDATED)}, "
                f"matched {matched}{extra} -> {matched}/{denom} = {pct:.1f}% ({self.seconds:.0f}s)")

    def reasons(self, top: int = 20) -> list[tuple[int, str]]:
        c = collections.Counter(f"{o.status}: {_normalise(o.detail)}" for o in self.outcomes
                                if o.status not in ("matched", "f16 precision"))
        return [(k, r) for r, k in c.most_common(top)]


def _normalise(text: str) -> str:
    text = re.sub(r"node \S+ \(", "node (", text)
    text = re.sub(r"`[^`]*`", "`…`", text)
    text = re.sub(r"(?<![A-Za-z_])\d+", "N", text)
    return text[:200]


def importable(case) -> str | None:
    """Why the case is not importable, or None."""
    from onnx import AttributeProto, TensorProto

    g = case.model.graph
    for n in g.node:
        if n.domain not in ("", "ai.onnx"):
            return f"domain {n.domain}"
        if any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in n.attribute):
            return "control flow"
        if n.op_type in RANDOM_OPS:
            return "random"
    for vi in list(g.input) + list(g.output):
        if not vi.type.HasField("tensor_type"):
            return "not a tensor (sequence/optional/map)"
        t = TensorProto.DataType.Name(vi.type.tensor_type.elem_type)
        if t not in QNN_TYPES:
            return f"type {t}"
    if not case.data_sets:
        return "no data"
    inputs, outputs = case_data(case)
    if any(not isinstance(a, np.ndarray) for a in list(inputs) + list(outputs)):
        return "non-tensor data"
    if _training_dropout(g, inputs):
        return "random"
    return None


def _training_dropout(graph, inputs: list) -> bool:
    """A Dropout in training mode with a ratio above 0: its mask comes from numpy's random generator."""
    from onnx import numpy_helper

    data = {i.name: a for i, a in zip(graph.input, inputs)}
    data.update({t.name: numpy_helper.to_array(t) for t in graph.initializer})
    for n in graph.node:
        if n.op_type != "Dropout" or len(n.input) < 3 or n.input[2] not in data:
            continue
        ratio = data.get(n.input[1], 0.5) if n.input[1] else 0.5
        if bool(np.asarray(data[n.input[2]]).reshape(-1)[0]) and float(np.asarray(ratio).reshape(-1)[0]) > 0:
            return True
    return False


def param_names(model) -> set[str]:
    """Names of the graph inputs that feed a parameter-like input position of some node."""
    return onnx_cases.param_names(model, STATIC_INPUTS)


def freeze_params(model, inputs: list[np.ndarray], also: set[str] = frozenset()):
    """The model with graph inputs at parameter-like positions (and `also`) frozen into initializers."""
    return onnx_cases.freeze_params(model, inputs, STATIC_INPUTS, also)


def run_case(case, rules, backend: str, *, float16: bool | None = None, also: set[str] = frozenset()) -> Outcome:
    import qlower
    from qlower.diagnostics import QlowerError
    from qlower.frontends.onnx_frontend import load_onnx
    from qlower.reference.interpreter import run_dequantized

    inputs, expected = case_data(case)
    model, inputs = freeze_params(case.model, list(inputs), also)
    try:
        graph = load_onnx(model)
    except QlowerError as exc:
        return Outcome(case.name, "import error", str(exc).splitlines()[0])
    except Exception as exc:  # noqa: BLE001 - an internal error is a finding to report, not a crash
        return Outcome(case.name, "import error", f"internal error: {type(exc).__name__}: {exc}")
    outputs = {o.name: graph.value(o.name) if graph.has_value(o.name) else None for o in model.graph.output}
    try:
        result = qlower.lower(graph, rules, backend=backend, float16=float16)
    except QlowerError as exc:
        return Outcome(case.name, "not lowered", str(exc).splitlines()[0])
    except Exception as exc:  # noqa: BLE001
        return Outcome(case.name, "not lowered", f"internal error: {type(exc).__name__}: {exc}")
    if result.qnn is None:
        return Outcome(case.name, "not lowered", str(result.errors[0]).splitlines()[0] if result.errors else "")
    if not result.ok:
        return Outcome(case.name, "invalid", str(result.errors[0]).splitlines()[0])
    try:
        got = run_dequantized(result.qnn, _feeds(result.qnn, model, inputs))
    except (QlowerError, ValueError, KeyError) as exc:
        return Outcome(case.name, "run error", f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
    except Exception as exc:  # noqa: BLE001
        return Outcome(case.name, "run error", f"internal error: {type(exc).__name__}: {exc}")
    f16 = runs_float_in_float16(backend) and float16 is not False
    problem = _compare(case, outputs, got, expected, f16)
    if problem is None:
        return Outcome(case.name, "matched")
    if f16 and run_case(case, rules, backend, float16=False, also=also).status == "matched":
        return Outcome(case.name, "f16 precision", problem)
    return Outcome(case.name, "mismatch", problem)


def collect(name_filter: str | None = None) -> tuple[list, collections.Counter]:
    """The importable node cases, and why the others are not."""
    from onnx.backend.test.case.node import collect_testcases

    cases, skipped = [], collections.Counter()
    for c in collect_testcases():
        if c.kind != "node" or (name_filter and name_filter not in c.name):
            continue
        why = importable(c)
        if why is None:
            cases.append(c)
        else:
            skipped[why] += 1
    return cases, skipped


def run_all(cases: Iterable, backend: str) -> Tally:
    import qlower

    t0 = time.perf_counter()
    rules = qlower.load_rules(packs=["onnx"])
    tally = Tally(backend)
    cases = list(cases)
    by_name = {c.name: c for c in cases}
    for case in cases:
        base = by_name.get(case.name.removesuffix("_expanded")) if case.name.endswith("_expanded") else None
        also = param_names(base.model) if base is not None else set()
        with np.errstate(all="ignore"):
            tally.outcomes.append(run_case(case, rules, backend, also=also))
    tally.seconds = time.perf_counter() - t0
    return tally


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", action="append", choices=BACKENDS)
    ap.add_argument("--case", help="only cases whose name contains this")
    ap.add_argument("--list", action="append", default=[], metavar="STATUS",
                    help="list the cases with this outcome (e.g. mismatch, 'not lowered', all)")
    ap.add_argument("--top", type=int, default=25, help="how many failure reasons to print")
    args = ap.parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            cases, skipped = collect(args.case)
        print(f"node cases: {len(cases)} importable; not importable: "
              + ", ".join(f"{k} {v}" for k, v in skipped.most_common()))
        gc.collect()
        gc.freeze()
        for backend in args.backend or ["cpu", "htp"]:
            tally = run_all(cases, backend)
            for o in sorted(tally.outcomes, key=lambda o: (o.status, o.name)):
                if "all" in args.list or o.status in args.list:
                    print(f"  {o.status:14} {o.name}  {o.detail}")
            if runs_float_in_float16(backend):
                f16 = [o.name for o in tally.outcomes if o.status == "f16 precision"]
                if f16:
                    print(f"float16 precision cases ({len(f16)}): " + ", ".join(sorted(f16)))
            print("top failure reasons:")
            for k, reason in tally.reasons(args.top):
                print(f"  {k:4}  {reason}")
            print(tally.summary())
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
