"""Source semantics of the `onnx` dialect: ONNX's own reference evaluator, one node at a time.

qlower does not reimplement ONNX operators. Each kernel call builds (or reuses)
a one-node ONNX model and runs it with `onnx.reference.ReferenceEvaluator`,
so rule tests and whole-graph checks compare against the semantics ONNX
itself publishes.

Two conventions connect the evaluator to qlower's kernel contract:

* The onnx dialect keeps constant *parameter inputs* (Reshape's shape,
  Slice's starts..., Reduce axes, Clip min/max, ...) as attributes, whatever
  opset the model used (see `PARAM_INPUTS`). The kernel turns them back into
  inputs of the opset it evaluates at.
* Like every source dialect, kernels compute on real values: quantized
  operands arrive dequantized, and a result with an encoding is returned as
  real float32. QuantizeLinear with an encoded result therefore returns
  dequantize(quantize(x)), and DequantizeLinear of an already-real operand is
  the identity. int64 results come back as int32 (qlower's onnx graphs hold
  no int64, QNN computes none).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs
import numpy as np

from qlower.qnn.shapes.spatial import same_pads
from qlower.reference.spec import Kernel, KernelError, OutSpec

# The opset kernels evaluate at (ops introduced later use their own first version).
EVAL_OPSET = 21


@attrs.frozen
class ParamInput:
    """An ONNX input that qlower's onnx dialect carries as an attribute when it is constant."""

    index: int  # input position in the ONNX schema
    attr: str  # attribute name in the onnx dialect
    kind: str  # "ints" (int64 1-D), "int" (int64 scalar), "int1" (int64 [1]), "floats", "like0" (scalar of input 0's dtype)
    since: int  # first opset in which ONNX takes it as an input (before: an attribute of the same name)


def _p(index: int, attr: str, kind: str, since: int) -> ParamInput:
    return ParamInput(index, attr, kind, since)


_REDUCE_18 = ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
              "ReduceProd", "ReduceSumSquare")

PARAM_INPUTS: Mapping[str, tuple[ParamInput, ...]] = MappingProxyType({
    "Reshape": (_p(1, "shape", "ints", 5),),
    "Expand": (_p(1, "shape", "ints", 1),),
    "Tile": (_p(1, "repeats", "ints", 1),),
    "Slice": (_p(1, "starts", "ints", 10), _p(2, "ends", "ints", 10), _p(3, "axes", "ints", 10),
              _p(4, "steps", "ints", 10)),
    "Split": (_p(1, "split", "ints", 13),),
    "Squeeze": (_p(1, "axes", "ints", 13),),
    "Unsqueeze": (_p(1, "axes", "ints", 13),),
    "ReduceSum": (_p(1, "axes", "ints", 13),),
    **{name: (_p(1, "axes", "ints", 18),) for name in _REDUCE_18},
    "Clip": (_p(1, "min", "like0", 11), _p(2, "max", "like0", 11)),
    "Pad": (_p(1, "pads", "ints", 11), _p(2, "constant_value", "like0", 11), _p(3, "axes", "ints", 18)),
    "TopK": (_p(1, "k", "int1", 10),),
    "CumSum": (_p(1, "axis", "int", 1),),
    "Resize": (_p(1, "roi", "floats", 11), _p(2, "scales", "floats", 10), _p(3, "sizes", "ints", 11)),
    "STFT": (_p(1, "frame_step", "int", 1), _p(3, "frame_length", "int", 1)),
    "CumProd": (_p(1, "axis", "int", 26),),
    "DFT": (_p(1, "dft_length", "int", 17), _p(2, "axis", "int", 20)),
})

_ONNX_FLOAT = {"float16", "float32", "float64", "bfloat16"}


def _freeze(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, np.ndarray):
        return (v.dtype.str, v.shape, v.tobytes())
    return v


def _param_array(p: ParamInput, value: Any, first: np.ndarray | None) -> np.ndarray:
    if p.kind == "ints":
        return np.asarray(value, dtype=np.int64).reshape(-1)
    if p.kind == "int":
        return np.asarray(int(value), dtype=np.int64)
    if p.kind == "int1":
        return np.asarray([int(value)], dtype=np.int64)
    if p.kind == "floats":
        return np.asarray(value, dtype=np.float32).reshape(-1)
    dtype = first.dtype if first is not None else np.dtype(np.float32)
    return np.asarray(value, dtype=dtype)


def with_param_inputs(op: str, args: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """Operands and attributes as ONNX wants them at EVAL_OPSET: parameter attributes become inputs."""
    args, attrs = list(args), dict(attrs)
    for p in PARAM_INPUTS.get(op, ()):
        value = attrs.pop(p.attr, None)
        has_operand = p.index < len(args) and args[p.index] is not None
        if value is None or has_operand or (isinstance(value, (list, tuple)) and not value):
            continue  # absent, given as an operand, or an empty list (ONNX's "absent")
        while len(args) <= p.index:
            args.append(None)
        first = args[0] if args and isinstance(args[0], np.ndarray) else None
        args[p.index] = _param_array(p, value, first)
    while args and args[-1] is None:
        args.pop()
    return args, attrs


def infer_shapes(op: str, attrs: Mapping[str, Any], operands: Sequence[Any], n_out: int) -> list[Any]:
    """Result (dtype, shape) pairs by ONNX shape inference on a one-node model (None where unknown).

    `operands` holds, per input, None (absent), an ndarray (constant) or a (dtype, shape) pair.
    """
    from onnx import shape_inference

    from qlower.reference.onnx_types import onnx_to_numpy

    args, attrs = with_param_inputs(op, operands, attrs)
    model, _ = _model(op, attrs, args, n_out, static=True)
    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:
        return [None] * n_out
    found = {}
    for vi in inferred.graph.output:
        t = vi.type.tensor_type
        if not t.elem_type or not t.HasField("shape"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        if None not in dims:
            found[vi.name] = (onnx_to_numpy(t.elem_type), tuple(int(d) for d in dims))
    return [found.get(f"out{i}") for i in range(n_out)]


class OnnxKernels(Mapping[str, Kernel]):
    """op name → kernel for every default-domain ONNX op; evaluators are built lazily and cached.

    The cache is bounded (least recently used evicted) and belongs to this
    object, so separate users never share state.
    """

    def __init__(self, cache_size: int = 512) -> None:
        self._cache_size = cache_size
        self._cache: OrderedDict[tuple, Any] = OrderedDict()
        self._names: tuple[str, ...] | None = None
        self._kernels: dict[str, Kernel] = {}

    # ------------------------------------------------------------- mapping
    def _all_names(self) -> tuple[str, ...]:
        if self._names is None:
            from onnx import defs

            self._names = tuple(sorted({s.name for s in defs.get_all_schemas_with_history()
                                        if s.domain in ("", "ai.onnx")}))
        return self._names

    def __getitem__(self, op: str) -> Kernel:
        k = self._kernels.get(op)
        if k is None:
            if op not in self._all_names():
                raise KeyError(op)

            def k(inputs, attrs, outs, _op=op):
                return self.run(_op, inputs, attrs, outs)
            self._kernels[op] = k
        return k

    def __iter__(self) -> Iterator[str]:
        return iter(self._all_names())

    def __len__(self) -> int:
        return len(self._all_names())

    def __contains__(self, op: object) -> bool:
        return isinstance(op, str) and op in self._all_names()

    # ------------------------------------------------------------- running
    def run(self, op: str, inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any],
            outs: Sequence[OutSpec]) -> list[np.ndarray]:
        """Evaluate one onnx-dialect op on real-valued inputs."""
        args = [None if x is None else np.asarray(x) for x in inputs]
        op = "ScatterElements" if op == "Scatter" else op  # Scatter-9 is ScatterElements by its old name
        if op == "DequantizeLinear" and args and args[0] is not None and args[0].dtype.kind == "f":
            return [np.asarray(args[0], np.float32)]  # already real: the operand carried the encoding
        args, attrs = with_param_inputs(op, args, attrs)
        if op == "GatherElements" and len(args) == 2 and all(a is not None for a in args):
            return [_to_result(_gather_elements(args[0], args[1], int(attrs.get("axis", 0))),
                               outs[0] if outs else None)]
        if op == "MaxPool":
            fixed = _max_pool_exact_path(args, attrs)
            if fixed is not None and fixed[0][0].ndim > args[0].ndim:  # a trailing unit dim: run, drop it
                got = self.run(op, fixed[0], fixed[1], [_widened_spec(o) for o in outs])
                return [np.asarray(r)[..., 0] for r in got]
            if fixed is not None:
                args, attrs = fixed
        n_out = max(len(outs), 1)
        sess, names = self._session(op, attrs, args, n_out)
        feeds = {name: a for name, a in zip(names, args) if name}
        try:
            with np.errstate(all="ignore"):  # NaN and inf are legitimate ONNX results
                results = sess.run(None, feeds)
        except Exception as exc:  # the evaluator rejects bad inputs with assorted exception types
            raise KernelError(f"onnx.{op}: {type(exc).__name__}: {exc}") from None
        out = []
        for i, r in enumerate(results[:len(outs)] if outs else results):
            out.append(_to_result(np.asarray(r), outs[i] if i < len(outs) else None))
        if op == "QuantizeLinear" and outs and outs[0].encoding is not None:
            out[0] = self._dequantized(args, attrs, np.asarray(results[0]))
        return out

    def _dequantized(self, args: list, attrs: Mapping[str, Any], q: np.ndarray) -> np.ndarray:
        """QuantizeLinear whose result carries an encoding: its real value is DQ(Q(x))."""
        dq_args = [q] + args[1:3]
        dq_attrs = {k: v for k, v in attrs.items() if k in ("axis", "block_size")}
        sess, names = self._session("DequantizeLinear", dq_attrs, dq_args, 1)
        feeds = {name: a for name, a in zip(names, dq_args) if name}
        return np.asarray(sess.run(None, feeds)[0], np.float32)

    def _session(self, op: str, attrs: Mapping[str, Any], args: Sequence[np.ndarray | None], n_out: int):
        sig = tuple(None if a is None else (a.dtype.str, a.ndim) for a in args)
        key = (op, tuple(sorted((k, _freeze(v)) for k, v in attrs.items())), sig, n_out)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        built = _build(op, attrs, args, n_out)
        self._cache[key] = built
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return built


def _max_pool_exact_path(args: list, attrs: Mapping[str, Any]) -> tuple[list, dict] | None:
    """MaxPool's operands and attributes rewritten to the same windows, values and flat Indices for
    onnx.reference's exact MaxPool routine, or None when no rewrite is needed or possible.

    onnx.reference computes a MaxPool whose strides and dilations are all 1 with a generic pooling
    routine that pads 1-D inputs wrongly and builds Indices without the plane offset (and from the
    output shape instead of the kernel's); any other stride sends it to its exact routine, which
    onnxruntime and torch agree with: 1-D and 2-D pooling gets a trailing unit spatial dim pooled at
    stride 2. That routine stops at 3-D: there a kernel dim of 1 gets dilation 2 instead (a one-tap
    window ignores its dilation), as in torch's export of MaxPool3d(return_indices=True); a 3-D kernel
    without one is left to the generic routine. auto_pad becomes explicit pads: the exact routine
    counts ceil(size / stride) SAME_LOWER windows as floor, and ignores ceil_mode under VALID (ONNX
    shape inference and onnxruntime do neither)."""
    x = args[0] if args else None
    if x is None or np.ndim(x) not in (3, 4, 5) or "kernel_shape" not in attrs:
        return None
    nd = np.ndim(x) - 2
    strides = [int(v) for v in attrs.get("strides") or [1] * nd]
    dilations = [int(v) for v in attrs.get("dilations") or [1] * nd]
    kernel = [int(v) for v in attrs["kernel_shape"]]
    fixed = dict(attrs)
    mode = attrs.get("auto_pad", "NOTSET")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        pairs = [same_pads(size, k, st, d, mode == "SAME_UPPER")
                 for size, k, st, d in zip(np.shape(x)[2:], kernel, strides, dilations)]
        fixed.update(auto_pad="NOTSET", pads=[b for b, _ in pairs] + [e for _, e in pairs])
    elif mode == "VALID":
        fixed.update(auto_pad="NOTSET", pads=[0] * (2 * nd))
    resolved = (list(args), fixed) if mode in ("SAME_UPPER", "SAME_LOWER", "VALID") else None
    if any(v != 1 for v in strides + dilations):
        return resolved
    if nd == 3:
        if 1 not in kernel:
            return resolved
        one = kernel.index(1)
        fixed.update(dilations=[2 if i == one else 1 for i in range(nd)], strides=strides)
        return list(args), fixed
    pads = [int(v) for v in fixed.get("pads") or [0] * (2 * nd)]
    fixed.update(kernel_shape=kernel + [1], strides=strides + [2], dilations=dilations + [1],
                 pads=pads[:nd] + [0] + pads[nd:] + [0])
    return [np.asarray(x)[..., None]] + list(args[1:]), fixed


def _gather_elements(data: np.ndarray, index: np.ndarray, axis: int) -> np.ndarray:
    """ONNX GatherElements (negative indices count from the end). onnx.reference computes it with
    np.choose, which takes at most 64 choices, and falls back to a 2-D routine that reads only
    each row's first index: a [1, 64] table gathered with a [1, 8] index (BERT's token type ids)
    fails there. numpy's take_along_axis is the op's definition."""
    if data.ndim != index.ndim:
        raise KernelError(f"onnx.GatherElements: data of rank {data.ndim} with indices of rank {index.ndim}")
    axis = axis + data.ndim if axis < 0 else axis
    if not 0 <= axis < data.ndim:
        raise KernelError(f"onnx.GatherElements: axis {axis} out of range for rank {data.ndim}")
    n = data.shape[axis]
    idx = np.asarray(index, np.int64)
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise KernelError(f"onnx.GatherElements: indices outside [{-n}, {n - 1}]")
    others = [i for i in range(data.ndim) if i != axis]
    if any(index.shape[i] > data.shape[i] for i in others):
        raise KernelError(f"onnx.GatherElements: indices {list(index.shape)} do not fit data {list(data.shape)}")
    sliced = data[tuple(slice(0, index.shape[i]) if i != axis else slice(None) for i in range(data.ndim))]
    return np.take_along_axis(sliced, np.where(idx < 0, idx + n, idx), axis=axis)


def _widened_spec(spec: OutSpec) -> OutSpec:
    """`spec` for the result with a trailing unit dim (see _max_pool_exact_path)."""
    return attrs.evolve(spec, shape=None if spec.shape is None else tuple(spec.shape) + (1,))


def _to_result(r: np.ndarray, spec: OutSpec | None) -> np.ndarray:
    if spec is not None and spec.encoding is not None:
        return r.astype(np.float32)
    if r.dtype == np.int64:
        r = r.astype(np.int32)
    elif r.dtype == np.uint64:
        r = r.astype(np.uint32)
    if spec is not None and spec.shape is not None and r.dtype != spec.dtype and r.dtype.kind != "O":
        r = r.astype(spec.dtype)
    return r


def _opset_for(op: str, attr_names: Sequence[str] = ()) -> int:
    """EVAL_OPSET, or the newest opset for ops (or attributes) that came later."""
    from onnx import defs

    try:
        schema = defs.get_schema(op, EVAL_OPSET, "")
    except Exception:
        return defs.onnx_opset_version()
    if any(a not in schema.attributes for a in attr_names if not a.startswith("_")):
        return defs.onnx_opset_version()
    return EVAL_OPSET


def _attribute(schema: Any, name: str, value: Any):
    """An AttributeProto of the schema's declared type (qlower stores dtypes by name, bools as ints)."""
    from onnx import AttributeProto, helper

    from qlower.reference.onnx_types import dtype_to_onnx

    decl = schema.attributes.get(name) if schema is not None else None
    kind = decl.type if decl is not None else None
    if kind == AttributeProto.INT:
        if isinstance(value, str):
            value = dtype_to_onnx(value)
        return helper.make_attribute(name, int(value))
    if kind == AttributeProto.FLOAT:
        return helper.make_attribute(name, float(value))
    if kind == AttributeProto.INTS:
        return helper.make_attribute(name, [int(v) for v in value], attr_type=AttributeProto.INTS)
    if kind == AttributeProto.FLOATS:
        return helper.make_attribute(name, [float(v) for v in value], attr_type=AttributeProto.FLOATS)
    if kind == AttributeProto.STRINGS:
        return helper.make_attribute(name, [str(v) for v in value], attr_type=AttributeProto.STRINGS)
    if kind == AttributeProto.TENSOR:
        return helper.make_attribute(name, _tensor(np.asarray(value)))
    if isinstance(value, bool):
        value = int(value)
    return helper.make_attribute(name, value)


def _tensor(a: np.ndarray):
    from onnx import numpy_helper

    return numpy_helper.from_array(a)


def _model(op: str, attrs: Mapping[str, Any], args: Sequence[Any], n_out: int, static: bool = False):
    """A one-node ModelProto; array args are runtime inputs (or, with `static`, initializers)."""
    from onnx import TensorProto, defs, helper

    from qlower.reference.onnx_types import numpy_to_onnx

    opset = _opset_for(op, [k for k, v in attrs.items() if v is not None])
    try:
        schema = defs.get_schema(op, opset, "")
    except Exception:
        raise KernelError(f"onnx.{op} is not a default-domain ONNX op") from None
    names = [f"in{i}" if a is not None else "" for i, a in enumerate(args)]
    node = helper.make_node(op, names, [f"out{i}" for i in range(n_out)])
    for k, v in attrs.items():
        if k.startswith("_") or v is None or (isinstance(v, (list, tuple)) and not len(v)):
            continue
        node.attribute.append(_attribute(schema, k, v))
    inputs, inits = [], []
    for n, a in zip(names, args):
        if a is None:
            continue
        if isinstance(a, np.generic):  # a numpy scalar is 0-d data, not a (dtype, shape) pair
            a = np.asarray(a)
        if isinstance(a, np.ndarray):
            if static:
                inits.append(_tensor(a.astype(np.int64) if a.dtype == np.int32 else a))
                inits[-1].name = n
                continue
            inputs.append(helper.make_tensor_value_info(n, numpy_to_onnx(a.dtype), [None] * a.ndim))
        else:
            dtype, shape = a
            inputs.append(helper.make_tensor_value_info(n, numpy_to_onnx(np.dtype(dtype)), list(shape)))
    outputs = [helper.make_tensor_value_info(f"out{i}", TensorProto.UNDEFINED, None) for i in range(n_out)]
    graph = helper.make_graph([node], f"qlower_{op}", inputs, outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), names


def _build(op: str, attrs: Mapping[str, Any], args: Sequence[np.ndarray | None], n_out: int):
    """A ReferenceEvaluator over a one-node model, and the input names to feed."""
    from onnx.reference import ReferenceEvaluator

    model, names = _model(op, attrs, args, n_out)
    try:
        return ReferenceEvaluator(model), names
    except Exception as exc:
        raise KernelError(f"onnx.{op}: cannot build the reference evaluator: {exc}") from None
