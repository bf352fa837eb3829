"""`qlower lower --input-shape NAME=D0,D1,...`: fixing symbolic input dims from the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from qlower.cli.main import main

onnx = pytest.importorskip("onnx")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402


def qlower(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


@pytest.fixture
def dynamic(tmp_path):
    """Relu(x) + z with symbolic dims on both inputs."""
    m = h.make_model(h.make_graph(
        [h.make_node("Relu", ["x"], ["r"]), h.make_node("Add", ["r", "z"], ["y"])], "g",
        [h.make_tensor_value_info("x", T.FLOAT, ["batch", 4]), h.make_tensor_value_info("z", T.FLOAT, ["batch", "n"])],
        [h.make_tensor_value_info("y", T.FLOAT, None)]), opset_imports=[h.make_opsetid("", 17)])
    path = tmp_path / "dyn.onnx"
    onnx.save(m, str(path))
    return path


def test_symbolic_inputs_need_shapes_and_the_hint_names_the_flag(capsys, dynamic, tmp_path):
    code, _, err = qlower(capsys, "lower", dynamic, "--backend", "cpu", "-o", tmp_path / "out", "-q")
    assert code == 1 and "--input-shape NAME=D0,D1" in err
    assert not (tmp_path / "out").exists()


def test_input_shapes_fix_the_dims_and_the_graph_runs(capsys, dynamic, tmp_path):
    out = tmp_path / "out"
    code, _, err = qlower(capsys, "lower", dynamic, "--backend", "cpu", "-o", out, "-q",
                          "--input-shape", "x=3,4", "--input-shape", "z=3,1")
    assert code == 0, err
    net = out / "dyn_net.json"  # named after the model file
    doc = json.loads(net.read_text())
    assert doc["graph"]["tensors"]["x"]["dims"] == [3, 4] and doc["graph"]["tensors"]["z"]["dims"] == [3, 1]
    x = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
    z = np.array([[1.0], [2.0], [3.0]], np.float32)
    np.savez(tmp_path / "in.npz", x=x, z=z)
    code, _, err = qlower(capsys, "run", net, "--inputs", tmp_path / "in.npz", "-o", tmp_path / "o.npz")
    assert code == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "o.npz")["y"], np.maximum(x, 0) + z)


def test_verify_uses_the_same_shapes(capsys, dynamic, tmp_path):
    code, out, err = qlower(capsys, "lower", dynamic, "--backend", "cpu", "-o", tmp_path / "out", "--verify",
                            "--input-shape", "x=2,4", "--input-shape", "z=2,4")
    assert code == 0, err
    assert "verification passed" in out


@pytest.mark.parametrize("value, says", [
    ("x", "is not NAME=D0,D1"), ("=2,4", "is not NAME=D0,D1"), ("x=2,a", "positive integers"),
    ("x=", "positive integers"), ("x=0,4", "positive integers"), ("x=-1,4", "positive integers"),
    ("x=2,,4", "positive integers"),
])
def test_malformed_values_are_usage_errors(capsys, dynamic, tmp_path, value, says):
    code, _, err = qlower(capsys, "lower", dynamic, "--backend", "cpu", "-o", tmp_path / "out",
                          "--input-shape", value)
    assert code == 2 and says in err and "usage" in err


def test_repeated_name_is_a_usage_error(capsys, dynamic, tmp_path):
    code, _, err = qlower(capsys, "lower", dynamic, "-o", tmp_path / "out", "--input-shape", "x=2,4",
                          "--input-shape", "x=3,4")
    assert code == 2 and "more than once for x" in err


def test_unknown_input_name_is_a_user_error(capsys, dynamic, tmp_path):
    code, _, err = qlower(capsys, "lower", dynamic, "-o", tmp_path / "out", "--input-shape", "w=2,4")
    assert code == 1 and "'w', which is not a graph input" in err and "graph inputs: x, z" in err


def test_frontend_without_input_shapes_is_a_usage_error(capsys, tmp_path):
    graph = {"format": "qlower-graph/1", "name": "t", "inputs": ["x"], "outputs": ["x"],
             "tensors": {"x": {"dtype": "float32", "shape": [2]}}, "nodes": []}
    (tmp_path / "g.json").write_text(json.dumps(graph), encoding="utf-8")
    code, _, err = qlower(capsys, "lower", tmp_path / "g.json", "-o", tmp_path / "out", "--input-shape", "x=2")
    assert code == 2 and "json frontend takes no input shapes" in err
