"""ONNX backend node test cases (`onnx.backend.test.case.node`) prepared for qlower.

Shared by `tools/onnx_conformance.py` and the default-run sample in
`tests/frontends/test_onnx_backend_cases.py`, so both judge a case the same
way: the first data set as arrays, graph inputs at parameter positions frozen
into initializers (as a deployed model has them), the inputs in the lowered
graph's stored form, and the comparison with ONNX's expected outputs. Lowering
itself is the caller's (it goes through the API, a layer above this one).
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

import numpy as np

from qlower.reference.onnx_kernels import PARAM_INPUTS


def case_data(case: Any) -> tuple[list, list]:
    """The first data set's inputs and outputs, numpy scalars and TensorProtos as arrays."""
    from onnx import TensorProto, numpy_helper

    def arr(a):
        if isinstance(a, TensorProto):
            return numpy_helper.to_array(a)
        return np.asarray(a) if isinstance(a, (np.generic, int, float, bool)) else a

    inputs, outputs = case.data_sets[0]
    return [arr(a) for a in inputs], [arr(a) for a in outputs]


def param_names(model: Any, static_inputs: Mapping[str, tuple[int, ...]] = {}) -> set[str]:
    """Names of the graph inputs that feed a parameter-like input position of some node: the
    frontend's parameter inputs plus `static_inputs` (op type → input positions QNN needs static)."""
    names = set()
    for n in model.graph.node:
        positions = {p.index for p in PARAM_INPUTS.get(n.op_type, ())} | set(static_inputs.get(n.op_type, ()))
        names |= {n.input[i] for i in positions if i < len(n.input) and n.input[i]}
    return names


def freeze_params(model: Any, inputs: list[np.ndarray], static_inputs: Mapping[str, tuple[int, ...]] = {},
                  also: Set[str] = frozenset()) -> tuple[Any, list[np.ndarray]]:
    """The model with graph inputs at parameter-like positions turned into initializers holding the data.

    `also` names further inputs to freeze: an `_expanded` case (the op's function body inlined)
    freezes the inputs its unexpanded case has at parameter positions, whatever nodes now read them.
    """
    import onnx
    from onnx import numpy_helper

    init = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in init]
    data = dict(zip(names, inputs))
    static = {name for name in param_names(model, static_inputs) | set(also) if name in data}
    if not static:
        return model, inputs
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = [i for i in m.graph.input if i.name not in static]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    m.graph.initializer.extend(numpy_helper.from_array(np.asarray(data[name]), name) for name in sorted(static))
    return m, [data[i.name] for i in keep if i.name in data]


def case_feeds(qnn: Any, model: Any, inputs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The case's inputs in the lowered graph's stored form (64-bit integers narrowed, scalars → [1])."""
    init = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in init]
    feeds = {}
    for name, a in zip(names, inputs):
        t = qnn.tensors.get(name)
        if t is not None and name in qnn.inputs:
            a = np.asarray(a)
            if a.dtype == np.int64:
                a = a.astype(np.int32)
            elif a.dtype == np.uint64:
                a = a.astype(np.uint32)
            feeds[name] = a.reshape(t.dims)
    return feeds


def expected_real(v: Any, want: np.ndarray) -> np.ndarray:
    """Expected outputs as real values: quantized outputs (QuantizeLinear's) are dequantized."""
    if v is None or v.quant is None or want.dtype.kind == "f":
        return np.asarray(want, np.float64)
    scale, zero = np.asarray(v.quant.scale), np.asarray(v.quant.zero_point)
    if v.quant.axis is not None:
        shape = [1] * want.ndim
        shape[v.quant.axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return (np.asarray(want, np.float64) - zero) * scale


def compare(case: Any, outputs: Mapping[str, Any], got: Mapping[str, np.ndarray], expected: list,
            f16: bool = False) -> str | None:
    """None when every output agrees with ONNX's expected one, else what differs.

    Tolerances are the case's own (at least rtol 1e-4, atol 1e-5); with `f16` (a float16 run) float
    outputs get 2e-2 relative to the output's largest magnitude.
    """
    for (name, v), want in zip(outputs.items(), expected):
        ref = expected_real(v, np.asarray(want))
        if v is None or name not in got or np.size(got[name]) != ref.size:
            return f"output {name} missing or of the wrong size"
        have = np.asarray(got[name], np.float64).reshape(ref.shape)
        if f16 and ref.dtype.kind == "f" and np.asarray(want).dtype.kind == "f":
            scale = float(np.nanmax(np.abs(ref[np.isfinite(ref)]), initial=0.0)) or 1.0
            ok = np.allclose(have, ref, rtol=2e-2, atol=2e-2 * scale, equal_nan=True)
        else:
            ok = np.allclose(have, ref, rtol=max(case.rtol, 1e-4), atol=max(case.atol, 1e-5), equal_nan=True)
        if not ok:
            with np.errstate(all="ignore"):
                err = np.nanmax(np.abs(have - ref)) if have.size else 0.0
            return f"output {name}: max error {err:.3g}"
    return None
