"""AIMET encodings applied to a float ONNX model (`--quantization-overrides`).

The encodings are made by aimet-onnx's QuantizationSimModel (compute_encodings + export) on a
small CNN; the lowered graph must match AIMET's own QuantSim run within a step of the output
encoding, and verify. The older dict format (0.6.1) of the same encodings lowers identically.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest

import qlower
from qlower.cli.main import main

onnx = pytest.importorskip("onnx")

SHAPE = (1, 3, 12, 12)


def _float_model():
    """Conv → Relu → MaxPool → Conv → Clip(0, 6) → GlobalAveragePool → Flatten → Gemm, random weights."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)

    def init(name, *shape, s=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * s).astype(np.float32), name)

    inits = [init("w1", 8, 3, 3, 3), init("b1", 8, s=0.1), init("w2", 8, 8, 3, 3, s=0.2), init("b2", 8, s=0.1),
             init("wf", 4, 8), init("bf", 4, s=0.1),
             numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Clip", ["c2", "lo", "hi"], ["r2"], name="clip"),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1, name="fc")]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _x() -> np.ndarray:
    return (np.random.default_rng(11).standard_normal(SHAPE) * 1.5).astype(np.float32)


@functools.cache
def _aimet(activation_type: str, root: Path) -> tuple[Path, Path, np.ndarray]:
    """(float model, AIMET's 1.0.0 encodings, AIMET QuantSim's output on _x())."""
    quantsim = pytest.importorskip("aimet_onnx.quantsim")
    model = _float_model()
    path = root / "cnn.onnx"
    onnx.save(model, path)
    sim = quantsim.QuantizationSimModel(model, param_type="int8", activation_type=activation_type,
                                        providers=["CPUExecutionProvider"])
    calib = [np.random.default_rng(i).standard_normal(SHAPE).astype(np.float32) for i in range(6)]

    def forward(session, _=None):
        for x in calib:
            session.run(None, {"x": x})

    sim.compute_encodings(forward, None)
    out = root / f"aimet_{activation_type}"
    out.mkdir(exist_ok=True)
    sim.export(str(out), "cnn", encoding_version="1.0.0")
    want = sim.session.run(None, {"x": _x()})[0]
    return path, out / "cnn.encodings", want


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("aimet")


@functools.cache
def _rules() -> qlower.Rules:
    return qlower.load_rules(packs=["onnx"])


def _y_step(encodings: Path) -> float:
    doc = json.loads(encodings.read_text())
    return next(e["scale"][0] for e in doc["activation_encodings"] if e["name"] == "y")


@pytest.mark.parametrize("activation_type", ["int8", "int16"])
def test_lowered_graph_matches_aimet_quantsim(root, activation_type):
    from qlower.reference.interpreter import run

    model, encodings, want = _aimet(activation_type, root)
    graph = qlower.api.load_model(model, quantization_overrides=encodings)
    result = qlower.lower(graph, _rules(), "htp", verify=True, inputs={"x": _x()})
    result.raise_for_errors()
    assert result.verification.passed, result.verification.summary()
    counts = result.qnn_op_counts()
    assert counts["Conv2d"] == 2 and counts["FullyConnected"] == 1 and "Cast" not in counts
    fixed = {op.type for op in result.qnn.ops
             if all(result.qnn.tensors[t].datatype.is_fixed_point for t in op.outputs)}
    assert {"Conv2d", "FullyConnected", "PoolMax2d", "ReduceMean"} <= fixed  # every compute op fixed-point
    have = run(result.qnn, {"x": _x()})["y"]
    steps = np.abs(have - want) / _y_step(encodings)
    assert steps.max() <= 1.0001, steps


def test_legacy_format_lowers_the_same(root, tmp_path):
    from qlower.graph.encodings import read_encodings, write_encodings
    from qlower.reference.interpreter import run

    model, encodings, _ = _aimet("int8", root)
    legacy = tmp_path / "cnn_legacy.encodings"
    write_encodings(legacy, read_encodings(encodings), version="0.6.1")
    assert "param_encodings" in json.loads(legacy.read_text())
    outs = []
    for enc in (encodings, legacy):
        result = qlower.lower(qlower.api.load_model(model, quantization_overrides=enc), _rules(), "htp")
        result.raise_for_errors()
        outs.append(run(result.qnn, {"x": _x()})["y"])
    np.testing.assert_array_equal(outs[0], outs[1])


def test_cli_flag(root, tmp_path, capsys):
    model, encodings, _ = _aimet("int8", root)
    code = main(["lower", str(model), "--quantization-overrides", str(encodings), "--backend", "htp",
                 "-o", str(tmp_path), "-q"])
    out = capsys.readouterr()
    assert code == 0, out.err
    # what the file did; the Clip's bounds AIMET lists as activations are numbers here, not applied
    assert "3 weights, 5 activations quantized; 3 biases int32" in out.err and "entries not applied" in out.err
    net = json.loads(next(tmp_path.glob("*_net.json")).read_text())
    assert any(t.get("data_type") in (0x0408, "QNN_DATATYPE_UFIXED_POINT_8") or "FIXED" in str(t.get("data_type"))
               for t in net["graph"]["tensors"].values())


def test_bias_left_out_is_int32_from_input_and_weight_scales(root):
    model, encodings, _ = _aimet("int8", root)
    graph = qlower.api.load_model(model, quantization_overrides=encodings)
    b, w, x = graph.value("b1"), graph.value("w1"), graph.value("x")
    assert b.dtype == np.dtype("int32") and b.quant.zero_point == (0,) * 8
    conv = next(op for op in graph.ops if op.type == "onnx.Conv")
    s_in = conv.operands[0].quant.scale[0]
    np.testing.assert_allclose(b.quant.scale, np.asarray(w.quant.scale) * s_in, rtol=1e-12)
    assert x.quant is None  # the graph input stays float, quantized behind a QuantizeLinear


def test_a_misfit_entry_is_a_clear_error(tmp_path, capsys):
    model = tmp_path / "cnn.onnx"
    onnx.save(_float_model(), model)
    enc = tmp_path / "bad.encodings"
    enc.write_text(json.dumps({"version": "1.0.0", "activation_encodings": [], "param_encodings": [
        {"name": "w1", "bw": 8, "dtype": "INT", "enc_type": "PER_CHANNEL", "is_sym": True,
         "scale": [0.01] * 5, "offset": [-128] * 5}]}))
    code = main(["lower", str(model), "--quantization-overrides", str(enc), "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1 and "w1" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def _aimet_cell(bench, kind: str, config: str, tmp_path) -> tuple[str, float, float, float]:
    """The AIMET bench's cell for a transformers model: its text (which must say the lowered graph
    passed --verify), the largest step from QuantSim, and the SQNR of qlower and of QuantSim."""
    pytest.importorskip("aimet_onnx.quantsim")
    pytest.importorskip("transformers")
    import re

    bench_quant_aimet = bench("bench_quant_aimet")
    path, calib, feed = bench_quant_aimet._transformer(kind, tmp_path)
    text = bench_quant_aimet.cell(path, config, calib, feed, tmp_path)
    assert text.startswith("verify ok"), text
    found = re.search(r"max ([\d.]+) st", text)
    ours, theirs = map(float, re.search(r"SQNR qlower ([-\d.]+) dB, QuantSim ([-\d.]+) dB", text).groups())
    return text, float(found.group(1)) if found else float("inf"), ours, theirs


@pytest.mark.parametrize("kind", ["gpt2", "llama", "bert"])
def test_a_transformer_quantized_by_aimet_lowers_verifies_and_matches_quantsim(kind, tmp_path, bench):
    """A transformers model (random weights, dynamo ONNX export) through aimet-onnx's QuantSim at
    w8a8: AIMET lists the tied embedding table and the constants ops read among its activations and
    leaves out what export folded (position embeddings, a LayerNorm's bias); BERT's Linear layers are a
    MatMul and an Add with no encoding between them (one Gemm with an int32 bias); the lowered graph must
    validate for HTP, pass --verify and come within 0.5 dB of QuantSim's SQNR against the float model."""
    text, _, ours, theirs = _aimet_cell(bench, kind, "w8a8", tmp_path)
    assert ours >= theirs - 0.5, text


def test_a_zero_dimensional_constant_quantizes():
    from qlower.graph.quantize import quantize_affine

    got = quantize_affine(np.asarray(0.3535, np.float32), np.float64(0.0028), np.float64(0.0), 0, 255, np.uint8)
    assert got.shape == () and got.dtype == np.uint8 and int(got) == 126


@pytest.mark.parametrize("kind", ["gpt2", "bert"])
def test_an_aimet_lpbq_transformer_matches_quantsim_to_a_few_steps(kind, tmp_path, bench):
    """At w4a16 with AIMET's LPBQ (4-bit weights, integer block scales 1..16): the block scales are
    kept as AIMET wrote them (re-split on a 1..15 grid, GPT-2 was 1115 output steps off QuantSim),
    and BERT's Linear layers with a blockwise weight fuse into a Gemm with a 32-bit bias."""
    text, steps, ours, theirs = _aimet_cell(bench, kind, "w4a16_lpbq", tmp_path)
    assert steps <= 4 and ours >= theirs - 0.1, text
