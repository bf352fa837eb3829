"""`--verify` on graphs a real quantizer made (onnxruntime's `quantize_static`, QDQ format).

The source reference must compute what the quantized source computes: every encoded tensor on its
grid, saturated to its range. ONNX Runtime's quantizer drops a Relu (or Clip) whose output range
the encoding already clamps, so a reference that does not saturate disagrees with every correct
lowering. Checked here: the reference agrees with onnxruntime running the QDQ model; a correct
lowering passes; one mutated rule fails, naming its op; a final 16-bit Dequantize keeps FLOAT_32
on HTP (so the output is exact, not rounded to float16).
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import numpy as np
import pytest

import qlower

pytest.importorskip("onnx")
quantization = pytest.importorskip("onnxruntime.quantization")

PACK = Path(__file__).resolve().parents[2] / "patterns" / "onnx"
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


class _Calibration(quantization.CalibrationDataReader):
    def __init__(self) -> None:
        self._feeds = iter([{"x": np.random.default_rng(i).standard_normal(SHAPE).astype(np.float32)}
                            for i in range(6)])

    def get_next(self):
        return next(self._feeds, None)


CONFIGS = {
    "a8w8": dict(activation_type="QUInt8", weight_type="QInt8", per_channel=True),
    "a16w8": dict(activation_type="QUInt16", weight_type="QUInt8", per_channel=False),
}


@functools.cache
def _quantized(config: str, root: Path) -> Path:
    """The float model quantized by onnxruntime's static quantizer (QDQ format)."""
    import onnx

    src, dst = root / "cnn.onnx", root / f"cnn_{config}.onnx"
    if not dst.exists():
        onnx.save(_float_model(), src)
        kw = dict(CONFIGS[config])
        kw["activation_type"] = getattr(quantization.QuantType, kw["activation_type"])
        kw["weight_type"] = getattr(quantization.QuantType, kw["weight_type"])
        quantization.quantize_static(str(src), str(dst), _Calibration(), quant_format=quantization.QuantFormat.QDQ,
                                     **kw)
    return dst


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ort_quantized")


@functools.cache
def _rules(pack: Path | None = None) -> qlower.Rules:
    """The onnx pack (or a mutated copy of it), with the qnn cleanup pack as `lower` runs it."""
    return qlower.load_rules([pack], cleanup=True) if pack is not None else qlower.load_rules(packs=["onnx"])


def _inputs(seed: int = 11) -> dict[str, np.ndarray]:
    return {"x": (np.random.default_rng(seed).standard_normal(SHAPE) * 1.5).astype(np.float32)}


def _ort_run(path: Path, inputs) -> np.ndarray:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the QDQ model as written
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"]).run(None, inputs)[0]


def _output_step(path: Path) -> float:
    """The scale of the encoding the model's output is dequantized from."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    dq = next(n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "y")
    return float(inits[dq.input[1]])


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_the_quantizer_dropped_the_activations(root, config):
    """The premise: ORT folded Relu and Clip(0, 6) into the ranges of the Convs' outputs."""
    import onnx

    ops = [n.op_type for n in onnx.load(str(_quantized(config, root))).graph.node]
    assert "Relu" not in ops and "Clip" not in ops and "QuantizeLinear" in ops


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_source_reference_is_the_quantized_models(root, config):
    """The source reference of the QDQ model equals onnxruntime's run of it, to a step of the output."""
    from qlower.frontends.onnx_frontend import load_onnx
    from qlower.reference.onnx_kernels import OnnxKernels
    from qlower.reference.source import run_graph

    path = _quantized(config, root)
    got = run_graph(load_onnx(path), _inputs(), {"onnx": OnnxKernels()})["y"]
    want = _ort_run(path, _inputs())
    assert np.max(np.abs(got - want)) <= 1.0001 * _output_step(path)


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_correct_lowering_passes(root, config):
    from qlower.frontends.onnx_frontend import load_onnx

    path = _quantized(config, root)
    result = qlower.lower(load_onnx(path), _rules(), "htp", verify=True, inputs=_inputs())
    result.raise_for_errors()
    v = result.verification
    assert v.passed and v.diagnosis == "pass", v.summary()
    # every source op is locally right, the Convs whose activation was dropped among them
    report = qlower.api.verify(load_onnx(path), result, _rules(), inputs=_inputs(), localise=True).report
    assert all(r.verdict in ("ok", "fused") for r in report.ops), report.table()
    assert {"conv1", "conv2"} <= {r.node for r in report.ops if r.verdict == "ok"}
    # the lowered output is within one step of onnxruntime's (judged in steps of its encoding)
    step = _output_step(path)
    assert v.outputs[0].tolerance.scale == pytest.approx(step)
    from qlower.reference.interpreter import run

    have = run(result.qnn, _inputs())["y"]
    assert np.max(np.abs(have - _ort_run(path, _inputs()))) <= 1.0001 * step


def test_final_16bit_dequantize_is_float32_on_htp(root):
    """No FLOAT_16 output and Cast behind the last Dequantize: HTP lets it write FLOAT_32."""
    from qlower.frontends.onnx_frontend import load_onnx
    from qlower.qnn.datatypes import DataType

    result = qlower.lower(load_onnx(_quantized("a16w8", root)), _rules(), "htp")
    result.raise_for_errors()
    assert "Cast" not in result.qnn_op_counts()
    producer = next(op for op in result.qnn.ops if "y" in op.outputs)
    assert producer.type == "Dequantize" and result.qnn.tensors["y"].datatype == DataType.FLOAT_32


# A mutant of the Conv rule: the kernel's spatial dims swapped (a transposed 3×3 filter).
MUTANT = ("conv.qpat", "wt = relaid(w, transpose_tensor(const_value(w), [2, 3, 1, 0]), 3)",
          "wt = relaid(w, transpose_tensor(const_value(w), [3, 2, 1, 0]), 3)")


@pytest.fixture(scope="module")
def mutated_pack(tmp_path_factory) -> Path:
    file, old, new = MUTANT
    dst = tmp_path_factory.mktemp("mutant") / "onnx"
    shutil.copytree(PACK, dst)
    text = (dst / file).read_text()
    assert old in text, f"the mutant's source text is no longer in {file}"
    (dst / file).write_text(text.replace(old, new, 1))
    return dst


@pytest.mark.parametrize("config", ["a8w8"])
def test_mutated_rule_fails_naming_the_op(root, mutated_pack, config):
    from qlower.frontends.onnx_frontend import load_onnx

    rules = _rules(mutated_pack)
    result = qlower.lower(load_onnx(_quantized(config, root)), rules, "htp", verify=True, inputs=_inputs())
    result.raise_for_errors()
    v = result.verification
    assert not v.passed and v.diagnosis == "wrong-rule", v.summary()
    assert v.culprit.node == "conv1" and v.culprit.rule.endswith("onnx_conv2d")
    assert "node conv1 (onnx.Conv)" in v.summary()
