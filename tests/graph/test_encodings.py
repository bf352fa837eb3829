"""AIMET encodings files: the three layouts read to one form, written back, checked entry by entry.

The real thing: aimet-onnx's own exports of one model in 1.0.0 and 2.0.0 (when aimet-onnx is
installed) must read to the same encodings; hand-written documents pin each layout's fields.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qlower.diagnostics import QlowerError
from qlower.graph.encodings import (EncodingSet, TensorEncoding, parse_encodings, read_encodings, to_json,
                                    write_encodings)
from qlower.graph.types import Quant

V1 = {
    "version": "1.0.0",
    "activation_encodings": [
        {"name": "x", "dtype": "INT", "enc_type": "PER_TENSOR", "bw": 16, "is_sym": False,
         "scale": [0.001], "offset": [-30000]},
        {"name": "h", "dtype": "FLOAT", "enc_type": "PER_TENSOR", "bw": 16},
    ],
    "param_encodings": [
        {"name": "w", "dtype": "INT", "enc_type": "PER_CHANNEL", "bw": 8, "is_sym": True,
         "scale": [0.1, 0.2, 0.3], "offset": [-128, -128, -128]},
        # LPBQ: 2 channels × 2 blocks; scale and offset per channel on the 8-bit (bw) grid
        {"name": "wl", "dtype": "INT", "enc_type": "LPBQ", "bw": 8, "compressed_bw": 4, "is_sym": True,
         "block_size": 4, "scale": [0.01, 0.02], "offset": [-128, -128], "per_block_int_scale": [16, 3, 7, 16]},
        {"name": "wb", "dtype": "INT", "enc_type": "PER_BLOCK", "bw": 4, "is_sym": True, "block_size": 2,
         "scale": [0.5, 0.25, 0.125, 1.0], "offset": [-8, -8]},
    ],
}


def test_v1_entries_read_to_one_form():
    s = parse_encodings(V1)
    x = s.get("x")
    assert (x.kind, x.bitwidth, x.role, x.offset) == ("PER_TENSOR", 16, "activation", (-30000,))
    assert x.quant(signed=False) == Quant((0.001,), (30000,), bitwidth=16)
    assert s.get("h").is_float
    w = s.get("w")
    assert w.quant(signed=True, axis=0) == Quant((0.1, 0.2, 0.3), (0, 0, 0), axis=0, bitwidth=8, symmetric=True)
    assert w.quant(signed=False, axis=0).zero_point == (128, 128, 128)
    wl = s.get("wl")
    assert (wl.kind, wl.bitwidth, wl.block_scale_bitwidth) == ("LPBQ", 4, 4)
    assert wl.scale == pytest.approx((0.16, 0.03, 0.14, 0.32))  # channel scale × block integer, channel-major
    q = wl.quant(signed=True, axis=0, block_axis=1, shape=(2, 8))
    assert (q.zero_point, q.block_size, q.block_axis, q.bitwidth) == ((0, 0), 4, 1, 4)
    assert set(s.params) == {"w", "wl", "wb"} and set(s.activations) == {"x", "h"}


def test_legacy_layout_is_one_dict_per_channel():
    doc = {"version": "0.6.1",
           "activation_encodings": {"x": [{"bitwidth": 8, "dtype": "int", "is_symmetric": "False",
                                           "scale": 0.5, "offset": -3, "min": -1.5, "max": 126.0}]},
           "param_encodings": {"w": [{"bitwidth": 8, "dtype": "int", "is_symmetric": "True", "scale": s,
                                      "offset": -128, "min": -128 * s, "max": 127 * s} for s in (0.1, 0.2)],
                               "m": [{"bitwidth": 8, "dtype": "int", "is_symmetric": "False", "min": -1.0,
                                      "max": 3.0}]}}
    s = parse_encodings(doc)
    assert s.get("x").quant(signed=False) == Quant((0.5,), (3,), bitwidth=8)
    assert s.get("w").kind == "PER_CHANNEL" and s.get("w").quant(signed=True, axis=1).zero_point == (0, 0)
    assert s.get("m").quant(signed=False) == Quant.for_range(-1.0, 3.0, "uint8", bitwidth=8)  # min/max only


def test_v2_layout_keeps_axes_and_the_weight_layout():
    doc = {"version": "2.0.0", "encodings": [
        {"name": "x", "output_dtype": "uint16", "y_scale": 0.001, "y_zero_point": 30000},
        {"name": "b", "output_dtype": "int32", "y_scale": [1e-6, 2e-6], "axis": 0},
        # a MatMul weight [K=8, N=2]: blocks along axis 0 (the ONNX axis), channels along 1
        {"name": "wb", "output_dtype": "int4", "axis": 0, "block_size": 4, "y_scale": [[0.5, 0.25], [0.125, 1.0]]},
        {"name": "wl", "output_dtype": "int4", "axis": 0, "block_size": 4,
         "per_block_int_scale": [[16, 7], [3, 16]], "per_channel_float_scale": [[0.01, 0.02]]},
        {"name": "wm", "output_dtype": "int4", "axis": 1, "block_size": 4,
         "y_scale": {"x": [[16, 3], [7, 16]], "x_scale": [[0.01], [0.02]]}},
    ]}
    s = parse_encodings(doc)
    assert s.get("x").quant(signed=False) == Quant((0.001,), (30000,), bitwidth=16)
    assert s.get("b").quant(signed=True) == Quant((1e-6, 2e-6), (0, 0), axis=0, bitwidth=32, symmetric=True)
    wb = s.get("wb")
    assert (wb.axis, wb.block_axis, wb.scale) == (1, 0, (0.5, 0.125, 0.25, 1.0))  # channels × blocks
    wl, wm = s.get("wl"), s.get("wm")
    assert (wl.axis, wl.block_axis) == (1, 0) and (wm.axis, wm.block_axis) == (0, 1)
    assert wl.scale == pytest.approx((0.16, 0.03, 0.14, 0.32)) == wm.scale
    assert wl.quant(signed=True, shape=(8, 2)).block_axis == 0


def _quants():
    per_tensor = st.builds(lambda s, z, b: Quant((s,), (z % (1 << b),), bitwidth=b),
                           st.floats(1e-6, 10), st.integers(0, 1 << 16), st.sampled_from([4, 8, 16]))
    per_channel = st.builds(lambda ss, b: Quant(tuple(ss), (0,) * len(ss), axis=0, bitwidth=b, symmetric=True),
                            st.lists(st.floats(1e-6, 10), min_size=2, max_size=6), st.sampled_from([4, 8]))
    return st.one_of(per_tensor, per_channel)


@settings(max_examples=60, deadline=None)
@given(_quants(), st.sampled_from(["1.0.0", "0.6.1"]))
def test_quant_round_trips_through_every_written_layout(q, version):
    # (two channels at least: 0.6.1 writes one channel as a list of one, which reads back per-tensor)
    signed = q.axis is not None
    e = TensorEncoding.from_quant("t", q, signed=signed, role="param" if signed else "activation")
    back = parse_encodings(json.loads(json.dumps(to_json(EncodingSet({"t": e}), version)))).get("t")
    assert back.quant(signed=signed, axis=q.axis) == q


def test_offsets_mean_the_same_real_values_on_either_grid():
    e = parse_encodings(V1).get("w")
    u, s = e.quant(signed=False, axis=0), e.quant(signed=True, axis=0)
    q_u = np.arange(256)
    for c in range(3):
        real_u = u.scale[c] * (q_u - u.zero_point[c])
        real_s = s.scale[c] * ((q_u - 128) - s.zero_point[c])
        assert np.array_equal(real_u, real_s)
        assert np.allclose(real_u, e.scale[c] * (q_u + e.offset[c]))  # the file's own formula


def test_write_then_read(tmp_path):
    s = parse_encodings(V1)
    write_encodings(tmp_path / "m.encodings", s)
    assert read_encodings(tmp_path / "m.encodings").entries == s.entries
    with pytest.raises(ValueError, match="no block encodings"):
        to_json(s, "0.6.1")


@pytest.mark.parametrize("patch, message", [
    ({"bw": 40}, "`bw` must be an integer from 2 to 32"),
    ({"enc_type": "PER_ROW"}, "`enc_type` must be one of"),
    ({"scale": [0.1, "x", 0.3]}, "`scale` must be a number or a rectangular list of numbers"),
    ({"scale": [0.1, -0.2, 0.3]}, "`scale` must be positive"),
    ({"offset": [-128, -128]}, "3 scales but 2 offsets"),
    ({"offset": [-128, 5, -128]}, "offsets must lie in"),
    ({"offset": [-128, -127.5, -128]}, "`offset` must hold integers"),
    ({"is_sym": "maybe"}, "`is_sym` must be true or false"),
    ({"name": ""}, "`name` must be a non-empty string"),
])
def test_every_bad_field_is_named(patch, message):
    doc = json.loads(json.dumps(V1))
    doc["param_encodings"][0].update(patch)
    with pytest.raises(QlowerError, match=message) as e:
        parse_encodings(doc, "m.encodings")
    assert "m.encodings: param_encodings[0]" in str(e.value)


def test_bad_files_are_clear_errors(tmp_path):
    cases = {"not_json.encodings": b"{\"version\": ", "deep.encodings": b"[" * 100000 + b"]" * 100000,
             "binary.encodings": b"\xff\xfe\x00", "list.encodings": b"[]",
             "version.encodings": b'{"version": "9.9"}', "dup.encodings": json.dumps(
                 {"version": "1.0.0", "activation_encodings": [V1["activation_encodings"][0]] * 2}).encode()}
    for name, body in cases.items():
        (tmp_path / name).write_bytes(body)
        with pytest.raises(QlowerError) as e:
            read_encodings(tmp_path / name)
        assert name in str(e.value)
    with pytest.raises(QlowerError, match="not a regular file"):
        read_encodings(tmp_path)
    lp = json.loads(json.dumps(V1))
    lp["param_encodings"][1]["is_sym"] = False
    with pytest.raises(QlowerError, match="LPBQ encoding must be symmetric"):
        parse_encodings(lp)


def test_quant_checks_the_tensor_shape():
    s = parse_encodings(V1)
    with pytest.raises(ValueError, match="needs the channel axis"):
        s.get("w").quant(signed=True)
    with pytest.raises(ValueError, match="3 channel encodings for dimension 0"):
        s.get("w").quant(signed=True, axis=0, shape=(4, 2))
    with pytest.raises(ValueError, match="do not cover dimension 1"):
        s.get("wl").quant(signed=True, axis=0, block_axis=1, shape=(2, 12))




@pytest.fixture(scope="module")
def aimet_exports(tmp_path_factory):
    """One model quantized by aimet-onnx (LPBQ MatMul/Gemm/Conv weights, 16-bit activations) and
    exported in 1.0.0 and 2.0.0."""
    pytest.importorskip("aimet_onnx", reason="aimet-onnx is not installed (pip install aimet-onnx beside "
                                             "torch==2.13.0) — the real-export check needs it")
    torch = pytest.importorskip("torch")
    onnx = pytest.importorskip("onnx")
    from aimet_onnx.quantsim import QuantizationSimModel, set_lpbq_for_params

    out = tmp_path_factory.mktemp("aimet")
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.fc = torch.nn.Conv2d(32, 4, 3), torch.nn.Linear(32, 8)
            self.mm = torch.nn.Parameter(torch.randn(8, 16))

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x)).flatten(1)[:, :32]) @ self.mm

    torch.onnx.export(Net().eval(), (torch.randn(1, 32, 6, 6),), out / "m.onnx", input_names=["x"],
                      output_names=["y"], opset_version=17, dynamo=False)
    rng = np.random.default_rng(0)
    data = [{"x": rng.standard_normal((1, 32, 6, 6)).astype(np.float32)} for _ in range(2)]
    files = {}
    for tag, lpbq in (("lpbq", True), ("w8", False)):
        sim = QuantizationSimModel(onnx.load(out / "m.onnx"), param_type="int4" if lpbq else "int8",
                                   activation_type="int16")
        if lpbq:
            set_lpbq_for_params(sim, bitwidth=4, block_size=16, op_types={"MatMul", "Gemm", "Conv"})
        sim.compute_encodings(data)
        for v in ("1.0.0", "2.0.0"):
            sim.export(str(out), f"{tag}_{v[0]}", encoding_version=v)
            files[tag, v] = out / f"{tag}_{v[0]}.encodings"
    return files


@pytest.mark.parametrize("tag", ["lpbq", "w8"])
def test_aimet_versions_of_one_export_agree(aimet_exports, tag):
    v1, v2 = read_encodings(aimet_exports[tag, "1.0.0"]), read_encodings(aimet_exports[tag, "2.0.0"])
    assert v1.params and v1.activations
    for name, e in v1.entries.items():
        other = v2.get(name)
        assert other is not None, name
        signed = e.role == "param"
        a = e.quant(signed=signed, axis=other.axis, block_axis=other.block_axis)
        b = other.quant(signed=signed)
        assert (a.zero_point, a.axis, a.block_axis, a.block_size, a.bitwidth, a.symmetric) == \
               (b.zero_point, b.axis, b.block_axis, b.block_size, b.bitwidth, b.symmetric), name
        assert np.allclose(a.scale, b.scale, rtol=1e-6), name
        if e.kind == "LPBQ":
            assert e.block_int_scales == other.block_int_scales and e.block_scale_bitwidth == 4
    kinds = {e.kind for e in v1.params.values()}  # (the 8-row weight is too short for blocks of 16)
    assert kinds == ({"LPBQ", "PER_CHANNEL"} if tag == "lpbq" else {"PER_CHANNEL"})


def test_aimet_export_survives_qlower_round_trip(aimet_exports, tmp_path):
    s = read_encodings(aimet_exports["lpbq", "1.0.0"])
    write_encodings(tmp_path / "again.encodings", s)
    assert read_encodings(tmp_path / "again.encodings").entries == s.entries
    raw, ours = json.loads(aimet_exports["lpbq", "1.0.0"].read_text()), json.loads((tmp_path / "again.encodings").read_text())
    key = lambda d: {e["name"]: {k: v for k, v in e.items()} for e in d["param_encodings"]}  # noqa: E731
    for name, entry in key(raw).items():  # the fields AIMET wrote come back as AIMET wrote them
        for k in ("enc_type", "bw", "is_sym", "offset", "block_size", "compressed_bw", "per_block_int_scale"):
            assert key(ours)[name].get(k) == entry.get(k), (name, k)
        assert np.allclose(key(ours)[name]["scale"], entry["scale"])
