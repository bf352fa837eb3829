"""Importing torch.export programs into the `aten` dialect (optional extra `qlower[torch]`).

`load_exported(ep_or_path)` takes an `ExportedProgram` (or a `.pt2` file written
by `torch.export.save`) and returns a Graph of `aten.*` ops: the op naming,
operand/attribute split and dtype narrowing are the dialect's, defined in
`qlower.reference.aten_kernels`. Shapes and dtypes come from the exported
node metadata, lifted parameters, buffers and constants become graph
constants, user inputs and outputs become graph inputs and outputs. The
graph is then constant-folded with ATen itself, so masks built from arange,
cumsum and comparisons, and rotary tables, arrive as static tensors as QNN
needs. Tensors without elements are constants too (they drop out of `cat`).
`unbind` arrives as one `select` per result, and `max_pool*_with_indices` whose
indices nothing reads as `max_pool*`. State a program updates in place (a KV cache
through `index_put_`/`index_copy_`, a user input through `relu_`) becomes a graph input
holding the value before and a graph output holding the value after, named
`<state>` and `<state>__updated` (`STATE_SUFFIX`), after the user's own inputs and
outputs: the runtime feeds one call's `__updated` output as the next call's input.
Binary pointwise ops whose tensor operands differ in dtype get them cast to the
dtype ATen's type promotion computes in (`aten._to_copy`), as the exported program
computed; QNN's elementwise ops take one dtype. Shapes must be static: export without
`dynamic_shapes`. Data-dependent sizes that torch.export leaves symbolic (`item()`
of a tensor computed from constants only, such as the attention-window bounds of
Qwen2.5-VL's vision tower that `torch.split` reads with `.tolist()`) are computed
with torch at import time and become plain integers.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from qlower.diagnostics import QlowerError, error
from qlower.frontends.fold import fold_constants
from qlower.frontends.torch_quant import DEQUANTIZE_OP, QUANTIZE_OP
from qlower.frontends.pt2_archive import load_pt2
from qlower.graph.core import Graph, Value
from qlower.graph.types import DTYPE_NAMES
from qlower.reference.aten_kernels import NARROWED, AtenKernels, AtenOps, Signature, dtype_name
from qlower.reference.spec import KernelError, OutSpec

_CATEGORY = {"b": 0, "i": 1, "u": 1, "f": 2}
STATE_SUFFIX = "__updated"  # the graph output holding a mutated buffer's or input's new value
_NOT_PROMOTED = frozenset({"condition", "mask"})  # pointwise operands that select rather than compute
_DEFAULT_OF_CATEGORY = {0: "bool", 1: "int32", 2: "float32"}


def _fail(message: str, subject: str | None = None, hint: str | None = None, code: str = "torch-import") -> QlowerError:
    return QlowerError(error(message, subject=subject, hint=hint, code=code))


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise _fail("the torch frontend needs torch", hint="pip install qlower[torch]") from None
    return torch


def load_exported(ep_or_path: Any, *, decompose: bool = False, fold: bool = True, name: str | None = None,
                  trust_pickle: bool = False) -> Graph:
    """An ExportedProgram or `.pt2` path → an `aten` dialect Graph, constant-folded.

    The program is first brought to functional ATen with `run_decompositions`:
    with no decompositions by default (keeping `linear` and
    `scaled_dot_product_attention` whole, but inlining higher-order ops), or
    with torch's core ATen decompositions when `decompose` is set.

    A `.pt2` that would make torch run a pickle from the file is refused unless `trust_pickle`
    (see `pt2_archive` and docs/security.md).
    """
    torch = _torch()
    ep = ep_or_path
    if isinstance(ep_or_path, (str, Path)):
        path = Path(ep_or_path)
        if not path.is_file():
            raise _fail(f"no such file: {path}", code="no-file")
        try:
            from qlower.frontends.torch_quant import register_quant_ops

            register_quant_ops(path)  # pt2e programs name quantize/dequantize ops outside aten
            ep = load_pt2(path, trust_pickle=trust_pickle)
        except QlowerError:
            raise
        except Exception as exc:  # torch reports a bad archive in many ways
            hint = ("if the program takes or returns a type registered at export time (such as transformers' "
                    "ModelOutput), import its package first or export a wrapper that returns tensors"
                    if "deserializ" in str(exc) else None)
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise _fail(f"cannot load {path.name} as an exported program: {first}",
                        subject=f"file {path}", hint=hint) from None
        name = name or path.stem
    if not isinstance(ep, torch.export.ExportedProgram):
        raise _fail(f"expected a torch.export.ExportedProgram or a .pt2 path, got {type(ep).__name__}")
    ep = ep.run_decompositions() if decompose else ep.run_decompositions({})
    kernels = AtenKernels()
    graph = _Importer(ep, torch).run(name or "exported")
    if fold:
        _fold_empty(graph)
        _fold_sources(graph, kernels)
        fold_constants(graph, {"aten": kernels})
        graph.remove_dead()
    return graph


def _fold_empty(graph: Graph) -> None:
    """A tensor without elements is known from its shape alone: make it a constant, so that what reads only
    such tensors (a reduction over an empty dim) folds, and drop it from `cat`, to which it adds nothing.
    QNN has no zero-sized tensors; an empty slice (Phi-3's pass-through half of a full-width rotary) goes."""
    for op in graph.topo_order():
        if op.results and all(r.shape is not None and 0 in r.shape for r in op.results):
            results = list(op.results)
            graph.detach_op(op)
            for r in results:
                r.data = np.zeros(r.shape, dtype=r.dtype)
            continue
        if op.type == "aten.cat":
            keep = [v for v in op.operands if v is not None and not (v.shape and 0 in v.shape)]
            if keep and len(keep) < len(op.operands):
                name, results, attrs_ = op.name, list(op.results), dict(op.attrs)
                graph.detach_op(op)
                graph.add_op(name, op.type, keep, results, attrs_)


_UNINITIALIZED = frozenset({"empty", "empty_strided", "new_empty", "new_empty_strided", "empty_like"})


def _fold_sources(graph: Graph, kernels: Mapping[str, Any]) -> None:
    """Evaluate ops without operands (arange, full, scalar_tensor...) into constants; fold_constants skips them."""
    for op in graph.topo_order():
        if any(v is not None for v in op.operands):
            continue
        name = op.type.partition(".")[2]
        kernel = kernels.get(name)
        if kernel is None:
            continue
        if name in _UNINITIALIZED and all(r.shape is not None for r in op.results):
            # torch.empty's contents are whatever memory held: zeros, so that lowering (and the
            # artifacts) do not change from run to run; a program that reads them is undefined anyway
            results = list(op.results)
            graph.detach_op(op)
            for r in results:
                r.data = np.zeros(r.shape, dtype=r.dtype)
            continue
        try:
            values = kernel([], op.attrs, [OutSpec(r.shape, r.dtype, None) for r in op.results])
        except KernelError:
            continue  # random ops and the like stay; lowering reports them
        results = list(op.results)
        graph.detach_op(op)
        for r, x in zip(results, values):
            r.data = np.asarray(x).astype(r.dtype).reshape(r.shape)


def _static_shape(val: Any, subject: str, symbols: Mapping[Any, int] | None = None) -> tuple[int, ...]:
    dims = tuple(_concrete(d, symbols or {}) for d in val.shape)
    if not all(isinstance(d, int) for d in dims):
        raise _fail(f"shape {list(dims)} is symbolic", subject=subject, code="symbolic-shape",
                    hint="export with static shapes (no dynamic_shapes) at a fixed sequence length")
    return dims


def _numpy_of(t: Any, torch: Any, subject: str) -> np.ndarray:
    """A lifted tensor as numpy in the dialect's dtype (sharing torch's memory when the dtype is kept);
    int64 data must fit int32."""
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.float()
    arr = t.contiguous().numpy()
    target = NARROWED.get(arr.dtype.name, arr.dtype.name)
    if target not in DTYPE_NAMES:
        raise _fail(f"dtype {arr.dtype} has no QNN counterpart", subject=subject, code="dtype")
    if arr.dtype == np.int64 and arr.size and (arr.min() < -2**31 or arr.max() >= 2**31):
        raise _fail(f"int64 data in [{arr.min()}, {arr.max()}] does not fit int32", subject=subject, code="dtype")
    return arr.astype(target, copy=False)  # same dtype: a view of the tensor torch holds, no copy


def _concrete(x: Any, symbols: Mapping[Any, int]) -> Any:
    """A SymInt whose unbacked symbols are all known as an int; anything else unchanged."""
    node = getattr(x, "node", None)
    expr = getattr(node, "expr", None)
    if expr is None or not symbols:
        return x
    try:
        value = expr.xreplace(symbols)
    except (AttributeError, TypeError):
        return x
    return int(value) if isinstance(value, int) or getattr(value, "is_Integer", False) else x


_SCALAR_READS = frozenset({"item", "_local_scalar_dense"})


def _data_dependent_scalars(ep: Any, torch: Any) -> dict[Any, Any]:
    """FX node → Python number for each `item()` whose tensor is computed from lifted constants alone,
    evaluated with torch on the program's own constant data (the sizes export could only keep symbolic)."""
    specs = {s.arg.name: s for s in ep.graph_signature.input_specs if hasattr(s.arg, "name")}
    known: dict[Any, Any] = {}
    out: dict[Any, Any] = {}

    def real(node: Any) -> Any:
        if node in known:
            return known[node]
        if node.op == "placeholder":
            spec = specs.get(node.name)
            if spec is None or spec.kind.name not in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
                raise LookupError(node.name)
            t = ep.state_dict.get(spec.target)
            t = ep.constants.get(spec.target) if t is None else t
            if t is None:
                raise LookupError(node.name)
            known[node] = t
            return t
        if node.op != "call_function":
            raise LookupError(node.name)
        fetch = lambda a: real(a) if hasattr(a, "op") else a  # noqa: E731
        args = torch.fx.node.map_aggregate(node.args, fetch)
        kwargs = torch.fx.node.map_aggregate(node.kwargs, fetch)
        known[node] = node.target(*args, **kwargs)
        return known[node]

    for node in ep.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if node.target._schema.name.split("::", 1)[1] not in _SCALAR_READS:
            continue
        try:
            value = real(node)
        except LookupError:
            continue  # depends on a user input: reported as symbolic where it is used
        out[node] = value.item() if hasattr(value, "item") else value
    return out


class _Importer:
    """Walks the exported FX graph once, in its (topological) node order."""

    def __init__(self, ep: Any, torch: Any) -> None:
        self.ep, self.torch = ep, torch
        self.ops = AtenOps()
        self.graph = Graph()
        self.env: dict[Any, Any] = {}  # fx node → Value, or list of Values for several results
        self.scalars: dict[Any, Any] = {}  # fx node → its Python number (data-dependent sizes, their arithmetic)
        self.symbols: dict[Any, int] = {}  # unbacked size symbol (u0, ...) → its value
        self.quant: Any = None  # torch_quant.QuantPlan of a pt2e-quantized program
        self.by_name: dict[str, Any] = {}  # fx node name → fx node
        sig = ep.graph_signature
        self.mutated = set(sig.buffers_to_mutate.values())  # buffer targets the program writes
        self.state_inputs: dict[str, Value] = {}  # mutated buffer target → its graph input (after the user's)
        self.user_inputs: dict[str, Value] = {}  # user input name → its graph input
        self.fold_values: dict[str, Value] = {}  # tensor of the quantize/dequantize fold → its Value

    def run(self, name: str) -> Graph:
        self.graph.name = name
        specs = {s.arg.name: s for s in self.ep.graph_signature.input_specs if hasattr(s.arg, "name")}
        inputs: list[Value] = []
        outputs: list[Value] = []
        from qlower.frontends.torch_quant import plan_quant

        self.by_name = {n.name: n for n in self.ep.graph.nodes}
        self.quant = plan_quant(self.ep, self.torch, lambda n: self._const_data(n, specs.get(n.name)))
        for node, value in _data_dependent_scalars(self.ep, self.torch).items():
            self.scalars[node] = value
            expr = getattr(getattr(node.meta.get("val"), "node", None), "expr", None)
            if expr is not None and getattr(expr, "is_Symbol", False):
                self.symbols[expr] = int(value)
        for node in self.ep.graph.nodes:
            if node.op == "placeholder":
                self._placeholder(node, specs.get(node.name), inputs)
            elif node.op == "call_function":
                self._call(node)
            elif node.op == "output":
                outputs = self._outputs(node)
            else:
                raise _fail(f"unsupported FX node kind {node.op} ({node.target})", subject=f"node {node.name}",
                            hint="re-export with torch.export.export(..., strict=False)")
        self.graph.set_io(inputs + list(self.state_inputs.values()), outputs)
        return self.graph

    # ------------------------------------------------------------- values
    def _value(self, name: str, val: Any) -> Value:
        subject = f"tensor {name}"
        if not isinstance(val, self.torch.Tensor):
            raise _fail(f"expected a tensor, got {type(val).__name__}", subject=subject, code="not-a-tensor",
                        hint="data-dependent values (item(), nonzero()) cannot be imported")
        enc = self.quant.encoding(name) if self.quant is not None else None
        if enc is not None:  # a tensor of a pt2e program that the quantize/dequantize fold quantized
            return self.graph.add_value(self.graph.fresh_value_name(name), enc[0],
                                        _static_shape(val, subject, self.symbols), quant=enc[1])
        dt = dtype_name(val.dtype)
        if dt not in DTYPE_NAMES:
            raise _fail(f"dtype {val.dtype} has no QNN counterpart", subject=subject, code="dtype")
        return self.graph.add_value(self.graph.fresh_value_name(name), dt, _static_shape(val, subject, self.symbols))

    def _const_data(self, node: Any, spec: Any) -> np.ndarray | None:
        """A lifted constant's data as numpy in its own dtype (None for user inputs and computed values)."""
        if node.op != "placeholder" or spec is None or spec.kind.name not in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
            return None
        t = self.ep.state_dict.get(spec.target)
        t = self.ep.constants.get(spec.target) if t is None else t
        if t is None or not isinstance(t, self.torch.Tensor):
            return None
        t = t.detach().cpu()
        return (t.float() if t.dtype == self.torch.bfloat16 else t).contiguous().numpy()

    def _fold_value(self, name: str) -> Value:
        """The Value of a tensor of the fold (torch_quant): a quantized constant it made, or the FX
        node's value that the name resolves to along the fold's aliases."""
        q = self.quant
        v = self.fold_values.get(name)
        if v is not None:
            return v
        if name in q.result.quant_consts:
            data, quant = q.result.quant_consts[name]
            v = self.graph.add_value(self.graph.fresh_value_name(name), data.dtype, data.shape, quant=quant,
                                     data=data)
        elif name in q.result.float_consts and name not in q.kept:
            data = q.result.float_consts[name]
            v = self.graph.add_value(self.graph.fresh_value_name(name), data.dtype, data.shape, data=data)
        else:
            v = self.env[self.by_name[q.result.resolve(name)]]
        self.fold_values[name] = v
        return v

    def _quant_op(self, node: Any) -> None:
        """A quantize/dequantize op of a pt2e program, as the fold decided (torch_quant): a folded one
        stands for its quantized constant, float constant, or the quantized tensor it reads or writes."""
        q = self.quant
        name = node.name
        if name not in q.kept:
            folded = name if name in q.result.float_consts else q.result.sources.get(name, name)
            self.env[node] = self._fold_value(folded)
            return
        x = node.args[0] if hasattr(node.args[0], "name") else None
        src = None if x is None else q.operand(name, x.name) or q.result.sources.get(name, x.name)
        operand = self._fold_value(src) if src is not None else self._operand(x, name)
        result = self._value(name, node.meta.get("val"))
        if name in q.quantizes:
            if result.quant is None:
                raise _fail("a quantize op whose encoding qlower could not read", subject=f"node {name}",
                            code="torch-quant", hint="its scale and zero point must be constants")
            self.graph.add_op(name, QUANTIZE_OP, [operand], [result], {})
        else:
            if operand.quant is None:
                raise _fail("a dequantize op whose operand has no encoding qlower could read",
                            subject=f"node {name}", code="torch-quant",
                            hint="its scale and zero point must be constants")
            self.graph.add_op(name, DEQUANTIZE_OP, [operand], [result], {})
        self.env[node] = result

    def _placeholder(self, node: Any, spec: Any, inputs: list[Value]) -> None:
        kind = spec.kind.name if spec is not None else "USER_INPUT"
        val = node.meta.get("val")
        if kind == "USER_INPUT":
            if isinstance(val, self.torch.Tensor):
                v = self._value(node.name, val)
                inputs.append(v)
                self.user_inputs[node.name] = v
                self.env[node] = v
            elif node.users:
                raise _fail(f"non-tensor input {node.name} ({type(val).__name__}) is used by the graph",
                            subject=f"input {node.name}", hint="pass it as a constant when exporting")
            return
        if kind not in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
            raise _fail(f"unsupported input kind {kind}", subject=f"input {node.name}")
        if kind == "BUFFER" and spec.target in self.mutated:
            # state the program updates: the value before is fed by the runtime, not a constant
            v = self._value(node.name, val)
            self.graph.rename_value(v, self._state_name(spec.target, v))
            self.state_inputs[spec.target] = v
            self.env[node] = v
            return
        if not node.users or (self.quant is not None and node.name in self.quant.unread):
            return
        if self.quant is not None and node.name in self.quant.result.quant_consts:
            self.env[node] = self._fold_value(node.name)  # an integer constant that dequantize ops read
            return
        tensor = self.ep.state_dict.get(spec.target)
        if tensor is None:
            tensor = self.ep.constants.get(spec.target)
        if tensor is None:
            raise _fail(f"no data for {kind.lower()} {spec.target}", subject=f"input {node.name}")
        data = _numpy_of(tensor, self.torch, f"{kind.lower()} {spec.target}")
        self.env[node] = self.graph.add_value(self.graph.fresh_value_name(node.name), data.dtype, data.shape,
                                              data=data)

    def _state_name(self, target: str, v: Value) -> str:
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in target)
        return base if base == v.name or not self.graph.has_value(base) else self.graph.fresh_value_name(base)

    def _outputs(self, node: Any) -> list[Value]:
        """The user's outputs, then one `<state>__updated` output per buffer or input mutated in place
        (a copy when that value is also an output or the state's own input)."""
        specs = self.ep.graph_signature.output_specs
        outs: list[Value] = []
        updates: list[tuple[str, Value, Any]] = []
        for spec, arg in zip(specs, node.args[0]):
            kind = spec.kind.name
            if kind not in ("USER_OUTPUT", "BUFFER_MUTATION", "USER_INPUT_MUTATION"):
                raise _fail(f"the program updates {spec.target} in place ({kind}); only buffers and inputs "
                            "become graph state (an input and an output)",
                            subject=f"output {getattr(arg, 'name', arg)}", code="mutation")
            v = self.env.get(arg)
            if not isinstance(v, Value):
                raise _fail(f"output {arg} is not a tensor computed by the graph", subject="graph outputs")
            if kind == "USER_OUTPUT":
                outs.append(v)
            else:
                updates.append((spec.target, v, arg))
        inputs = {id(x) for x in [*self.user_inputs.values(), *self.state_inputs.values()]}
        for target, v, arg in updates:
            before = self.state_inputs.get(target) or self.user_inputs.get(target)
            if before is None:
                raise _fail(f"the program updates {target} in place but it is not one of its inputs",
                            subject=f"output {arg.name}", code="mutation")
            name = before.name + STATE_SUFFIX
            if any(v is o for o in outs) or id(v) in inputs or v.data is not None or self.graph.has_value(name):
                copy = self.graph.add_value(self.graph.fresh_value_name(name), v.dtype, v.shape)
                self.graph.add_op(self.graph.fresh_op_name(f"{arg.name}_state"), "aten.clone", [v], [copy], {})
                v = copy
            else:
                self.graph.rename_value(v, name)
            outs.append(v)
        return outs

    # ---------------------------------------------------------------- ops
    def _call(self, node: Any) -> None:
        target = node.target
        if self._scalar_op(node):
            return
        if target is operator.getitem:
            src, idx = node.args
            v = self.env[src][idx]
            if not self.graph.has_value(node.name):
                self.graph.rename_value(v, node.name)
            enc = self.quant.encoding(node.name) if self.quant is not None else None
            if enc is not None and isinstance(v, Value):  # one result of a multi-result op, quantized
                v.dtype, v.quant = enc
            self.env[node] = v
            return
        if self.quant is not None and node.name in self.quant.qdq_nodes:
            self._quant_op(node)
            return
        if not isinstance(target, self.torch._ops.OpOverload) or target.namespace != "aten":
            raise _fail(f"unsupported op {target}", subject=f"node {node.name}", code="unsupported-op",
                        hint="only ATen ops are imported; higher-order and custom ops are not")
        if not target._schema.returns:
            if target._schema.name == "aten::_assert_scalar" and self._resolve(node.args[0]) is False:
                raise _fail(f"the program's own check fails on these constants: {node.args[1]}",
                            subject=f"node {node.name}", code="torch-import")
            return  # _assert_tensor_metadata and other checks without results
        packet = target._schema.name.split("::", 1)[1]
        if packet == "unbind":
            self._unbind(node, target)
            return
        if packet.endswith("_with_indices") and self._values_only(node):
            self._values_of(node, packet.removesuffix("_with_indices"))
            return
        found = self.ops.form_of_overload(packet, target._overloadname)
        if found is None:
            raise _fail(f"aten.{packet}.{target._overloadname} has no form in the aten dialect",
                        subject=f"node {node.name}", code="unsupported-op",
                        hint="its arguments (generators, dimension names...) are not supported")
        form, sig = found
        operands, attrs_ = self._arguments(node, sig, target._schema)
        val = node.meta.get("val")
        vals = list(val) if isinstance(val, (tuple, list)) else [val]
        names = [node.name] if len(vals) == 1 and not isinstance(val, (tuple, list)) else \
            [f"{node.name}_{i}" for i in range(len(vals))]
        results = [self._value(n, v) for n, v in zip(names, vals)]
        self.graph.add_op(node.name, f"aten.{form.type_name}", operands, results, attrs_)
        self.env[node] = results if isinstance(val, (tuple, list)) else results[0]

    def _resolve(self, x: Any) -> Any:
        """An argument with data-dependent sizes replaced by their values (lists too)."""
        if isinstance(x, (list, tuple)):
            return type(x)(self._resolve(e) for e in x)
        if hasattr(x, "op") and x in self.scalars:
            return self.scalars[x]
        return _concrete(x, self.symbols)

    def _scalar_op(self, node: Any) -> bool:
        """A known `item()`, or Python arithmetic/comparison of known sizes (operator.add, ge, ...):
        recorded as a number, no op emitted."""
        if node in self.scalars:
            return True
        target = node.target
        is_aten_size = isinstance(target, self.torch._ops.OpOverload) and \
            target._schema.name in ("aten::sym_size", "aten::sym_numel")
        if getattr(target, "__module__", None) not in ("_operator", "operator", "math") and not is_aten_size:
            return False
        if target is operator.getitem:
            return False
        args = [self._resolve(a) for a in node.args]
        if is_aten_size:
            v = self.env.get(node.args[0])
            if not isinstance(v, Value) or v.shape is None:
                return False
            self.scalars[node] = v.shape[args[1]] if target._schema.name == "aten::sym_size" else int(np.prod(v.shape))
            return True
        if any(hasattr(a, "op") or isinstance(a, (self.torch.SymInt, self.torch.SymFloat, self.torch.SymBool))
               for a in args):
            return False
        self.scalars[node] = target(*args)
        return True

    def _unbind(self, node: Any, target: Any) -> None:
        """unbind(x, dim) is one `select` per index: the results are separate tensors."""
        bound = {k: self._resolve(v) for k, v in _bind(target._schema, node.args, node.kwargs, node.name).items()}
        x = self._operand(bound["self"], node.name)
        results = [self._value(f"{node.name}_{i}", v) for i, v in enumerate(node.meta.get("val"))]
        for i, r in enumerate(results):
            self.graph.add_op(self.graph.fresh_op_name(f"{node.name}_{i}"), "aten.select", [x], [r],
                              {"dim": self._attr(bound["dim"], f"node {node.name}"), "index": i})
        self.env[node] = results

    @staticmethod
    def _values_only(node: Any) -> bool:
        """Whether nothing reads the indices (result 1) of a max_pool*_with_indices node."""
        return all(u.target is operator.getitem and u.args[1] == 0 for u in node.users if u.users or u.op == "output")

    def _values_of(self, node: Any, packet: str) -> None:
        """max_pool2d_with_indices whose indices nobody reads is max_pool2d (same arguments, the values only)."""
        target = getattr(getattr(self.torch.ops.aten, packet, None), "default", None)
        found = self.ops.form_of_overload(packet, "default") if target is not None else None
        if found is None:
            raise _fail(f"aten.{packet} has no form in the aten dialect", subject=f"node {node.name}",
                        code="unsupported-op")
        form, sig = found
        operands, attrs_ = self._arguments(node, sig, target._schema)
        value = self._value(f"{node.name}_0", node.meta.get("val")[0])
        self.graph.add_op(node.name, f"aten.{form.type_name}", operands, [value], attrs_)
        self.env[node] = [value, None]

    def _arguments(self, node: Any, sig: Signature, schema: Any) -> tuple[list[Value | None], dict[str, Any]]:
        bound = {k: self._resolve(v) for k, v in _bind(schema, node.args, node.kwargs, node.name).items()}
        operands: list[Value | None] = []
        scalars: list[tuple[int, str, Any]] = []
        attrs_: dict[str, Any] = {}
        for a in sig.args:
            x = bound.get(a.name)
            if a.role == "attr":
                attrs_[a.name] = self._attr(x, f"node {node.name}, argument {a.name}")
            elif a.role == "operand" and a.kind in ("list", "optional_list"):
                present = [(i, t) for i, t in enumerate(x or ()) if t is not None]
                operands.extend(self._operand(t, node.name) for _, t in present)
                if a.kind == "optional_list":
                    attrs_[f"{a.name}_pos"] = [i for i, _ in present]
            elif a.role == "operand":
                if isinstance(x, (bool, int, float)):
                    scalars.append((len(operands), a.name, x))
                    operands.append(None)
                else:
                    operands.append(None if x is None else self._operand(x, node.name))
        self._promote(node, sig, operands, bound)
        peers = [v for v in operands if v is not None]
        for i, arg, x in scalars:
            operands[i] = self._scalar(x, peers, f"{node.name}_{arg}")
        while operands and operands[-1] is None:
            operands.pop()
        return operands, attrs_

    def _promote(self, node: Any, sig: Signature, operands: list[Value | None], bound: Mapping[str, Any]) -> None:
        """Cast the tensor operands of a pointwise op to the dtype ATen computes it in, when they differ
        (`add(int32, float32)` adds in float32, `ne(bool, int32)` compares in int32): QNN's elementwise
        ops take one dtype. Only where the result has that dtype (or is bool, for comparisons), so ops
        that convert on purpose (true division of integers, masked_fill's value) keep their own rules."""
        torch = self.torch
        if torch.Tag.pointwise not in node.target.tags:
            return
        slots = [(i, a) for i, a in enumerate(a for a in sig.operands) if a.kind == "tensor"
                 and a.name not in _NOT_PROMOTED and i < len(operands) and operands[i] is not None]
        if len(slots) < 2 or len({operands[i].dtype for i, _ in slots}) < 2:
            return
        vals = [bound[a.name].meta.get("val") if hasattr(bound[a.name], "meta") else bound[a.name]
                for a in (b for b in sig.operands if b.kind in ("tensor", "scalar")
                          and b.name not in _NOT_PROMOTED) if bound.get(a.name) is not None]
        if not all(isinstance(v, (torch.Tensor, bool, int, float)) for v in vals):
            return
        from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

        try:
            common = dtype_name(elementwise_dtypes(*vals, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.NO_OPMATH)[1])
        except Exception:  # noqa: BLE001 - torch refuses some mixes (complex); the op's own rule reports
            return
        result = node.meta.get("val")
        rdt = dtype_name(result.dtype) if isinstance(result, torch.Tensor) else None
        if rdt not in (common, "bool") or common not in DTYPE_NAMES:
            return
        for i, a in slots:
            v = operands[i]
            if v.dtype.name != common:
                cast = self.graph.add_value(self.graph.fresh_value_name(f"{v.name}_{common}"), common, v.shape)
                self.graph.add_op(self.graph.fresh_op_name(f"{node.name}_{a.name}_promote"), "aten._to_copy",
                                  [v], [cast], {"dtype": common})
                operands[i] = cast

    def _operand(self, x: Any, where: str) -> Value:
        src = self.quant.operand(where, x.name) if self.quant is not None and hasattr(x, "name") else None
        if src is not None:  # a node unit reads the quantized tensor in place of a folded dequantize op
            return self._fold_value(src)
        v = self.env.get(x) if hasattr(x, "op") else None
        if not isinstance(v, Value):
            raise _fail(f"operand {x!r} is not a tensor of the graph", subject=f"node {where}",
                        code="symbolic-shape" if isinstance(x, self.torch.SymInt) else "torch-import")
        return v

    def _scalar(self, x: bool | int | float, peers: Sequence[Value], name: str) -> Value:
        """A Python number as a constant, typed as ATen's promotion treats it next to the tensor operands.

        It has shape [1] (0-d only when every tensor operand is 0-d): that
        broadcasts to the same result and suits QNN ops that want rank >= 1.
        """
        cat = 0 if isinstance(x, bool) else 1 if isinstance(x, int) else 2
        peer = max((v.dtype for v in peers), key=lambda d: _CATEGORY.get(d.kind, 2), default=None)
        dt = peer if peer is not None and cat <= _CATEGORY.get(peer.kind, 2) else np.dtype(_DEFAULT_OF_CATEGORY[cat])
        if dt.kind in "iu" and not np.iinfo(dt).min <= x <= np.iinfo(dt).max:
            raise _fail(f"scalar {x} does not fit {dt}", subject=f"constant {name}", code="dtype")
        shape = (1,) if any(v.shape for v in peers) else ()
        return self.graph.add_value(self.graph.fresh_value_name(name), dt, shape,
                                    data=np.full(shape, x, dtype=dt))

    def _attr(self, x: Any, subject: str) -> Any:
        torch = self.torch
        if isinstance(x, (list, tuple)):
            return [self._attr(e, subject) for e in x]
        if isinstance(x, torch.dtype):
            return dtype_name(x)
        if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)) or hasattr(x, "op"):
            raise _fail(f"value {x} is symbolic", subject=subject, code="symbolic-shape",
                        hint="export with static shapes (no dynamic_shapes)")
        return x


def _bind(schema: Any, args: Sequence[Any], kwargs: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Schema argument name → the node's value for it, with schema defaults filled in."""
    positional = [a for a in schema.arguments if not a.kwarg_only]
    bound = {a.name: v for a, v in zip(positional, args)}
    bound.update(kwargs)
    for a in schema.arguments:
        if a.name not in bound:
            if not a.has_default_value():
                raise _fail(f"argument {a.name} is missing", subject=f"node {where}")
            bound[a.name] = a.default_value
    return bound
