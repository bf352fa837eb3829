"""Encodings by reference: `scale`/`zero_point` as npz/npy/safetensors arrays (block encodings list millions)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.numpy import save_file

from qlower.diagnostics import QlowerError
from qlower.graph.core import Graph
from qlower.graph.io import dumps_graph, load_graph, loads_graph, save_graph
from qlower.graph.types import Quant


def _block_graph(scales: np.ndarray, zps: np.ndarray, channels: int, blocks: int, block: int = 2) -> Graph:
    g = Graph("blk")
    q = Quant(scales, zps, axis=0, bitwidth=4, symmetric=True, block_size=block, block_axis=1)
    g.add_value("w", np.int8, (channels, blocks * block), quant=q,
                data=np.arange(channels * blocks * block, dtype=np.int8).reshape(channels, -1) % 7)
    return g


@settings(max_examples=25, deadline=None)
@given(channels=st.integers(1, 6), blocks=st.integers(1, 5), seed=st.integers(0, 2**16),
       zp=st.sampled_from([0, -8, 7]))
def test_saved_by_reference_loads_the_same_encoding(tmp_path_factory, channels, blocks, seed, zp):
    rng = np.random.default_rng(seed)
    scales = rng.uniform(1e-4, 1.0, channels * blocks)
    g = _block_graph(scales, np.full(channels * blocks, zp), channels, blocks)
    path = tmp_path_factory.mktemp("q") / "g.json"
    save_graph(g, path, quant_refs=1)
    doc = json.loads(path.read_text())
    assert doc["tensors"]["w"]["quant"]["scale"] == {"npz": "g.quant.npz", "key": "w.scale"}
    back = load_graph(path)
    assert back.value("w").quant == g.value("w").quant
    assert dumps_graph(back) == dumps_graph(g)  # inline again when saved without references


def test_short_encodings_stay_inline(tmp_path):
    g = _block_graph(np.full(4, 0.5), np.zeros(4, np.int64), 2, 2)
    save_graph(g, tmp_path / "g.json", quant_refs=5)
    assert json.loads((tmp_path / "g.json").read_text())["tensors"]["w"]["quant"]["scale"] == [0.5] * 4
    assert not (tmp_path / "g.quant.npz").exists()


def test_npy_and_safetensors_references(tmp_path):
    np.save(tmp_path / "s.npy", np.array([0.5, 0.25, 0.125, 1.0], np.float32))
    save_file({"zp": np.array([1, 2, 3, 4], np.int32)}, str(tmp_path / "z.safetensors"))
    doc = {"format": "qlower-graph/1", "inputs": [], "outputs": [], "nodes": [], "tensors": {
        "w": {"dtype": "uint8", "shape": [4, 2], "quant": {
            "scale": {"npy": "s.npy"}, "zero_point": {"safetensors": "z.safetensors", "key": "zp"}, "axis": 0}}}}
    q = loads_graph(json.dumps(doc), base_dir=tmp_path).value("w").quant
    assert q.scale == (0.5, 0.25, 0.125, 1.0) and q.zero_point == (1, 2, 3, 4) and q.axis == 0


@pytest.mark.parametrize("quant, files, code, words", [
    ({"scale": {"npy": "s.npy"}, "axis": 0}, {"s.npy": np.ones((2, 2))}, "bad-quant", "1-D array of floats"),
    ({"scale": {"npy": "s.npy"}, "axis": 0}, {"s.npy": np.ones(4, np.int32)}, "bad-quant", "1-D array of floats"),
    ({"scale": [1.0] * 4, "zero_point": {"npy": "z.npy"}, "axis": 0}, {"z.npy": np.ones(4)}, "bad-quant",
     "1-D array of integers"),
    ({"scale": {"npy": "s.npy"}, "axis": 0}, {"s.npy": np.ones(3)}, "quant-length", "3 scales"),
    ({"scale": {"npy": "s.npy"}, "axis": 0}, {"s.npy": np.array([1.0, 0.0, 1.0, 1.0])}, "bad-scale", "positive"),
    ({"scale": {"npy": "missing.npy"}, "axis": 0}, {}, "data-file", "cannot open"),
    ({"scale": {"npz": "q.npz", "key": "nope"}, "axis": 0}, {"q.npz": np.ones(4)}, "npz-key", "no array"),
    ({"scale": {"npy": "s.npy"}}, {"s.npy": np.ones(4)}, "bad-quant", "references need \"axis\""),
    ({"scale": [1.0] * 4, "zero_point": {"npy": "z.npy"}, "axis": 0}, {"z.npy": np.full(4, 300)}, "bad-quant",
     "zero point 300"),
])
def test_reference_errors_name_the_tensor(tmp_path, quant, files, code, words):
    for name, arr in files.items():
        if name.endswith(".npz"):
            np.savez(tmp_path / name, s=arr)
        else:
            np.save(tmp_path / name, arr)
    doc = {"format": "qlower-graph/1", "inputs": [], "outputs": [], "nodes": [],
           "tensors": {"w": {"dtype": "uint8", "shape": [4, 2], "quant": quant}}}
    with pytest.raises(QlowerError) as e:
        loads_graph(json.dumps(doc), base_dir=tmp_path, file="g.json")
    d = e.value.diagnostics[0]
    assert d.code == code and words in d.message and "`w`" in d.message
