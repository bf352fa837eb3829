"""Encodings' numbers as read-only arrays, and their text formatted with numpy (`qlower.qnn.numtext`).

The text of a long run must be the bytes the one-number-at-a-time formatting wrote: `repr` floats
(NaN and the infinities as each artifact spells them), `str` ints, in order.
"""

from __future__ import annotations

import copy
import json
import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qlower.graph.types import Quant
from qlower.qnn import emit_cpp, emit_json, numtext
from qlower.qnn.datatypes import DataType
from qlower.qnn.keys import encoding_key, tensor_key
from qlower.qnn.model import EncodingKind, QnnGraph, QnnTensor, QuantEncoding, TensorType

_FLOATS = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True) | st.sampled_from(
    [0.0, -0.0, math.nan, -math.nan, math.inf, -math.inf, 5e-324, 1e16, 1e-5, 0.1])
_LONG = numtext.SMALL * 3  # runs of up to this many cross from the Python path to the numpy one


# ---------------------------------------------------------------- numtext: the text of a run

@settings(max_examples=80, deadline=None)
@given(st.lists(_FLOATS, max_size=_LONG), st.sampled_from([numtext.json_float, numtext.c_float]))
def test_floats_are_joined_as_one_at_a_time(values: list[float], fmt) -> None:
    assert numtext.join(numtext.floats(np.array(values, np.float64), fmt)) == ", ".join(map(fmt, values))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=_LONG) | st.lists(st.integers(-3, 20), max_size=_LONG))
def test_ints_are_joined_as_str_writes_them(values: list[int]) -> None:
    assert numtext.join(numtext.ints(np.array(values, np.int64))) == ", ".join(map(str, values))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32])
def test_narrow_ints_are_joined_by_value(dtype) -> None:
    info = np.iinfo(dtype)
    a = np.random.default_rng(0).integers(info.min, info.max, 500, endpoint=True).astype(dtype)
    assert numtext.join(numtext.ints(a)) == ", ".join(map(str, a.tolist()))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 40), st.integers(0, 9), st.integers(0, 2**16))
def test_rows_are_what_json_writes(nrows: int, ncols: int, top: int) -> None:
    a = np.random.default_rng(nrows * 10 + ncols).integers(0, top, (nrows, ncols), endpoint=True)
    assert "[" + numtext.rows(numtext.ints(a), a.shape) + "]" == json.dumps(a.tolist())


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(_FLOATS, st.integers(-(2**31), 2**31 - 1)), max_size=_LONG))
def test_fields_interleave_with_their_glue(pairs: list[tuple[float, int]]) -> None:
    s = np.array([p[0] for p in pairs], np.float64)
    o = np.array([p[1] for p in pairs], np.int64)
    want = ", ".join(f"{{.scale= {emit_cpp.cfloat(x)}, .offset= {y}}}" for x, y in pairs)
    got = numtext.join_fields([numtext.floats(s, emit_cpp.cfloat), numtext.ints(o)],
                              ("{.scale= ", ", .offset= ", "}"), ", ", len(pairs))
    assert got == want


# ---------------------------------------------------------------- encodings hold frozen arrays

def _long_encodings(channels: int = 3 * numtext.SMALL, blocks: int = 5) -> dict[str, tuple[QuantEncoding, ...]]:
    """Per-axis encodings long enough for the numpy path, each built from lists and from arrays."""
    rng = np.random.default_rng(7)
    scales = rng.random(channels) * 1e-3
    scales[:4] = [0.0, -0.0, 1e-300, 3.0]  # (writers write what they are given; -0.0 keeps its sign)
    offsets = rng.integers(-300, 300, channels)
    rows = rng.integers(1, 16, (channels, blocks))
    made = {}
    for name, kind, kw in (
            ("axis", EncodingKind.AXIS_SCALE_OFFSET, {}),
            ("bw_axis", EncodingKind.BW_AXIS_SCALE_OFFSET, {"bitwidth": 4}),
            ("lpbq", EncodingKind.BLOCKWISE_EXPANSION, {"bitwidth": 4, "num_blocks_per_axis": blocks,
                                                        "block_scale_bitwidth": 4})):
        lists = QuantEncoding(kind, scales.tolist(), offsets.tolist(), axis=0, **kw,
                              **({"block_scales": [list(r) for r in rows.tolist()]} if "num_blocks_per_axis" in kw
                                 else {}))
        arrays = QuantEncoding(kind, scales, offsets, axis=0, **kw,
                               **({"block_scales": rows.astype(np.uint8)} if "num_blocks_per_axis" in kw else {}))
        made[name] = (lists, arrays)
    return made


def _graph(encodings: list[QuantEncoding]) -> QnnGraph:
    g = QnnGraph("numbers")
    for i, enc in enumerate(encodings):
        data = np.zeros((len(enc.scales), 5), np.int8)
        g.add_tensor(QnnTensor(f"w{i}", TensorType.STATIC, DataType.SFIXED_POINT_8, data.shape, enc, data))
    return g


def test_an_encoding_from_arrays_is_the_encoding_from_lists() -> None:
    for name, (lists, arrays) in _long_encodings().items():
        assert lists == arrays and hash(lists) == hash(arrays), name
        assert encoding_key(lists) == encoding_key(arrays), name
        assert emit_json.quant_params(lists) == emit_json.quant_params(arrays), name
    for a, b in [(_graph([e[0] for e in _long_encodings().values()]),
                  _graph([e[1] for e in _long_encodings().values()]))]:
        assert emit_json.dumps(a) == emit_json.dumps(b)
        assert emit_cpp.render(a) == emit_cpp.render(b)


def test_long_encodings_are_written_as_one_number_at_a_time() -> None:
    encs = [e[1] for e in _long_encodings().values()]
    g = _graph(encs)
    text = emit_json.dumps(g)
    doc = json.loads(text)
    enc = json.JSONEncoder(separators=(", ", ": ")).encode
    for i, e in enumerate(encs):  # each tensor's quant_params is json's encoding of the reference dict
        assert enc(doc["graph"]["tensors"][f"w{i}"]["quant_params"]) == enc(emit_json.quant_params(e))
        assert f'"quant_params": {enc(emit_json.quant_params(e))}' in text
    cpp = emit_cpp.render(g)
    axis, bw_axis, lpbq = encs
    cf = emit_cpp.cfloat
    assert ("Qnn_ScaleOffset_t scaleOffset_w0[] = {" + ", ".join(
        f"{{.scale= {cf(s)}, .offset= {o}}}" for s, o in zip(axis.scales, axis.offsets)) + "};") in cpp
    assert "float scales_w1[] = {" + ", ".join(map(cf, bw_axis.scales)) + "};" in cpp
    assert "int32_t offsets_w1[] = {" + ", ".join(map(str, bw_axis.offsets)) + "};" in cpp
    assert "uint8_t blockScales_w2[] = {" + ", ".join(
        str(v) for row in lpbq.block_scales for v in row) + "};" in cpp


def test_keys_tell_apart_what_writes_differently() -> None:
    def enc(scales, offsets=None, **kw) -> QuantEncoding:
        offsets = np.zeros(len(scales), np.int64) if offsets is None else offsets
        return QuantEncoding(EncodingKind.AXIS_SCALE_OFFSET, scales, offsets, axis=0, **kw)

    base = np.linspace(0.1, 1.0, 200)
    neg = base.copy()
    neg[100] = -0.0
    pos = base.copy()
    pos[100] = 0.0
    assert encoding_key(enc(neg)) != encoding_key(enc(pos)) and enc(neg) != enc(pos)
    nan = base.copy()
    nan[5] = math.nan
    assert encoding_key(enc(nan)) == encoding_key(enc(nan.copy())) and enc(nan) == enc(nan.copy())
    long = np.linspace(0.1, 1.0, 10_000)
    other = long.copy()
    other[1] = np.nextafter(other[1], 2.0)  # one bit apart, where a hash (which samples long runs) does not look
    assert encoding_key(enc(long)) != encoding_key(enc(other)) and enc(long) != enc(other)
    assert encoding_key(enc(long)) == encoding_key(enc(long.copy())) and enc(long) == enc(long.tolist())
    t = QnnTensor("x", TensorType.NATIVE, DataType.UFIXED_POINT_8, (200, 1), enc(base))
    assert tensor_key(t) == tensor_key(QnnTensor("y", TensorType.NATIVE, DataType.UFIXED_POINT_8, (200, 1),
                                                 enc(base.tolist())))
    # integers compare by value whatever their width
    assert enc(base, np.zeros(200, np.int8)) == enc(base, [0] * 200)
    assert encoding_key(enc(base, np.zeros(200, np.int8))) == encoding_key(enc(base, [0] * 200))


def test_quant_numbers_are_read_only_arrays_that_act_as_tuples() -> None:
    src = np.array([0.5, 0.25, 0.125])
    q = Quant(src, np.array([1, 2, 3], np.int8), axis=0)
    src[0] = 9.0  # the caller's array stays the caller's
    assert q.scale == (0.5, 0.25, 0.125) and q.zero_point == [1, 2, 3]
    assert q == Quant([0.5, 0.25, 0.125], [1, 2, 3], axis=0) and hash(q) == hash(Quant([0.5, 0.25, 0.125],
                                                                                    [1, 2, 3], axis=0))
    assert type(q.scale[0]) is float and type(q.zero_point[1]) is int and len(q.scale) == 3 and q.scale
    assert q.scale[1:] == (0.25, 0.125) and list(q.zero_point) == [1, 2, 3] and 0.25 in q.scale
    a = np.asarray(q.scale)
    assert a.dtype == np.float64 and not a.flags.writeable
    assert np.asarray(q.zero_point).dtype == np.int64  # as from the tuple, whatever the stored width
    with pytest.raises(ValueError):
        a[0] = 1.0
    assert pickle.loads(pickle.dumps(q)) == q and copy.deepcopy(q) == q
    assert not np.asarray(pickle.loads(pickle.dumps(q)).scale).flags.writeable
    assert Quant([0.0], [0]) != Quant([-0.0], [0])  # (they are written 0.0 and -0.0)
    assert repr(Quant(0.5, 3).scale) == "(0.5,)"
    with pytest.raises(OverflowError):
        Quant([1.0], [2**63])


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="writing in a child process needs os.fork")
def test_many_encoding_numbers_write_the_cpp_in_a_child(tmp_path, monkeypatch) -> None:
    from qlower.qnn import artifacts

    g = _graph([e[1] for e in _long_encodings().values()])
    want = [p.read_bytes() for p in artifacts.save(g, tmp_path / "serial", parallel=False)]
    started = []
    start = artifacts._Child.start
    monkeypatch.setattr(artifacts._Child, "start", staticmethod(lambda *a: started.append(a) or start(*a)))
    monkeypatch.setattr(artifacts, "PARALLEL_NUMBERS", 10**9)
    assert [p.read_bytes() for p in artifacts.save(g, tmp_path / "few")] == want and not started
    monkeypatch.setattr(artifacts, "PARALLEL_NUMBERS", 1000)  # (the graph has about 2,600)
    assert [p.read_bytes() for p in artifacts.save(g, tmp_path / "many")] == want
    assert sorted(a[2] for a in started) == ["numbers.cpp", "numbers_net.json"]  # a child each


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="writing in a child process needs os.fork")
def test_a_failing_json_child_leaves_no_files(tmp_path, monkeypatch) -> None:
    from qlower.diagnostics import QlowerError
    from qlower.qnn import artifacts

    def broken(*a, **k):
        raise QlowerError(emit_json.error("the json writer broke", code="test"))

    monkeypatch.setattr(artifacts, "PARALLEL_NUMBERS", 1000)
    monkeypatch.setattr(emit_json, "write", broken)
    with pytest.raises(QlowerError, match="the json writer broke"):
        artifacts.save(_graph([e[1] for e in _long_encodings().values()]), tmp_path)
    assert list(tmp_path.iterdir()) == []
