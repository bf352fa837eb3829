"""Makers of hostile model files, each written into a folder the test owns.

Each maker returns the path to hand to qlower. The secret file they try to reach sits beside the
model's folder (`secret.txt`, holding SECRET), so a leak shows as its bytes in an artifact."""

from __future__ import annotations

import json
import os
import pickle
import struct
import zipfile
from pathlib import Path

import numpy as np

SECRET = b"SECRET-0123456789abcdef-never-in-an-artifact"


def secret_beside(root: Path) -> Path:
    """A file outside the model's folder that no model may read."""
    p = root / "secret.txt"
    p.write_bytes(SECRET * 4)
    return p


class Marker:
    """Unpickling it creates `path`: proof that a pickle from the file ran."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (Path(self.path).touch, ())


def evil_pickle(marker: Path) -> bytes:
    return pickle.dumps(Marker(marker), protocol=2)


# ------------------------------------------------------------------ ONNX
def onnx_add_model(folder: Path, init, name: str = "m.onnx", extra_nodes=()) -> Path:
    """y = x + W for one initializer W (a TensorProto built by the caller)."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    inits = init if isinstance(init, list) else [init]
    nodes = [helper.make_node("Add", ["x", inits[0].name], ["y"], name="add"), *extra_nodes]
    g = helper.make_graph(nodes, "g", [x], [y], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(model.SerializeToString())
    return path


def external(name: str, location: str, offset=None, length=None, dims=(4,)):
    from onnx import TensorProto

    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", offset), ("length", length)):
        if v is not None:
            e = t.external_data.add()
            e.key, e.value = k, str(v)
    return t


def raw(name: str, data: bytes, dims=(4,), data_type=None):
    from onnx import TensorProto

    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT if data_type is None else data_type
    t.dims.extend(dims)
    t.raw_data = data
    return t


# ------------------------------------------------------------------ qlower-graph/1
def graph_doc(data=None, shape=(4,), quant=None, dtype="float32") -> dict:
    w: dict = {"dtype": dtype, "shape": list(shape)}
    if data is not None:
        w["data"] = data
    if quant is not None:
        w["quant"] = quant
    return {"format": "qlower-graph/1", "name": "g", "inputs": ["x"], "outputs": ["y"],
            "tensors": {"x": {"dtype": "float32", "shape": [4]}, "w": w, "y": {"dtype": "float32", "shape": [4]}},
            "nodes": [{"name": "add", "op": "mllm.Add", "inputs": ["x", "w"], "outputs": ["y"]}]}


def write_graph(folder: Path, doc: dict | str, name: str = "g.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


def npy_with_header(path: Path, header: str, data: bytes = b"") -> Path:
    """An .npy file (version 1.0 or 2.0 by header size) whose header text is `header` verbatim."""
    h = header.encode("latin1")
    if len(h) + 10 < 65536:
        path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + data)
    else:
        path.write_bytes(b"\x93NUMPY\x02\x00" + struct.pack("<I", len(h)) + h + data)
    return path


def npz_deflated_claiming(path: Path, key: str, shape: tuple[int, ...]) -> Path:
    """A deflated npz member whose .npy header claims `shape` float32 but holds a few bytes."""
    h = repr({"descr": "<f4", "fortran_order": False, "shape": shape})
    body = h.encode("latin1")
    pad = 64 - (10 + len(body) + 1) % 64
    header = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(body) + pad + 1) + body + b" " * pad + b"\n"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(key + ".npy", header + bytes(1 << 16))
    return path


def safetensors_raw(path: Path, header: dict | str, data: bytes) -> Path:
    b = (header if isinstance(header, str) else json.dumps(header)).encode()
    path.write_bytes(struct.pack("<Q", len(b)) + b + data)
    return path


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def npz_of(path: Path, **arrays: np.ndarray) -> Path:
    np.savez(path, **arrays)
    return path
