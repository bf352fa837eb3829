"""Datatypes a backend's op lacks, computed in another one behind Casts (the packs' `compute` declarations).

After lowering, a QNN op whose input/output datatypes match no datatype row of the backend (or that
a documented constraint refuses for a datatype a declaration replaces: HTP's FLOAT_16
ScatterElements takes reduction NONE alone, its FLOAT_32 one every reduction) is retried with some
of its dtypes replaced as a `compute SRC... as DST [wrapping] [for OPS] [backends(...)]` declaration
allows: when the op takes the replaced datatypes and the backend has
the ops that convert each replaced input to DST and each replaced output back, those conversions
are put around the op (static inputs are converted in place). The declarations state which
replacements are exact for which ops; the pass only checks what the op definitions allow.

Conversions are exact or not made:

- DST holds every SRC value (uint8 → int32, float16 → float32): a Cast each way. With `wrapping`
  an integer result is first reduced into SRC's range the way two's complement wraps (QNN's Cast
  saturates), with integer Divide/Multiply/Subtract/Less/Select/Add.
- uint32 → int32 (the one same-width pair): a Cast would saturate values of 2^31 and above, so the
  value is split into 16-bit halves (wrapping uint32 Multiply, float32 arithmetic exact to well
  under half a unit) and rebuilt in int32: as x − 2^31 (order kept: comparisons, extrema) or, with
  `wrapping`, as the two's-complement int32 of the same bits (Add, Subtract, Multiply). The result
  is rebuilt as a uint32 from int32 pieces below 2^31 with wrapping uint32 Multiply
  (2^31 + w = (2^31 + 1)·w for odd w, 2·(2^30 + w/2) for even w).
- int8/int16/uint8/uint16 where the backend's Cast does not read the plain type (CPU, HTP): the
  bytes of such a tensor are those of a fixed-point tensor with scale 1 and offset 0 (INT_8 ↔
  SFIXED_POINT_8, UINT_16 ↔ UFIXED_POINT_16...). A graph input, or a result, whose every other use
  is an op the backend cannot take as it is, is retyped to that identity encoding; it is converted
  with Dequantize (exact: float32 holds every 16-bit integer) and Cast float32 → int32, and back
  with Cast int32 → float32 and Quantize (exact: the values are in range, after wrapping).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import attrs
import numpy as np

from qlower.diagnostics import QlowerError
from qlower.graph.core import Graph, Op, Provenance, Value
from qlower.graph.types import Quant, canonical_dtype
from qlower.qnn.datatypes import DataType, from_numpy
from qlower.qnn.opdef import OpDefRegistry
from qlower.qnn.precision import cast as put_cast
from qlower.qnn.precision import cast_max_rank
from qlower.qnn.validate import datatypes_allowed

_DT = {
    "int8": DataType.INT_8, "int16": DataType.INT_16, "int32": DataType.INT_32, "int64": DataType.INT_64,
    "uint8": DataType.UINT_8, "uint16": DataType.UINT_16, "uint32": DataType.UINT_32, "uint64": DataType.UINT_64,
    "float16": DataType.FLOAT_16, "float32": DataType.FLOAT_32, "float64": DataType.FLOAT_64, "bool": DataType.BOOL_8,
}
_MAX_KINDS = 4  # distinct replaceable dtypes tried per op (2^k subsets)
_I32, _U32, _F32, _B = DataType.INT_32, DataType.UINT_32, DataType.FLOAT_32, DataType.BOOL_8

# The QNN ops (and their datatypes) each kind of conversion is built from.
_WRAP_OPS = (("ElementWiseDivide", [_I32, _I32], [_I32]), ("ElementWiseMultiply", [_I32, _I32], [_I32]),
             ("ElementWiseSubtract", [_I32, _I32], [_I32]), ("ElementWiseAdd", [_I32, _I32], [_I32]),
             ("ElementWiseLess", [_I32, _I32], [_B]), ("ElementWiseGreaterEqual", [_I32, _I32], [_B]),
             ("ElementWiseSelect", [_B, _I32, _I32], [_I32]))
_U32_IN_OPS = (("ElementWiseMultiply", [_U32, _U32], [_U32]), ("Cast", [_U32], [_F32]),
               ("ElementWiseDivide", [_F32, _F32], [_F32]), ("ElementWiseSubtract", [_F32, _F32], [_F32]),
               ("ElementWiseRound", [_F32], [_F32]), ("Cast", [_F32], [_I32]), *_WRAP_OPS)
_U32_OUT_OPS = (*_WRAP_OPS, ("ElementWiseEqual", [_I32, _I32], [_B]), ("Cast", [_I32], [_U32]),
                ("ElementWiseMultiply", [_U32, _U32], [_U32]))


# The identity encoding: a fixed-point tensor with it stores exactly the integers it means.
_IDENTITY = Quant((1.0,), (0,))
_FIXED_OK = ("int8", "int16", "uint8", "uint16")  # every value exact in float32


@attrs.frozen
class _Target:
    dtype: str  # numpy dtype name
    wrapping: bool


def _identity(v: Value | None) -> bool:
    """Whether `v` is an integer retyped to fixed point with the identity encoding (see module doc)."""
    return v is not None and v.quant == _IDENTITY and np.dtype(v.dtype).name in _FIXED_OK


def _dt(v: Value | None) -> DataType | None:
    """The plain datatype `v` holds (an identity-encoded value counts as its plain integers)."""
    if v is None:
        return None
    return _DT.get(np.dtype(v.dtype).name) if v.quant is None or _identity(v) else None


def _real_dt(v: Value | None) -> DataType | None:
    """The datatype `v` has in the QNN graph."""
    if v is None:
        return None
    return from_numpy(v.dtype, quantized=True) if _identity(v) else _dt(v)


def _fixed(src: str) -> DataType:
    return from_numpy(src, quantized=True)


def _name(v: Value) -> str:
    return np.dtype(v.dtype).name


def _mapping(computes: Sequence, op_type: str, backend: str) -> dict[str, list[_Target]]:
    """Source dtype name → the targets declared for this op and backend, in order."""
    out: dict[str, list[_Target]] = {}
    for c in computes:
        if c.backends and backend not in c.backends:
            continue
        if c.ops and op_type not in c.ops or not c.ops and op_type == "qnn.Cast":
            continue  # a Cast only where a declaration names it
        target = canonical_dtype(c.target)
        for s in c.sources:
            src = canonical_dtype(s)
            t = _Target(target, bool(getattr(c, "wrapping", False))) if target else None
            if src and t and t not in out.setdefault(src, []):
                out[src].append(t)
    return out


def _holds(src: str, dst: str) -> bool:
    """Whether every value of dtype `src` is a value of dtype `dst`."""
    s, d = np.dtype(src), np.dtype(dst)
    if s == np.bool_:
        return True
    if np.issubdtype(d, np.floating):
        return np.issubdtype(s, np.floating) and s.itemsize <= d.itemsize or (
            np.issubdtype(s, np.integer) and np.iinfo(s).bits < np.finfo(d).nmant + 1)
    if np.issubdtype(s, np.integer) and np.issubdtype(d, np.integer):
        return np.iinfo(d).min <= np.iinfo(s).min and np.iinfo(s).max <= np.iinfo(d).max
    return False


def _is_u32_i32(src: str, dst: str) -> bool:
    return src == "uint32" and dst == "int32"


def _needs_wrap(src: str, dst: str, t: _Target) -> bool:
    return t.wrapping and np.issubdtype(np.dtype(src), np.integer) and not _holds(dst, src)


def _all_allowed(registry: OpDefRegistry, backend: str, ops: Sequence) -> bool:
    return all(datatypes_allowed(registry, op, backend, ins, outs) for op, ins, outs in ops)


def _cast_in(registry: OpDefRegistry, backend: str, src: str, dst: str) -> bool:
    return _holds(src, dst) and datatypes_allowed(registry, "Cast", backend, [_DT[src]], [_DT[dst]])


def _fixed_in(registry: OpDefRegistry, backend: str, src: str, dst: str) -> bool:
    """Dequantize of the identity-encoded `src` to float32, then (for int32) a Cast."""
    return (src in _FIXED_OK and dst in ("float32", "int32")
            and datatypes_allowed(registry, "Dequantize", backend, [_fixed(src)], [_F32])
            and (dst == "float32" or datatypes_allowed(registry, "Cast", backend, [_F32], [_I32])))


def _fixed_back(registry: OpDefRegistry, backend: str, src: str, dst: str) -> bool:
    """(For int32 a Cast to float32, then) Quantize to the identity-encoded `src`."""
    return (src in _FIXED_OK and dst in ("float32", "int32")
            and datatypes_allowed(registry, "Quantize", backend, [_F32], [_fixed(src)])
            and (dst == "float32" or datatypes_allowed(registry, "Cast", backend, [_I32], [_F32])))


def _valid_as_is(op: Op, registry: OpDefRegistry, backend: str) -> bool:
    ins, outs = [_real_dt(v) for v in op.operands], [_real_dt(r) for r in op.results]
    return (None not in outs and all(d is not None for v, d in zip(op.operands, ins) if v is not None)
            and datatypes_allowed(registry, op.type[4:], backend, ins, outs))


def _conditional_on(registry: OpDefRegistry, op_type: str, backend: str, sources: frozenset[str],
                    memo: dict[tuple[str, frozenset[str]], bool]) -> bool:
    """Whether a documented constraint of the op on `backend` holds for one of the datatypes a
    `compute` declaration replaces ("for FLOAT_16, only NONE reduction"): then valid datatypes alone
    do not make the op valid, and the replaced datatypes may. Only such ops are validated whole here."""
    key = (op_type, sources)
    if key not in memo:
        names = {_DT[s].name for s in sources if s in _DT}
        memo[key] = any({d.name for d in (c.when.datatypes or ())} & names
                        or {d.name for d in c.when.except_datatypes} & names
                        or any(f"'{n}'" in getattr(c.get("if"), "text", "") for n in names)
                        for c in registry.checks(op_type, backend))
    return memo[key]


def _refused(op: Op, registry: OpDefRegistry, backend: str, swap: dict[str, _Target] | None = None) -> bool:
    """Whether the backend's validation refuses `op` on its own, with the dtypes in `swap` replaced:
    the op in a graph of its own (operands as inputs, static data converted), converted and validated."""
    from qlower.qnn.convert import to_table
    from qlower.qnn.validate import validate_graph

    swap = swap or {}
    one = Graph(op.name)

    def copy(v: Value) -> Value:
        src = _name(v)
        dt = np.dtype(swap[src].dtype) if src in swap else v.dtype
        data = None if v.data is None else (_static(np.asarray(v.data), src, swap[src]) if src in swap else v.data)
        return one.add_value(v.name, dt, v.shape, quant=v.quant, data=data)

    operands = [None if v is None else copy(v) for v in op.operands]
    results = [copy(r) for r in op.results]
    one.add_op(op.name, op.type, operands, results, dict(op.attrs))
    one.set_io([v for v in operands if v is not None and v.data is None], results)
    try:
        diags = validate_graph(to_table(one, registry), registry, backend)
    except QlowerError:  # an op the converter cannot take on its own is not retried
        return False
    return any(d.is_error for d in diags)


def _retypeable(v: Value, op: Op, registry: OpDefRegistry, backend: str) -> bool:
    """Whether `v` may become identity-encoded: no other use takes it as the plain integer it is."""
    if v.data is not None or (v.producer is None and not v.is_input):
        return False
    return all(u is op or not u.type.startswith("qnn.") or _identity(v) or not _valid_as_is(u, registry, backend)
               for u, _ in v.users)


def _route_in(v: Value, op: Op, registry: OpDefRegistry, backend: str, src: str, dst: str) -> str | None:
    """How operand `v` (dtype `src`) becomes `dst`: "cast", "fixed" (Dequantize) or None."""
    if not _identity(v) and _cast_in(registry, backend, src, dst):
        return "cast"
    if (_identity(v) or v.is_input and v.producer is None and _retypeable(v, op, registry, backend)) and \
            _fixed_in(registry, backend, src, dst):
        return "fixed"
    return None


def _route_back(r: Value, op: Op, registry: OpDefRegistry, backend: str, src: str, dst: str) -> str | None:
    """How result `r` (dtype `src`) is made from `dst`: "cast", "fixed" (Quantize) or None.

    Fixed point is preferred where the backend's Cast cannot read the plain type again.
    """
    cast = datatypes_allowed(registry, "Cast", backend, [_DT[dst]], [_DT[src]])
    if cast and _cast_in(registry, backend, src, "int32"):
        return "cast"
    if not r.is_input and _retypeable(r, op, registry, backend) and _fixed_back(registry, backend, src, dst):
        return "fixed"
    return "cast" if cast else None


def _conversions_ok(registry: OpDefRegistry, backend: str, src: str, t: _Target, op: Op) -> bool:
    """Whether the backend has the ops to convert `op`'s `src` operands into `t` and its results back."""
    dst = t.dtype
    ins = [v for v in op.operands if v is not None and v.data is None and _name(v) == src]
    outs = [r for r in op.results if _name(r) == src]
    if _is_u32_i32(src, dst):
        return (not ins or _all_allowed(registry, backend, _U32_IN_OPS)) and (
            not outs or _all_allowed(registry, backend, _U32_OUT_OPS))
    if not _holds(src, dst) and ins:
        return False
    if any(_route_in(v, op, registry, backend, src, dst) is None for v in ins):
        return False
    if outs:
        if any(_route_back(r, op, registry, backend, src, dst) is None for r in outs):
            return False
        if _needs_wrap(src, dst, t) and not (dst == "int32" and _all_allowed(registry, backend, _WRAP_OPS)):
            return False
    return True


def _choice(op: Op, mapping: dict[str, list[_Target]], registry: OpDefRegistry, backend: str,
            constrained: bool = False) -> dict[str, _Target] | None:
    """The replacement (dtype name → target) that makes `op` and its conversions valid, or None;
    `constrained`: valid as validation judges it, constraints included (not datatypes alone)."""
    values = [*op.operands, *op.results]
    if any(v is not None and _dt(v) is None for v in values):
        return None  # quantized or unrepresentable: not this pass's business
    kinds = sorted({_name(v) for v in values if v is not None} & set(mapping))
    if not kinds or len(kinds) > _MAX_KINDS:
        return None
    t = op.type[4:]
    for n in range(1, len(kinds) + 1):
        for subset in itertools.combinations(kinds, n):
            for targets in itertools.product(*(mapping[k] for k in subset)):
                swap = dict(zip(subset, targets))

                def dts(vs):
                    return [None if v is None else _DT[swap[_name(v)].dtype if _name(v) in swap else _name(v)]
                            for v in vs]

                if not datatypes_allowed(registry, t, backend, dts(op.operands), dts(op.results)):
                    continue
                if any(_identity(v) and _name(v) not in swap for v in values):
                    continue  # an identity-encoded value is always converted back to plain
                if all(_conversions_ok(registry, backend, k, tgt, op) for k, tgt in swap.items()) and not (
                        constrained and _refused(op, registry, backend, swap)):
                    return swap
    return None


class _Builder:
    """Adds the ops of one conversion to the graph, next to the op they serve."""

    def __init__(self, graph: Graph, prov: Provenance, base: str, shape, cast_rank: int | None = None) -> None:
        self.g, self.prov, self.base, self.shape = graph, prov, base, shape
        self.cast_rank = cast_rank  # the backend's largest Cast rank (HTP: 4); higher ones cast flattened

    def const(self, value, dtype: str) -> Value:
        return self.g.add_value(self.g.fresh_value_name(f"{self.base}.k"), np.dtype(dtype), [1],
                                data=np.array([value], dtype=dtype))

    def op(self, qtype: str, operands: Sequence[Value], dtype: str, into: Value | None = None) -> Value:
        out = into if into is not None else self.g.add_value(self.g.fresh_value_name(f"{self.base}.t"),
                                                              np.dtype(dtype), self.shape)
        if qtype == "Cast":  # flattened above the backend's Cast rank (HTP: 4)
            put_cast(self.g, operands[0], out, f"{self.base}.cast", self.cast_rank, self.prov)
            return out
        self.g.add_op(self.g.fresh_op_name(f"{self.base}.{qtype.removeprefix('ElementWise').lower()}"),
                      f"qnn.{qtype}", list(operands), [out], {}, self.prov)
        return out

    def bin(self, qtype: str, a: Value, b, dtype: str = "int32") -> Value:
        bv = b if isinstance(b, Value) else self.const(b, _name(a))
        out = "bool" if qtype in ("ElementWiseLess", "ElementWiseGreaterEqual", "ElementWiseEqual") else dtype
        return self.op(qtype, [a, bv], out)

    def select(self, c: Value, a, b) -> Value:
        av = a if isinstance(a, Value) else self.const(a, "int32")
        bv = b if isinstance(b, Value) else self.const(b, "int32")
        return self.op("ElementWiseSelect", [c, av, bv], "int32")

    def floor_divmod(self, v: Value, m: int) -> tuple[Value, Value]:
        """q, r with v = q·m + r and 0 <= r < m (int32, m > 0; integer Divide truncates)."""
        q = self.bin("ElementWiseDivide", v, m)
        r = self.bin("ElementWiseSubtract", v, self.bin("ElementWiseMultiply", q, m))
        neg = self.bin("ElementWiseLess", r, 0)
        return (self.select(neg, self.bin("ElementWiseSubtract", q, 1), q),
                self.select(neg, self.bin("ElementWiseAdd", r, m), r))

    def wrap(self, v: Value, src: str) -> Value:
        """v (int32) reduced into `src`'s range modulo 2^bits, as two's complement arithmetic wraps."""
        info = np.iinfo(np.dtype(src))
        _, r = self.floor_divmod(v, 1 << info.bits)
        if info.min < 0:
            hi = self.bin("ElementWiseGreaterEqual", r, info.max + 1)
            r = self.select(hi, self.bin("ElementWiseSubtract", r, 1 << info.bits), r)
        return r

    def u32_to_i32(self, x: Value, wrapping: bool) -> Value:
        """x (uint32) as int32: x − 2^31 (order kept), or with `wrapping` the same 32 bits."""
        low = self.op("Cast", [self.bin("ElementWiseMultiply", x, 65536, "uint32")], "float32")
        lo_f = self.bin("ElementWiseDivide", low, 65536.0, "float32")  # x mod 2^16, exactly
        xf = self.op("Cast", [x], "float32")  # within 2^7 of x
        d = self.bin("ElementWiseDivide", self.bin("ElementWiseSubtract", xf, lo_f, "float32"), 65536.0, "float32")
        hi = self.op("Cast", [self.op("ElementWiseRound", [d], "float32")], "int32")  # x div 2^16
        lo = self.op("Cast", [lo_f], "int32")
        if wrapping:
            h = self.select(self.bin("ElementWiseGreaterEqual", hi, 32768), self.bin("ElementWiseSubtract", hi, 65536), hi)
        else:
            h = self.bin("ElementWiseSubtract", hi, 32768)
        return self.bin("ElementWiseAdd", self.bin("ElementWiseMultiply", h, 65536), lo)

    def i32_to_u32(self, v: Value, wrapping: bool, into: Value) -> Value:
        """The uint32 that `u32_to_i32(·, wrapping)` maps to v."""
        q, r = self.floor_divmod(v, 65536)  # q in [-2^15, 2^15), r in [0, 2^16)
        if wrapping:
            hi = self.select(self.bin("ElementWiseLess", q, 0), self.bin("ElementWiseAdd", q, 65536), q)
        else:
            hi = self.bin("ElementWiseAdd", q, 32768)
        big = self.bin("ElementWiseGreaterEqual", hi, 32768)  # the result is 2^31 + w
        w = self.bin("ElementWiseAdd", self.bin("ElementWiseMultiply", self.select(
            big, self.bin("ElementWiseSubtract", hi, 32768), hi), 65536), r)
        half = self.bin("ElementWiseDivide", w, 2)
        odd = self.bin("ElementWiseEqual", self.bin("ElementWiseSubtract", w, self.bin("ElementWiseMultiply", half, 2)), 1)
        t = self.select(big, self.select(odd, w, self.bin("ElementWiseAdd", half, 1 << 30)), w)
        p = self.select(big, self.select(odd, 3, 2), 1)
        s = self.select(big, self.select(odd, 715827883, 1), 1)  # 3 · 715827883 = 2^31 + 1
        cast = [self.op("Cast", [a], "uint32") for a in (t, p, s)]
        return self.op("ElementWiseMultiply", [self.bin("ElementWiseMultiply", cast[0], cast[1], "uint32"), cast[2]],
                       "uint32", into)


def _static(data: np.ndarray, src: str, t: _Target) -> np.ndarray:
    """A constant converted as `u32_to_i32`/Cast would convert it at run time."""
    arr = np.asarray(data)
    if _is_u32_i32(src, t.dtype):
        return arr.astype(np.uint32).view(np.int32) if t.wrapping else (arr.astype(np.int64) - 2 ** 31).astype(np.int32)
    return arr.astype(t.dtype)


def compute_in_supported_types(graph: Graph, computes: Sequence, registry: OpDefRegistry, backend: str) -> int:
    """Put conversions around the QNN ops of `graph` whose datatypes `backend` lacks, as `computes` allow.

    Returns how many ops were changed. Ops the backend already takes are left alone.
    """
    if not computes:
        return 0
    changed = 0
    converted: dict[tuple[str, _Target], Value] = {}
    conditional: dict[tuple[str, frozenset[str]], bool] = {}
    mappings: dict[str, dict[str, list[_Target]]] = {}  # per op type
    cast_rank = cast_max_rank(registry, backend)
    for op in list(graph.ops):
        if not op.type.startswith("qnn."):
            continue
        ins = [_dt(v) for v in op.operands]
        outs = [_dt(r) for r in op.results]
        if None in outs or any(d is None for v, d in zip(op.operands, ins) if v is not None):
            continue
        mapping = mappings.get(op.type)
        if mapping is None:
            mapping = mappings[op.type] = _mapping(computes, op.type, backend)
        constrained = _valid_as_is(op, registry, backend)
        if constrained and not (  # datatypes the backend takes, which a constraint may still refuse
                mapping and _conditional_on(registry, op.type[4:], backend, frozenset(mapping), conditional)
                and _refused(op, registry, backend)):
            continue
        swap = _choice(op, mapping, registry, backend, constrained) if mapping else None
        if swap is None:
            continue
        prov = Provenance(f"compute {'/'.join(sorted(swap))}", "qlower/qnn/retype.py", op.name)
        for i, v in enumerate(list(op.operands)):
            if v is None or _name(v) not in swap:
                continue
            src, t = _name(v), swap[_name(v)]
            nv = converted.get((v.name, t))
            if nv is None:
                b = _Builder(graph, prov, f"{v.name}.to_{t.dtype}", v.shape, cast_rank)
                if v.data is not None and not v.is_input:
                    nv = graph.add_value(graph.fresh_value_name(f"{v.name}.{t.dtype}"), np.dtype(t.dtype), v.shape,
                                         data=_static(v.data, src, t))
                elif _is_u32_i32(src, t.dtype):
                    nv = b.u32_to_i32(v, t.wrapping)
                elif _route_in(v, op, registry, backend, src, t.dtype) == "fixed":
                    v.quant = _IDENTITY
                    nv = b.op("Dequantize", [v], "float32")
                    if t.dtype != "float32":
                        nv = b.op("Cast", [nv], t.dtype)
                else:
                    nv = b.op("Cast", [v], t.dtype)
                converted[(v.name, t)] = nv
            graph.set_operand(op, i, nv)
        for j, r in enumerate(list(op.results)):
            if _name(r) not in swap:
                continue
            src, t = _name(r), swap[_name(r)]
            route = None if _is_u32_i32(src, t.dtype) else _route_back(r, op, registry, backend, src, t.dtype)
            nv = graph.add_value(graph.fresh_value_name(f"{r.name}.{t.dtype}"), np.dtype(t.dtype), r.shape)
            graph.replace_result(op, j, nv)
            b = _Builder(graph, prov, f"{r.name}.from_{t.dtype}", r.shape, cast_rank)
            if _is_u32_i32(src, t.dtype):
                b.i32_to_u32(nv, t.wrapping, r)
                continue
            w = b.wrap(nv, src) if _needs_wrap(src, t.dtype, t) else nv
            if route == "fixed":
                r.quant = _IDENTITY
                b.op("Quantize", [w if t.dtype == "float32" else b.op("Cast", [w], "float32")], src, r)
            else:
                b.op("Cast", [w], src, r)
        changed += 1
    return changed
