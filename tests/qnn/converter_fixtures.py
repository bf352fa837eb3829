"""Small `_net.json`/`.bin` pairs in the QNN converters' own layout, written here (not copied).

Two generations, as seen in public converter outputs: `new` (qairt 2.2x: packageName
tagged 1544 = STRING, `operation` params, ElementWiseNeuron) and `old` (earlier 2.x:
string scalars tagged 2147483647, `eltwise_type`/`neuron_type` naming the op). Both
carry the converter's bookkeeping: `param_map`, `macs_per_inference`, extra tensor keys.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import numpy as np

F32, U32, BOOL, STRING, UNDEF = 562, 306, 1288, 1544, 2147483647
PKG_CODE = {"new": STRING, "old": UNDEF}


def _quant() -> dict[str, Any]:
    return {"definition": UNDEF, "encoding": UNDEF, "is_overridden": False,
            "scale_offset": {"bitwidth": 0, "minimum": 0.0, "maximum": 0.0, "scale": 0.0, "offset": 0,
                             "is_symmetric": False, "is_fixed_point": True}}


def tensor(tid: int, ttype: int, dims: list[int], dt: int = F32, data: Any = None) -> dict[str, Any]:
    t = {"id": tid, "type": ttype, "dataFormat": 0, "data_type": dt, "unquantized_data_type": dt,
         "axis_format": "ANY", "src_axis_format": "NOT_YET_DEFINED", "quant_params": _quant(), "dims": dims,
         "is_dynamic_dims": [], "is_quantizable": True, "is_updateable": False}
    if data is not None:
        t["data"] = data
    if ttype == 4 and data is None:
        t["params_count"] = f"{int(np.prod(dims))} (50%)"
    return t


def node(style: str, ir_type: str, ins: list[str], outs: list[str], *, scalars: dict[str, tuple[int, Any]] = {},
         tensors: dict[str, tuple[str, list[int], list[Any]]] = {}, meta: tuple[str, ...] = ()) -> dict[str, Any]:
    """`scalars`: name -> (datatype code, value); `tensors`: name -> (tensor name, dims, data).

    `meta` names the meta params (param_map 2; packageName always is).
    """
    sp = {k: {str(code): v} for k, (code, v) in scalars.items()}
    sp["packageName"] = {str(PKG_CODE[style]): "qti.aisw"}
    tp = {k: {tn: tensor(900 + i, 4, dims, U32, data)} for i, (k, (tn, dims, data)) in enumerate(tensors.items())}
    pmap = {k: 2 if k in meta or k == "packageName" else 1 for k in sorted([*sp, *tp])}
    return {"package": "qti.aisw", "type": ir_type, "tensor_params": tp, "scalar_params": sp, "param_map": pmap,
            "input_names": ins, "output_names": outs, "macs_per_inference": "0"}


def weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {"w": rng.standard_normal((1, 1, 2, 2)).astype(np.float32),
            "b": rng.standard_normal(2).astype(np.float32)}


def net(style: str) -> dict[str, Any]:
    """Conv2d -> add input -> relu -> 2x2 pool -> (new: exp -> mean over H,W)."""
    s = style
    pool = "PoolMax2d" if s == "new" else "PoolAvg2d"
    pool_scalars = {} if s == "new" else {"count_pad_for_edges": (BOOL, 0)}
    t = {"x": tensor(1, 0, [1, 4, 4, 2]), "w": tensor(2, 4, [1, 1, 2, 2]), "b": tensor(3, 4, [2]),
         "c": tensor(4, 3, [1, 4, 4, 2]), "s": tensor(5, 3, [1, 4, 4, 2]), "r": tensor(6, 3, [1, 4, 4, 2])}
    string = PKG_CODE[s]
    nodes = {
        "conv": node(s, "Conv2d", ["x", "w", "b"], ["c"], scalars={"group": (U32, 1)}, tensors={
            "dilation": ("conv_dilation", [2], [1, 1]), "pad_amount": ("conv_pad_amount", [2, 2], [[0, 0], [0, 0]]),
            "stride": ("conv_stride", [2], [1, 1])}),
        "add": (node(s, "Eltwise_Binary", ["c", "x"], ["s"], scalars={"operation": (U32, 0)}) if s == "new" else
                node(s, "Eltwise_Binary", ["c", "x"], ["s"], scalars={"eltwise_type": (string, "ElementWiseAdd")},
                     meta=("eltwise_type",))),
        "relu": (node(s, "ElementWiseNeuron", ["s"], ["r"], scalars={"operation": (U32, 4)}) if s == "new" else
                 node(s, "Neuron", ["s"], ["r"], scalars={"neuron_type": (string, "Relu")}, meta=("neuron_type",))),
        "pool": node(s, "Pool", ["r"], ["p"], scalars={**pool_scalars, "pool_type": (string, pool)},
                     tensors={"filter_size": ("pool_filter_size", [2], [2, 2]),
                              "pad_amount": ("pool_pad_amount", [2, 2], [[0, 0], [0, 0]]),
                              "stride": ("pool_stride", [2], [2, 2])}, meta=("pool_type",)),
    }
    if s == "new":
        t |= {"p": tensor(7, 3, [1, 2, 2, 2]), "e": tensor(8, 3, [1, 2, 2, 2]), "y": tensor(9, 1, [1, 1, 1, 2])}
        nodes["exp"] = node(s, "Eltwise_Unary", ["p"], ["e"], scalars={"operation": (U32, 5)})
        nodes["mean"] = node(s, "Reduce", ["e"], ["y"], scalars={"keep_dims": (BOOL, 1),
                                                                  "reduce_type": (STRING, "ReduceMean")},
                             tensors={"axes": ("mean_axes", [2], [1, 2])}, meta=("reduce_type",))
    else:
        t |= {"p": tensor(7, 1, [1, 2, 2, 2])}
    return {"model.cpp": f"build/{s}.cpp", "model.bin": f"build/{s}.bin",
            "converter_command": "qnn-onnx-converter; act_bitwidth=8", "copyright_str": "",
            "op_types": sorted({n["type"] for n in nodes.values()}), "graph": {"tensors": t, "nodes": nodes}}


def write(directory: Path, style: str, *, bin_file: str | bytes | None = "tar") -> Path:
    """Write `<style>_net.json` and, per `bin_file`, a real tar `.bin` ("tar"), raw bytes, or nothing (None)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{style}_net.json"
    path.write_text(json.dumps(net(style), indent=1), encoding="utf-8")
    binp = directory / f"{style}.bin"
    if bin_file == "tar":
        with tarfile.open(binp, "w") as tar:
            for name, arr in weights().items():
                payload = arr.tobytes()
                info = tarfile.TarInfo(f"{name}.raw")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    elif isinstance(bin_file, bytes):
        binp.write_bytes(bin_file)
    return path


LFS_POINTER = (b"version https://git-lfs.github.com/spec/v1\n"
               b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 10240\n")
