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


def test_range_whose_limit_is_found_after_folding_gets_its_real_length():
    """Swin's shifted-window mask as torch.onnx's TorchScript exporter writes it: a Range up to a dim of a
    Pad whose pads are computed. One-node inference must not take the length Range has on stand-in zeros
    (0, an empty tensor): the Range folds once the Pad's shape is known, and the graph computes the right
    numbers."""
    import qlower
    from onnx import TensorProto, helper
    from qlower.frontends.onnx_frontend import load_onnx
    from qlower.reference.interpreter import run_dequantized

    nodes = [
        helper.make_node("Constant", [], ["pf"], value=helper.make_tensor("pf", TensorProto.FLOAT, [4], [0, 1, 0, 1])),
        helper.make_node("Cast", ["pf"], ["pads"], to=TensorProto.INT64),
        helper.make_node("Pad", ["x", "pads"], ["p"]),
        helper.make_node("Shape", ["p"], ["s"]),
        helper.make_node("Constant", [], ["one"], value=helper.make_tensor("one", TensorProto.INT64, [], [1])),
        helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("zero", TensorProto.INT64, [], [0])),
        helper.make_node("Gather", ["s", "one"], ["n"], axis=0),
        helper.make_node("Range", ["zero", "n", "one"], ["r"]),
        helper.make_node("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["p", "rf"], ["y"]),
    ]
    g = helper.make_graph(nodes, "range_after_fold", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    graph = load_onnx(model)
    result = qlower.lower(graph, qlower.load_rules(packs=["onnx"]), backend="cpu")
    assert result.ok, result.errors
    x = np.arange(1, 5, dtype=np.float32).reshape(1, 4)
    got = np.asarray(run_dequantized(result.qnn, {"x": x})["y"])
    want = np.pad(x, ((0, 0), (1, 1))) + np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(got.reshape(want.shape), want)
