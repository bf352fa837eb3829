"""pt2e-quantized torch.export programs: quantize/dequantize ops into tensor encodings.

`prepare_pt2e`/`convert_pt2e` (torchao, and ExecuTorch's QnnQuantizer that
drives them) write a quantized program the way a QDQ ONNX model is written:
each quantized tensor passes through a `quantize_per_tensor` →
`dequantize_per_tensor` pair, weights are integer constants behind a
`dequantize_per_channel`. This module reads those ops
(`quantized_decomposed.*`, their `.tensor` overloads with constant scale and
zero point, and torchao's `quantize_affine`/`dequantize_affine` when they are
per-tensor or per-channel) and hands them to the ONNX frontend's QDQ fold
(`qlower.frontends.onnx_qdq.fold_qdq`) as `QdqNode`s, so both frontends fold
by the same rules: the torch importer then gives the folded tensors their
encodings, and the quantize/dequantize ops the fold keeps become
`aten.quantize_encoded` / `aten.dequantize_encoded`.

pt2e stores what QNN calls a 16-bit activation as int32 with the range
0..65535, and 4-bit weights as int8 with the range −7..7 (or −8..7): the
storage here is the narrowest QNN integer type holding the range (uint16 for
the first), and a range narrower than its storage becomes the encoding's
`bitwidth`. A quantize of a tensor computed at run time must use a full
b-bit range (QNN saturates to exactly that), or the symmetric one without the
most negative value (QNN may reach that value, as on the device); constants may
use any range.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from qlower.diagnostics import QlowerError, error
from qlower.frontends.onnx_qdq import QdqNode, QdqResult, fold_qdq
from qlower.graph.types import Quant

QUANTIZE_OP = "aten.quantize_encoded"
DEQUANTIZE_OP = "aten.dequantize_encoded"

# (namespace, packet) → whether it quantizes (True) or dequantizes (False)
_QDQ = {
    ("quantized_decomposed", "quantize_per_tensor"): True,
    ("quantized_decomposed", "dequantize_per_tensor"): False,
    ("quantized_decomposed", "quantize_per_channel"): True,
    ("quantized_decomposed", "dequantize_per_channel"): False,
    ("torchao", "quantize_affine"): True,
    ("torchao", "dequantize_affine"): False,
}
_CONST_KINDS = ("PARAMETER", "BUFFER", "CONSTANT_TENSOR")


def _fail(message: str, subject: str, hint: str | None = None) -> QlowerError:
    return QlowerError(error(message, subject=subject, hint=hint, code="torch-quant"))


def register_quant_ops(path: Path) -> None:
    """Make the quantize/dequantize ops a saved program may name known to torch before it is loaded.

    `quantized_decomposed` comes with torch; torchao's ops are registered by importing torchao,
    which takes seconds, so only when the archive names them.
    """
    import zipfile

    try:
        import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
    except ImportError:
        pass
    try:
        with zipfile.ZipFile(path) as z:
            wants = any(b"torchao." in z.read(i) for i in z.infolist()
                        if i.filename.endswith(".json") and i.file_size < (1 << 28))
    except (OSError, zipfile.BadZipFile):
        return  # torch.export.load reports it
    if wants:
        try:
            import torchao.quantization.quant_primitives  # noqa: F401
        except ImportError:
            pass  # torch.export.load then says which op it does not know


def is_qdq(target: Any, torch: Any) -> bool:
    return isinstance(target, torch._ops.OpOverload) and \
        (target.namespace, target._schema.name.split("::", 1)[1]) in _QDQ


@attrs.frozen
class QuantPlan:
    """The fold's decisions for one program, keyed by FX node name."""

    result: QdqResult
    qdq_nodes: frozenset[str]  # FX nodes that are quantize/dequantize ops
    kept: frozenset[str]  # of those, the ones that stay as ops
    quantizes: frozenset[str]  # the kept ones that quantize (the others dequantize)
    unread: frozenset[str]  # lifted constants that only folded quantize/dequantize ops read
    # op (a node unit, a requantizing quantize op) → its operands the fold renamed: dequantize op → the
    # quantized tensor read instead
    renamed: Mapping[str, Mapping[str, str]] = attrs.Factory(dict)

    def encoding(self, name: str) -> tuple[np.dtype, Quant] | None:
        return self.result.encodings.get(name)

    def operand(self, op: str, arg: str) -> str | None:
        """The fold's tensor that op `op` reads for its FX argument `arg` (None: the argument itself)."""
        return self.renamed.get(op, {}).get(arg)


def _storage(dtype_name: str, lo: int, hi: int, subject: str) -> tuple[np.dtype, int | None]:
    """The narrowest QNN integer storage for [lo, hi] and the bitwidth when narrower than it."""
    if lo > hi:
        raise _fail(f"quantization range [{lo}, {hi}] is empty", subject)
    signed = lo < 0
    bits = max(int(hi).bit_length(), int(-lo - 1).bit_length() if signed else 0, 1) + (1 if signed else 0)
    for width in (8, 16, 32):
        if bits <= width and (signed or width < 32):
            kind = np.dtype(f"int{width}" if signed else f"uint{width}")
            return kind, (bits if bits < width else None)
    raise _fail(f"quantization range [{lo}, {hi}] of {dtype_name} fits no QNN integer type", subject)


def _full_range(lo: int, hi: int, dtype: np.dtype, bitwidth: int | None) -> bool:
    """Whether QNN saturates a computed tensor to [lo, hi]: the full b-bit range, or the symmetric one
    that leaves out the most negative value (QnnQuantizer's int16 −32767..32767 operands), where QNN
    also reaches that value, as the QNN backend itself does with the same encoding."""
    from qlower.graph.quantize import bounds

    full = bounds(dtype, bitwidth)
    return (lo, hi) == full or (lo < 0 and lo == -hi and (lo - 1, hi) == full)


@attrs.frozen
class _Spec:
    quantize: bool
    x: Any  # the FX node quantized or dequantized
    scale: Any  # float, or FX node of a tensor
    zero_point: Any  # int, None, or FX node of a tensor
    axis: int | None
    lo: int | None
    hi: int | None
    dtype: Any  # torch dtype of the integer side


def _spec(node: Any, torch: Any) -> _Spec:
    from torch.fx.operator_schemas import normalize_function

    target = node.target
    packet = target._schema.name.split("::", 1)[1]
    bound = normalize_function(target, tuple(node.args), dict(node.kwargs), normalize_to_only_use_kwargs=True)
    if bound is None:
        raise _fail(f"the arguments of {target} do not match its schema", f"node {node.name}")
    b = bound.kwargs
    quantize = _QDQ[(target.namespace, packet)]
    if target.namespace == "torchao":
        x = b["input"]
        shape = tuple(x.meta["val"].shape) if hasattr(x, "meta") and "val" in x.meta else None
        block = [int(d) for d in b["block_size"]]
        axis = _affine_axis(block, shape, node.name)
        dtype = b["output_dtype"] if quantize else b["input_dtype"]
        lo, hi = b.get("quant_min"), b.get("quant_max")
        return _Spec(quantize, x, b["scale"], b.get("zero_point"), axis, None if lo is None else int(lo),
                     None if hi is None else int(hi), dtype)
    if node.target._overloadname == "tensor2":
        raise _fail(f"{target} with quant_min/quant_max as tensors is not imported", f"node {node.name}",
                    hint="convert with pt2e's default (scalar) ranges")
    axis = int(b["axis"]) if "axis" in b else None
    x = b["input"]
    zp = b.get("zero_points", b.get("zero_point"))
    return _Spec(quantize, x, b.get("scales", b.get("scale")), zp, axis, int(b["quant_min"]), int(b["quant_max"]),
                 b["dtype"])


def _affine_axis(block: list[int], shape: tuple[int, ...] | None, where: str) -> int | None:
    """torchao's block_size as qlower's granularity: the whole tensor (None) or one channel axis."""
    if shape is None or len(block) != len(shape):
        raise _fail(f"block_size {block} does not match the tensor's shape", f"node {where}")
    unit = [i for i, (b, d) in enumerate(zip(block, shape)) if b != d]
    if not unit:
        return None
    if len(unit) == 1 and block[unit[0]] == 1:
        return unit[0]
    raise _fail(f"block_size {block} over shape {list(shape)} is blocked quantization, which qlower does not "
                "import from torch programs yet", f"node {where}",
                hint="quantize per channel (block size 1 on the channel axis, the full extent elsewhere)")


def plan_quant(ep: Any, torch: Any, const_of: Any) -> QuantPlan | None:
    """Fold the program's quantize/dequantize ops (None when it has none).

    `const_of(fx_node)` gives a lifted constant's data as numpy (None for anything else).
    """
    from qlower.reference.aten_kernels import dtype_name

    graph_nodes = list(ep.graph.nodes)
    if not any(n.op == "call_function" and is_qdq(n.target, torch) for n in graph_nodes):
        return None
    nodes: list[QdqNode] = []
    consts: dict[str, np.ndarray] = {}
    types: dict[str, tuple[np.dtype, tuple[int, ...] | None]] = {}
    bitwidth: dict[str, int] = {}
    qdq: set[str] = set()
    inputs: set[str] = set()
    outputs: set[str] = set()
    const_nodes: dict[str, Any] = {}

    def record(n: Any) -> None:
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor):
            dt = dtype_name(val.dtype)
            shape = tuple(int(d) for d in val.shape) if all(isinstance(d, int) for d in val.shape) else None
            types[n.name] = (np.dtype(dt) if dt in _NP else np.dtype(np.float32), shape)

    def tensor_const(arg: Any, subject: str, what: str) -> np.ndarray:
        data = const_of(arg) if hasattr(arg, "op") else None
        if data is None:
            raise _fail(f"the {what} of a quantize/dequantize op is computed at run time; qlower imports "
                        "constant encodings only", subject,
                        hint="use static quantization (pt2e with calibrated observers), not dynamic")
        const_nodes[arg.name] = arg
        return np.asarray(data)

    for n in graph_nodes:
        if n.op == "placeholder":
            record(n)
            data = const_of(n)
            if data is None:
                inputs.add(n.name)
            continue
        if n.op == "output":
            outs = n.args[0] if isinstance(n.args[0], (list, tuple)) else [n.args[0]]
            outputs.update(a.name for a in outs if hasattr(a, "name"))
            continue
        if n.op != "call_function":
            continue
        record(n)
        if not is_qdq(n.target, torch):
            ins = [a.name for a in _flat_nodes((n.args, n.kwargs))]
            nodes.append(QdqNode(f"fx:{n.target}", tuple(ins), (n.name,)))
            continue
        qdq.add(n.name)
        subject = f"node {n.name} ({n.target})"
        s = _spec(n, torch)
        tdt = dtype_name(s.dtype) if s.dtype is not None else "int32"
        info = np.iinfo(np.dtype(tdt)) if tdt in _NP and np.dtype(tdt).kind in "iu" else None
        if info is None:
            raise _fail(f"quantization to {s.dtype} is not imported (integer encodings only)", subject)
        lo = info.min if s.lo is None else s.lo
        hi = info.max if s.hi is None else s.hi
        storage, bits = _storage(tdt, lo, hi, subject)
        if isinstance(s.scale, (int, float)):
            scale = np.asarray([float(s.scale)], np.float64)
        else:
            scale = tensor_const(s.scale, subject, "scale").astype(np.float64).ravel()
        if s.zero_point is None:
            zp = np.zeros(scale.shape, np.int64)
        elif isinstance(s.zero_point, (int, float)):
            zp = np.asarray([int(s.zero_point)], np.int64)
        else:
            zp = tensor_const(s.zero_point, subject, "zero point").astype(np.int64).ravel()
        if zp.size == 1 and scale.size > 1:
            zp = np.full(scale.shape, int(zp[0]), np.int64)
        if zp.size != scale.size:
            raise _fail(f"{scale.size} scales but {zp.size} zero points", subject)
        if zp.size and (zp.min() < lo or zp.max() > hi):
            raise _fail(f"zero point outside the range [{lo}, {hi}]", subject)
        x = s.x
        if not hasattr(x, "op"):
            raise _fail("its input is not a tensor of the program", subject)
        xdata = const_of(x)
        if s.quantize and xdata is None and not _full_range(lo, hi, storage, bits):
            raise _fail(f"quantizes a computed tensor to the range [{lo}, {hi}], which is not a full {bits or storage.itemsize * 8}"
                        f"-bit range; QNN would saturate to {list(_bounds(storage, bits))}", subject,
                        hint="quantize activations to a full range (quant_min/quant_max of the dtype)")
        if not s.quantize and xdata is not None:
            arr = np.asarray(xdata)
            if arr.dtype.kind not in "iu":
                raise _fail(f"dequantizes a constant of dtype {arr.dtype}", subject)
            if arr.size and (arr.min() < lo or arr.max() > hi):
                raise _fail(f"constant {x.name} holds values outside the range [{lo}, {hi}]", subject)
            consts[x.name] = arr.astype(storage)
            const_nodes[x.name] = x
        elif s.quantize and xdata is not None:
            consts[x.name] = np.asarray(xdata, np.float32)
            const_nodes[x.name] = x
        sname, zname = f"{n.name}::scale", f"{n.name}::zero_point"
        consts[sname], consts[zname] = scale, zp.astype(storage)
        if s.axis is not None and scale.size == 1:
            attrs_ = {}  # one channel: per-tensor
        else:
            attrs_ = {} if s.axis is None else {"axis": s.axis}
            if s.axis is None and scale.size != 1:
                raise _fail(f"per-tensor {'quantize' if s.quantize else 'dequantize'} with {scale.size} scales", subject)
        if bits is not None:
            bitwidth[n.name] = bits
        nodes.append(QdqNode("QuantizeLinear" if s.quantize else "DequantizeLinear", (x.name, sname, zname),
                             (n.name,), attrs_))
        if s.quantize:
            types[n.name] = (storage, types.get(n.name, (None, None))[1])
    res = fold_qdq(nodes, consts, types, inputs, outputs)
    _narrow(res, bitwidth, nodes)
    before = {n.output[0]: n.input for n in nodes}
    renamed = {}
    for n in res.nodes:
        old = before.get(n.output[0])
        if old is not None and tuple(old) != tuple(n.input):
            renamed[n.output[0]] = {a: b for a, b in zip(old, n.input) if a != b}
    kept_nodes = {n.output[0] for n in res.nodes if n.op_type in ("QuantizeLinear", "DequantizeLinear")}
    quantizes = {n.output[0] for n in res.nodes if n.op_type == "QuantizeLinear"}
    still_read = {i for n in res.nodes for i in n.input}
    unread = {name for name in const_nodes if name not in still_read}
    return QuantPlan(res, frozenset(qdq), frozenset(kept_nodes), frozenset(quantizes), frozenset(unread), renamed)


_NP = frozenset({"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                 "bool"})


def _bounds(dtype: np.dtype, bits: int | None) -> tuple[int, int]:
    from qlower.graph.quantize import bounds

    return bounds(dtype, bits)


def _narrow(res: QdqResult, bitwidth: Mapping[str, int], nodes: list[QdqNode]) -> None:
    """Give the encodings that came from a narrow range (4-bit weights in int8) their bitwidth."""
    if not bitwidth:
        return
    bw = dict(bitwidth)
    for n in nodes:  # a quantized constant or tensor named after the Q/DQ op, or its input
        if n.output[0] in bitwidth and n.op_type == "DequantizeLinear":
            bw.setdefault(n.input[0], bitwidth[n.output[0]])
    links = list(res.aliases.items()) + list(res.sources.items())
    changed = True
    while changed:  # along the fold's aliases and DQ sources, both ways (t stands for x', x for t)
        changed = False
        for k, v in links:
            for a, b in ((k, v), (v, k)):
                if a in bw and b not in bw:
                    bw[b] = bw[a]
                    changed = True
    for name, (dtype, q) in list(res.encodings.items()):
        if name in bw and q.bitwidth is None:
            res.encodings[name] = (dtype, attrs.evolve(q, bitwidth=bw[name]))
    for name, (data, q) in list(res.quant_consts.items()):
        if name in bw and q.bitwidth is None:
            res.quant_consts[name] = (data, attrs.evolve(q, bitwidth=bw[name]))


def _flat_nodes(x: Any) -> list[Any]:
    out: list[Any] = []
    if isinstance(x, (list, tuple)):
        for e in x:
            out.extend(_flat_nodes(e))
    elif isinstance(x, dict):
        for e in x.values():
            out.extend(_flat_nodes(e))
    elif hasattr(x, "op") and hasattr(x, "name"):
        out.append(x)
    return out
