"""Frontends leave weights where they are: ONNX external data read lazily, torch.export tensors not copied."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import qlower  # noqa: E402
from qlower.diagnostics import QlowerError  # noqa: E402
from qlower.frontends.onnx_frontend import load_onnx  # noqa: E402
from qlower.graph.lazy import LazyArray  # noqa: E402


def _model():
    rng = np.random.default_rng(3)
    w = rng.normal(size=(32, 48)).astype(np.float32)
    b = rng.normal(size=(48,)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])]
    g = helper.make_graph(nodes, "ext", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 48])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), w, b


def test_external_initializers_are_references_with_the_right_data(tmp_path):
    model, w, b = _model()
    inline = tmp_path / "inline.onnx"
    onnx.save_model(model, str(inline))
    ext = tmp_path / "ext.onnx"
    onnx.save_model(model, str(ext), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="ext.weights", size_threshold=0)
    g = load_onnx(ext)
    data = g.value("w").data
    assert isinstance(data, LazyArray)
    np.testing.assert_array_equal(np.asarray(data), w)
    np.testing.assert_array_equal(np.asarray(g.value("b").data), b)
    rules = qlower.load_rules(packs=["onnx"])
    bins = []
    for path in (inline, ext):
        res = qlower.lower(load_onnx(path), rules, backend="htp")
        res.raise_for_errors()
        out = tmp_path / f"out_{path.stem}"
        res.save(out)
        bins.append(next(out.glob("*.bin")).read_bytes())
    assert bins[0] == bins[1]


def test_missing_external_file_is_a_clear_error(tmp_path):
    model, _, _ = _model()
    ext = tmp_path / "ext.onnx"
    onnx.save_model(model, str(ext), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="ext.weights", size_threshold=0)
    (tmp_path / "ext.weights").write_bytes(b"\0" * 16)
    with pytest.raises(QlowerError) as e:
        load_onnx(ext)
    assert "too short" in str(e.value) and "ext.weights" in str(e.value)
    (tmp_path / "ext.weights").unlink()
    with pytest.raises(QlowerError) as e:
        load_onnx(ext)
    assert "cannot open its external data file" in str(e.value)


def test_torch_export_weights_are_not_copied():
    """torch.export: float32 weights stay in the memory torch holds (views, no copies)."""
    torch = pytest.importorskip("torch")
    from qlower.frontends.torch_frontend import load_exported

    lin = torch.nn.Linear(16, 8)
    ep = torch.export.export(lin.eval(), (torch.randn(2, 16),))
    g = load_exported(ep, fold=False)
    consts = [v for v in g.iter_consts() if v.data.shape == (8, 16)]
    assert consts and any(np.shares_memory(v.data, p.detach().numpy()) for v in consts
                          for p in ep.state_dict.values())
