"""BF16 weights, as Qwen and Llama checkpoints ship them: read exactly (widened to float32) wherever
they come from: safetensors by reference, ONNX initializers inline and as external data."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qlower.diagnostics import QlowerError
from qlower.graph.io import load_graph, save_graph
from qlower.graph.lazy import LazyArray, widen_bf16

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")


def _graph(tmp_path, dtype: str, shape: list[int], file: str = "w.safetensors", key: str = "w") -> dict:
    return {"format": "qlower-graph/1", "name": "g", "inputs": ["x"], "outputs": ["y"],
            "tensors": {"x": {"dtype": "float32", "shape": [1, shape[1]]},
                        "w": {"dtype": dtype, "shape": shape, "data": {"safetensors": file, "key": key}},
                        "y": {"dtype": "float32", "shape": [1, shape[0]]}},
            "nodes": [{"name": "fc", "op": "mllm.Linear", "inputs": ["x", "w"], "outputs": ["y"]}]}


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 9), seed=st.integers(0, 2**31 - 1))
def test_bf16_safetensors_read_exactly(tmp_path_factory, rows, cols, seed):
    """A BF16 tensor declared float32 reads as torch's own widening, whole and in row slices."""
    tmp = tmp_path_factory.mktemp("bf16")
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(rows, cols, generator=g) * 3).to(torch.bfloat16)
    w[0, 0] = float("inf") if rows * cols > 1 else w[0, 0]
    safetensors_torch.save_file({"other": torch.ones(3, dtype=torch.bfloat16), "w": w}, str(tmp / "w.safetensors"))
    (tmp / "g.json").write_text(json.dumps(_graph(tmp, "float32", [rows, cols])))
    graph = load_graph(tmp / "g.json")
    data = graph.value("w").data
    assert isinstance(data, LazyArray) and data.dtype == np.float32
    want = w.float().numpy()
    np.testing.assert_array_equal(np.asarray(data), want)
    pieces = np.concatenate(list(data.chunks(max_bytes=cols * 4 * 3)))
    np.testing.assert_array_equal(pieces, want.reshape(-1))


def test_bf16_reference_survives_save(tmp_path):
    """Saving keeps the BF16 tensor a reference (no float32 copy written) while the checkpoint lies in
    the saved file's folder, and it loads back the same."""
    w = torch.randn(8, 4).to(torch.bfloat16)
    (tmp_path / "ckpt").mkdir()
    safetensors_torch.save_file({"w": w}, str(tmp_path / "ckpt" / "w.safetensors"))
    (tmp_path / "ckpt" / "g.json").write_text(json.dumps(_graph(tmp_path, "float32", [8, 4])))
    out = tmp_path / "h.json"
    save_graph(load_graph(tmp_path / "ckpt" / "g.json"), out)
    doc = json.loads(out.read_text())
    assert doc["tensors"]["w"]["data"] == {"safetensors": "ckpt/w.safetensors", "key": "w"}
    np.testing.assert_array_equal(np.asarray(load_graph(out).value("w").data), w.float().numpy())


def test_bf16_saved_away_from_its_checkpoint_carries_the_data(tmp_path):
    """A reference out of the saved file's folder would be refused on load (docs/security.md), so the
    widened values go in instead, and they load back the same."""
    w = torch.randn(8, 4).to(torch.bfloat16)
    safetensors_torch.save_file({"w": w}, str(tmp_path / "w.safetensors"))
    (tmp_path / "g.json").write_text(json.dumps(_graph(tmp_path, "float32", [8, 4])))
    out = tmp_path / "sub" / "h.json"
    out.parent.mkdir()
    save_graph(load_graph(tmp_path / "g.json"), out)
    doc = json.loads(out.read_text())
    assert "safetensors" not in json.dumps(doc["tensors"]["w"])
    np.testing.assert_array_equal(np.asarray(load_graph(out).value("w").data), w.float().numpy())


def test_bf16_declared_other_than_float32_is_an_error(tmp_path):
    safetensors_torch.save_file({"w": torch.ones(2, 2, dtype=torch.bfloat16)}, str(tmp_path / "w.safetensors"))
    (tmp_path / "g.json").write_text(json.dumps(_graph(tmp_path, "float16", [2, 2])))
    with pytest.raises(QlowerError) as e:
        load_graph(tmp_path / "g.json")
    d = e.value.diagnostics[0]
    assert d.code == "data-dtype" and "tensor w" in d.subject


def test_widen_bf16_law():
    """Every bfloat16 bit pattern widens to the float32 ml_dtypes gives (NaNs stay NaN)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bits = np.arange(1 << 16, dtype=np.uint16)
    want = bits.view(ml_dtypes.bfloat16).astype(np.float32)
    got = widen_bf16(bits)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))


@pytest.mark.parametrize("external", [False, True])
def test_onnx_bf16_initializer(tmp_path, external):
    """An ONNX model with a bfloat16 weight cast to float (how mixed-precision exports store weights)
    imports it exactly, inline or as external data, and computes what onnxruntime's reference does."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    import ml_dtypes

    from qlower.frontends.onnx_frontend import load_onnx
    from qlower.reference.onnx_kernels import OnnxKernels
    from qlower.reference.source import run_graph

    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 3)).astype(ml_dtypes.bfloat16)
    init = numpy_helper.from_array(w, "w")
    assert init.data_type == TensorProto.BFLOAT16
    graph = helper.make_graph(
        [helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT),
         helper.make_node("MatMul", ["x", "wf"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    if external:
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location="m.data", size_threshold=0)
    else:
        onnx.save_model(model, str(path))
    g = load_onnx(path)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    got = run_graph(g, {"x": x}, {"onnx": OnnxKernels()})["y"]
    from onnx.reference import ReferenceEvaluator

    want = ReferenceEvaluator(onnx.load(str(path))).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, x @ w.astype(np.float32), rtol=1e-6, atol=1e-6)
