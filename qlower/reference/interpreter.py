"""Run a QnnGraph on numpy: the reference meaning of what qlower emits.

Values are kept in their *stored* form (the tensor's numpy storage dtype: uint8
for UFIXED_POINT_8, uint16 bit patterns for BFLOAT_16...). Around each ordinary
kernel the interpreter

* dequantizes every input tensor that has an encoding (real = scale·(q + offset),
  see `qlower.reference.quant`) and decodes bfloat16, so kernels see real values;
* converts scalar params that QNN states in an input's or output's quantized
  domain (Pad's pad_constant_value, OneHot's on/off values...) to real values;
* checks every result against the declared dims and requantizes results whose
  tensor has an encoding (round half to even, saturating to the bitwidth).

Quantize, Dequantize, Convert and Cast (`OpEntry.raw_io` in the registry) get stored values plus the
input specs instead. Graph inputs are given in stored form; a float array for a
quantized (or bfloat16) input is encoded first with the tensor's encoding.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs
import numpy as np

from qlower.diagnostics import QlowerError, did_you_mean, error
from qlower.qnn.datatypes import DataType, to_numpy
from qlower.qnn.model import (
    EncodingKind, OpConfig, QnnGraph, QnnTensor, QuantEncoding, ScalarParam, TensorType,
)
from qlower.qnn.opdef import OpDefRegistry
from qlower.qnn.registry import QnnOps
from qlower.reference.qnn import qnn_ops
from qlower.reference.quant import (
    bfloat16_bits_to_float, bit_range, dequantize, float_to_bfloat16_bits, quantize,
)
from qlower.reference.spec import KernelError, OutSpec

# Scalar params whose integer value is in a tensor's quantized domain when that
# tensor is quantized: (op, param) -> ("in" | "out", index of that tensor).
QUANTIZED_DOMAIN_PARAMS: Mapping[tuple[str, str], tuple[str, int]] = MappingProxyType({
    ("Pad", "pad_constant_value"): ("in", 0),
    ("OneHot", "on_value"): ("out", 0),
    ("OneHot", "off_value"): ("out", 0),
    ("ConstantOfShape", "value"): ("out", 0),
})

_INPUT_TYPES = (TensorType.APP_WRITE, TensorType.APP_READWRITE)
_OUTPUT_TYPES = (TensorType.APP_READ, TensorType.APP_READWRITE)


# --- stored <-> real values of one tensor ------------------------------------------------

def effective_encoding(tensor: QnnTensor) -> QuantEncoding | None:
    """The tensor's effective encoding, or None when it is not fixed point.

    A 4-bit datatype (e.g. SFIXED_POINT_4 stored in int8) with an encoding that
    states no bitwidth gets the datatype's, so saturation uses the right range.
    """
    enc = tensor.encoding
    if not tensor.datatype.is_fixed_point:
        return None
    if enc is None or enc.kind == EncodingKind.UNDEFINED:
        raise QlowerError(error(f"fixed-point tensor `{tensor.name}` ({tensor.datatype.qnn_name}) has no encoding",
                                subject=f"tensor {tensor.name}", code="missing-encoding"))
    if enc.bitwidth is None and tensor.datatype.bitwidth < to_numpy(tensor.datatype).itemsize * 8:
        enc = attrs.evolve(enc, bitwidth=tensor.datatype.bitwidth)
    return enc


def _kernel_dtype(tensor: QnnTensor) -> np.dtype:
    """The dtype a kernel sees for this tensor: bfloat16 is presented as float32."""
    return np.dtype(np.float32) if tensor.datatype == DataType.BFLOAT_16 else to_numpy(tensor.datatype)


def decode_value(tensor: QnnTensor, stored: np.ndarray) -> np.ndarray:
    """Stored form to real values: dequantized, bfloat16 decoded, or unchanged."""
    enc = effective_encoding(tensor)
    if enc is not None:
        return dequantize(stored, enc, tensor.datatype)
    if tensor.datatype == DataType.BFLOAT_16:
        return bfloat16_bits_to_float(stored)
    return np.asarray(stored)


def encode_value(tensor: QnnTensor, value: np.ndarray) -> np.ndarray:
    """Real (or already stored) values to the tensor's stored form."""
    value = np.asarray(value)
    storage = to_numpy(tensor.datatype)
    floating = np.issubdtype(value.dtype, np.floating)
    enc = effective_encoding(tensor)
    if enc is not None and floating:
        return quantize(value, enc, tensor.datatype)
    if tensor.datatype == DataType.BFLOAT_16 and floating:
        return float_to_bfloat16_bits(value)
    if storage == np.bool_:
        return value != 0
    if np.issubdtype(storage, np.integer) and np.issubdtype(value.dtype, np.integer) and value.size:
        lo, hi = bit_range(tensor.datatype, enc) if enc is not None else (np.iinfo(storage).min, np.iinfo(storage).max)
        if value.min() < lo or value.max() > hi:
            raise ValueError(f"values in [{value.min()}, {value.max()}] do not fit [{lo}, {hi}]")
    if np.issubdtype(storage, np.integer) and floating:
        raise ValueError(f"float data given for integer tensor of dtype {storage}")
    return value.astype(storage)


def to_float32(tensor: QnnTensor, stored: np.ndarray) -> np.ndarray:
    return np.asarray(decode_value(tensor, stored)).astype(np.float32)


# --- running ------------------------------------------------------------------------------

def _fail(message: str, subject: str, code: str, hint: str | None = None) -> QlowerError:
    return QlowerError(error(message, subject=subject, code=code, hint=hint))


def graph_inputs(graph: QnnGraph) -> list[str]:
    """Declared inputs, or every APP_WRITE/APP_READWRITE tensor when none are declared."""
    return list(graph.inputs) or [n for n, t in graph.tensors.items() if t.type in _INPUT_TYPES]


def graph_outputs(graph: QnnGraph) -> list[str]:
    return list(graph.outputs) or [n for n, t in graph.tensors.items() if t.type in _OUTPUT_TYPES]


def _feed(graph: QnnGraph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = graph_inputs(graph)
    unknown = [n for n in inputs if n not in names]
    if unknown:
        raise _fail(f"`{unknown[0]}` is not an input of graph `{graph.name}`", f"graph {graph.name}",
                    "unknown-input", did_you_mean(unknown[0], names) or f"inputs are: {', '.join(names)}")
    env: dict[str, np.ndarray] = {}
    for name in names:
        tensor = graph.tensors.get(name)
        if tensor is None:
            raise _fail(f"graph input `{name}` has no tensor", f"graph {graph.name}", "unknown-tensor")
        if name not in inputs:
            raise _fail(f"missing value for graph input `{name}`", f"tensor {name}", "missing-input",
                        f"expected shape {list(tensor.dims)}, {tensor.datatype.qnn_name}")
        value = np.asarray(inputs[name])
        if value.shape != tuple(tensor.dims):
            raise _fail(f"input `{name}` has shape {list(value.shape)}, expected {list(tensor.dims)}",
                        f"tensor {name}", "input-shape")
        try:
            env[name] = encode_value(tensor, value)
        except ValueError as exc:
            raise _fail(f"input `{name}` ({tensor.datatype.qnn_name}): {exc}", f"tensor {name}",
                        "input-dtype") from None
    return env


def _param_value(op: OpConfig, p: Any) -> Any:
    if isinstance(p, ScalarParam):
        return p.value
    data = p.tensor.data
    if data is None:
        raise _fail(f"tensor param `{p.name}` has no data", f"node {op.name}", "missing-data")
    return np.asarray(data)


def _to_real_param(value: Any, p: Any, tensor: QnnTensor | None) -> Any:
    """An integer scalar in a quantized tensor's domain, as a real value."""
    if tensor is None or not isinstance(p, ScalarParam) or p.datatype.is_float:
        return value
    enc = effective_encoding(tensor)
    if enc is None or enc.per_axis:
        return value
    return float(enc.scales[0] * (int(value) + enc.offsets[0]))


def _inputs_of(op: OpConfig, graph: QnnGraph, env: Mapping[str, np.ndarray]) -> list[QnnTensor | None]:
    tensors: list[QnnTensor | None] = []
    for name in op.inputs:
        if not name:
            tensors.append(None)
            continue
        t = graph.tensors.get(name)
        if t is None:
            raise _fail(f"input `{name}` of {op.type} is not a tensor of the graph", f"node {op.name}",
                        "unknown-tensor", did_you_mean(name, graph.tensors))
        if t.type == TensorType.NULL:
            tensors.append(None)
            continue
        if t.type == TensorType.STATIC:
            if t.data is None:
                raise _fail(f"static tensor `{name}` has no data", f"node {op.name}", "missing-data")
        elif name not in env:
            raise _fail(f"input `{name}` of {op.type} is used before any op produces it", f"node {op.name}",
                        "not-computed")
        tensors.append(t)
    return tensors


def _outputs_of(op: OpConfig, graph: QnnGraph) -> list[QnnTensor]:
    tensors = []
    for name in op.outputs:
        t = graph.tensors.get(name)
        if t is None:
            raise _fail(f"output `{name}` of {op.type} is not a tensor of the graph", f"node {op.name}",
                        "unknown-tensor")
        tensors.append(t)
    return tensors


def _kernel_args(op: OpConfig, in_tensors: list[QnnTensor | None], env: Mapping[str, np.ndarray],
                 raw: bool) -> list[np.ndarray | None]:
    """Input values as the kernel sees them: stored (raw ops, bf16 decoded) or real."""
    args: list[np.ndarray | None] = []
    for t in in_tensors:
        if t is None:
            args.append(None)
            continue
        stored = np.asarray(t.data if t.type == TensorType.STATIC else env[t.name])
        try:
            if raw:
                args.append(bfloat16_bits_to_float(stored) if t.datatype == DataType.BFLOAT_16 else stored)
            else:
                args.append(decode_value(t, stored))
        except ValueError as exc:
            raise _fail(f"cannot read input `{t.name}` of {op.type}: {exc}", f"node {op.name}",
                        "bad-encoding") from None
    return args


def _real_params(op: OpConfig, params: dict[str, Any], in_tensors: list[QnnTensor | None],
                 out_tensors: list[QnnTensor]) -> None:
    """Rewrite the params of QUANTIZED_DOMAIN_PARAMS to real values, in place."""
    for p in op.params:
        where = QUANTIZED_DOMAIN_PARAMS.get((op.type, p.name))
        if where is not None:
            pool = in_tensors if where[0] == "in" else out_tensors
            ref = pool[where[1]] if where[1] < len(pool) else None
            params[p.name] = _to_real_param(params[p.name], p, ref)


def _store(op: OpConfig, t: QnnTensor, spec: OutSpec, value: np.ndarray, raw: bool) -> np.ndarray:
    """A kernel result, shape-checked, in the tensor's stored form."""
    value = np.asarray(value)
    if value.ndim == 0 and tuple(t.dims) == (1,):
        value = value.reshape(1)
    if value.shape != tuple(t.dims):
        raise _fail(f"{op.type} output `{t.name}` has shape {list(value.shape)}, declared {list(t.dims)}",
                    f"node {op.name}", "output-shape")
    try:
        if t.datatype == DataType.BFLOAT_16:
            return float_to_bfloat16_bits(value)
        if spec.encoding is not None and not raw:
            return quantize(value, spec.encoding, t.datatype)
    except ValueError as exc:
        raise _fail(f"cannot store output `{t.name}` of {op.type}: {exc}", f"node {op.name}", "bad-encoding") from None
    return value.astype(to_numpy(t.datatype), copy=False)


@functools.cache
def kernel_registry() -> QnnOps:
    """The op registry as the interpreter needs it: kernels (and shape functions) without the OpDef XML,
    which running a graph does not read; built once."""
    return qnn_ops(OpDefRegistry.from_files([]))


def _run_op(graph: QnnGraph, op: OpConfig, env: dict[str, np.ndarray], ops: QnnOps) -> None:
    subject = f"node {op.name}"
    entry = ops.of_package(op.type, op.package)
    kernel = entry.kernel if entry is not None else None
    if kernel is None:
        raise _fail(f"no reference kernel for {op.package}.{op.type}", subject, "no-kernel")
    raw = entry.raw_io
    in_tensors, out_tensors = _inputs_of(op, graph, env), _outputs_of(op, graph)
    outs = [OutSpec(t.dims, _kernel_dtype(t), effective_encoding(t)) for t in out_tensors]
    params = {p.name: _param_value(op, p) for p in op.params}
    args = _kernel_args(op, in_tensors, env, raw)
    try:
        if raw:
            in_specs = [None if t is None else OutSpec(t.dims, _kernel_dtype(t), effective_encoding(t))
                        for t in in_tensors]
            results = kernel(args, params, outs, in_specs=in_specs)  # type: ignore[call-arg]
        else:
            _real_params(op, params, in_tensors, out_tensors)
            results = kernel(args, params, outs)
    except KernelError as exc:
        raise _fail(f"{op.type}: {exc}", subject, "kernel-error") from exc
    except QlowerError:
        raise
    except Exception as exc:  # a kernel bug or numpy failure: still name the node
        raise _fail(f"{op.type} kernel failed: {type(exc).__name__}: {exc}", subject, "kernel-failed") from exc
    if len(results) != len(out_tensors):
        raise _fail(f"{op.type} produced {len(results)} results for {len(out_tensors)} outputs", subject,
                    "output-count")
    for t, spec, value in zip(out_tensors, outs, results):
        env[t.name] = _store(op, t, spec, value, raw)


def run(graph: QnnGraph, inputs: Mapping[str, np.ndarray], *, keep_all: bool = False,
        ops: QnnOps | None = None) -> dict[str, np.ndarray]:
    """Execute `graph.ops` in order and return graph outputs (stored form) by name.

    With keep_all, every tensor computed or fed is returned, for locating where
    two graphs start to differ. Kernels are found through `ops` (the op registry;
    by default `kernel_registry()`).
    """
    ops = ops if ops is not None else kernel_registry()
    env = _feed(graph, inputs)
    for op in graph.ops:
        _run_op(graph, op, env, ops)
    if keep_all:
        return dict(env)
    result = {}
    for name in graph_outputs(graph):
        t = graph.tensors.get(name)
        if name in env:
            result[name] = env[name]
        elif t is not None and t.type == TensorType.STATIC and t.data is not None:
            result[name] = np.asarray(t.data)
        else:
            raise _fail(f"graph output `{name}` is never produced", f"graph {graph.name}", "output-missing")
    return result


def run_dequantized(graph: QnnGraph, inputs: Mapping[str, np.ndarray], *,
                    ops: QnnOps | None = None) -> dict[str, np.ndarray]:
    """Like `run`, but outputs are real values as float32 (dequantized, bf16 decoded)."""
    return {name: to_float32(graph.tensors[name], value) for name, value in run(graph, inputs, ops=ops).items()}

