"""Reading `_net.json` as the QNN converters write it (fixtures in their layout, written here)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qlower.api import load_registry
from qlower.cli.main import main
from qlower.diagnostics import QlowerError, Severity
from qlower.qnn import artifacts, ir_types, reader
from qlower.qnn.datatypes import DataType
from qlower.qnn.model import ScalarParam
from qlower.qnn.validate import validate_graph
from tests.qnn import converter_fixtures as fx
from tests.qnn.test_artifacts import assert_graph_equal, graphs


def ops(net: reader.NetFile) -> dict[str, tuple[str, list[str]]]:
    return {op.name: (op.type, [p.name for p in op.params]) for op in net.graph.ops}


# ------------------------------------------------------------- IR types and meta params

def test_new_converter_layout(tmp_path: Path) -> None:
    net = reader.read(fx.write(tmp_path, "new"))
    assert ops(net) == {
        "conv": ("Conv2d", ["dilation", "pad_amount", "stride", "group"]),
        "add": ("ElementWiseBinary", ["operation"]),
        "relu": ("ElementWiseNeuron", ["operation"]),
        "pool": ("PoolMax2d", ["filter_size", "pad_amount", "stride"]),
        "exp": ("ElementWiseUnary", ["operation"]),
        "mean": ("ReduceMean", ["axes", "keep_dims"]),
    }
    assert net.diagnostics == () and net.missing_data == ()
    by_name = {op.name: op for op in net.graph.ops}
    assert by_name["add"].provenance == "converter IR Eltwise_Binary"
    assert by_name["conv"].provenance is None and by_name["conv"].package == "qti.aisw"
    assert validate_graph(net.graph, load_registry([]), "cpu") == []


def test_old_converter_layout(tmp_path: Path) -> None:
    """Older converters: the op is named by a string param tagged with the UNDEFINED code."""
    net = reader.read(fx.write(tmp_path, "old"))
    assert ops(net) == {
        "conv": ("Conv2d", ["dilation", "pad_amount", "stride", "group"]),
        "add": ("ElementWiseAdd", []),
        "relu": ("Relu", []),
        "pool": ("PoolAvg2d", ["filter_size", "pad_amount", "stride", "count_pad_for_edges"]),
    }
    assert validate_graph(net.graph, load_registry([]), "cpu") == []


def test_runs_the_mapped_ops(tmp_path: Path) -> None:
    """The mapping is semantic: conv -> add -> relu -> max pool -> exp -> mean, checked against numpy."""
    path = fx.write(tmp_path, "new")
    x = np.random.default_rng(0).standard_normal((1, 4, 4, 2)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    assert main(["run", str(path), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "out.npz")]) == 0
    w = fx.weights()
    r = np.maximum(np.einsum("nhwc,co->nhwo", x, w["w"][0, 0]) + w["b"] + x, 0)
    p = r.reshape(1, 2, 2, 2, 2, 2).max(axis=(2, 4))
    with np.load(tmp_path / "out.npz") as z:
        np.testing.assert_allclose(z["y"], np.exp(p).mean(axis=(1, 2), keepdims=True), rtol=1e-5)


def test_string_scalars_and_package_from_package_name(tmp_path: Path) -> None:
    doc = fx.net("new")
    node = doc["graph"]["nodes"]["conv"]
    del node["package"]
    node["scalar_params"]["packageName"] = {str(fx.UNDEF): "my.pkg"}
    node["scalar_params"]["note"] = {str(fx.STRING): "kept"}
    node["param_map"]["note"] = 1
    path = tmp_path / "s_net.json"
    path.write_text(json.dumps(doc))
    op = reader.read(path).graph.ops[0]
    assert op.package == "my.pkg" and op.param("packageName") is None
    assert op.param("note") == ScalarParam("note", DataType.STRING, "kept")


def test_param_map_meta_params_are_dropped(tmp_path: Path) -> None:
    """Supplemental converter attributes (param_map 2) never reach the op, whatever they are called."""
    doc = fx.net("new")
    node = doc["graph"]["nodes"]["conv"]
    node["scalar_params"]["padding_size_strategy"] = {"306": 5}
    node["param_map"]["padding_size_strategy"] = 2
    path = tmp_path / "m_net.json"
    path.write_text(json.dumps(doc))
    assert reader.read(path).graph.ops[0].param("padding_size_strategy") is None


def test_meta_tensor_params_are_dropped_with_their_data_needs(tmp_path: Path) -> None:
    """Like Reshape's supplemental `shape` tensor: not an op param, so its data is not needed either."""
    doc = fx.net("new")
    node = doc["graph"]["nodes"]["conv"]
    node["tensor_params"]["bn_gamma"] = {"conv_bn_gamma": fx.tensor(77, 4, [2])}
    node["param_map"]["bn_gamma"] = 2
    path = fx.write(tmp_path, "new")
    path.write_text(json.dumps(doc))
    net = reader.read(path)
    assert net.graph.ops[0].param("bn_gamma") is None and net.missing_data == () and net.diagnostics == ()


@pytest.mark.parametrize("edit, needle", [
    (lambda n: n["scalar_params"].pop("pool_type"), "node 'pool' (Pool without `pool_type`)"),
    (lambda n: n["scalar_params"].update(pool_type={"306": 3}), "node 'pool' (Pool whose `pool_type` is not"),
])
def test_ir_nodes_that_name_no_op_keep_their_type_with_one_warning(tmp_path: Path, edit, needle: str) -> None:
    """The rest of the file still validates; the node itself is refused as an unknown op."""
    doc = fx.net("new")
    edit(doc["graph"]["nodes"]["pool"])
    path = fx.write(tmp_path, "new")
    path.write_text(json.dumps(doc))
    net = reader.read(path)
    assert [d.code for d in net.diagnostics] == ["ir-type"] and needle in net.diagnostics[0].message
    assert net.graph.ops[3].type == "Pool"
    found = validate_graph(net.graph, load_registry([]), "cpu")
    assert [(d.code, d.subject) for d in found if d.is_error] == [("unknown-op", "node pool (qnn.Pool)")]


def test_a_malformed_param_map_names_the_node(tmp_path: Path) -> None:
    doc = fx.net("new")
    doc["graph"]["nodes"]["pool"]["param_map"] = [1]
    path = tmp_path / "b_net.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(QlowerError, match=r"node 'pool'.*`param_map` must map"):
        reader.read(path)


def test_unknown_keys_are_one_note(tmp_path: Path) -> None:
    doc = fx.net("new")
    doc["future_field"] = 1
    doc["graph"]["nodes"]["conv"]["latency_hint"] = 3
    doc["graph"]["nodes"]["add"]["latency_hint"] = 4
    doc["graph"]["tensors"]["x"]["layout_id"] = 0
    path = fx.write(tmp_path, "new")
    path.write_text(json.dumps(doc))
    net = reader.read(path)
    assert [d.severity for d in net.diagnostics] == [Severity.NOTE]
    msg = net.diagnostics[0].message
    assert all(k in msg for k in ("future_field", "latency_hint", "layout_id")) and msg.count("latency_hint") == 1
    assert len(net.graph.ops) == 6


# ------------------------------------------------------------- the data table

def test_shipped_table_is_well_formed_and_targets_known_ops() -> None:
    table = ir_types.shipped()
    registry = load_registry([])
    assert "packageName" in table.meta_params
    for rules in table.rules.values():
        for r in rules:
            assert len(r.source) > 40, r  # every mapping says where it was seen
            if r.qnn_op is not None:
                assert registry.op(r.qnn_op) is not None, r.qnn_op


@pytest.mark.parametrize("doc, needle", [
    ({"ir_types": {}}, "needs `ir_types` and `meta_params`"),
    ({"meta_params": {"p": ""}, "ir_types": {}}, "meta param p needs a `source`"),
    ({"meta_params": {}, "ir_types": {"X": []}}, "non-empty list"),
    ({"meta_params": {}, "ir_types": {"X": [{"param": "t", "source": "seen"}]}}, "exactly one of"),
    ({"meta_params": {}, "ir_types": {"X": [{"param": "t", "qnn_op": "A", "op_from_value": True,
                                             "source": "seen"}]}}, "exactly one of"),
    ({"meta_params": {}, "ir_types": {"X": [{"param": "t", "qnn_op": "A"}]}}, "a `source`"),
    ({"meta_params": {}, "ir_types": {"X": [{"param": "t", "qnn_op": "A", "source": "s", "x": 1}]}}, "keys are"),
])
def test_table_schema_is_checked(doc, needle: str) -> None:
    with pytest.raises(ValueError, match="X|ir_types|meta") as info:
        ir_types.parse(doc)
    assert needle in str(info.value)


def test_a_custom_table_is_used(tmp_path: Path) -> None:
    doc = fx.net("new")
    doc["graph"]["nodes"]["exp"]["type"] = "Fancy_Unary"
    path = tmp_path / "c_net.json"
    path.write_text(json.dumps(doc))
    assert reader.read(path).graph.ops[4].type == "Fancy_Unary"  # not an IR type: passed through
    table = ir_types.parse({"meta_params": {}, "ir_types": {"Fancy_Unary": [
        {"param": "operation", "qnn_op": "ElementWiseUnary", "source": "a test"}]}})
    assert reader.read(path, table=table).graph.ops[4].type == "ElementWiseUnary"


# ------------------------------------------------------------- absent static data

@pytest.mark.parametrize("bin_file, reason", [
    (None, "no .bin was found next to the JSON"),
    (fx.LFS_POINTER, "new.bin is a git-LFS pointer file, not the data"),
    (b"\x00garbage" * 100, "new.bin is not a readable tar"),
])
def test_absent_data_is_one_warning_then_an_error_for_values(tmp_path: Path, bin_file, reason: str) -> None:
    path = fx.write(tmp_path, "new", bin_file=bin_file)
    net = reader.read(path)
    assert [d.severity for d in net.diagnostics] == [Severity.WARNING]
    assert reason in net.diagnostics[0].message and "2 tensors" in net.diagnostics[0].message
    assert set(net.missing_data) == {"w", "b"}
    assert net.graph.tensors["w"].data is None and net.graph.ops[0].param("stride").tensor.data is not None
    assert validate_graph(net.graph, load_registry([]), "cpu") == []
    for fail in (net.require_data, lambda: reader.load(path)):
        with pytest.raises(QlowerError, match=r"tensor 'w'.*" + reason[:20]):
            fail()


def test_bin_without_a_member_is_absent_data(tmp_path: Path) -> None:
    path = fx.write(tmp_path, "new", bin_file=None)
    import tarfile
    with tarfile.open(tmp_path / "new.bin", "w"):
        pass
    net = reader.read(path)
    assert net.data_problem == "new.bin has no .raw member for it" and len(net.missing_data) == 2


# ------------------------------------------------------------- validate and run agree

def cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "internal error" not in err
    return code, out, err


BROKEN = {
    "invalid JSON": lambda p: p.write_text("{\"graph\": {"),
    "unknown datatype": lambda p: _edit(p, lambda d: d["graph"]["tensors"]["x"].update(data_type=4242)),
    "malformed param_map": lambda p: _edit(p, lambda d: d["graph"]["nodes"]["pool"].update(param_map=[1])),
    "raw of the wrong size": lambda p: _edit(p, lambda d: d["graph"]["tensors"]["b"].update(dims=[3])),
}


def _edit(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("breakage", sorted(BROKEN))
def test_validate_and_run_refuse_the_same_unreadable_files(capsys, tmp_path: Path, breakage: str) -> None:
    path = fx.write(tmp_path, "new")
    BROKEN[breakage](path)
    np.savez(tmp_path / "in.npz", x=np.zeros((1, 4, 4, 2), np.float32))
    code_v, _, err_v = cli(capsys, "validate", path, "--backend", "cpu")
    code_r, _, err_r = cli(capsys, "run", path, "--inputs", tmp_path / "in.npz", "-o", tmp_path / "o.npz")
    assert code_v == code_r == 1 and err_v == err_r and "new_net.json" in err_v
    assert not (tmp_path / "o.npz").exists()


@pytest.mark.parametrize("bin_file", [None, fx.LFS_POINTER])
def test_absent_data_warns_in_validate_and_fails_run(capsys, tmp_path: Path, bin_file) -> None:
    path = fx.write(tmp_path, "new", bin_file=bin_file)
    np.savez(tmp_path / "in.npz", x=np.zeros((1, 4, 4, 2), np.float32))
    code, out, err = cli(capsys, "validate", path, "--backend", "cpu")
    assert code == 0 and "0 error(s)" in out and err.count("warning:") == 1 and "static data of 2 tensors" in err
    code, out, err = cli(capsys, "run", path, "--inputs", tmp_path / "in.npz", "-o", tmp_path / "o.npz")
    assert code == 1 and out == "" and "static tensor has no data" in err and "tensor 'w'" in err
    assert not (tmp_path / "o.npz").exists()


# ------------------------------------------------------------- a law: converter bookkeeping is transparent

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.sampled_from(["new", "old"]), st.booleans())
def test_converter_bookkeeping_does_not_change_the_graph(g, style: str, drop_package: bool) -> None:
    """qlower's own file, decorated as a converter decorates it, reads back to the same graph."""
    with tempfile.TemporaryDirectory() as d:
        path = artifacts.save(g, Path(d))[0]
        doc = json.loads(path.read_text())
        for t in doc["graph"]["tensors"].values():
            t.update(unquantized_data_type=t["data_type"], is_dynamic_dims=[], is_quantizable=True,
                     is_updateable=False)
        for n in doc["graph"]["nodes"].values():
            n["scalar_params"]["packageName"] = {str(fx.PKG_CODE[style]): n["package"]}
            n["param_map"] = {**{p: 1 for p in [*n["tensor_params"], *n["scalar_params"]]}, "packageName": 2}
            n["macs_per_inference"] = "12k (3%)"
            if drop_package:
                del n["package"]
        path.write_text(json.dumps(doc))
        net = reader.read(path)
        assert net.diagnostics == ()
        assert_graph_equal(g, net.graph)
