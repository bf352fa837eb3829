"""Malformed input: every case is a clear error naming the file and the field or node (exit 1, no
traceback, no internal error), and nothing is silently taken in a wrong reading."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from qlower.api import load_model
from qlower.diagnostics import QlowerError
from hostile import (deep_json, external, graph_doc, npy_with_header, onnx_add_model, raw, safetensors_raw,
                     write_graph)


def _clear(model: Path, cli, *needles: str) -> None:
    with pytest.raises(QlowerError) as e:
        load_model(model)
    for n in needles:
        assert n in str(e.value), str(e.value)
    got = cli("lower", model, "-o", model.parent / "out", "-q")
    got.clean_failure()
    for n in needles:
        assert n in got.err, got.err


# ---------------------------------------------------------------- ONNX
def _onnx(case: str, d: Path) -> Path:
    from onnx import TensorProto, helper

    ones = np.ones(4, np.float32).tobytes()
    if case in ("negative-offset", "text-offset", "text-length"):
        (d / "w.bin").parent.mkdir(parents=True, exist_ok=True)
        (d / "w.bin").write_bytes(bytes(64))
        kw = {"negative-offset": {"offset": -4}, "text-offset": {"offset": "1e3"}, "text-length": {"length": "x"}}
        return onnx_add_model(d, external("W", "w.bin", **kw[case]))
    if case == "raw-size":
        return onnx_add_model(d, raw("W", bytes(12)))
    if case == "negative-dims":
        return onnx_add_model(d, raw("W", ones, dims=(-4,)))
    if case == "huge-dims":
        return onnx_add_model(d, raw("W", ones, dims=(1 << 40,)))
    if case == "string":
        return onnx_add_model(d, helper.make_tensor("W", TensorProto.STRING, [1], [b"a"]))
    if case == "twice":
        return onnx_add_model(d, [raw("W", ones), raw("W", np.zeros(4, np.float32).tobytes())])
    if case == "cycle":
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
        nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="n1"), helper.make_node("Relu", ["a"], ["b"], name="n2"),
                 helper.make_node("Relu", ["a"], ["y"], name="n3")]
        m = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
        d.mkdir(parents=True, exist_ok=True)
        (d / "m.onnx").write_bytes(m.SerializeToString())
        return d / "m.onnx"
    if case == "constant-raw-size":
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
        nodes = [helper.make_node("Constant", [], ["W"], name="c", value=raw("Wv", bytes(12))),
                 helper.make_node("Add", ["x", "W"], ["y"], name="add")]
        m = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
        d.mkdir(parents=True, exist_ok=True)
        (d / "m.onnx").write_bytes(m.SerializeToString())
        return d / "m.onnx"
    if case == "not-utf8-name":
        m = onnx_add_model(d, raw("W", ones))
        m.write_bytes(m.read_bytes().replace(b"add", b"\xed\xa0\x80"))  # a lone surrogate, as bytes
        return m
    d.mkdir(parents=True, exist_ok=True)
    (d / "m.onnx").write_bytes({"garbage": b"\x08\x07root:x:0:0:" * 20, "empty": b""}[case])
    return d / "m.onnx"


ONNX = {"negative-offset": "offset '-4' is not a non-negative integer", "text-offset": "offset '1e3'",
        "text-length": "length 'x'", "raw-size": "does not match its dims", "negative-dims": "negative dims [-4]",
        "huge-dims": "need more data than it holds", "string": "holds strings", "twice": "declared twice",
        "cycle": "has a cycle", "constant-raw-size": "does not match its dims", "not-utf8-name": "not valid UTF-8", "garbage": "cannot read",
        "empty": "error"}


@pytest.mark.parametrize("case", sorted(ONNX))
def test_malformed_onnx_is_a_clear_error(tmp_path, cli, case):
    _clear(_onnx(case, tmp_path / case), cli, ONNX[case])


# ---------------------------------------------------------------- qlower-graph/1
def _graph(case: str, d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    if case == "deep":
        return write_graph(d, deep_json(100_000))
    if case == "deep-attr":
        doc = graph_doc(data=[1, 2, 3, 4])
        doc["nodes"][0]["attrs"] = {"a": "@"}
        return write_graph(d, json.dumps(doc).replace('"@"', deep_json(50_000)))
    if case == "tensor-twice":
        text = json.dumps(graph_doc(data=[1, 2, 3, 4]))
        return write_graph(d, text.replace('"w": {', '"w": {"dtype": "float32", "shape": [4], "data": [9, 9, 9, 9]}, '
                                                     '"w": {', 1))
    if case == "truncated-npy":
        np.save(d / "w.npy", np.ones(4, np.float32))
        (d / "w.npy").write_bytes((d / "w.npy").read_bytes()[:-8])
        return write_graph(d, graph_doc(data={"npy": "w.npy"}))
    if case == "lone-surrogate":
        doc = graph_doc(data=[1, 2, 3, 4])
        doc["tensors"]["\ud800"] = doc["tensors"].pop("y")
        doc["outputs"] = ["\ud800"]
        doc["nodes"][0]["outputs"] = ["\ud800"]
        return write_graph(d, json.dumps(doc))
    if case == "npy-huge-header":
        npy_with_header(d / "w.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), " + " " * 20000 + "}\n")
        return write_graph(d, graph_doc(data={"npy": "w.npy"}))
    st = {"st-past-end": {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 32]}},
          "st-overlap": {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                         "v": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}},
          "st-shape": {"w": {"dtype": "F32", "shape": [5], "data_offsets": [0, 16]}}}[case]
    safetensors_raw(d / "w.safetensors", st, bytes(16))
    return write_graph(d, graph_doc(data={"safetensors": "w.safetensors", "key": "w"}))


GRAPH = {"deep": "nested too deeply", "deep-attr": "nested too deeply", "tensor-twice": 'key "w" appears twice',
         "truncated-npy": "truncated", "lone-surrogate": "UTF-8", "npy-huge-header": "not a valid .npy header",
         "st-past-end": "not a valid safetensors file", "st-overlap": "not a valid safetensors file",
         "st-shape": "not a valid safetensors file"}


@pytest.mark.parametrize("case", sorted(GRAPH))
def test_malformed_graph_files_are_clear_errors(tmp_path, cli, case):
    _clear(_graph(case, tmp_path / case), cli, GRAPH[case])


def test_a_big_graph_with_a_tensor_twice_is_refused_too(tmp_path):
    """Files of a megabyte and more take the typed decoder, which also keeps the last of two keys."""
    doc = graph_doc(data=[1, 2, 3, 4])
    doc["nodes"][0]["attrs"] = {"pad": "x" * (1 << 20)}
    text = json.dumps(doc).replace('"w": {', '"w": {"dtype": "float32", "shape": [4], "data": [9, 9, 9, 9]}, '
                                              '"w": {', 1)
    with pytest.raises(QlowerError, match='key "w" appears twice'):
        load_model(write_graph(tmp_path, text))


@pytest.mark.parametrize("twice", [False, True])
def test_big_graphs_with_dtype_attributes(tmp_path, twice):
    """Nodes' `dtype` attributes are told apart from tensor entries: such a graph loads, and a tensor
    declared twice in it is still found."""
    doc = graph_doc(data=[1, 2, 3, 4])
    doc["nodes"][0]["attrs"] = {"dtype": "float32", "pad": "x" * (1 << 20)}
    text = json.dumps(doc)
    if twice:
        text = text.replace('"w": {', '"w": {"dtype": "float32", "shape": [4], "data": [9, 9, 9, 9]}, "w": {', 1)
        with pytest.raises(QlowerError, match='key "w" appears twice'):
            load_model(write_graph(tmp_path, text))
    else:
        g = load_model(write_graph(tmp_path, text))
        np.testing.assert_array_equal(np.asarray(g.value("w").data), [1, 2, 3, 4])


# ---------------------------------------------------------------- QNN network JSON and inputs
def test_deep_net_json_is_a_clear_error(tmp_path, cli):
    p = tmp_path / "m_net.json"
    p.write_text('{"graph": ' + deep_json(100_000) + "}")
    for argv in (("validate", p, "--backend", "htp"), ("run", p, "--inputs", tmp_path / "x.npz", "-o",
                                                         tmp_path / "o.npz")):
        got = cli(*argv)
        got.clean_failure()
        assert "nested too deeply" in got.err


def _lowered(tmp_path: Path, cli) -> Path:
    model = write_graph(tmp_path / "m", graph_doc(data=[1, 2, 3, 4]))
    assert cli("lower", model, "-o", tmp_path / "out", "-q").code == 0
    return tmp_path / "out" / "g_net.json"


def test_run_refuses_complex_and_corrupt_inputs(tmp_path, cli):
    net = _lowered(tmp_path, cli)
    np.savez(tmp_path / "complex.npz", x=np.ones(4, np.complex64))
    (tmp_path / "corrupt.npz").write_bytes(b"PK\x03\x04" + bytes(200))
    np.savez(tmp_path / "objects.npz", x=np.array([{"a": 1}], dtype=object))
    for name, needle in (("complex", "imaginary part"), ("corrupt", "not an .npz"), ("objects", "")):
        got = cli("run", net, "--inputs", tmp_path / f"{name}.npz", "-o", tmp_path / "o.npz")
        got.clean_failure()
        assert needle in got.err
        assert not (tmp_path / "o.npz").exists()
    np.savez(tmp_path / "real.npz", x=np.ones(4, np.float32))
    assert cli("run", net, "--inputs", tmp_path / "real.npz", "-o", tmp_path / "o.npz").code == 0
    with np.load(tmp_path / "o.npz") as z:
        np.testing.assert_allclose(z["y"], [2, 3, 4, 5])


def test_verify_refuses_complex_inputs(tmp_path, cli):
    model = write_graph(tmp_path / "m", graph_doc(data=[1, 2, 3, 4]))
    np.savez(tmp_path / "complex.npz", x=np.ones(4, np.complex64))
    got = cli("lower", model, "-o", tmp_path / "out", "-q", "--verify", "--inputs", tmp_path / "complex.npz")
    got.clean_failure()
    assert "imaginary part" in got.err


@pytest.mark.parametrize("shape", [[1 << 40, 1 << 40], [4, 0, 1 << 62]])
def test_dims_beyond_qnn_are_refused(tmp_path, cli, shape):
    """QNN dims are uint32: a graph claiming more would be written with dims the runtime truncates."""
    doc = graph_doc()
    for t in ("x", "y"):
        doc["tensors"][t]["shape"] = shape
    del doc["tensors"]["w"]
    doc["nodes"][0]["inputs"] = ["x", "x"]
    _clear(write_graph(tmp_path, doc), cli, "beyond what QNN holds")


def test_onnx_value_dims_beyond_qnn_are_refused(tmp_path, cli):
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1 << 40])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1 << 40])
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    (tmp_path / "m.onnx").write_bytes(m.SerializeToString())
    _clear(tmp_path / "m.onnx", cli, "beyond what QNN holds")


@pytest.mark.parametrize("kind", ["npz", "npz-deflated", "npy"])
def test_object_arrays_stay_refused(tmp_path, kind):
    """(What held before and must keep holding.) Object arrays would need a pickle to load."""
    import zipfile

    arr = np.array([{"a": 1}, None], dtype=object)
    if kind == "npy":
        with open(tmp_path / "w.npy", "wb") as f:
            np.lib.format.write_array(f, arr, allow_pickle=True)
        ref = {"npy": "w.npy"}
    else:
        with zipfile.ZipFile(tmp_path / "w.npz", "w", zipfile.ZIP_DEFLATED if kind == "npz-deflated"
                             else zipfile.ZIP_STORED) as z, z.open("w.npy", "w") as f:
            np.lib.format.write_array(f, arr, allow_pickle=True)
        ref = {"npz": "w.npz", "key": "w"}
    doc = graph_doc(data=ref, shape=(2,))
    with pytest.raises(QlowerError, match="object"):
        load_model(write_graph(tmp_path, doc))
