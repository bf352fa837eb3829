"""Generate the benchmark workload W(B) as a qlower-graph/1 file (mllm dialect).

B repetitions of: h = MatMul(x, W_i) (W_i a constant float32 weight),
s = Sigmoid(h), y = Mul(h, s), x_next = Add(y, x) — N = 4·B ops.
Weights go to an .npz next to the JSON.

    python bench/gen_workload.py OUT.json --blocks 2500 [--hidden 8] [--onnx OUT.onnx]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np


def workload(blocks: int, hidden: int = 8, seed: int = 0) -> tuple[dict, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    act = {"dtype": "float32", "shape": [1, hidden]}
    npz_name = None  # filled by the writer
    tensors: dict[str, dict] = {"x0": dict(act)}
    nodes = []
    weights: dict[str, np.ndarray] = {}
    x = "x0"
    for i in range(blocks):
        w, h, s, y, nx = f"w{i}", f"h{i}", f"s{i}", f"y{i}", f"x{i + 1}"
        weights[w] = (rng.standard_normal((hidden, hidden)) * (0.5 / np.sqrt(hidden))).astype(np.float32)
        tensors[w] = {"dtype": "float32", "shape": [hidden, hidden], "data": {"npz": npz_name, "key": w}}
        for t in (h, s, y, nx):
            tensors[t] = dict(act)
        nodes.append({"name": f"mm{i}", "op": "mllm.MatMul", "inputs": [x, w], "outputs": [h]})
        nodes.append({"name": f"sig{i}", "op": "mllm.Sigmoid", "inputs": [h], "outputs": [s]})
        nodes.append({"name": f"mul{i}", "op": "mllm.Mul", "inputs": [h, s], "outputs": [y]})
        nodes.append({"name": f"add{i}", "op": "mllm.Add", "inputs": [y, x], "outputs": [nx]})
        x = nx
    doc = {"format": "qlower-graph/1", "name": f"w{blocks}", "inputs": ["x0"], "outputs": [x],
           "tensors": tensors, "nodes": nodes}
    return doc, weights


def write(path: Path, blocks: int, hidden: int = 8) -> None:
    doc, weights = workload(blocks, hidden)
    npz = path.with_suffix(".npz")
    for t in doc["tensors"].values():
        if "data" in t:
            t["data"]["npz"] = npz.name
    np.savez(npz, **weights)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, separators=(",", ":")))
    os.replace(tmp, path)


def write_onnx(path: Path, blocks: int, hidden: int = 8) -> None:
    """The same workload as an ONNX model, for comparisons with ONNX tooling."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    _, weights = workload(blocks, hidden)
    nodes, inits = [], []
    x = "x0"
    for i in range(blocks):
        inits.append(numpy_helper.from_array(weights[f"w{i}"], f"w{i}"))
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"h{i}"], name=f"mm{i}"),
                  helper.make_node("Sigmoid", [f"h{i}"], [f"s{i}"], name=f"sig{i}"),
                  helper.make_node("Mul", [f"h{i}", f"s{i}"], [f"y{i}"], name=f"mul{i}"),
                  helper.make_node("Add", [f"y{i}", x], [f"x{i + 1}"], name=f"add{i}")]
        x = f"x{i + 1}"
    g = helper.make_graph(nodes, f"w{blocks}",
                          [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [1, hidden])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, hidden])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), str(path))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--blocks", type=int, required=True)
    ap.add_argument("--hidden", type=int, default=8)
    ap.add_argument("--onnx", default=None)
    a = ap.parse_args()
    write(Path(a.out), a.blocks, a.hidden)
    if a.onnx:
        write_onnx(Path(a.onnx), a.blocks, a.hidden)
