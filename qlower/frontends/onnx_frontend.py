"""The ONNX frontend: an ONNX model → a graph in the `onnx` dialect (optional extra `qlower[onnx]`).

Every node of the default domain becomes an op `onnx.<OpType>` with its
attributes (ONNX defaults are left to the op declarations in
`patterns/onnx/ops.qpat`). The importer then normalises what differs between
opsets, so rules see one form whatever opset the model was written for:

* constant *parameter inputs* (Reshape's shape, Slice's starts/ends/axes/steps,
  Reduce axes, Split sizes, Squeeze/Unsqueeze axes, Clip min/max, Pad's pads,
  TopK's k, CumSum's axis, Resize's roi/scales/sizes, ...) become attributes of
  the same name, as older opsets had them (`PARAM_INPUTS` in
  `qlower/reference/onnx_kernels.py`); non-constant ones stay operands;
* Softmax/LogSoftmax before opset 13 (softmax over the flattened trailing
  dims) become Reshape → Softmax(axis -1) → Reshape; Upsample becomes Resize;
  Pad-2's `paddings`/`value` are renamed; Cast's `to` is a dtype name;
* unused optional outputs (MaxPool's indices, Dropout's mask, ...) are dropped.

The model's default-domain opset is kept on the graph as `graph.onnx_opset`.

Tensors: shapes and dtypes come from ONNX shape inference; initializers and
Constant nodes become constants; int64 becomes int32 (QNN has no int64
compute); Shape/Size of statically shaped tensors become constants; empty
optional inputs are absent operands. QDQ nodes are folded into encodings by
node units, as onnxruntime's QNN EP groups them (`onnx_qdq`); com.microsoft
QuantizeLinear/DequantizeLinear are imported as the default-domain ops. Empty tensors (a 0 dim) become empty constants, which
Concat drops (`fold_empty`). Then everything computable from constants is
folded with the onnx reference kernels; a graph output that folded to a
constant gets an `onnx.Identity` of the constant as its producer (an empty
graph output is an error). Float initializers in ONNX external data are not
read at load (`load_external_data=False`): they become references to their
byte range (`qlower.graph.lazy`), read when something needs them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


from qlower.diagnostics import QlowerError, error
from qlower.graph.core import Graph

DEFAULT_DOMAINS = ("", "ai.onnx")
_CONCAT = ("onnx.Concat",)
_SPLIT = ("onnx.Split",)
_TYPE_ONLY = {"onnx.CastLike": (1,)}


def _onnx():
    try:
        import onnx
    except ImportError:
        raise QlowerError(error("the ONNX frontend needs the onnx package", hint="pip install 'qlower[onnx]'",
                                code="frontend")) from None
    return onnx


def _fail(message: str, subject: str | None = None, hint: str | None = None) -> QlowerError:
    return QlowerError(error(message, subject=subject, hint=hint, code="onnx-import"))


def read_model(source: str | Path | Any) -> Any:
    """A ModelProto from a path (or the proto itself); unreadable files are a QlowerError."""
    onnx = _onnx()
    if isinstance(source, onnx.ModelProto):
        return source
    path = Path(source)
    try:
        return onnx.load(str(path), load_external_data=False)  # external weights: read lazily (onnx_build)
    except FileNotFoundError:
        raise _fail(f"no such file: {path}") from None
    except Exception as exc:  # protobuf decode errors and friends
        raise _fail(f"cannot read {path} as an ONNX model: {type(exc).__name__}: {exc}") from None


def load_onnx(source: str | Path | Any, *, input_shapes: Mapping[str, Sequence[int]] | None = None,
              fold: bool = True) -> Graph:
    """Import an ONNX model (path or ModelProto) as an onnx-dialect Graph.

    `input_shapes` fixes graph inputs whose shapes are symbolic (QNN graphs are static).
    """
    from qlower.frontends.onnx_build import GraphBuilder

    onnx = _onnx()
    model = read_model(source)
    opset = default_opset(model)
    _check_nodes(model)
    model = _contrib_qdq_to_default(model)
    model = _with_input_shapes(model, input_shapes or {})
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception:  # inference is best effort; missing shapes are reported below
        inferred = model
    base_dir = None if isinstance(source, onnx.ModelProto) else Path(source).parent
    builder = GraphBuilder(inferred, opset, base_dir=base_dir)
    graph = builder.build()
    from qlower.frontends.fold import fold_constants, fold_empty, fold_shape_ops, produce_constant_outputs
    from qlower.reference.onnx_kernels import OnnxKernels

    kernels = {"onnx": OnnxKernels()}
    if fold:
        fold_empty(graph, _CONCAT, _SPLIT)
        fold_constants(graph, kernels, type_only=_TYPE_ONLY)
    builder.promote_params(graph)
    builder.infer_missing(graph)
    while fold and fold_shape_ops(graph, "onnx.Shape", "onnx.Size"):  # shapes found only after folding
        fold_constants(graph, kernels, type_only=_TYPE_ONLY)
        builder.promote_params(graph)
        builder.infer_missing(graph)
    if fold and fold_empty(graph, _CONCAT, _SPLIT):  # empties whose shapes only one-node inference found
        fold_constants(graph, kernels, type_only=_TYPE_ONLY)
        builder.promote_params(graph)
    produce_constant_outputs(graph, "onnx.Identity")
    builder.check_shapes(graph)
    return graph


def default_opset(model: Any) -> int:
    for imp in model.opset_import:
        if imp.domain in DEFAULT_DOMAINS:
            return int(imp.version)
    raise _fail("the model imports no default-domain (ai.onnx) opset")


def _check_names(model: Any) -> None:
    """Every name is text (protobuf hands strings that are not valid UTF-8 over as bytes)."""
    g = model.graph
    lists = [[g.name], [v.name for v in (*g.input, *g.output, *g.value_info, *g.initializer)]]
    for n in g.node:
        lists += [[n.name, n.op_type, n.domain], n.input, n.output]
    for names in lists:
        for x in names:
            if not isinstance(x, str):
                raise _fail(f"the model holds a name that is not valid UTF-8 ({len(x)} bytes)")


def _check_acyclic(model: Any) -> None:
    """Nodes feed each other without a cycle (a cycle has no order to run in); in O(nodes + edges)."""
    producer = {o: i for i, n in enumerate(model.graph.node) for o in n.output if o}
    waiting = [sum(1 for x in set(n.input) if x in producer) for n in model.graph.node]
    users: dict[int, list[int]] = {}
    for i, n in enumerate(model.graph.node):
        for x in set(n.input):
            if x in producer:
                users.setdefault(producer[x], []).append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    done = 0
    while ready:
        i = ready.pop()
        done += 1
        for j in users.get(i, ()):
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.append(j)
    if done != len(waiting):
        stuck = [model.graph.node[i] for i, w in enumerate(waiting) if w > 0][:5]
        names = ", ".join(n.name or n.output[0] for n in stuck)
        raise _fail(f"the graph has a cycle (nodes that depend on each other: {names})", subject=f"node {names}")


def _check_nodes(model: Any) -> None:
    """Only default-domain ops without subgraphs are imported; say which node is not."""
    from onnx import AttributeProto

    _check_names(model)
    _check_acyclic(model)
    for i, n in enumerate(model.graph.node):
        who = f"node {n.name or f'#{i}'} ({(n.domain + '.') if n.domain else ''}{n.op_type})"
        if n.domain == "com.microsoft" and n.op_type in _CONTRIB_QDQ:
            continue
        if n.op_type == "MatMulNBits" and n.domain == "com.microsoft":
            raise _fail(f"{who}: MatMulNBits (ONNX Runtime's packed n-bit weight MatMul) is not imported; "
                        "quantize to QDQ instead (blocked DequantizeLinear of int4 weights, opset 21, which "
                        "qlower lowers)", subject=who,
                        hint="onnxruntime.quantization.quantize_static with QDQ format, or "
                             "matmul_nbits_quantizer with quant_format=QuantFormat.QDQ")
        if n.domain not in DEFAULT_DOMAINS:
            raise _fail(f"{who} is in domain {n.domain!r}; only the default ONNX domain is imported",
                        subject=who, hint="export without contrib ops, or add a plugin frontend for the domain")
        if any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in n.attribute):
            raise _fail(f"{who} has a subgraph; control flow (If/Loop/Scan) is not imported", subject=who)


_CONTRIB_QDQ = ("QuantizeLinear", "DequantizeLinear")


def _contrib_qdq_to_default(model: Any) -> Any:
    """com.microsoft QuantizeLinear/DequantizeLinear (16- and 4-bit types before opset 21) compute
    what the default-domain ops compute: import them as those (a copy; the caller's model stays)."""
    if not any(n.domain == "com.microsoft" and n.op_type in _CONTRIB_QDQ for n in model.graph.node):
        return model
    onnx = _onnx()
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for n in model.graph.node:
        if n.domain == "com.microsoft" and n.op_type in _CONTRIB_QDQ:
            n.domain = ""
    return model


def _with_input_shapes(model: Any, shapes: Mapping[str, Sequence[int]]) -> Any:
    if not shapes:
        return model
    onnx = _onnx()
    model = onnx.ModelProto.FromString(model.SerializeToString())
    known = {i.name for i in model.graph.input}
    for name in shapes:
        if name not in known:
            raise _fail(f"input_shapes (--input-shape) names {name!r}, which is not a graph input",
                        hint=f"graph inputs: {', '.join(sorted(known))}")
    for inp in model.graph.input:
        if inp.name in shapes:
            dims = inp.type.tensor_type.shape.dim
            del dims[:]
            for d in shapes[inp.name]:
                dims.add().dim_value = int(d)
    return model
