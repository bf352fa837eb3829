"""Shared pieces of the report tests: a small mllm model and an independent reading of `_net.json`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

# Bits per element of each QNN datatype code (QnnTypes.h's Qnn_DataType_t), written out here
# rather than taken from qlower so the memory check does not reuse the code it checks.
BITS = {
    0x0008: 8, 0x0016: 16, 0x0032: 32, 0x0064: 64, 0x0108: 8, 0x0116: 16, 0x0132: 32, 0x0164: 64,
    0x0216: 16, 0x0226: 16, 0x0232: 32, 0x0264: 64, 0x0304: 4, 0x0308: 8, 0x0316: 16, 0x0332: 32,
    0x0404: 4, 0x0408: 8, 0x0416: 16, 0x0432: 32, 0x0508: 8,
}
APP_WRITE, APP_READ, STATIC, NULL = 0, 1, 4, 5


def mini_model(folder: Path, *, hidden: int = 8, inner: int = 16, seq: int = 4) -> Path:
    """An mllm decoder-MLP slice: RMSNorm, two Linears around SiLU·Mul, a residual Add, a self-attention score."""
    rng = np.random.default_rng(0)

    def const(*shape):
        return {"dtype": "float32", "shape": list(shape), "data": rng.standard_normal(shape).round(3).tolist()}

    graph = {
        "format": "qlower-graph/1", "name": "mini", "inputs": ["x"], "outputs": ["y", "scores"],
        "tensors": {
            "x": {"dtype": "float32", "shape": [1, seq, hidden]},
            "norm.w": const(hidden), "up.w": const(inner, hidden), "up.b": const(inner),
            "gate.w": const(inner, hidden), "down.w": const(hidden, inner), "down.b": const(hidden),
            "h": {"dtype": "float32", "shape": [1, seq, hidden]},
            "u": {"dtype": "float32", "shape": [1, seq, inner]},
            "g": {"dtype": "float32", "shape": [1, seq, inner]},
            "a": {"dtype": "float32", "shape": [1, seq, inner]},
            "m": {"dtype": "float32", "shape": [1, seq, inner]},
            "d": {"dtype": "float32", "shape": [1, seq, hidden]},
            "y": {"dtype": "float32", "shape": [1, seq, hidden]},
            "scores": {"dtype": "float32", "shape": [1, seq, seq]},
        },
        "nodes": [
            {"name": "norm", "op": "mllm.RMSNorm", "inputs": ["x", "norm.w"], "outputs": ["h"],
             "attrs": {"epsilon": 1e-6, "add_unit_offset": False}},
            {"name": "up", "op": "mllm.Linear", "inputs": ["h", "up.w", "up.b"], "outputs": ["u"]},
            {"name": "gate", "op": "mllm.Linear", "inputs": ["h", "gate.w"], "outputs": ["g"]},
            {"name": "act", "op": "mllm.SiLU", "inputs": ["g"], "outputs": ["a"]},
            {"name": "mul", "op": "mllm.Mul", "inputs": ["a", "u"], "outputs": ["m"]},
            {"name": "down", "op": "mllm.Linear", "inputs": ["m", "down.w", "down.b"], "outputs": ["d"]},
            {"name": "residual", "op": "mllm.Add", "inputs": ["x", "d"], "outputs": ["y"]},
            {"name": "score", "op": "mllm.MatMul", "inputs": ["h", "h"], "outputs": ["scores"],
             "attrs": {"transpose_a": False, "transpose_b": True}},
        ],
    }
    path = folder / "mini.json"
    path.write_text(json.dumps(graph), encoding="utf-8")
    return path


def tensor_bytes(doc: dict) -> int:
    return (math.prod(doc["dims"]) * BITS[doc["data_type"]] + 7) // 8


def memory_from_net_json(path: Path) -> dict:
    """static_bytes, static_bytes_by_datatype (by code), peak_activation_bytes, peak_node and the
    per-step live bytes, computed from the `_net.json` text alone by the issue's definition."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    tensors, nodes = doc["graph"]["tensors"], list(doc["graph"]["nodes"].items())
    static: dict[int, int] = {}
    statics = [t for t in tensors.values() if t["type"] == STATIC]
    for _, node in nodes:
        for param in node["tensor_params"].values():
            statics.extend(param.values())
    for t in statics:
        static[t["data_type"]] = static.get(t["data_type"], 0) + tensor_bytes(t)
    steps = len(nodes)
    live = [0] * steps
    for name, t in tensors.items():
        if t["type"] in (STATIC, NULL) or not steps:  # no steps: nothing is ever live
            continue
        made = [k for k, (_, n) in enumerate(nodes) if name in n["output_names"]]
        used = [k for k, (_, n) in enumerate(nodes) if name in n["input_names"]]
        if t["type"] == APP_WRITE:
            first = 0
        elif made:
            first = made[0]
        elif used:
            first = 0
        else:
            continue  # neither produced, read nor a graph input: never live
        last = steps - 1 if t["type"] == APP_READ else max(used, default=first)
        for k in range(first, max(first, last) + 1):
            live[k] += tensor_bytes(t)
    peak = max(live, default=0)
    at = live.index(peak) if steps else None
    return {"static_bytes": sum(static.values()), "static_by_code": static, "peak_activation_bytes": peak,
            "peak_step": at, "peak_node": nodes[at][0] if at is not None else None, "live": live}
