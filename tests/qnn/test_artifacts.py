"""The converter artifacts: layout, determinism, atomic writes and an exact round trip."""

from __future__ import annotations

import json
import re
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qlower.diagnostics import QlowerError
from qlower.qnn import artifacts, emit_bin, emit_cpp, emit_json, reader
from qlower.qnn.datatypes import DataType, to_numpy
from qlower.qnn.model import (EncodingKind, OpConfig, QnnGraph, QnnTensor, QuantEncoding, ScalarParam,
                              TensorParam, TensorType)

DT = DataType
TT = TensorType


# ---------------------------------------------------------------- helpers

def assert_tensor_equal(a: QnnTensor, b: QnnTensor) -> None:
    assert (a.name, a.type, a.datatype, tuple(a.dims), a.encoding) == \
        (b.name, b.type, b.datatype, tuple(b.dims), b.encoding)
    assert (a.data is None) == (b.data is None), a.name
    if a.data is not None:
        assert a.data.dtype == b.data.dtype, a.name
        assert b.data.shape == tuple(a.dims), a.name
        assert a.data.tobytes() == b.data.tobytes(), a.name  # bitwise: NaN payloads too


def assert_graph_equal(a: QnnGraph, b: QnnGraph) -> None:
    """Exact equality; op provenance is message-only, its structured `origin` round-trips."""
    assert a.name == b.name
    assert list(a.tensors) == list(b.tensors)
    for name in a.tensors:
        assert_tensor_equal(a.tensors[name], b.tensors[name])
    assert (a.inputs, a.outputs) == (b.inputs, b.outputs)
    assert len(a.ops) == len(b.ops)
    for x, y in zip(a.ops, b.ops):
        assert (x.name, x.type, x.package, x.inputs, x.outputs) == (y.name, y.type, y.package, y.inputs, y.outputs)
        assert x.origin == y.origin
        assert [p.name for p in x.params] == [p.name for p in y.params]
        for p, q in zip(x.params, y.params):
            assert type(p) is type(q)
            if isinstance(p, TensorParam):
                assert_tensor_equal(p.tensor, q.tensor)
            else:
                assert (p.datatype, p.value, type(p.value)) == (q.datatype, q.value, type(q.value))


def static(name: str, dt: DataType, data: np.ndarray, enc: QuantEncoding | None = None) -> QnnTensor:
    return QnnTensor(name, TT.STATIC, dt, data.shape, enc, data)


def rich_graph() -> QnnGraph:
    """Every encoding kind, several static dtypes and scalar types, tensor params, odd names."""
    g = QnnGraph("rich")
    g.add_tensor(QnnTensor("input/0", TT.APP_WRITE, DT.UFIXED_POINT_8, (1, 4),
                           QuantEncoding.from_zero_point(0.02, 128)))  # symmetric uint8: offset -128
    g.add_tensor(QnnTensor("mask", TT.APP_WRITE, DT.BOOL_8, (1, 4)))
    g.add_tensor(static("w.axis", DT.SFIXED_POINT_8, np.arange(-8, 8, dtype=np.int8).reshape(4, 4),
                        QuantEncoding.from_zero_point([0.1, 0.2, 0.3, 0.4], [0, 0, 0, 0], axis=1)))
    g.add_tensor(static("w_bw", DT.UFIXED_POINT_8, np.arange(16, dtype=np.uint8).reshape(4, 4),
                        QuantEncoding.from_zero_point(0.5, 3, bitwidth=4)))
    g.add_tensor(static("w_bwaxis", DT.SFIXED_POINT_8, np.full((2, 4), -3, dtype=np.int8),
                        QuantEncoding.from_zero_point([0.5, 0.25], [0, 0], axis=0, bitwidth=4)))
    g.add_tensor(static("w_bwaxis_off", DT.UFIXED_POINT_8, np.ones((2, 2), dtype=np.uint8),
                        QuantEncoding.from_zero_point([0.5, 0.25], [7, 8], axis=0, bitwidth=4)))
    g.add_tensor(static("w_block", DT.SFIXED_POINT_4, np.zeros((2, 8), dtype=np.int8),
                        QuantEncoding(EncodingKind.BLOCKWISE_EXPANSION, [0.5, 0.75], [0, 0], axis=0,
                                      bitwidth=4, num_blocks_per_axis=2, block_scale_bitwidth=6,
                                      block_scales=((1, 63), (2, 5)))))
    g.add_tensor(static("bias", DT.INT_32, np.array([-(2**31), 0, 7, 2**31 - 1], dtype=np.int32)))
    g.add_tensor(static("half", DT.FLOAT_16, np.array([[1.5, -0.0, np.inf, 65504.0]], dtype=np.float16)))
    g.add_tensor(static("flags", DT.BOOL_8, np.array([True, False, True, True])))
    g.add_tensor(static("f32", DT.FLOAT_32, np.array([[np.nan, 1e-38, -2.5, 3.0]], dtype=np.float32)))
    g.add_tensor(QnnTensor("mid", TT.NATIVE, DT.FLOAT_32, (1, 4)))
    g.add_tensor(QnnTensor("out:1", TT.APP_READ, DT.UFIXED_POINT_16, (1, 4),
                           QuantEncoding.from_zero_point(1e-4, 0)))
    g.add_tensor(QnnTensor("out:0", TT.APP_READ, DT.FLOAT_32, ()))
    g.inputs, g.outputs = ["mask", "input/0"], ["out:0", "out:1"]  # not creation order on purpose
    perm = static("conv_perm", DT.UINT_32, np.array([1, 0], dtype=np.uint32))
    table = static("conv.table", DT.FLOAT_16, np.array([[0.5, -1.0]], dtype=np.float16))
    g.ops.append(OpConfig("conv/1", "Conv2d", ["input/0", "w.axis", "bias"], ["mid"], [
        ScalarParam("keep", DT.BOOL_8, True), TensorParam("perm", perm),
        ScalarParam("group", DT.UINT_32, 4_000_000_000), ScalarParam("shift", DT.INT_32, -7),
        TensorParam("table", table), ScalarParam("alpha", DT.FLOAT_32, 0.1),
        ScalarParam("big", DT.INT_64, -(2**63)), ScalarParam("mode", DT.STRING, 'a "quoted" */ name'),
    ], provenance="rule conv"))
    g.ops.append(OpConfig("tail", "ElementWiseAdd", ["mid", "half", "mask", "flags", "f32"], ["out:0", "out:1"],
                          package="my.pkg"))
    g.ops.append(OpConfig("uses_quant", "Gather", ["w_bw", "w_bwaxis", "w_bwaxis_off", "w_block"], []))
    return g


def balanced(code: str) -> bool:
    """Brackets balance once string/char literals and comments are removed."""
    code = re.sub(r'"(\\.|[^"\\])*"', '""', code)
    code = re.sub(r"/\*.*?\*/", "", code, flags=re.S)
    code = re.sub(r"//[^\n]*", "", code)
    stack, pairs = [], {")": "(", "]": "[", "}": "{"}
    for ch in code:
        if ch in "([{":
            stack.append(ch)
        elif ch in pairs:
            if not stack or stack.pop() != pairs[ch]:
                return False
    return not stack


# ---------------------------------------------------------------- writing

def test_round_trip_is_exact(tmp_path: Path) -> None:
    g = rich_graph()
    paths = artifacts.save(g, tmp_path, converter_command="qlower lower model.onnx")
    assert [p.name for p in paths] == ["rich_net.json", "rich.cpp", "rich.bin"]
    assert_graph_equal(g, reader.load(paths[0]))


def test_offset_is_negated_zero_point(tmp_path: Path) -> None:
    artifacts.save(rich_graph(), tmp_path)
    doc = json.loads((tmp_path / "rich_net.json").read_text())
    qp = doc["graph"]["tensors"]["input/0"]["quant_params"]
    assert qp == {"definition": 1, "encoding": 0, "scale_offset": {"scale": 0.02, "offset": -128}}
    assert ".offset= -128}" in (tmp_path / "rich.cpp").read_text()


def test_json_layout_follows_the_converter(tmp_path: Path) -> None:
    artifacts.save(rich_graph(), tmp_path, converter_command="qlower lower m.onnx")
    doc = json.loads((tmp_path / "rich_net.json").read_text())
    assert list(doc) == ["model.cpp", "model.bin", "converter_command", "copyright_str", "op_types",
                         "Total parameters", "Total MACs per inference", "graph"]
    assert doc["model.cpp"] == "rich.cpp" and doc["converter_command"] == "qlower lower m.onnx"
    assert doc["op_types"] == ["Conv2d", "ElementWiseAdd", "Gather"]
    assert doc["Total parameters"] == "76 (0 MB assuming single precision float)"
    t = doc["graph"]["tensors"]
    assert "conv_perm" not in t  # tensor params belong to their node
    assert t["w.axis"]["params_count"] == "16 (21.1%)"
    assert t["mid"]["quant_params"] == {"definition": 2147483647, "encoding": 2147483647,
                                        "scale_offset": {"scale": 0.0, "offset": 0}}
    assert t["w.axis"]["quant_params"]["axis_scale_offset"]["num_scale_offsets"] == 4
    assert t["w_bw"]["quant_params"]["bw_scale_offset"] == {"bitwidth": 4, "scale": 0.5, "offset": -3}
    assert t["w_bwaxis"]["quant_params"]["bw_axis_scale_offset"]["offsets"] == []
    assert t["w_bwaxis_off"]["quant_params"]["bw_axis_scale_offset"]["offsets"] == [-7, -8]
    assert t["w_block"]["quant_params"]["blockwise_expansion"]["block_scales"] == [[1, 63], [2, 5]]
    assert (t["w.axis"]["data_type"], t["w.axis"]["type"], t["w.axis"]["axis_format"]) == (776, 4, "NF")
    node = doc["graph"]["nodes"]["conv/1"]
    assert node["tensor_params"]["perm"]["conv_perm"]["data"] == [1, 0]
    assert node["scalar_params"]["keep"] == {"1288": True}
    assert node["scalar_params"]["group"] == {"306": 4_000_000_000}
    assert node["param_order"][:3] == ["keep", "perm", "group"]
    assert "param_order" not in doc["graph"]["nodes"]["tail"]
    assert doc["graph"]["nodes"]["tail"]["package"] == "my.pkg"


def test_output_is_byte_identical(tmp_path: Path) -> None:
    a = artifacts.save(rich_graph(), tmp_path / "a")
    b = artifacts.save(rich_graph(), tmp_path / "b")
    for x, y in zip(a, b):
        assert x.read_bytes() == y.read_bytes(), x.name


def test_bin_members_are_reproducible(tmp_path: Path) -> None:
    artifacts.save(rich_graph(), tmp_path)
    with tarfile.open(tmp_path / "rich.bin") as tar:
        members = tar.getmembers()
        names = [m.name for m in members]
        assert names == sorted(names)
        assert all((m.mtime, m.uid, m.gid, m.mode, m.uname, m.gname) == (0, 0, 0, 0o644, "", "")
                   for m in members)
        assert "conv_table.raw" in names and "w_axis.raw" in names and "conv_perm.raw" in names
        assert tar.extractfile("bias.raw").read() == np.array(
            [-(2**31), 0, 7, 2**31 - 1], dtype="<i4").tobytes()


def test_text_is_unchanged_by_the_streaming_writers() -> None:
    """Digests of the rich graph's `_net.json` and `.cpp` as the whole-document writers made them.

    A deliberate format change updates these (and docs/artifacts.md).
    """
    import hashlib

    g = rich_graph()
    digests = [hashlib.sha256(text.encode("utf-8")).hexdigest() for text in (
        emit_json.dumps(g, converter_command="qlower lower m.onnx"),
        emit_cpp.render(g, converter_command="qlower lower m.onnx"))]
    assert digests == ["876caaf7126c69df7ae14c4003ae4cfbfe2a7163978f8de9378e2629dc974855",
                       "f4a1de0cd8d5ebf99d2cdd2d403152fafde000c782018e273447bbb097fc40ff"]


def _frame(doc: dict) -> str:
    """The `_net.json` layout: indented frame, one object per line as json's C encoder writes it."""
    enc = json.JSONEncoder(separators=(", ", ": ")).encode
    body = doc.pop("graph")
    lines = ["{", *(f"  {enc(k)}: {enc(v)}," for k, v in doc.items()), '  "graph": {']
    for section, last in (("tensors", False), ("nodes", True)):
        items = list(body[section].items())
        lines.append(f"    {enc(section)}: {{")
        lines += [f"      {enc(k)}: {enc(v)}{',' if j < len(items) - 1 else ''}" for j, (k, v) in enumerate(items)]
        lines.append("    }" + ("" if last else ","))
    return "\n".join([*lines, "  }", "}"]) + "\n"


def test_json_lines_are_what_the_json_encoder_writes() -> None:
    """The templated lines equal json's own encoding of the objects they hold."""
    g = rich_graph()
    g.ops[0].params.append(ScalarParam("negzero", DT.FLOAT_64, -0.0))
    g.tensors["f32"].encoding = QuantEncoding(EncodingKind.SCALE_OFFSET, [float("nan")], [3], bitwidth=8)
    text = emit_json.dumps(g)
    doc = json.loads(text)
    assert _frame(dict(doc)) == text
    layout = emit_bin.plan(g)
    ids = {n: i for i, n in enumerate(g.tensors)} | layout.io_ids
    for name, t in g.tensors.items():  # the per-kind templates agree with the reference dict
        count = doc["graph"]["tensors"][name].get("params_count")
        want = emit_json.tensor_json(t, ids[name], params_count=count)
        assert json.dumps(doc["graph"]["tensors"][name]) == json.dumps(want), name


def test_bin_is_what_tarfile_writes(tmp_path: Path) -> None:
    """The streamed tar equals tarfile's PAX output, long member names (PAX headers) included."""
    import io

    g = rich_graph()
    long_name = "w" * 120
    g.add_tensor(static(long_name, DT.FLOAT_32, np.arange(300, dtype=np.float32).reshape(3, 100)))
    g.add_tensor(static("empty", DT.INT_8, np.zeros((0, 4), np.int8)))
    g.add_tensor(static("big_endian", DT.INT_16, np.array([1, -2, 300], dtype=">i2")))
    g.ops.append(OpConfig("uses", "Gather", [long_name, "empty", "big_endian"], []))
    layout = emit_bin.plan(g)
    ref = io.BytesIO()
    with tarfile.open(fileobj=ref, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member, t in sorted((layout.cname(t.name) + ".raw", t) for t in layout.statics):
            payload = emit_bin.raw_bytes(t)
            info = tarfile.TarInfo(member)
            info.size, info.mtime, info.mode, info.uid, info.gid = len(payload), 0, 0o644, 0, 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(payload))
    out = io.BytesIO()
    emit_bin.write(g, out, layout)
    assert out.getvalue() == ref.getvalue()
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        assert tar.extractfile(long_name + ".raw").read() == np.arange(300, dtype="<f4").tobytes()
        assert tar.extractfile("big_endian.raw").read() == np.array([1, -2, 300], dtype="<i2").tobytes()


def chain_graph(blocks: int) -> QnnGraph:
    """The benchmark's shape: MatMul (static weight, scalar params), Sigmoid, Mul, Add per block."""
    g = QnnGraph("chain")
    g.add_tensor(QnnTensor("x0", TT.APP_WRITE, DT.FLOAT_32, (1, 8)))
    for i in range(blocks):
        x, w, h, s, y, nx = f"x{i}", f"w{i}", f"h{i}", f"s{i}", f"y{i}", f"x{i + 1}"
        g.add_tensor(static(w, DT.FLOAT_32, np.full((8, 8), i, np.float32)))
        for n in (h, s, y):
            g.add_tensor(QnnTensor(n, TT.NATIVE, DT.FLOAT_32, (1, 8)))
        g.add_tensor(QnnTensor(nx, TT.APP_READ if i == blocks - 1 else TT.NATIVE, DT.FLOAT_32, (1, 8)))
        g.ops += [OpConfig(f"mm{i}", "MatMul", [x, w], [h], [ScalarParam("transpose_in0", DT.BOOL_8, False),
                                                             ScalarParam("transpose_in1", DT.BOOL_8, False)]),
                  OpConfig(f"sig{i}", "Sigmoid", [h], [s]), OpConfig(f"mul{i}", "ElementWiseMultiply", [h, s], [y]),
                  OpConfig(f"add{i}", "ElementWiseAdd", [y, x], [nx])]
    g.inputs, g.outputs = ["x0"], [f"x{blocks}"]
    return g


def test_writers_stream_in_bounded_chunks() -> None:
    """No writer hands over the whole document at once: many writes, each far smaller than the file."""

    class Sink:
        def __init__(self) -> None:
            self.sizes: list[int] = []

        def write(self, b) -> int:
            n = memoryview(b).nbytes
            self.sizes.append(n)
            return n

    g = chain_graph(2500)
    layout = emit_bin.plan(g)
    for write in (lambda f: emit_json.write(g, f, layout=layout), lambda f: emit_cpp.write(g, f, layout=layout),
                  lambda f: emit_bin.write(g, f, layout)):
        sink = Sink()
        write(sink)
        total = sum(sink.sizes)
        assert len(sink.sizes) > 3 and max(sink.sizes) < max(total // 3, 4 << 20), (len(sink.sizes), total)
    with tempfile.TemporaryDirectory() as d:
        assert_graph_equal(g, reader.load(artifacts.save(g, Path(d))[0]))


def test_cpp_is_plausible(tmp_path: Path) -> None:
    g = rich_graph()
    artifacts.save(g, tmp_path)
    cpp = (tmp_path / "rich.cpp").read_text()
    assert balanced(cpp)
    for name in g.tensors:
        assert f'.name= "{name}"' in cpp
    for op in g.ops:
        assert f'"{op.name}", // Node Name' in cpp
    for c in ("w_axis", "bias", "conv_perm", "conv_table", "f32"):
        assert f"BINVARSTART({c})" in cpp and f"BINLEN({c})" in cpp
    assert "QNN_QUANTIZATION_ENCODING_BLOCKWISE_EXPANSION" in cpp
    assert "{.bool8Value = 1}" in cpp and "{.uint32Value = 4000000000}" in cpp
    assert '"a \\"quoted\\" * / name"' not in cpp and '"a \\"quoted\\" */ name"' in cpp
    assert "QnnModel_composeGraphs" in cpp and cpp.count("static ModelError_t addNode_") == 3


def test_exactly_representable_data_is_stored_in_the_storage_dtype(tmp_path: Path) -> None:
    g = rich_graph()
    g.tensors["bias"].data = np.array([1, 2, 3, 4], dtype=np.int64)  # e.g. from a Python list
    g.ops[0].params[1].tensor.data = np.array([1, 0])
    artifacts.save(g, tmp_path)
    back = reader.load(tmp_path / "rich_net.json")
    assert back.tensors["bias"].data.dtype == np.int32 and back.tensors["bias"].data.tolist() == [1, 2, 3, 4]
    assert back.ops[0].params[1].tensor.data.dtype == np.uint32


def test_c_identifiers_are_unique_and_keep_valid_names() -> None:
    ids = emit_bin.c_identifiers(["a.b", "a_b", "1x", "a-b", "ok"])
    assert ids["a_b"] == "a_b" and ids["ok"] == "ok" and ids["1x"] == "_1x"
    assert len(set(ids.values())) == 5
    assert ids == emit_bin.c_identifiers(["ok", "a-b", "1x", "a_b", "a.b"])


def test_failed_save_leaves_no_partial_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    g = rich_graph()
    artifacts.save(g, tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def broken(graph, fileobj, layout=None):
        fileobj.write(b"partial")
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(emit_bin, "write", broken)
    g.ops[0].params[2] = ScalarParam("group", DT.UINT_32, 5)  # would change the outputs
    with pytest.raises(RuntimeError):
        artifacts.save(g, tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    fresh = tmp_path / "fresh"
    with pytest.raises(RuntimeError):
        artifacts.save(g, fresh)
    assert list(fresh.iterdir()) == []


@pytest.mark.parametrize("breakage, needle", [
    (lambda g: g.inputs.pop(), "not listed in graph inputs"),
    (lambda g: g.outputs.append("mid"), "not an APP_READ tensor"),
    (lambda g: setattr(g.tensors["bias"], "data", np.full(4, 2**40, np.int64)), "does not convert exactly"),
    (lambda g: setattr(g.tensors["f32"], "data", np.full((1, 4), 0.1)), "f32"),
    (lambda g: setattr(g.tensors["bias"], "dims", (5,)), "elements"),
    (lambda g: g.ops[1].params.append(TensorParam("p", static("bias", DT.INT_32, np.zeros(1, np.int32)))),
     "used twice"),
    (lambda g: g.ops[1].params.append(ScalarParam("n", DT.UINT_8, 300)), "out of range"),
    (lambda g: g.ops[1].inputs.append("ghost"), "ghost"),
    (lambda g: setattr(g.tensors["w.axis"], "encoding",
                       QuantEncoding.from_zero_point([1.0, 1.0], [0, 0], axis=1)), "axis 1 has size 4"),
])
def test_unwritable_graph_is_a_user_error(tmp_path: Path, breakage, needle: str) -> None:
    g = rich_graph()
    breakage(g)
    with pytest.raises(QlowerError, match=re.escape(needle)):
        artifacts.save(g, tmp_path)
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- reading

def saved(tmp_path: Path) -> tuple[Path, dict]:
    artifacts.save(rich_graph(), tmp_path)
    path = tmp_path / "rich_net.json"
    return path, json.loads(path.read_text())


def rewrite(path: Path, doc: dict) -> None:
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("edit, needle", [
    (lambda d: d["graph"]["tensors"]["mid"].update(data_type=4242), "tensor 'mid'"),
    (lambda d: d["graph"]["tensors"]["mid"].update(type=99), "unknown tensor type"),
    (lambda d: d["graph"]["tensors"]["bias"].update(dims=[5]), "tensor 'bias'"),
    (lambda d: d["graph"]["tensors"]["mid"].update(dims=[1, -4]), "non-negative"),
    (lambda d: d["graph"]["tensors"]["out:1"]["quant_params"].update(encoding=6), "encoding 6"),
    (lambda d: d["graph"]["tensors"]["w.axis"]["quant_params"]["axis_scale_offset"]["scale_offsets"].pop(),
     "tensor 'w.axis'"),
    (lambda d: d["graph"]["nodes"]["conv/1"]["scalar_params"].update(keep={"99999": 1}), "param 'keep'"),
    (lambda d: d["graph"]["nodes"]["conv/1"]["scalar_params"].update(shift={"50": "x"}), "param 'shift'"),
    (lambda d: d["graph"]["nodes"]["conv/1"].pop("type"), "node 'conv/1'"),
    (lambda d: d["graph"]["nodes"]["conv/1"].update(param_order=["nope"]), "param_order"),
    (lambda d: d.update(graph=[]), "graph"),
])
def test_malformed_json_is_a_user_error(tmp_path: Path, edit, needle: str) -> None:
    path, doc = saved(tmp_path)
    edit(doc)
    rewrite(path, doc)
    with pytest.raises(QlowerError, match=re.escape(needle)):
        reader.load(path)


def test_invalid_json_and_missing_files(tmp_path: Path) -> None:
    bad = tmp_path / "x_net.json"
    bad.write_text('{"graph": {"tensors": {')
    with pytest.raises(QlowerError, match="invalid JSON at line 1"):
        reader.load(bad)
    with pytest.raises(QlowerError, match="cannot read"):
        reader.load(tmp_path / "absent_net.json")
    path, _ = saved(tmp_path / "s")
    with pytest.raises(QlowerError, match="does not exist"):
        reader.load(path, tmp_path / "nope.bin")
    (tmp_path / "s" / "rich.bin").unlink()
    with pytest.raises(QlowerError, match=r"tensor 'w\.axis'.*no \.bin was found"):
        reader.load(path)
    (tmp_path / "s" / "rich.bin").write_bytes(b"not a tar at all" * 64)
    with pytest.raises(QlowerError, match="not a readable tar"):
        reader.load(path)


def test_raw_size_mismatch_names_the_tensor(tmp_path: Path) -> None:
    path, _ = saved(tmp_path)
    with tarfile.open(tmp_path / "rich.bin") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    members["bias.raw"] = members["bias.raw"][:-1]
    with tarfile.open(tmp_path / "rich.bin", "w") as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, __import__("io").BytesIO(payload))
    with pytest.raises(QlowerError, match=r"tensor 'bias'.*15 bytes"):
        reader.load(path)


def test_tensor_params_fall_back_to_inline_data(tmp_path: Path) -> None:
    g = QnnGraph("p")
    g.add_tensor(QnnTensor("x", TT.APP_WRITE, DT.FLOAT_32, (2, 3)))
    g.add_tensor(QnnTensor("y", TT.APP_READ, DT.FLOAT_32, (3, 2)))
    g.inputs, g.outputs = ["x"], ["y"]
    g.ops.append(OpConfig("t", "Transpose", ["x"], ["y"],
                          [TensorParam("perm", static("t_perm", DT.UINT_32, np.array([1, 0], np.uint32)))]))
    artifacts.save(g, tmp_path)
    (tmp_path / "p.bin").unlink()  # like the ONNX Runtime / LiteRT dumps: inline data only
    assert_graph_equal(g, reader.load(tmp_path / "p_net.json"))


def test_foreign_json_is_read_leniently(tmp_path: Path) -> None:
    """Shapes seen in other tools' dumps: extra keys, names for codes, inline data, no .bin."""
    doc = {
        "model.cpp": "N/A", "model.bin": "N/A", "converter_command": "", "op_types": ["Conv2d"],
        "graph": {
            "tensors": {
                "in": {"id": 7, "type": 0, "dataFormat": 0, "data_type": "QNN_DATATYPE_UFIXED_POINT_8",
                       "dims": [1, 2], "is_updateable": False, "permute_order_to_src": [0, 1],
                       "quant_params": {"definition": 1, "encoding": 0,
                                        "scale_offset": {"bitwidth": 8, "minimum": -1.0, "maximum": 1.0,
                                                         "scale": 0.0078125, "offset": -128,
                                                         "is_symmetric": False}}},
                "w": {"id": 3, "type": 4, "data_type": 776, "dims": [2],
                      "quant_params": {"definition": 1, "encoding": 3,
                                       "axis_scale_offset": {"axis": 0, "num_scale_offsets": 2,
                                                             "scale_offsets": [
                                                                 {"bitwidth": 4, "scale": 0.5, "offset": 0},
                                                                 {"bitwidth": 4, "scale": 0.25, "offset": 0}]}},
                      "data": [-1, 1]},
                "out": {"id": 1, "type": "QNN_TENSOR_TYPE_APP_READ", "data_type": 562, "dims": [1, 2]},
            },
            "nodes": {"conv": {"type": "Conv2d", "input_names": ["in", "w"], "output_names": ["out"],
                               "macs_per_inference": "", "scalar_params": {"group": {"306": 1.0}},
                               "tensor_params": {"stride": {"conv_stride": {
                                   "id": 9, "type": 4, "data_type": 306, "dims": [2], "data": [[1, 1]][0]}}}}},
        },
    }
    path = tmp_path / "foreign_net.json"
    path.write_text(json.dumps(doc))
    g = reader.load(path)
    assert g.name == "foreign" and g.inputs == ["in"] and g.outputs == ["out"]
    assert g.tensors["in"].encoding == QuantEncoding(EncodingKind.SCALE_OFFSET, [0.0078125], [-128], bitwidth=8)
    w = g.tensors["w"]
    assert w.encoding == QuantEncoding(EncodingKind.BW_AXIS_SCALE_OFFSET, [0.5, 0.25], [0, 0], axis=0, bitwidth=4)
    assert w.data.dtype == np.int8 and w.data.tolist() == [-1, 1]
    op = g.ops[0]
    assert op.package == "qti.aisw" and [p.name for p in op.params] == ["stride", "group"]
    assert op.params[1] == ScalarParam("group", DT.UINT_32, 1)


# ---------------------------------------------------------------- property

_STORED = [DT.INT_8, DT.INT_16, DT.INT_32, DT.INT_64, DT.UINT_8, DT.UINT_16, DT.UINT_32, DT.UINT_64,
           DT.FLOAT_16, DT.BFLOAT_16, DT.FLOAT_32, DT.FLOAT_64, DT.BOOL_8, DT.SFIXED_POINT_8,
           DT.UFIXED_POINT_8, DT.SFIXED_POINT_16, DT.UFIXED_POINT_16, DT.SFIXED_POINT_32, DT.UFIXED_POINT_4]
_SCALAR = [DT.BOOL_8, DT.UINT_8, DT.UINT_32, DT.INT_32, DT.INT_64, DT.UINT_64, DT.FLOAT_32, DT.FLOAT_64,
           DT.STRING, DT.INT_8]
_names = st.text(alphabet="ab_./:-1", min_size=1, max_size=4)
_scales = st.floats(min_value=1e-12, max_value=1e6, allow_nan=False)
_offsets = st.integers(-(2**31), 2**31 - 1)


@st.composite
def encodings(draw, dims: tuple[int, ...]) -> QuantEncoding | None:
    kinds = [None, EncodingKind.SCALE_OFFSET, EncodingKind.BW_SCALE_OFFSET]
    axes = [i for i, d in enumerate(dims) if d > 0]
    if axes:
        kinds += [EncodingKind.AXIS_SCALE_OFFSET, EncodingKind.BW_AXIS_SCALE_OFFSET,
                  EncodingKind.BLOCKWISE_EXPANSION]
    kind = draw(st.sampled_from(kinds))
    if kind is None:
        return None
    bitwidth = draw(st.none() | st.integers(1, 16))
    if kind in (EncodingKind.BW_SCALE_OFFSET, EncodingKind.BW_AXIS_SCALE_OFFSET) and bitwidth is None:
        bitwidth = 8
    if kind in (EncodingKind.SCALE_OFFSET, EncodingKind.BW_SCALE_OFFSET):
        return QuantEncoding(kind, draw(_scales), draw(_offsets), bitwidth=bitwidth)
    axis = draw(st.sampled_from(axes))
    n = dims[axis]
    scales = draw(st.lists(_scales, min_size=n, max_size=n))
    offsets = draw(st.lists(_offsets, min_size=n, max_size=n) | st.just([0] * n))
    if kind is not EncodingKind.BLOCKWISE_EXPANSION:
        return QuantEncoding(kind, scales, offsets, axis=axis, bitwidth=bitwidth)
    blocks, bsb = draw(st.integers(1, 3)), draw(st.integers(1, 16))
    rows = draw(st.lists(st.lists(st.integers(0, (1 << (8 if bsb <= 8 else 16)) - 1),
                                  min_size=blocks, max_size=blocks), min_size=n, max_size=n))
    return QuantEncoding(kind, scales, offsets, axis=axis, bitwidth=bitwidth, num_blocks_per_axis=blocks,
                         block_scale_bitwidth=bsb, block_scales=tuple(tuple(r) for r in rows))


@st.composite
def tensors(draw, name: str, kind: TensorType) -> QnnTensor:
    dims = tuple(draw(st.lists(st.integers(0 if kind is TT.STATIC else 1, 3), max_size=3)))
    dt = draw(st.sampled_from(_STORED))
    enc = draw(encodings(dims))
    data = None
    if kind is TT.STATIC:
        raw = draw(st.binary(min_size=emit_bin.num_elements(dims) * to_numpy(dt).itemsize,
                             max_size=emit_bin.num_elements(dims) * to_numpy(dt).itemsize))
        if dt is DT.BOOL_8:  # only the bytes 0 and 1 are booleans
            data = (np.frombuffer(raw, dtype=np.uint8) % 2).astype(np.bool_).reshape(dims)
        else:
            data = np.frombuffer(raw, dtype=to_numpy(dt)).reshape(dims).copy()
    return QnnTensor(name, kind, dt, dims, enc, data)


@st.composite
def scalars(draw, name: str) -> ScalarParam:
    dt = draw(st.sampled_from(_SCALAR))
    if dt is DT.STRING:
        value = draw(st.text(max_size=6))
    elif dt is DT.BOOL_8:
        value = draw(st.booleans())
    elif dt.is_float:
        value = draw(st.floats(allow_nan=False, width=32 if dt is DT.FLOAT_32 else 64))
    else:
        info = np.iinfo(to_numpy(dt))
        value = draw(st.integers(int(info.min), int(info.max)))
    return ScalarParam(name, dt, value)


@st.composite
def graphs(draw, names_from: st.SearchStrategy[str] = _names) -> QnnGraph:
    names = draw(st.lists(names_from, min_size=3, max_size=12, unique=True))
    pool = iter(names)
    g = QnnGraph(draw(st.sampled_from(["g", "model.v2", "net-1"])))
    for kind in draw(st.lists(st.sampled_from([TT.APP_WRITE, TT.STATIC, TT.NATIVE]), min_size=1, max_size=4)):
        name = next(pool, None)
        if name is None:
            break
        g.add_tensor(draw(tensors(name, kind)))
    for i in range(draw(st.integers(0, 3))):
        outs = [n for n in (next(pool, None) for _ in range(draw(st.integers(1, 2)))) if n is not None]
        if not outs:
            break
        existing = list(g.tensors)
        params: list = []
        for pname in draw(st.lists(st.sampled_from(["axis", "perm", "eps", "mode"]), unique=True, max_size=3)):
            tname = next(pool, None)
            if draw(st.booleans()) and tname is not None:
                params.append(TensorParam(pname, draw(tensors(tname, TT.STATIC))))
            else:
                params.append(draw(scalars(pname)))
        for o in outs:
            g.add_tensor(draw(tensors(o, draw(st.sampled_from([TT.NATIVE, TT.APP_READ])))))
        ins = draw(st.lists(st.sampled_from(existing), max_size=3)) if existing else []
        g.ops.append(OpConfig(f"op{i}", draw(st.sampled_from(["Add", "Conv2d", "Reshape"])), ins, outs, params,
                              package=draw(st.sampled_from(["qti.aisw", "custom.pkg"]))))
    g.inputs = draw(st.permutations([n for n, t in g.tensors.items() if t.type is TT.APP_WRITE]))
    g.outputs = draw(st.permutations([n for n, t in g.tensors.items() if t.type is TT.APP_READ]))
    return g


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_round_trip_property(g: QnnGraph) -> None:
    with tempfile.TemporaryDirectory() as d:
        paths = artifacts.save(g, Path(d))
        assert_graph_equal(g, reader.load(paths[0]))
        assert balanced(paths[1].read_text())
        again = [emit_json.dumps(g), emit_cpp.render(g)]
        assert again == [paths[0].read_text(), paths[1].read_text()]


# ---------------------------------------------------------------- the .cpp in a child process

@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="writing in a child process needs os.fork")
@pytest.mark.parametrize("make", [rich_graph, lambda: chain_graph(300)])
def test_parallel_save_writes_the_same_bytes(tmp_path: Path, make) -> None:
    serial = artifacts.save(make(), tmp_path / "serial", parallel=False)
    forked = artifacts.save(make(), tmp_path / "forked", parallel=True)
    assert [p.name for p in serial] == [p.name for p in forked]
    for a, b in zip(serial, forked):
        assert a.read_bytes() == b.read_bytes(), a.name


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="writing in a child process needs os.fork")
def test_a_failure_in_the_child_is_raised_and_leaves_no_files(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import signal

    def broken(graph, fileobj, **kw):
        fileobj.write(b"partial")
        raise QlowerError("the .cpp cannot be written")

    monkeypatch.setattr(emit_cpp, "write", broken)
    with pytest.raises(QlowerError, match=r"the \.cpp cannot be written"):
        artifacts.save(rich_graph(), tmp_path / "a", parallel=True)
    assert list((tmp_path / "a").iterdir()) == []

    def killed(graph, fileobj, **kw):
        os.kill(os.getpid(), signal.SIGKILL)

    monkeypatch.setattr(emit_cpp, "write", killed)
    with pytest.raises(QlowerError, match="ended with signal SIGKILL"):
        artifacts.save(rich_graph(), tmp_path / "b", parallel=True)
    assert list((tmp_path / "b").iterdir()) == []


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="writing in a child process needs os.fork")
def test_a_failure_in_the_parent_stops_the_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(graph, fileobj, **kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(emit_json, "write", broken)
    with pytest.raises(QlowerError, match="No space left on device"):
        artifacts.save(chain_graph(300), tmp_path, parallel=True)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- .cpp node templates

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_node_templates_write_what_formatting_each_node_writes(g: QnnGraph) -> None:
    assert emit_cpp.render(g) == emit_cpp.render(g, templates=False)


def test_node_templates_with_odd_names_and_shared_signatures() -> None:
    """Many ops of one signature, names that are not C identifiers (renamed) or look like braces."""
    g = chain_graph(6)
    rename = {n: f"{n}.{{x}}/\"q\"" if i % 2 else n for i, n in enumerate(g.tensors)}
    g.tensors = {rename[n]: t for n, t in g.tensors.items()}
    for n, t in g.tensors.items():
        t.name = n
    for i, op in enumerate(g.ops):
        op.inputs = [rename[n] for n in op.inputs]
        op.outputs = [rename[n] for n in op.outputs]
        op.name = f"{op.name}/{{0}}" if i % 3 == 0 else op.name
    g.inputs, g.outputs = [rename[n] for n in g.inputs], [rename[n] for n in g.outputs]
    text = emit_cpp.render(g)
    assert text == emit_cpp.render(g, templates=False)
    assert '"mm0/{0}", // Node Name' in text and '.name= "s0.{x}/\\"q\\""' in text


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="writing in a child process needs os.fork")
def test_no_process_to_spare_writes_in_the_caller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    def no_fork():
        raise OSError(12, "Cannot allocate memory")

    want = artifacts.save(chain_graph(30), tmp_path / "a", parallel=False)
    monkeypatch.setattr(os, "fork", no_fork)
    got = artifacts.save(chain_graph(30), tmp_path / "b", parallel=True)
    assert [p.read_bytes() for p in got] == [p.read_bytes() for p in want]


@pytest.mark.parametrize("parallel", [False, True] if hasattr(__import__("os"), "fork") else [False])
def test_direct_and_buffered_writing_give_the_same_bytes(tmp_path: Path, parallel: bool) -> None:
    direct = artifacts.save(chain_graph(300), tmp_path / "direct", parallel=parallel, direct=True)
    buffered = artifacts.save(chain_graph(300), tmp_path / "buffered", parallel=parallel, direct=False)
    for a, b in zip(direct, buffered):
        assert a.read_bytes() == b.read_bytes(), a.name
