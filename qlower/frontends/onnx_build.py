"""Building the onnx-dialect Graph from an (inferred) ModelProto: see `onnx_frontend`'s docstring."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from qlower._files import UnsafeReference, confined
from qlower.diagnostics import QlowerError, error
from qlower.frontends.onnx_qdq import QdqResult, fold_qdq
from qlower.reference.onnx_types import graph_dtype, narrow_ints, onnx_to_numpy
from qlower.graph.core import Graph, Value
from qlower.graph.lazy import LazyArray, RawSource, widen_bf16
from qlower.reference.onnx_kernels import EVAL_OPSET, PARAM_INPUTS

# Legacy spellings renamed to the current attribute names (op, old) → new.
_RENAMED = {("Pad", "paddings"): "pads", ("Pad", "value"): "constant_value"}
_SOFTMAX_LIKE = ("Softmax", "LogSoftmax", "Hardmax")


@attrs.define
class Spec:
    """A node after normalisation, not yet in the graph."""

    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]
    name: str


def _fail(message: str, subject: str | None = None, hint: str | None = None) -> QlowerError:
    return QlowerError(error(message, subject=subject, hint=hint, code="onnx-import"))


def _attr_value(a: Any) -> Any:
    """An ONNX attribute as plain JSON-friendly Python (tensors as nested lists, strings decoded)."""
    from onnx import helper

    v = helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list):
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
    if hasattr(v, "dims") and hasattr(v, "data_type"):
        return np.asarray(_initializer(v, None)).tolist()  # (its dims and bytes checked first)
    return v


def _initializer(t: Any, base_dir: Path | None) -> np.ndarray | LazyArray:
    """An initializer's data; ONNX external data becomes a reference read when needed.

    Its dims and byte counts are checked before anything is read or allocated, and an external
    data file must lie inside the model's folder (what onnx's own loader demands)."""
    from onnx import TensorProto, numpy_helper

    subject = f"tensor {t.name}"
    dims = [int(d) for d in t.dims]
    if any(d < 0 for d in dims):
        raise _fail(f"initializer {t.name} has negative dims {dims}", subject=subject)
    dtype = onnx_to_numpy(t.data_type)
    if t.data_type == TensorProto.STRING or (dtype is not None and dtype.kind in "OSU"):
        raise _fail(f"initializer {t.name} holds strings, which qlower does not import", subject=subject)
    if t.data_location != TensorProto.EXTERNAL:
        # every element type takes at least half a byte of raw_data or one typed entry per 2 elements
        held = 2 * len(t.raw_data) + 2 * sum(len(f) for f in (t.float_data, t.int32_data, t.int64_data,
                                                               t.double_data, t.uint64_data))
        if math.prod(dims) > held:
            raise _fail(f"initializer {t.name}: dims {dims} need more data than it holds", subject=subject)
        try:
            arr = numpy_helper.to_array(t)
            # bfloat16 weights are imported as float32: exact (bfloat16 is float32's upper half), and QNN's
            # float path and qlower's quantizer both start from float32
            return arr.astype(np.float32) if t.data_type == TensorProto.BFLOAT16 else arr
        except (ValueError, TypeError, KeyError, OverflowError, MemoryError) as exc:
            raise _fail(f"initializer {t.name}: its data does not match its dims {dims} and type: "
                        f"{str(exc)[:200]}", subject=subject) from None
    info = {e.key: e.value for e in t.external_data}
    if base_dir is None or "location" not in info:
        raise _fail(f"initializer {t.name} has external data but the model was not loaded from a file",
                    subject=subject)
    bf16 = t.data_type == TensorProto.BFLOAT16
    if bf16:
        dtype = np.dtype(np.uint16)  # the raw bits, widened to float32 when read
    if dtype is None:
        raise _fail(f"initializer {t.name} has ONNX element type {t.data_type}, which qlower does not import",
                    subject=subject)
    for key in ("offset", "length"):
        if key in info and not (info[key].isascii() and info[key].isdigit()):
            raise _fail(f"initializer {t.name}: external data {key} {info[key][:40]!r} is not a non-negative "
                        "integer", subject=subject)
    shape = tuple(dims)
    size = math.prod(shape) * dtype.itemsize
    offset = int(info.get("offset", 0))
    path = base_dir / info["location"]
    try:
        path = confined(base_dir, info["location"])
        have = path.stat().st_size
    except UnsafeReference as exc:
        raise _fail(f"initializer {t.name}: external data location {info['location'][:200]!r} refused: {exc}",
                    subject=subject) from None
    except OSError as exc:
        raise _fail(f"initializer {t.name}: cannot open its external data file {path}: {exc.strerror or exc}",
                    subject=subject) from None
    if offset + size > have or ("length" in info and int(info["length"]) < size):
        raise _fail(f"initializer {t.name}: external data file {path} is too short ({have} bytes; needs "
                    f"{size} at offset {offset})", subject=subject)
    lazy = LazyArray(RawSource(path, offset, dtype, shape), dtype, shape)
    return lazy.map(widen_bf16, np.float32) if bf16 else lazy


def _initializers(g: Any, base_dir: Path | None) -> dict[str, np.ndarray | LazyArray]:
    """Initializers by name; a name given twice (which one would win?) is refused."""
    out: dict[str, np.ndarray | LazyArray] = {}
    for t in g.initializer:
        if t.name in out:
            raise _fail(f"initializer {t.name} is declared twice", subject=f"tensor {t.name}")
        out[t.name] = _initializer(t, base_dir)
    return out


def _constant_value(node: Any) -> np.ndarray:
    for a in node.attribute:
        if a.name == "value":
            return np.asarray(_initializer(a.t, None))  # (its dims and bytes checked first)
        if a.name == "value_float":
            return np.asarray(a.f, np.float32)
        if a.name == "value_floats":
            return np.asarray(list(a.floats), np.float32)
        if a.name == "value_int":
            return np.asarray(a.i, np.int64)
        if a.name == "value_ints":
            return np.asarray(list(a.ints), np.int64)
    raise _fail(f"Constant node {node.name or node.output[0]} has no supported value attribute "
                "(sparse and string constants are not imported)", subject=f"node {node.name}")


class GraphBuilder:
    """Turns one inferred model into a Graph; holds the facts the passes share."""

    def __init__(self, model: Any, opset: int, base_dir: Path | None = None) -> None:
        self.model, self.opset = model, opset
        g = model.graph
        self.consts: dict[str, np.ndarray] = _initializers(g, base_dir)
        self.types: dict[str, tuple[np.dtype | None, tuple[int, ...] | None]] = {}
        self.onnx_types: dict[str, int] = {}
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            self._note_type(vi)
        self.nodes = []
        for n in g.node:
            if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
                if n.output[0] in self.consts:
                    raise _fail(f"tensor {n.output[0]} is both an initializer and a Constant's output",
                                subject=f"tensor {n.output[0]}")
                self.consts[n.output[0]] = _constant_value(n)
            else:
                self.nodes.append(n)
        self.inputs = [i.name for i in g.input if i.name not in self.consts]
        self.outputs = [o.name for o in g.output]
        self.used = {i for n in self.nodes for i in n.input if i} | set(self.outputs)
        self.qdq: QdqResult | None = None

    def _note_type(self, vi: Any) -> None:
        t = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            return
        dims = None
        if t.HasField("shape"):
            ds = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
            dims = None if any(d is None for d in ds) else tuple(int(d) for d in ds)
            if dims and (min(dims) < 0 or max(dims) > 0xFFFFFFFF or math.prod(dims) > 1 << 48):
                raise _fail(f"tensor {vi.name} has dims {list(dims)}: negative, or beyond what QNN holds (dims "
                            "below 2^32, at most 2^48 elements)", subject=f"tensor {vi.name}")
        self.types[vi.name] = (onnx_to_numpy(t.elem_type) if t.elem_type else None, dims)
        self.onnx_types[vi.name] = t.elem_type

    def shape_of(self, name: str) -> tuple[int, ...] | None:
        if name in self.consts:
            return tuple(self.consts[name].shape)
        return self.types.get(name, (None, None))[1]

    # ------------------------------------------------------------------ build
    def build(self) -> Graph:
        self.qdq = fold_qdq(self.nodes, self.consts, self.types, set(self.inputs), set(self.outputs))
        specs: list[Spec] = []
        for i, n in enumerate(self.qdq.nodes):
            specs.extend(self._normalise(n, i))
        graph = Graph(self.model.graph.name or "onnx_model")
        graph.onnx_opset = self.opset  # the model's default-domain opset, for tools that care
        values: dict[str, Value] = {}
        inputs = [self._value(graph, values, name) for name in self.inputs]
        for s in specs:
            operands = [self._value(graph, values, x) if x else None for x in s.inputs]
            while operands and operands[-1] is None:
                operands.pop()
            results = [self._value(graph, values, o, produced=True) for o in s.outputs]
            graph.add_op(graph.fresh_op_name(s.name), f"onnx.{s.op}", operands, results, s.attrs)
        outputs = [self._value(graph, values, o) for o in self.outputs]
        graph.set_io(inputs, outputs)
        return graph

    def _value(self, graph: Graph, values: dict[str, Value], name: str, produced: bool = False) -> Value:
        assert self.qdq is not None
        name = self.qdq.resolve(name)
        v = values.get(name)
        if v is not None:
            return v
        if name in self.qdq.float_consts and not produced:
            data = self.qdq.float_consts[name]
            v = graph.add_value(name, data.dtype, data.shape, data=data)
        elif name in self.qdq.quant_consts:
            data, quant = self.qdq.quant_consts[name]
            v = graph.add_value(name, data.dtype, data.shape, quant=quant, data=data)
        elif name in self.consts and not produced:
            c = self.consts[name]
            # external data stays by reference (read when needed) unless it must be narrowed
            data = c if isinstance(c, LazyArray) and c.dtype.kind == "f" else narrow_ints(np.asarray(c))
            if graph_dtype(data.dtype) is None:
                raise _fail(f"constant {name} has dtype {data.dtype}, which qlower does not import",
                            subject=f"tensor {name}")
            v = graph.add_value(name, data.dtype, data.shape, data=data)
        else:
            dtype, shape = self.types.get(name, (None, None))
            enc = self.qdq.encodings.get(name)
            if enc is not None:
                dtype = enc[0]
            elif dtype is None and name not in self.types and not produced:
                raise _fail(f"tensor {name} is used but neither produced, a graph input nor an initializer",
                            subject=f"tensor {name}")
            gd = graph_dtype(dtype) if dtype is not None else np.dtype(np.float32)
            if gd is None:
                from onnx import TensorProto

                kind = TensorProto.DataType.Name(self.onnx_types.get(name, 0))
                raise _fail(f"tensor {name} has ONNX type {kind}, which qlower does not import",
                            subject=f"tensor {name}")
            v = graph.add_value(name, gd, shape, quant=enc[1] if enc is not None else None)
        values[name] = v
        return v

    # -------------------------------------------------------------- normalise
    def _schema(self, op: str, opset: int):
        from onnx import defs

        try:
            return defs.get_schema(op, opset, "")
        except Exception:
            return None

    def _normalise(self, n: Any, index: int) -> list[Spec]:
        op = n.op_type
        name = n.name or f"{op.lower()}_{index}"
        schema = self._schema(op, self.opset)
        if schema is None:
            raise _fail(f"node {name}: {op} is not an ONNX op at opset {self.opset}", subject=f"node {name}")
        attrs = {_RENAMED.get((op, a.name), a.name): _attr_value(a) for a in n.attribute}
        outputs = self._outputs(n, schema, name)
        inputs = list(n.input)
        if op in ("Shape", "Size") and self.shape_of(inputs[0]) is not None:
            shape = self.shape_of(inputs[0])
            if op == "Size":
                self.consts[outputs[0]] = np.asarray(math.prod(shape), np.int64)
            else:
                r = len(shape)
                start, end = attrs.get("start", 0), attrs.get("end", r)
                self.consts[outputs[0]] = np.asarray(shape[slice(start, end)], np.int64)
            return []
        if op == "Cast":
            to = graph_dtype(onnx_to_numpy(int(attrs["to"])))
            if to is None:
                raise _fail(f"node {name}: Cast to ONNX type {attrs['to']} is not supported", subject=f"node {name}")
            attrs["to"] = to.name
        if op == "Upsample" or (op == "Resize" and self.opset < 11):
            return [self._upsample(n, name, inputs, outputs, attrs)]
        if op in _SOFTMAX_LIKE and self.opset < 13:
            return self._legacy_softmax(name, op, inputs, outputs, attrs)
        if op == "GroupNormalization" and self.opset < 21:
            inputs = self._per_channel_group_params(name, inputs, int(attrs.get("num_groups", 1)))
        if op == "Concat" and "axis" not in attrs:
            attrs["axis"] = 1  # Concat-1's default
        if op == "DFT" and self.opset < 20 and "axis" not in attrs:
            attrs["axis"] = 1  # DFT-17's default (an input from opset 20, defaulting to -2)
        return [Spec(op, inputs, outputs, self._keep_known(op, attrs), name)]

    def _keep_known(self, op: str, attrs: dict[str, Any]) -> dict[str, Any]:
        """Drop attributes the current schema no longer has (consumed_inputs, broadcast, is_test, ...)."""
        schemas = [s for s in (self._schema(op, EVAL_OPSET), self._schema(op, 10 ** 4)) if s is not None]
        if not schemas:
            return attrs
        params = {p.attr for p in PARAM_INPUTS.get(op, ())}
        return {k: v for k, v in attrs.items() if k in params or any(k in s.attributes for s in schemas)}

    def _outputs(self, n: Any, schema: Any, name: str) -> list[str]:
        """Output names with unused optional trailing outputs dropped; gaps get placeholder names."""
        from onnx.defs import OpSchema

        outs = list(n.output)

        def optional(i: int) -> bool:
            if i >= len(schema.outputs):
                return False
            return schema.outputs[i].option == OpSchema.FormalParameterOption.Optional

        while len(outs) > 1 and (not outs[-1] or (optional(len(outs) - 1) and outs[-1] not in self.used)):
            outs.pop()
        return [o or f"{name}.unused_{i}" for i, o in enumerate(outs)]

    def _upsample(self, n: Any, name: str, inputs: list[str], outputs: list[str], attrs: dict) -> Spec:
        """Upsample and Resize-10 interpolate asymmetrically: the same as Resize with these modes."""
        mode = attrs.get("mode", "nearest")
        scales = inputs[1] if len(inputs) > 1 else None
        if scales is None and "scales" in attrs:
            scales = f"{name}.scales"
            self.consts[scales] = np.asarray(attrs["scales"], np.float32)
        new = {"mode": "linear" if mode in ("linear", "bilinear") else mode,
               "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
        return Spec("Resize", [inputs[0], "", scales or ""], outputs, new, name)

    def _per_channel_group_params(self, name: str, inputs: list[str], groups: int) -> list[str]:
        """GroupNormalization-18 scales and shifts per group; from opset 21 per channel: repeat them."""
        shape = self.shape_of(inputs[0])
        if shape is None or len(shape) < 2 or any(i not in self.consts for i in inputs[1:3]):
            raise _fail(f"node {name}: GroupNormalization before opset 21 needs constant scale and bias and a "
                        "static input shape", subject=f"node {name}")
        out = [inputs[0]]
        for i, tag in zip(inputs[1:3], ("scale", "bias")):
            per_group = np.asarray(self.consts[i]).reshape(-1)
            if per_group.size == groups:
                fresh = f"{name}.{tag}_per_channel"
                self.consts[fresh] = np.repeat(per_group, shape[1] // groups)
                out.append(fresh)
            else:
                out.append(i)
        return out

    def _legacy_softmax(self, name: str, op: str, inputs: list[str], outputs: list[str],
                        attrs: dict) -> list[Spec]:
        """Before opset 13 softmax ran over the input flattened to 2-D at `axis` (default 1)."""
        shape = self.shape_of(inputs[0])
        if shape is None:
            raise _fail(f"node {name}: {op} before opset 13 needs a static input shape", subject=f"node {name}")
        r = len(shape)
        axis = int(attrs.get("axis", 1))
        axis = axis + r if axis < 0 else axis
        if axis == r - 1:
            return [Spec(op, inputs, outputs, {"axis": -1}, name)]
        flat = [math.prod(shape[:axis]), math.prod(shape[axis:])]
        x2, y2 = f"{name}.flat_in", f"{name}.flat_out"
        dtype = self.types.get(inputs[0], (np.dtype(np.float32), None))[0]
        self.types[x2] = (dtype, tuple(flat))
        self.types[y2] = (dtype, tuple(flat))
        return [Spec("Reshape", [inputs[0]], [x2], {"shape": flat}, f"{name}.flatten"),
                Spec(op, [x2], [y2], {"axis": -1}, name),
                Spec("Reshape", [y2], outputs, {"shape": list(shape)}, f"{name}.unflatten")]

    # ------------------------------------------------------------ after fold
    def promote_params(self, graph: Graph) -> None:
        """Constant parameter inputs → attributes (see PARAM_INPUTS)."""
        for op in list(graph.ops):
            params = PARAM_INPUTS.get(op.type[5:], ()) if op.type.startswith("onnx.") else ()
            for p in params:
                v = op.operands[p.index] if p.index < len(op.operands) else None
                if v is None or v.data is None or v.quant is not None:
                    continue
                op.attrs[p.attr] = _as_attr(v.data, p.kind)
                graph.set_operand(op, p.index, None)
                if not v.users and not v.is_output:
                    graph.remove_value(v)

    def infer_missing(self, graph: Graph) -> None:
        """Shapes inference left open (e.g. behind folded constants), from one-node inference."""
        from qlower.reference.onnx_kernels import OnnxKernels, infer_shapes

        kernels = OnnxKernels(cache_size=16)
        for op in graph.topo_order():
            if not op.type.startswith("onnx.") or all(r.shape is not None for r in op.results):
                continue
            if any(v is not None and v.shape is None for v in op.operands):
                continue
            operands = [None if v is None else v.data if v.data is not None and v.quant is None
                        else (np.float32 if v.quant is not None else v.dtype, v.shape) for v in op.operands]
            found = infer_shapes(op.type[5:], op.attrs, operands, len(op.results))
            if any(f is None for f in found):
                found = _shapes_by_running(op, operands, kernels)
            for r, got in zip(op.results, found):
                if r.shape is None and got is not None:
                    r.shape = got[1]

    def check_shapes(self, graph: Graph) -> None:
        missing = [v for v in graph.values if v.shape is None and (v.users or v.is_output or v.is_input)]
        if missing:
            names = ", ".join(f"{v.name} (from {v.producer.type})" if v.producer else v.name for v in missing[:5])
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            raise _fail(f"no static shape for tensor {names}{more} after ONNX shape inference",
                        subject=f"tensor {missing[0].name}",
                        hint="QNN graphs are static: fix symbolic inputs with `qlower lower --input-shape "
                             "NAME=D0,D1,...` (input_shapes in the API), or export with fixed shapes")


def _shapes_by_running(op: Any, operands: list, kernels: Any, limit: int = 1 << 20) -> list:
    """Result shapes from evaluating the op on stand-in values, for what shape inference leaves open
    (small inputs only).

    The unknown operands are zeros, then ones: a shape that changes with them (Range's length from a
    limit computed at run time, a Reshape to a computed shape) depends on values not known yet and stays
    open, as does an empty result from non-empty operands (zeros as a length). A second run that fails
    (an index of one past a dim of one) proves nothing, so the first run's shapes stand.
    """
    from qlower.reference.spec import KernelError, OutSpec

    unknown = [a is not None and not isinstance(a, np.ndarray) for a in operands]
    if sum(int(np.prod(a[1])) if u else a.size for a, u in zip(operands, unknown) if a is not None) > limit:
        return [None] * len(op.results)

    def run(fill: Any) -> list | None:
        args = [fill(a[1], a[0]) if u else a for a, u in zip(operands, unknown)]
        try:
            outs = kernels[op.type[5:]](args, op.attrs, [OutSpec(None, r.dtype) for r in op.results])
        except (KernelError, KeyError, ValueError, TypeError, IndexError):
            return None
        return [(np.asarray(o).dtype, tuple(np.shape(o))) for o in outs]

    found = run(np.zeros)
    if found is None:
        return [None] * len(op.results)
    if any(unknown):
        other = run(np.ones)
        empty_in = any(a is not None and 0 in (tuple(a[1]) if u else a.shape) for a, u in zip(operands, unknown))
        if (other is not None and [s for _, s in other] != [s for _, s in found]) \
                or (not empty_in and any(0 in s for _, s in found)):
            return [None] * len(op.results)
    return found


def _as_attr(data: np.ndarray, kind: str) -> Any:
    flat = np.asarray(data).ravel()
    if kind == "ints":
        return [int(x) for x in flat]
    if kind == "floats":
        return [float(x) for x in flat]
    if kind in ("int", "int1"):
        return int(flat[0])
    x = flat[0]
    return float(x) if np.asarray(x).dtype.kind == "f" else int(x)
