"""qlower.qnn.keys: the one rule for when two values, params, tensors or ops are one.

Laws: two values key alike exactly when every artifact writes them alike (the JSON text, and for a
float the IEEE bytes a float64 tensor holds), so -0.0 and 0.0 are two keys, a NaN is one key per bit
pattern, and True, 1 and 1.0 are three; the dict form (`attrs_key`) and the tuple form (`values_key`)
of the rule agree; interning by these keys (conversion and `table_of`) gives every op back its own
params, types and bits included.
"""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qlower.graph.core import Graph
from qlower.qnn import emit_cpp, emit_json
from qlower.qnn.convert import to_table
from qlower.qnn.datatypes import DataType
from qlower.qnn.keys import (MISSING, NO_KEY, array_key, attrs_key, encoding_key, float_bits, params_key,
                             scalar_key, scalar_param_key, tensor_key, value_key, values_key)
from qlower.qnn.model import (EncodingKind, OpConfig, QnnGraph, QnnTensor, QuantEncoding, ScalarParam, TensorParam,
                              TensorType)
from qlower.qnn.table import table_of

_SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_ENC = json.JSONEncoder(separators=(", ", ": ")).encode  # as the writers encode a value


def _nan(payload: int, negative: bool = False) -> float:
    """A quiet NaN with `payload` in its mantissa (Python floats keep it)."""
    return struct.unpack("<d", struct.pack("<Q", (0xFFF8 if negative else 0x7FF8) << 48 | payload))[0]


_TRICKY = [0.0, -0.0, 1.0, -1.0, 1e-6, math.inf, -math.inf, math.nan, _nan(1), _nan(1), _nan(2),
           _nan(0, negative=True), 0, 1, -1, 2, True, False, "", "1", "1.0", None]
_floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [0.0, -0.0, math.nan, _nan(1), _nan(2), _nan(0, negative=True)])
_scalars = st.sampled_from(_TRICKY) | _floats | st.integers(-3, 3) | st.booleans() | st.text(max_size=2)


def _emitted(v) -> tuple:
    """What the artifacts write of a value: its JSON text, with its type (the writers branch on it), and
    for a float the bytes a float64 tensor holds (JSON writes every NaN `NaN`)."""
    return type(v), _ENC(v), float_bits(v) if type(v) is float else b""


# ------------------------------------------------------------------ the float rule, on scalars

@_SETTINGS
@given(_scalars, _scalars)
def test_scalars_key_alike_iff_they_are_written_alike(a, b) -> None:
    assert (scalar_key(a) == scalar_key(b)) == (_emitted(a) == _emitted(b))
    assert hash(scalar_key(a)) == hash(scalar_key(a))


def test_the_float_rule() -> None:
    assert scalar_key(0.0) != scalar_key(-0.0)
    assert scalar_key(math.nan) == scalar_key(float("nan"))  # one bit pattern: one key, though nan != nan
    assert {scalar_key(math.nan): 1}.get(scalar_key(float("nan"))) == 1
    assert scalar_key(_nan(1)) != scalar_key(_nan(2)) and scalar_key(_nan(1)) == scalar_key(_nan(1))
    assert len({scalar_key(True), scalar_key(1), scalar_key(1.0)}) == 3
    assert len({scalar_key(False), scalar_key(0), scalar_key(0.0), scalar_key(None), scalar_key("")}) == 5


def test_numpy_scalars_and_arrays_key_by_dtype_shape_and_bytes() -> None:
    assert scalar_key(np.float32(-0.0)) != scalar_key(np.float32(0.0))
    assert scalar_key(np.float32(1.0)) != scalar_key(np.float64(1.0)) != scalar_key(1.0)
    assert scalar_key(np.int64(1)) != scalar_key(1) and scalar_key(np.bool_(True)) != scalar_key(True)
    assert scalar_key(np.float32(np.nan)) == scalar_key(np.float32(np.nan))
    a = np.arange(6, dtype=np.float32)
    assert array_key(a) == array_key(a.copy())
    assert array_key(a) != array_key(a.reshape(2, 3)) != array_key(a.astype(np.float64))
    assert array_key(np.array([0.0])) != array_key(np.array([-0.0]))
    assert array_key(a.reshape(2, 3).T) == array_key(np.ascontiguousarray(a.reshape(2, 3).T))  # (C order)
    assert array_key(a, max_size=5) is NO_KEY and array_key(a, max_size=6) is not NO_KEY
    assert array_key(np.array([object()])) is NO_KEY


@_SETTINGS
@given(st.lists(_scalars, max_size=3), st.lists(_scalars, max_size=3))
def test_lists_and_tuples_key_by_type_and_items(a, b) -> None:
    same = type(a) is type(b) and len(a) == len(b) and all(map(lambda x, y: _emitted(x) == _emitted(y), a, b))
    assert (value_key(a) == value_key(b)) == same
    assert value_key(a) != value_key(tuple(a))
    assert value_key([*a, object()]) is NO_KEY and value_key(object()) is NO_KEY


# ------------------------------------------------------------------ attribute dicts and tuples: one rule, two forms

@_SETTINGS
@given(st.lists(_scalars | st.sampled_from([np.float32(-0.0), np.float32(0.0), np.int8(1)]), min_size=1, max_size=4),
       st.data())
def test_attrs_key_and_values_key_agree(a, data) -> None:
    b = data.draw(st.lists(_scalars, min_size=len(a), max_size=len(a)) | st.just(list(a)))
    names = [f"a{i}" for i in range(len(a))]
    da, db = dict(zip(names, a)), dict(zip(names, b))
    same = all(map(lambda x, y: type(x) is type(y) and scalar_key(x) == scalar_key(y), a, b))
    assert (attrs_key(da) == attrs_key(db)) == same
    assert (values_key(tuple(a)) == values_key(tuple(b))) == same


def test_an_attribute_without_a_key_keys_nothing() -> None:
    assert attrs_key({"axis": 1, "perm": [0, 1]}) is NO_KEY
    assert attrs_key({"w": np.zeros(2)}) is NO_KEY
    assert values_key((1, [0, 1])) is NO_KEY
    # an absent attribute is a key of its own, unlike None
    assert values_key((MISSING,)) != values_key((None,)) and values_key((MISSING,)) == values_key((MISSING,))


# ------------------------------------------------------------------ params: a key shared means the same text

_PARAM_TYPES = [DataType.FLOAT_32, DataType.FLOAT_64, DataType.INT_32, DataType.UINT_32, DataType.BOOL_8,
                DataType.STRING]


def _written(p: ScalarParam) -> tuple[str, str] | None:
    """Both writers' text of a scalar param (None when its value does not fit its datatype)."""
    try:
        v = emit_json.scalar_value(p, "p")
    except Exception:
        return None
    return f'{{"{int(p.datatype)}": {_ENC(v)}}}', emit_cpp._scalar(p, "p")


@_SETTINGS
@given(st.sampled_from(_PARAM_TYPES), _scalars, st.sampled_from(_PARAM_TYPES), _scalars)
def test_scalar_params_that_key_alike_are_written_alike(dt_a, a, dt_b, b) -> None:
    pa, pb = ScalarParam("eps", dt_a, a), ScalarParam("eps", dt_b, b)
    ka, kb = scalar_param_key("eps", dt_a, a), scalar_param_key("eps", dt_b, b)
    if ka == kb:
        assert _written(pa) == _written(pb)
    assert (ka == kb) == (dt_a is dt_b and _emitted(a) == _emitted(b))


def test_written_floats_differ_where_keys_do() -> None:
    """The cases a looser key would merge: each pair is written differently."""
    for a, b in [(0.0, -0.0), (1, 1.0), (True, 1)]:
        dt = DataType.FLOAT_32 if type(a) is float else DataType.INT_32
        assert _ENC(a) != _ENC(b)
        assert scalar_param_key("x", dt, a) != scalar_param_key("x", dt, b)
    pa, pb = ScalarParam("x", DataType.FLOAT_32, 0.0), ScalarParam("x", DataType.FLOAT_32, -0.0)
    assert _written(pa) != _written(pb)


def test_params_key() -> None:
    t = QnnTensor("w", TensorType.STATIC, DataType.FLOAT_32, (2,), None, np.zeros(2, np.float32))
    other = QnnTensor("v", TensorType.STATIC, DataType.FLOAT_32, (2,), None, np.ones(2, np.float32))
    eps = ScalarParam("eps", DataType.FLOAT_32, 1e-6)
    # a tensor param keys by its tensor's kind, not its name or data (those are each op's own)
    assert params_key([eps, TensorParam("w", t)]) == params_key([eps, TensorParam("w", other)])
    assert params_key([TensorParam("w", t)]) != params_key([TensorParam("w", QnnTensor(
        "w", TensorType.STATIC, DataType.FLOAT_32, (1, 2), None, np.zeros((1, 2), np.float32)))])
    assert params_key([ScalarParam("eps", DataType.FLOAT_32, -0.0)]) != params_key(
        [ScalarParam("eps", DataType.FLOAT_32, 0.0)])
    assert params_key([ScalarParam("x", DataType.FLOAT_32, object())]) is NO_KEY


# ------------------------------------------------------------------ encodings and tensors

def _enc(scales, offsets=(0,), **kw) -> QuantEncoding:
    kind = EncodingKind.AXIS_SCALE_OFFSET if len(scales) > 1 else EncodingKind.SCALE_OFFSET
    return QuantEncoding(kind, scales, offsets * len(scales) if len(offsets) == 1 else offsets,
                         axis=0 if len(scales) > 1 else None, **kw)


def test_encodings_key_by_value_floats_by_bits() -> None:
    assert encoding_key(_enc((0.5,))) == encoding_key(_enc((0.5,)))  # made apart: one key
    assert encoding_key(_enc((math.nan,))) == encoding_key(_enc((float("nan"),)))  # a NaN scale too
    assert encoding_key(_enc((0.0,))) != encoding_key(_enc((-0.0,)))
    assert encoding_key(_enc((0.5,), (1,))) != encoding_key(_enc((0.5,), (2,)))
    assert encoding_key(_enc((0.5, 0.25))) != encoding_key(_enc((0.25, 0.5)))
    assert encoding_key(_enc((0.5,), bitwidth=8)) != encoding_key(_enc((0.5,)))
    lpbq = dict(kind=EncodingKind.BLOCKWISE_EXPANSION, scales=(0.5, 0.5), offsets=(0, 0), axis=0, bitwidth=4,
                num_blocks_per_axis=2, block_scale_bitwidth=4)
    assert encoding_key(QuantEncoding(**lpbq, block_scales=((1, 2), (3, 4)))) == encoding_key(
        QuantEncoding(**lpbq, block_scales=((1, 2), (3, 4))))
    assert encoding_key(QuantEncoding(**lpbq, block_scales=((1, 2), (3, 4)))) != encoding_key(
        QuantEncoding(**lpbq, block_scales=((1, 2), (4, 3))))
    assert encoding_key(None) is None


def test_tensor_key() -> None:
    def t(enc=None, data=None, dims=(1, 4)):
        return QnnTensor("x", TensorType.NATIVE, DataType.UFIXED_POINT_8, dims, enc, data)

    assert tensor_key(t(_enc((0.5,)))) == tensor_key(t(_enc((0.5,))))
    assert tensor_key(t(_enc((0.5,)))) != tensor_key(t(_enc((-0.5,)))) != tensor_key(t())
    assert tensor_key(t()) != tensor_key(t(dims=(4,))) != tensor_key(t(data=np.zeros((1, 4), np.uint8)))


# ------------------------------------------------------------------ interning gives every op its own params back

def _param_facts(params) -> list:
    return [(p.name, p.datatype, _emitted(p.value)) for p in params]


@_SETTINGS
@given(st.lists(st.sampled_from(_TRICKY[:-4]), min_size=2, max_size=16))
def test_table_of_shares_kinds_only_between_params_written_alike(values) -> None:
    g = QnnGraph("g")
    g.add_tensor(QnnTensor("x", TensorType.APP_WRITE, DataType.FLOAT_32, (2,)))
    prev = "x"
    for i, v in enumerate(values):
        out = f"y{i}"
        g.add_tensor(QnnTensor(out, TensorType.APP_READ if i == len(values) - 1 else TensorType.NATIVE,
                               DataType.FLOAT_32, (2,)))
        dt = DataType.BOOL_8 if type(v) is bool else DataType.INT_32 if type(v) is int else DataType.FLOAT_32
        g.ops.append(OpConfig(f"op{i}", "ElementWiseNeuron", [prev], [out], [ScalarParam("alpha", dt, v)]))
        prev = out
    g.inputs, g.outputs = ["x"], [prev]
    table = table_of(g)
    assert table.check() == []
    assert [_param_facts(op.params) for op in table.graph().ops] == [_param_facts(op.params) for op in g.ops]
    # the ops between the first (it reads the graph input) and the last (it writes the output) share a
    # kind exactly when their params are written alike
    middle = range(1, len(values) - 1)
    written = [(op.params[0].datatype, _emitted(op.params[0].value)) for op in g.ops]
    for i in middle:
        for j in middle:
            assert (table.op_kind[i] == table.op_kind[j]) == (written[i] == written[j])


@_SETTINGS
@given(st.lists(st.sampled_from(_TRICKY[:-4] + [np.float32(-0.0), np.float32(0.0)]), min_size=2, max_size=12))
def test_conversion_gives_every_op_its_own_attributes(values) -> None:
    """`to_table`'s two memos (a Graph op's attributes, then its params) share a kind only between ops
    whose params are written alike: each converted op has the value (type and bits) its source op had."""
    g = Graph("g")
    prev = x = g.add_value("x", "float32", [2, 3])
    for i, v in enumerate(values):
        y = g.add_value(f"y{i}", "float32", [2, 3])
        g.add_op(f"op{i}", "qnn.ElementWiseNeuron", [prev], [y], {"alpha": v})
        prev = y
    g.set_io([x], [prev])
    table = to_table(g)
    assert table.check() == []
    for op, src in zip(table.graph().ops, g.ops):
        (p,) = op.params
        want = src.attrs["alpha"]
        want = want.item() if isinstance(want, np.generic) else want
        assert (type(p.value), _emitted(p.value)) == (type(want), _emitted(want)), src.name
