"""Shape ops whose input shape is only known after folding (ONNX's own CenterCropPad function body,
where a Pad's pads are computed from the requested size) fold to constants, so the ops they feed
fold too and the graph lowers. Checked on the onnx package's own node test case and data."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")


def _case(name: str):
    """The case's model and first data set, as the onnx package generates them (importing the op's
    case module registers its cases)."""
    import onnx.backend.test.case.node as cases
    from onnx.backend.test.case.node import center_crop_pad  # noqa: F401

    (case,) = [c for c in cases._NodeTestCases if c.name == name]
    inputs, outputs = case.data_sets[0]
    return case.model, [np.asarray(a) for a in inputs], [np.asarray(a) for a in outputs]


def test_center_crop_pad_function_body_folds_its_shapes_and_lowers():
    import qlower
    from onnx import numpy_helper
    from qlower.frontends.onnx_frontend import load_onnx
    from qlower.reference.interpreter import run_dequantized

    model, inputs, outputs = _case("test_center_crop_pad_crop_and_pad_expanded")
    # the requested size is a constant of a deployed model: an initializer, as the conformance tool does
    frozen = onnx.ModelProto()
    frozen.CopyFrom(model)
    shape_input = [i for i in frozen.graph.input if i.name == "shape"]
    frozen.graph.input.remove(shape_input[0])
    frozen.graph.initializer.append(numpy_helper.from_array(np.asarray(inputs[1]), "shape"))

    graph = load_onnx(frozen)
    assert not [op for op in graph.ops if op.type in ("onnx.Shape", "onnx.Size")]
    result = qlower.lower(graph, qlower.load_rules(packs=["onnx"]), backend="cpu")
    assert result.ok, result.errors
    got = run_dequantized(result.qnn, {"x": np.asarray(inputs[0])})
    np.testing.assert_array_equal(np.asarray(got["y"]).reshape(np.shape(outputs[0])), outputs[0])
