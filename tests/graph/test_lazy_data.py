"""Constants by reference (.safetensors, .npy): read when needed, released after, streamed to the .bin."""

from __future__ import annotations

import io
import json
import tarfile
import weakref

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.numpy import save_file

import qlower
from qlower.diagnostics import QlowerError
from qlower.graph import lazy
from qlower.graph.io import load_graph, save_graph
from qlower.graph.lazy import LazyArray, NpySource


def _mlp(tmp_path, layers: int = 6, width: int = 48, as_npz: bool = False):
    """A chain of Linear layers; weights in two safetensors shards, biases in .npy files."""
    rng = np.random.default_rng(7)
    tensors = {"x0": {"dtype": "float32", "shape": [1, 4, width]}}
    nodes, shards, arrays = [], [{}, {}], {}
    for i in range(layers):
        w = (rng.normal(size=(width, width)) * 0.1).astype(np.float32)
        b = (rng.normal(size=(width,)) * 0.1).astype(np.float32)
        shards[i % 2][f"layers.{i}.weight"] = w
        np.save(tmp_path / f"b{i}.npy", b)
        arrays[f"w{i}"], arrays[f"b{i}"] = w, b
        if as_npz:
            wref, bref = {"npz": "m.npz", "key": f"w{i}"}, {"npz": "m.npz", "key": f"b{i}"}
        else:
            wref = {"safetensors": f"model-0000{i % 2 + 1}.safetensors", "key": f"layers.{i}.weight"}
            bref = {"npy": f"b{i}.npy"}
        tensors[f"w{i}"] = {"dtype": "float32", "shape": [width, width], "data": wref}
        tensors[f"b{i}"] = {"dtype": "float32", "shape": [width], "data": bref}
        tensors[f"x{i + 1}"] = {"dtype": "float32", "shape": [1, 4, width]}
        nodes.append({"name": f"fc{i}", "op": "mllm.Linear", "inputs": [f"x{i}", f"w{i}", f"b{i}"],
                      "outputs": [f"x{i + 1}"]})
    for k, shard in enumerate(shards):
        save_file(shard, str(tmp_path / f"model-0000{k + 1}.safetensors"))
    np.savez(tmp_path / "m.npz", **arrays)
    doc = {"format": "qlower-graph/1", "name": "mlp", "inputs": ["x0"], "outputs": [f"x{layers}"],
           "tensors": tensors, "nodes": nodes}
    path = tmp_path / ("npz.json" if as_npz else "ref.json")
    path.write_text(json.dumps(doc))
    return path, arrays


def test_references_load_without_reading(tmp_path, monkeypatch):
    path, arrays = _mlp(tmp_path)
    reads = []
    monkeypatch.setattr(lazy.SafetensorsSource, "read", lambda self: reads.append(self) or np.zeros(1))
    monkeypatch.setattr(lazy.NpySource, "read", lambda self: reads.append(self) or np.zeros(1))
    g = load_graph(path)
    assert reads == []
    w = g.value("w3").data
    assert isinstance(w, LazyArray) and w.shape == (48, 48) and w.dtype == np.float32
    assert g.value("w3").is_const


def test_references_read_the_declared_data(tmp_path):
    path, arrays = _mlp(tmp_path)
    g = load_graph(path)
    for name, want in arrays.items():
        got = g.value(name).data
        np.testing.assert_array_equal(np.asarray(got), want)
        np.testing.assert_array_equal(got + 1, want + 1)  # operators read too
        np.testing.assert_array_equal(np.transpose(got), want.T)
    half = g.value("w0").data.astype(np.float16).reshape(-1)
    assert isinstance(half, LazyArray)
    np.testing.assert_array_equal(np.concatenate(list(half.chunks(max_bytes=100))), want_f16 := arrays["w0"].astype(
        np.float16).reshape(-1))
    assert want_f16.size == half.size


def test_save_keeps_references_relative_to_the_new_file(tmp_path):
    path, arrays = _mlp(tmp_path)
    g = load_graph(path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b1.npy").write_bytes((tmp_path / "b1.npy").read_bytes())
    b1 = g.value("b1")
    b1.data = LazyArray(NpySource(tmp_path / "sub" / "b1.npy"), b1.dtype, b1.shape)
    save_graph(g, tmp_path / "sub" / "copy.json")
    doc = json.loads((tmp_path / "sub" / "copy.json").read_text())
    assert doc["tensors"]["b1"]["data"] == {"npy": "b1.npy"}  # inside the new file's folder: relative to it
    # outside it (loading refuses references that leave the file's folder): the data itself is written
    assert type(doc["tensors"]["w1"]["data"]) is list
    g2 = load_graph(tmp_path / "sub" / "copy.json")
    np.testing.assert_array_equal(np.asarray(g2.value("w1").data), arrays["w1"])
    np.testing.assert_array_equal(np.asarray(g2.value("b1").data), arrays["b1"])


def _bin_members(path) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(path.read_bytes())) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers()}


@pytest.mark.parametrize("backend", ["htp", "cpu"])
def test_bin_from_references_equals_bin_from_npz(tmp_path, backend):
    ref, _ = _mlp(tmp_path)
    npz, _ = _mlp(tmp_path, as_npz=True)
    rules = qlower.load_rules(packs=["mllm"])
    outs = []
    for src in (ref, npz):
        res = qlower.lower(load_graph(src), rules, backend=backend)
        res.raise_for_errors()
        out = tmp_path / f"out_{src.stem}_{backend}"
        res.save(out)
        outs.append(out / "mlp.bin")
    assert outs[0].read_bytes() == outs[1].read_bytes()
    assert len(_bin_members(outs[0])) >= 12


def test_lowering_holds_at_most_one_weight_at_a_time(tmp_path, monkeypatch):
    """Every array read from a reference is dropped before the next one is read."""
    path, _ = _mlp(tmp_path, layers=8)
    live: list[weakref.ref] = []
    peak = [0]
    real_rows, real_read = lazy.SafetensorsSource.rows, lazy.SafetensorsSource.read

    def track(arr):
        live.append(weakref.ref(arr))
        peak[0] = max(peak[0], sum(r() is not None for r in live))
        return arr

    monkeypatch.setattr(lazy.SafetensorsSource, "rows", lambda self, i, j: track(real_rows(self, i, j)))
    monkeypatch.setattr(lazy.SafetensorsSource, "read", lambda self: track(real_read(self)))
    rules = qlower.load_rules(packs=["mllm"])
    res = qlower.lower(load_graph(path), rules, backend="htp")
    res.raise_for_errors()
    # lowering for HTP retypes the float32 weights to float16 (saturating) without reading one:
    # the conversion is recorded and done by the .bin writer, a piece at a time
    assert live == []
    assert sum(isinstance(d, LazyArray) for d in res.table.tensor_data.values()) == 16  # weights, biases
    res.save(tmp_path / "out")
    assert len(live) >= 8  # every weight was read, by the .bin writer
    assert peak[0] == 1


def test_float16_saturation_by_reference_equals_in_memory(tmp_path):
    """A float32 weight beyond float16's range (an attention mask's minimum, inf, NaN) becomes the
    same float16 data whether it is read when written (safetensors) or held (npz)."""
    path, arrays = _mlp(tmp_path, layers=2)
    w = arrays["w1"].copy()
    w[0, :6] = [np.finfo(np.float32).min, -np.inf, np.inf, 1e6, -7e4, np.nan]
    save_file({"layers.0.weight": arrays["w0"], "layers.1.weight": w}, str(tmp_path / "model-00002.safetensors"))
    save_file({"layers.0.weight": arrays["w0"]}, str(tmp_path / "model-00001.safetensors"))
    doc = json.loads(path.read_text())
    doc["tensors"]["w1"]["data"] = {"safetensors": "model-00002.safetensors", "key": "layers.1.weight"}
    path.write_text(json.dumps(doc))
    np.savez(tmp_path / "m.npz", **{**arrays, "w1": w})
    npz = tmp_path / "npz.json"
    for k in ("w0", "w1", "b0", "b1"):
        doc["tensors"][k]["data"] = {"npz": "m.npz", "key": k}
    npz.write_text(json.dumps(doc))
    rules = qlower.load_rules(packs=["mllm"])
    members = []
    for src in (path, npz):
        res = qlower.lower(load_graph(src), rules, backend="htp")
        res.raise_for_errors()
        res.save(tmp_path / src.stem)
        members.append(_bin_members(tmp_path / src.stem / "mlp.bin"))
    assert members[0] == members[1]
    got = np.frombuffer(members[0][next(m for m in members[0] if "w1" in m)], np.float16)[:6]
    np.testing.assert_array_equal(got, np.array([-65504, -np.inf, np.inf, 65504, -65504, np.nan], np.float16))


@given(rows=st.integers(1, 9), cols=st.integers(1, 7), piece=st.integers(1, 200), seed=st.integers(0, 2**16))
@settings(max_examples=40, deadline=None)
def test_recorded_steps_read_whole_equal_read_in_pieces(tmp_path_factory, rows, cols, piece, seed):
    """Law: a LazyArray's recorded steps (astype, reshape, map) give the same data read whole as read a
    piece at a time, and the same as doing them to the array in memory."""
    rng = np.random.default_rng(seed)
    a = (rng.normal(size=(rows, cols)) * 1e5).astype(np.float32)
    f = tmp_path_factory.mktemp("law") / "a.npy"
    np.save(f, a)
    clip = lambda x: np.clip(x, -3e4, 3e4).astype(np.float16)  # noqa: E731 (elementwise, like saturation)
    lazy_a = LazyArray(lazy.NpySource(f), np.float32, a.shape).reshape(-1).astype(np.float64).map(clip, np.float16)
    want = clip(a.reshape(-1).astype(np.float64))
    assert lazy_a.dtype == np.float16 and lazy_a.shape == want.shape
    np.testing.assert_array_equal(lazy_a.read(), want)
    np.testing.assert_array_equal(np.concatenate(list(lazy_a.chunks(max_bytes=piece))), want)


def test_reference_errors(tmp_path):
    path, _ = _mlp(tmp_path, layers=2)
    doc = json.loads(path.read_text())
    t = doc["tensors"]
    t["w0"]["data"] = {"safetensors": "model-00001.safetensors", "key": "layers.0.weigth"}
    t["w1"]["data"] = {"safetensors": "missing.safetensors", "key": "k"}
    t["b0"]["data"] = {"npy": "b0.npy", "key": "x"}
    t["b1"]["shape"] = [47]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc, indent=1))
    with pytest.raises(QlowerError) as e:
        load_graph(bad)
    by = {d.subject: d for d in e.value.diagnostics}
    assert by["tensor w0"].code == "data-key" and "layers.0.weight" in by["tensor w0"].hint
    assert by["tensor w1"].code == "data-file"
    assert by["tensor b0"].code == "bad-data"
    assert by["tensor b1"].code == "data-shape"
    assert all(d.span is not None and d.span.line > 1 for d in e.value.diagnostics)
    t["w0"]["data"] = {"safetensors": "model-00001.safetensors", "key": "layers.0.weight"}
    t["w0"]["dtype"] = "float16"
    t["w1"]["data"], t["b0"]["data"], t["b1"]["shape"] = {"npy": "b1.npy"}, {"npy": "b0.npy"}, [48]
    bad.write_text(json.dumps(doc))
    with pytest.raises(QlowerError) as e:
        load_graph(bad)
    codes = {d.subject: d.code for d in e.value.diagnostics}
    assert codes == {"tensor w0": "data-dtype", "tensor w1": "data-shape"}
